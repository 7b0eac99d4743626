"""The router role on a remote host, pure parts: the schema's one-line errors, the
site and its commands (no `ip netns exec`: the host's own network), the netem argv a
router host with sch_netem gets (this kernel has none: only the argv is tested here),
what `rig clean` records, and `rig plan` naming the router host."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from rig.description import scenario
from rig.description.profile import Direction, LinkProfile
from rig.errors import InputError
from rig.orchestration import plan
from rig.process.remote import Host
from rig.realization import remote_router
from rig.realization.emul import netem, userspace

H = {"ssh": "root@h.example"}
BASE = {
    "name": "three", "topology": "host",
    "hosts": {"dtn1": H, "dtn2": H, "rtr": H},
    "paths": [{"name": "wan", "kind": "emulated", "rtt": "20ms", "server_host": "dtn1",
               "client_host": "dtn2", "server_addr": "192.0.2.7", "router_host": "rtr",
               "router_ifaces": {"client": "eth1", "server": "eth2"}}],
    "files": [{"name": "f", "size": "1MiB"}],
    "servers": [{"name": "ng", "kind": "nginx"}],
    "clients": [{"name": "curl", "tool": "curl", "file": "f"}],
}


def _parse(d):
    return scenario.parse(d, source="s.yaml")


def test_a_path_through_a_router_host_loads():
    sc = _parse(BASE)
    p = sc.paths[0]
    assert (p.router_host, p.router_ifaces.client, p.router_ifaces.server) == ("rtr", "eth1",
                                                                               "eth2")
    assert list(sc.remote_hosts()) == ["dtn1", "dtn2", "rtr"]
    assert not sc.tunes_local()          # nothing of this host is on the path


def _set(key, value):
    def f(d):
        d["paths"][0][key] = value
    return f


def _drop(key):
    def f(d):
        d["paths"][0].pop(key)
    return f


@pytest.mark.parametrize("mutate, match", [
    (_set("router_host", "rtr2"),
     r"^s\.yaml: paths\[0\]\.router_host: no such host \(declared: local, dtn1, dtn2, rtr\) "
     r"\(got 'rtr2'\)$"),
    (_drop("router_host"), r"^s\.yaml: paths\[0\]\.router_host: an emulated path between hosts "
                           r"names the host"),
    (_drop("router_ifaces"), r"^s\.yaml: paths\[0\]\.router_ifaces: name the router host's"),
    (_set("router_ifaces", {"client": "eth1"}),
     r"^s\.yaml: paths\[0\]\.router_ifaces\.server: required key is missing$"),
    (_set("router_ifaces", {"client": "eth1", "server": "eth1"}),
     r"paths\[0\]\.router_ifaces\.server: the two router interfaces must differ \(got 'eth1'\)"),
    (_set("router_ifaces", {"client": "eth1", "server": "a-name-too-long-for-linux"}),
     r"paths\[0\]\.router_ifaces\.server: expected an interface name"),
    (_set("router_host", "dtn1"), r"paths\[0\]\.router_ifaces: the router role on an end "
                                  r"host takes that end's interface on the path: router_iface"),
    (_set("router_iface", "eth1"), r"paths\[0\]\.router_iface: router_iface is for the router "
                                   r"role on an end host.* \(got 'eth1'\)$"),
    (_drop("server_addr"), r"paths\[0\]\.server_addr: an emulated path between hosts needs"),
    (_set("client_host", "local"), r"paths\[0\]\.client_host: an emulated path through a "
                                   r"router host runs between two remote hosts"),
    (_set("capture", "headers"), r"paths\[0\]\.capture: captures on a remote router"),
    (_set("backend", "none"), r"paths\[0\]\.backend: a router host emulates"),
    (_set("kind", "real"), r"paths\[0\]\.router_host: a real path has no router"),
])
def test_bad_router_keys_are_one_line_errors(mutate, match):
    d = copy.deepcopy(BASE)
    mutate(d)
    if d["paths"][0]["kind"] == "real":
        d["paths"][0].pop("rtt")
    with pytest.raises(InputError, match=match) as e:
        _parse(d)
    assert "\n" not in str(e.value)


def _site():
    sc = _parse(BASE)
    return remote_router.make_site("rig3f2a", 0, sc.paths[0], Host("rtr", "root@rtr",
                                                                    rundir_base="/dev/shm"))


def test_the_site_lives_in_the_router_hosts_own_network_and_run_directory():
    s = _site()
    assert (s.router_ns, s.to_client_if, s.to_server_if) == ("", "eth1", "eth2")
    assert str(s.workdir) == "/dev/shm/rig3f2a/wan" and s.host is not None
    assert str(userspace.control_path(s)) == "/dev/shm/rig3f2a/wan/rig3f2a-wan-engine.sock"
    assert remote_router.queue_base("rig3f2a", 0) != remote_router.queue_base("rig3f2b", 0)
    assert remote_router.queue_base("rig3f2a", 0) != remote_router.queue_base("rig3f2a", 1)
    assert all(1024 <= remote_router.queue_base(f"rig{x:04x}", i) < 65534
               for x in (0, 0xffff, 0x1234) for i in range(32))


def test_nfqueue_rules_run_without_a_namespace_and_carry_the_prefix():
    s = _site()
    assert userspace.nfqueue_rule_argv(s, "-I", "eth1", "eth2", s.queue_base) == [
        "iptables", "-w", "5", "-I", "FORWARD", "-i", "eth1", "-o", "eth2", "-m", "comment",
        "--comment", "rig3f2a", "-j", "NFQUEUE", "--queue-num", str(s.queue_base)]


def test_netem_on_a_router_host_is_the_local_argv_without_ip_netns_exec():
    d = Direction(delay_s=0.010, rate_bps=1e9)
    local = netem.netem_argv("rig3f2a-0r", "eth2", d, 0.020)
    remote = netem.netem_argv("", "eth2", d, 0.020)
    assert local[:4] == ["ip", "netns", "exec", "rig3f2a-0r"] and remote == local[4:]
    assert remote[:8] == ["tc", "qdisc", "replace", "dev", "eth2", "root", "handle", "1:"]
    s = _site()
    cmds = netem.plan_argv(s, LinkProfile(forward=d, reverse=d))
    assert [c[0] for c in cmds] == ["tc"] * 4 and [c[4] for c in cmds] == ["eth2", "eth2",
                                                                           "eth1", "eth1"]


def test_clean_record_names_exactly_the_rules_and_devices_of_the_run():
    rec = remote_router.record(_site(), "0")
    assert rec["forward_before"] == "0" and rec["devs"] == ["eth1", "eth2"]
    assert [r[3] for r in rec["rules"]] == ["-D", "-D"]
    assert all("rig3f2a" in r for r in rec["rules"])
    json.dumps(rec)        # goes into the state file


def test_addresses_and_the_ssh_connection():
    out = json.dumps([{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
                      {"ifname": "eth0", "addr_info": [{"local": "10.0.0.5"},
                                                       {"local": "fe80::1"}]}])
    assert remote_router.addresses(out) == {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5", "fe80::1"]}
    assert remote_router.ssh_local_addr("10.0.0.9 51234 10.0.0.5 22") == "10.0.0.5"
    assert remote_router.ssh_local_addr(None) is None
    assert remote_router.backend_name("auto", True) == "netem"
    assert remote_router.backend_name("auto", False) == "userspace"
    assert remote_router.backend_name("userspace", True) == "userspace"


def test_plan_prints_the_router_hosts_commands_with_its_host():
    lines = plan.plan_lines(_parse(BASE))
    rtr = [ln for ln in lines if ln.startswith("@rtr ")]
    assert any("net.ipv4.ip_forward" in ln for ln in rtr)
    assert any(ln.startswith("@rtr tc qdisc replace dev eth2 root handle 1: netem") for ln in rtr)
    assert any("rig.realization.emul.engine" in ln for ln in rtr)
    assert any("-j NFQUEUE" in ln and "--comment rig0000" in ln for ln in rtr)
    assert not any("ip netns exec" in ln for ln in lines)
    assert not any(ln.startswith("@rtr") and "tcp_rmem" in ln for ln in lines)   # not tuned


def test_a_remote_engine_is_asked_at_most_every_few_seconds(monkeypatch):
    """Each ask is an SSH channel: the watchdog (every 0.5 s) must not run one per tick
    on the router host; a local engine is asked every time."""
    from rig.process import proc

    class Alive:
        def alive(self):
            return True
    calls: list[str] = []
    monkeypatch.setattr(userspace.control, "ping", lambda *a, **k: calls.append("ping"))
    monkeypatch.setattr(proc, "run", lambda *a, **k: calls.append("run") or
                        type("R", (), {"ok": True})())
    now = [1000.0]
    monkeypatch.setattr(userspace.time, "monotonic", lambda: now[0])
    for site, every in ((_site(), userspace.REMOTE_CHECK_EVERY_S),
                        (dataclasses.replace(_site(), host=None, router_ns="rig3f2a-0r"), 0.0)):
        be = userspace.UserspaceBackend()
        key = be._key(site)
        be._engines[key] = Alive()
        be._rules[key] = {("eth1", "eth2", 1), ("eth2", "eth1", 2)}
        calls.clear()
        for _ in range(8):          # 8 watchdog ticks, 0.5 s apart
            be.check(site)
            now[0] += 0.5
        asks = calls.count("ping")
        assert asks == (2 if every else 8), (site.host, calls)
        assert calls.count("run") == 2 * asks
