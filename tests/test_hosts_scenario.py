"""Hosts in a scenario (pure): the schema, one-line errors, and `rig plan` naming the
host of every command; plus the remote executor's argv (quoted once, never a shell)."""
from __future__ import annotations

import copy
import json
import shlex

import pytest

from rig.description import scenario
from rig.errors import InputError
from rig.orchestration import plan
from rig.process import remote
from rig.process.remote import Host

BASE = {
    "name": "two", "topology": "host",
    "hosts": {"dtn1": {"ssh": "root@dtn1.example", "port": 2222,
                       "identity": "~/.ssh/id_ed25519"}},
    "paths": [{"name": "loop", "kind": "real", "server_host": "dtn1",
               "server_addr": "192.0.2.7"}],
    "files": [{"name": "f", "size": "1MiB"}],
    "servers": [{"name": "ng", "kind": "nginx"}],
    "clients": [{"name": "curl", "tool": "curl", "file": "f"}],
}


def _parse(d):
    return scenario.parse(d, source="s.yaml")


def _bad(mutate, match):
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(InputError, match=match) as e:
        _parse(d)
    assert "\n" not in str(e.value)


def test_hosts_load_with_defaults():
    sc = _parse(BASE)
    h = sc.hosts["dtn1"]
    assert (h.ssh, h.port, h.identity, h.known_hosts, h.rundir) == (
        "root@dtn1.example", 2222, "~/.ssh/id_ed25519", None, "/dev/shm")
    p = sc.paths[0]
    assert (p.client_host, p.server_host) == ("local", "dtn1")
    assert list(sc.remote_hosts()) == ["dtn1"]


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d["paths"][0].update(server_host="dtn2"),
     r"^s\.yaml: paths\[0\]\.server_host: no such host \(declared: local, dtn1\) \(got 'dtn2'\)$"),
    (lambda d: d["paths"][0].update(client_host="nope"), r"paths\[0\]\.client_host: no such host"),
    (lambda d: d["hosts"]["dtn1"].update(ssh="-oProxyCommand=touch /tmp/x"),
     r"hosts\.dtn1\.ssh: expected user@host"),
    (lambda d: d["hosts"]["dtn1"].update(sshh="x"), r"hosts\.dtn1\.sshh: unknown key"),
    (lambda d: d["hosts"]["dtn1"].pop("ssh"), r"hosts\.dtn1\.ssh: required key is missing"),
    (lambda d: d["hosts"]["dtn1"].update(port=0), r"hosts\.dtn1\.port"),
    (lambda d: d["hosts"]["dtn1"].update(rundir="tmp/x"), r"hosts\.dtn1\.rundir: expected an absolute"),
    (lambda d: d["hosts"].update(local={"ssh": "x"}), r"hosts\.local: 'local' is the host running rig"),
    (lambda d: d["hosts"].update({"bad name!": {"ssh": "x"}}), r"hosts\.bad name!"),
    (lambda d: d["paths"][0].update(server_ns="ns1"), r"paths\[0\]\.server_ns: namespaces on a remote host"),
    (lambda d: d.update(topology="client-router-server", paths=[
        {"name": "e", "rtt": "10ms", "server_host": "dtn1"}]),
     r"paths\[0\]\.server_host: an emulated path with one end on this host is not built"),
])
def test_bad_hosts_are_one_line_errors(mutate, match):
    _bad(mutate, match)


def test_plan_names_the_host_of_every_remote_command():
    lines = plan.plan_lines(_parse(BASE))
    remote_lines = [ln for ln in lines if ln.startswith("@dtn1 ")]
    assert any("nginx -e /dev/shm/rig0000/loop-ng/nginx-error.log" in ln for ln in remote_lines)
    assert any(ln.startswith("@dtn1 iperf3 -s") for ln in remote_lines)
    assert any("write /dev/shm/rig0000/data/f" in ln for ln in remote_lines)
    # the client runs here: its line has no host; no local tmpfs, the data is on dtn1
    assert any(ln.startswith("curl ") and "192.0.2.7:28080/f" in ln for ln in lines)   # remote: 20000 up
    assert not any(ln.startswith("mount ") for ln in lines)
    d = copy.deepcopy(BASE)
    d["hosts"]["wn1"] = {"ssh": "wn1.example"}
    d["paths"][0]["client_host"] = "wn1"
    lines = plan.plan_lines(_parse(d))
    assert any(ln.startswith("@wn1 curl ") for ln in lines)
    assert any(ln.startswith("@wn1 ping ") for ln in lines)


def test_remote_command_is_quoted_once_and_carries_argv_as_data():
    h = Host(name="dtn1", ssh="root@dtn1.example", port=2222, identity="/k",
             control_path="/run/rig/rig0001/ssh-dtn1")
    argv = ["printf", "%s", "$(reboot)", "; rm -rf /", "it's"]
    spec = remote.run_spec(argv, timeout=5, env={"A": "b c"}, rundir="/dev/shm/rig0001",
                           io_target=None, grace=3.0)
    ssh = h.ssh_argv(remote.agent_command(spec))
    assert ssh[:2] == ["ssh", "-T"] and ssh[-2] == "root@dtn1.example"
    assert "ControlPath=/run/rig/rig0001/ssh-dtn1" in ssh and "2222" in ssh
    words = shlex.split(ssh[-1])       # what the remote shell makes of it
    assert words[:4] == ["python3", "-I", "-S", "-c"] and words[4] == remote.AGENT
    assert json.loads(words[5])["argv"] == argv and json.loads(words[5])["env"] == {"A": "b c"}
    assert len(words) == 6


def test_clean_refuses_a_directory_that_is_not_a_rig_run_directory():
    from rig.errors import RigError
    from rig.orchestration import hosts
    h = Host(name="dtn1", ssh="x")
    for bad in ("/", "/dev/shm", "/home/user", "/dev/shm/rig12345", "/dev/shm/../etc/rig0001"):
        with pytest.raises(RigError, match="refusing to remove"):
            hosts.clean_host(h, bad)


def test_results_without_the_host_columns_still_load(tmp_path):
    """A results folder written before client_host/server_host existed reads them as
    NULL; a column not in ADDED_AFTER_V1 missing is still an error."""
    import sqlite3

    from fixtures_results import make_run
    from rig.report import model
    from rig.results import check
    from rig.results.store import ADDED_AFTER_V1
    assert {"client_host", "server_host"} <= ADDED_AFTER_V1
    run = tmp_path / "old"
    make_run(run, rtts=(0, 20))
    db = sqlite3.connect(run / "results.sqlite")
    for c in ("client_host", "server_host"):
        db.execute(f"ALTER TABLE transfers DROP COLUMN {c}")
    db.commit()
    db.close()
    check.check(run / "results.sqlite")
    r = model.load_run(run)
    assert r.transfers and all(t.client_host is None for t in r.transfers)
    db = sqlite3.connect(run / "results.sqlite")
    db.execute("ALTER TABLE transfers DROP COLUMN tool")
    db.commit()
    db.close()
    with pytest.raises(InputError, match=r"transfers\.tool: missing column"):
        check.check(run / "results.sqlite")


TWO_REMOTE = dict(BASE, hosts={**BASE["hosts"], "dtn2": {"ssh": "root@dtn2.example"}},
                  paths=[dict(BASE["paths"][0], client_host="dtn2")],
                  tuning={"congestion_control": "reno", "tcp_rmem_max": "64MiB", "mtu": 9000})


def test_tuning_a_real_path_between_remote_hosts_is_planned_on_each_host():
    sc = _parse(TWO_REMOTE)
    assert not sc.tunes_local() and list(sc.remote_hosts()) == ["dtn1", "dtn2"]
    lines = plan.plan_lines(sc)
    for h in ("dtn1", "dtn2"):
        assert any(ln.startswith(f"@{h} # tuning") and "net.ipv4.tcp_congestion_control=reno"
                   in ln and "mtu 9000" in ln for ln in lines), h
    assert not any(ln.startswith("sysctl") for ln in lines)     # nothing tuned here
    assert any(ln.startswith("@dtn2 curl ") for ln in lines)


def test_tuning_a_real_path_with_an_end_here_is_refused():
    d = copy.deepcopy(TWO_REMOTE)
    d["paths"][0]["client_host"] = "local"
    with pytest.raises(InputError, match=r"tuning\.congestion_control: not applied on real "
                                         r"path 'loop' \(an end on this host"):
        _parse(d)


def test_each_host_is_asked_for_the_programs_its_role_needs():
    from rig.orchestration import hosts
    d = copy.deepcopy(TWO_REMOTE)
    d["servers"] = [{"name": "x", "kind": "xrootd"}, {"name": "ng", "kind": "nginx"}]
    d["clients"] = [{"name": "c", "tool": "curl", "file": "f", "server": "ng"},
                    {"name": "x", "tool": "xrdcp", "file": "f", "server": "x",
                     "binary": "/opt/xrootd-5.8/bin/xrdcp"}]
    sc = _parse(d)
    server, client = hosts.required_tools(sc, "dtn1"), hosts.required_tools(sc, "dtn2")
    assert {"xrootd", "nginx", "iperf3", "ip", "tar"} <= set(server)
    assert not {"curl", "ping"} & set(server)
    assert client["/opt/xrootd-5.8/bin/xrdcp"] == "clients[1].binary"
    assert client["curl"] == "clients[0].tool" and "ping" in client and "ip" in client
    assert "xrootd" not in client
