"""Clients on one remote host, servers on another, neither of them this one: a copy of
scenarios/two-hosts.example.yaml with its hosts and address replaced by two OpenSSH
servers in namespaces this test creates (tests/sshhost.py), "dtn1" and "dtn2", joined
by a veth pair of their own (the path under test). This host only reaches them over
SSH. Checks the rows (remote CPU of client and server trees, exit codes, durations
taken on the host that ran the process), the path's validation between the two hosts,
the tuning written on both and restored; then a run killed with SIGKILL and `rig clean`
putting back the tuning and leaving nothing on either host.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rig.orchestration import clean
from rig.realization import netns

from sshhost import link_hosts, pids_with, ssh_host, start_run

pytestmark = pytest.mark.e2e
RIG = [sys.executable, "-m", "rig"]
ROOT = Path(__file__).resolve().parent.parent
SIZE = 32 << 20
RMEM = 48 << 20
SHM = "/dev/shm/rig-test-hosts"
KEYS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    import shutil
    missing = [t for t in ("ssh", "nginx", "xrootd", "xrdcp", "curl", "davix-get", "iperf3")
               if not shutil.which(t)]
    assert not missing, f"missing tools (make install): {missing}"
    try:
        with ssh_host(tmp_path_factory.mktemp("dtn1")) as a, \
                ssh_host(tmp_path_factory.mktemp("dtn2")) as b, link_hosts(a, b) as link:
            yield a, b, link
    finally:
        shutil.rmtree(SHM, ignore_errors=True)      # the bases; the runs removed their own


def _copy_of_example(tmp: Path, a, b, link, *, iperf_s: int = 1) -> Path:
    """The shipped example with what a site admin adapts replaced (hosts, keys, the
    address) and made small (32 MiB, one repeat, 1-2 transfers, short validation)."""
    d = yaml.safe_load((ROOT / "scenarios/two-hosts.example.yaml").read_text())
    for name, h in (("dtn1", a), ("dtn2", b)):
        # the two "hosts" share this machine's files: a run directory base of each
        # their own, as two machines have (else the second would clean the first's)
        d["hosts"][name].update(ssh=f"root@{h.addr}", identity=str(h.identity),
                                known_hosts=str(h.known_hosts), rundir=f"{SHM}/{name}")
    d["paths"][0]["server_addr"] = link.a_addr
    d["files"] = [{"name": "f1G", "size": "32MiB"}]
    d["sweep"] = {"repeats": 1, "concurrency": [1, 2]}
    d["clients"][-1]["duration"] = "2s"
    d["tuning"] = {"congestion_control": "reno", "tcp_rmem_max": "48MiB",
                   "tcp_wmem_max": "48MiB", "mtu": 9000}
    d["validation"] = {"ping_count": 5, "iperf_duration": f"{iperf_s}s", "iperf_streams": 2}
    d["transfer_timeout"] = "60s"
    f = tmp / "two-hosts.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


def _state(ns: str, dev: str) -> dict:
    out = {k: " ".join(subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", k],
                                      capture_output=True, text=True, timeout=10,
                                      check=True).stdout.split()) for k in KEYS}
    link = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", dev],
                                     capture_output=True, text=True, timeout=10,
                                     check=True).stdout)[0]
    out["mtu"] = link["mtu"]
    return out


def _leftovers(prefix: str) -> list:
    dirs = [f"{SHM}/{h}/{prefix}" for h in ("dtn1", "dtn2")]
    return [*pids_with(f"/{prefix}/"), *pids_with(f"/run/rig/{prefix}/ssh-"),
            *[d for d in dirs if Path(d).exists()]]


def test_clients_on_one_remote_host_servers_on_another(two, tmp_path):
    a, b, link = two
    before = (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev))
    assert before[0]["net.ipv4.tcp_congestion_control"] != "reno"   # or nothing would change
    out = tmp_path / "out"
    r = subprocess.run([*RIG, "run", str(_copy_of_example(tmp_path, a, b, link)),
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    env = {k: json.loads(v) for k, v in db.execute("SELECT key, value_json FROM environment")}
    prefix = env["prefix"]
    rows = db.execute("SELECT * FROM transfers ORDER BY rowid").fetchall()
    assert [x["client"] for x in rows] == [c for c in ("xrdcp-S4", "curl", "davix", "iperf3-P4")
                                           for _ in range(3)]
    for x in rows:
        assert x["ok"] == 1 and x["exit_code"] == 0, (x["client"], x["error"], x["stderr_tail"])
        assert (x["client_host"], x["server_host"]) == ("dtn2", "dtn1")
        extra = json.loads(x["extra"])
        # the client's tree CPU as the agent on dtn2 reaped it
        assert 0 < x["cpu_user_s"] + x["cpu_sys_s"] < 30, x["client"]
        # the duration was taken on dtn2 and is within its own process's wall time
        assert 0 < x["duration_s"] <= extra["process_wall_s"] + 1e-6
        assert (x["congestion_control"], x["tcp_rmem_max"], x["tcp_wmem_max"]) == (
            "reno", RMEM, RMEM)
        assert json.loads(x["argv"])[0] in ("xrdcp", "curl", "davix-get", "iperf3")
        if x["tool"] != "iperf3":
            assert x["bytes"] == SIZE and link.a_addr in x["url"]
            # the server's CPU from dtn1's /proc, shared by the group's transfers
            assert x["server_cpu_user_s"] is not None and x["server_cpu_sys_s"] is not None
        else:
            assert x["bytes"] > SIZE and x["server_cpu_user_s"] is None
    groups = db.execute("SELECT client, concurrency, SUM(server_cpu_user_s + server_cpu_sys_s) "
                        "FROM transfers WHERE tool != 'iperf3' GROUP BY 1, 2").fetchall()
    # nginx sends 32 MiB with sendfile() in under one 10 ms tick: 0 is a fair reading
    # there; xrootd reads and writes every page and must show its CPU
    assert all(0.0 <= g[2] < 30 for g in groups), [tuple(g) for g in groups]
    assert all(g[2] > 0 for g in groups if g[0] == "xrdcp-S4"), [tuple(g) for g in groups]
    vals = db.execute("SELECT * FROM validations").fetchall()
    assert len(vals) == 2
    for v in vals:   # ping and iperf3 ran on dtn2 towards dtn1's address on the link
        assert v["iperf_bps"] > 1e8 and 0 < v["rtt_ms_measured"] < 5, dict(v)
        assert json.loads(v["raw"])["iperf3_argv"][2] == link.a_addr
    # commands.log: "  seconds  @HOST [VAR=value...] argv..."
    cmds = [ln.split(None, 1)[1] for ln in (out / "commands.log").read_text().splitlines()]
    for host, word in (("dtn2", "xrdcp"), ("dtn2", "curl"), ("dtn2", "davix-get"),
                       ("dtn2", "iperf3 -c"), ("dtn2", "ping"), ("dtn1", "xrootd"),
                       ("dtn1", "nginx -e"), ("dtn1", "iperf3 -s")):
        assert any(c.startswith(f"@{host} ") and f" {word} " in c for c in cmds), (host, word)
    # nothing here touched the path: every command naming its address ran on a host
    assert all(c.startswith("@") for c in cmds if link.a_addr in c)
    # tuning: written on both hosts (and recorded per host), restored on both
    th = env["tuning_hosts"]
    for name, dev in (("dtn1", link.a_dev), ("dtn2", link.b_dev)):
        assert th[name]["sysctls_wrote"]["net.ipv4.tcp_congestion_control"] == "reno"
        assert th[name]["mtu_wrote"] == {dev: 9000}
        assert f"{dev} mtu 1500" in th[name]["restored"]
    assert "host dtn2: tuned" in r.stderr and "mtu 9000" in r.stderr
    # each host's server configs and logs came back under its own name
    assert f"{SHM}/dtn1/{prefix}/data" in (out / "logs/dtn1/loop-nginx/nginx.conf").read_text()
    assert (out / "logs/dtn1/loop-xrootd/xrootd.cfg").exists()
    assert not (out / "logs/dtn2").exists()
    assert (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev)) == before
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()


def test_sigkill_then_rig_clean_restores_tuning_on_both_hosts(two, tmp_path):
    a, b, link = two
    before = (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev))
    p, prefix = start_run(_copy_of_example(tmp_path, a, b, link, iperf_s=20),
                          tmp_path / "out", "validate", "server xrootd")
    try:
        assert prefix, "the run did not reach the hosts"
    finally:
        os.kill(p.pid, signal.SIGKILL)       # only rig itself: its ssh children live on
        p.wait()
    during = (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev))
    assert during != before and during[1]["mtu"] == 9000, "nothing to restore: proves nothing"
    said: list[str] = []
    clean.clean(say=said.append, prefixes=[prefix])
    assert f"restored {link.b_dev} mtu 1500 on host dtn2" in said, said
    assert f"removed {SHM}/dtn1/{prefix} on host dtn1" in said, said
    assert (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev)) == before
    deadline = time.monotonic() + 5
    while _leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()


def test_a_program_missing_on_the_client_host_is_one_line_and_leaves_nothing(two, tmp_path):
    a, b, link = two
    before = (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev))
    f = _copy_of_example(tmp_path, a, b, link)
    d = yaml.safe_load(f.read_text())
    d["clients"][0]["binary"] = "/nonexistent/xrdcp"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    r = subprocess.run([*RIG, "run", str(f), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last == (f"rig: host dtn2 (root@{b.addr}): /nonexistent/xrdcp not found there "
                    "(needed by clients[0].binary)"), r.stderr[-2000:]
    prefix = next(ln.rsplit("/", 1)[1].strip() for ln in r.stderr.splitlines()
                  if "run directory " in ln)
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
    assert (_state(a.ns, link.a_dev), _state(b.ns, link.b_dev)) == before
