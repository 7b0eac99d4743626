"""Server ports (issue 40 item 2): a server's `ports:` setting, its instances' ports, two
servers given one port, a protocol the kind lacks, the defaults on another host, and a
port already in use refused before anything starts. Pure except the last test, which
binds a port on loopback."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from rig.description import scenario
from rig.errors import InputError, RigError
from rig.orchestration.origins import server_plans
from rig.realization import netns
from rig.services import servers
from rig.services.servers.start import refuse_taken_ports


def _sc(tmp_path: Path, *srv: dict) -> scenario.Scenario:
    doc = {"name": "ports", "paths": [{"name": "wan", "kind": "emulated", "rtt": ["0ms"]}],
           "files": [{"name": "f", "size": "1MiB"}], "servers": list(srv),
           "clients": [{"name": "c", "tool": "xrdcp", "file": "f", "server": srv[0]["name"]}]}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    return scenario.load(f)


def _plans(sc: scenario.Scenario) -> dict[str, list[servers.ServerPlan]]:
    path = netns.lay_out(sc.topology, "rig0000", 0, "wan", "198.18.0.0/24",
                         servers=scenario.server_count(sc))
    return server_plans(sc, path, Path("/w"), Path("/d"))


def test_given_ports_are_taken_as_is_and_instances_step_by_ten(tmp_path):
    sc = _sc(tmp_path, {"name": "x", "kind": "xrootd", "count": 2,
                        "ports": {"root": 11094, "http": 18000}},
             {"name": "n", "kind": "nginx"})
    plans = _plans(sc)
    assert [p.ports for p in plans["x"]] == [{"root": 11094, "http": 18000},
                                             {"root": 11104, "http": 18010}]
    assert plans["n"][0].ports == servers.default_ports("nginx", 2)
    cfg = servers.server_files(plans["x"][1])
    assert any("xrd.port 11104" in body for body in cfg.values())


def test_without_ports_the_defaults_are_unchanged(tmp_path):
    plans = _plans(_sc(tmp_path, {"name": "x", "kind": "xrootd"}))
    assert plans["x"][0].ports == {"root": 1094, "http": 8000}


def test_two_servers_given_one_port_are_refused_before_anything_starts(tmp_path):
    sc = _sc(tmp_path, {"name": "x", "kind": "xrootd", "ports": {"root": 9000}},
             {"name": "y", "kind": "xrootd", "ports": {"root": 9000}})
    with pytest.raises(RigError) as e:
        _plans(sc)
    assert "server y (xrootd): ports: root 9000" in str(e.value) and "\n" not in str(e.value)
    sc = _sc(tmp_path, {"name": "x", "kind": "xrootd", "ports": {"http": 5201}})
    with pytest.raises(RigError, match="http 5201 .* its iperf3"):
        _plans(sc)


@pytest.mark.parametrize("ports, key, says", [
    ({"gsiftp": 2811}, "servers[0].ports.gsiftp", "has no gsiftp port (has: root, http, https)"),
    ({"root": 70000}, "servers[0].ports.root", "must be <= 65535"),
    ({"root": 0}, "servers[0].ports.root", ">= 1"),
    ({"root": 9000, "http": 9000}, "servers[0].ports.", "two protocols on one port"),
    ([9000], "servers[0].ports", "protocols to ports"),
])
def test_bad_ports_are_one_line_naming_file_key_and_value(tmp_path, ports, key, says):
    with pytest.raises(InputError) as e:
        _sc(tmp_path, {"name": "x", "kind": "xrootd", "ports": ports})
    msg = str(e.value)
    assert key in msg and says in msg and "s.yaml" in msg and "\n" not in msg


def test_on_another_host_the_defaults_keep_clear_of_production_ports():
    here = servers.default_ports("xrootd", 0, tls=True)
    there = servers.default_ports("xrootd", 0, tls=True, remote=True)
    assert here == {"root": 1094, "http": 8000, "https": 8443}
    assert there == {"root": 21094, "http": 28000, "https": 28443}
    assert servers.default_ports("iperf3", 0, remote=True) == {"iperf3": 25201}
    assert servers.default_ports("fdt", 1, remote=True) == {"fdt": 34331}   # under 65536
    assert "fdt" in servers.kinds()
    for kind in servers.kinds():
        for k in range(4):
            assert all(0 < p < 65536 for p in servers.default_ports(kind, k, tls=True,
                                                                    remote=True).values())


def test_a_port_in_use_is_refused_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(RigError) as e:
            refuse_taken_ports(None, "127.0.0.1", {"root": port}, "server x (xrootd)")
    assert f"port {port} (root) on 127.0.0.1 is already in use" in str(e.value)
    refuse_taken_ports(None, "127.0.0.1", {"root": port}, "server x (xrootd)")   # freed
