"""The router role on an end host: two OpenSSH servers in namespaces this test creates
(tests/sshhost.py), "dtn1" (the servers) and "dtn2" (the clients), joined by one veth
pair of their own. A copy of scenarios/end-router.example.yaml with those names and
addresses; the userspace engine runs on one end (this kernel has no netem), its NFQUEUE
rules in OUTPUT/INPUT, a 2 Gbit/s TBF on the interface's egress and, for the direction
that end receives, on an IFB its ingress is redirected to.

Checks the rows (xrdcp and curl on dtn2 against xrootd and nginx on dtn1), the ping RTT
(never below the configured RTT; the rig's flag consistent with its own tolerance), the
rate (no transfer above it), the engine's stats read back over SSH, nothing of the run
left on either host; then a SIGKILLed run: the rig's SSH connection to the end host keeps
working while the rules are in force (its bytes never reach them), and `rig clean`
removes the engine, the rules, the TBFs and the IFB.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.orchestration import clean
from rig.orchestration.pathcheck import rtt_flag
from rig.realization import netns

from sshhost import (gone_after_clean, link_hosts, missing_tools, pids_with, remote_scenario,
                     run_then_sigkill, ssh_host)

pytestmark = pytest.mark.e2e
RIG = [sys.executable, "-m", "rig"]
ROOT = Path(__file__).resolve().parent.parent
SIZE = 32 << 20
SHM = "/dev/shm/rig-test-endrouter"
RTT_MS = 20.0
RATE_BPS = 2e9


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    assert not missing_tools(), f"missing tools (make install): {missing_tools()}"
    tmp = tmp_path_factory.mktemp("hosts")
    for d in ("dtn1", "dtn2"):
        (tmp / d).mkdir()
    try:
        with ssh_host(tmp / "dtn1") as s, ssh_host(tmp / "dtn2") as c, \
                link_hosts(s, c) as link:       # a = dtn1, b = dtn2
            yield s, c, link
    finally:
        shutil.rmtree(SHM, ignore_errors=True)      # the bases; the runs removed their own


def _scenario(tmp: Path, two, end: str, *, iperf_s: int = 1, loss: str = "0%") -> Path:
    s, c, link = two
    d = remote_scenario(ROOT / "scenarios/end-router.example.yaml", {"dtn1": s, "dtn2": c},
                        SHM, iperf_s=iperf_s)
    p = d["paths"][0]
    p.update(server_addr=link.a_addr, router_host=end, rate=f"{int(RATE_BPS)}bit", loss=loss,
             router_iface=link.a_dev if end == "dtn1" else link.b_dev)
    f = tmp / "end-router.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


def _out(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          timeout=10, check=True).stdout


def _state(h) -> dict:
    """What the run may touch on an end host, read with the kernel's own tools."""
    return {"forward": _out(h.ns, "sysctl", "-n", "net.ipv4.ip_forward").strip(),
            "rules": [ln for ch in ("INPUT", "OUTPUT", "FORWARD")
                      for ln in _out(h.ns, "iptables", "-S", ch).splitlines() if "NFQUEUE" in ln],
            "qdiscs": sorted(q["kind"] for q in json.loads(_out(h.ns, "tc", "-j", "qdisc", "show"))
                             if q["kind"] in ("tbf", "netem", "clsact", "ingress")),
            "ifbs": [x["ifname"] for x in json.loads(_out(h.ns, "ip", "-j", "link", "show",
                                                            "type", "ifb"))]}


def _rule_bytes(h) -> int:
    """Bytes the kernel counted on the NFQUEUE rules of INPUT and OUTPUT."""
    n = 0
    for ch in ("INPUT", "OUTPUT"):
        for ln in _out(h.ns, "iptables", "-L", ch, "-v", "-x", "-n").splitlines():
            if "NFQUEUE" in ln:
                n += int(ln.split()[1])
    return n


def _leftovers(prefix: str) -> list:
    dirs = [f"{SHM}/{h}/{prefix}" for h in ("dtn1", "dtn2")]
    return [*pids_with(f"/{prefix}/"), *pids_with(f"/run/rig/{prefix}/ssh-"),
            *[d for d in dirs if Path(d).exists()]]


# on the server end a little loss on the data direction, which dtn1 sends: its OUTPUT rule
# (the engine drops there but holds nothing); the client end has no rule for what it sends
@pytest.mark.parametrize("end, loss", [("dtn1", "0.1%"), ("dtn2", "0%")])
def test_emulated_path_with_the_router_on_an_end_host(two, tmp_path, end, loss):
    s, c, link = two
    before = {n: _state(x) for n, x in (("dtn1", s), ("dtn2", c))}
    assert before[end] == {"forward": "0", "rules": [], "qdiscs": [], "ifbs": []}, before
    out = tmp_path / "out"
    res = subprocess.run([*RIG, "run", str(_scenario(tmp_path, two, end, loss=loss)),
                          "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    env = {k: json.loads(v) for k, v in db.execute("SELECT key, value_json FROM environment")}
    prefix = env["prefix"]
    assert env["backends"] == {"wan": "userspace"}      # auto: no sch_netem here
    rows = db.execute("SELECT * FROM transfers ORDER BY rowid").fetchall()
    assert [x["client"] for x in rows] == ["xrdcp-S4", "curl"]
    for x in rows:
        assert x["ok"] == 1 and x["exit_code"] == 0, (x["client"], x["error"], x["stderr_tail"])
        assert (x["client_host"], x["server_host"]) == ("dtn2", "dtn1")
        assert x["bytes"] == SIZE and link.a_addr in x["url"]
        assert x["backend"] == "userspace" and x["rtt_ms_configured"] == RTT_MS
        assert x["duration_s"] > 3 * RTT_MS / 1e3
        # the data direction is shaped: by the TBF on dtn1's egress (server end) or on
        # dtn2's IFB (client end); 1 % for the TBF's 256 KB burst, 4 % for timing
        assert x["throughput_bps"] <= RATE_BPS * 1.05, dict(x)
    vals = db.execute("SELECT * FROM validations ORDER BY rowid").fetchall()
    assert [v["phase"] for v in vals] == ["before", "after"]
    for v in vals:
        # each way waits its half in the engine: never early; a direction delayed twice
        # (30 ms) would break the upper bound
        assert RTT_MS <= v["rtt_ms_measured"] < 1.4 * RTT_MS, dict(v)
        tol = rtt_flag(RTT_MS, v["rtt_ms_measured"], abs_ms=0.3, rel=0.01,
                       stddev_ms=v["rtt_ms_stddev"] or 0.0, count=20)
        assert (tol is not None) == ("RTT" in (v["flag_reason"] or "")), dict(v)
        assert v["iperf_bps"] is None or 1e7 < v["iperf_bps"] <= RATE_BPS * 1.05, dict(v)
    st = db.execute("SELECT * FROM engine_stats ORDER BY taken_at").fetchall()
    assert [r["phase"] for r in st] == ["check-before", "transfers", "check-after"]
    stats = json.loads(st[-1]["stats"])     # cumulative: the whole run
    assert stats["backend"] == "userspace" and stats["alive"] and not stats.get("error"), stats
    cmds = [ln.split(None, 1)[1] for ln in (out / "commands.log").read_text().splitlines()]
    dirs = {d["direction"]: d for d in stats["directions"]}
    # the whole RTT on the forward direction (userspace.end_profile): what dtn1 receives
    # (INPUT) on the server end, what dtn2 sends (OUTPUT) on the client end
    fwd, rev = dirs["forward"], dirs["reverse"]
    assert fwd["applied_delay_mean_s"] == pytest.approx(RTT_MS / 1e3), stats
    assert fwd["seen"] > 100 and fwd["lateness"]["count"] == fwd["released"] > 0, stats
    if loss != "0%":         # GSO packets: up to 64 KB each (segmented where loss is)
        assert rev["seen"] > SIZE / 65536 and rev["dropped_loss"] > 0, stats
        assert rev["applied_delay_mean_s"] == pytest.approx(0.0, abs=1e-6), stats
    else:
        assert rev["seen"] == 0, stats
    rules = [ln for ln in cmds if ln.startswith(f"@{end} iptables") and "-I" in ln.split()]
    want = {"dtn1": ["INPUT", "OUTPUT"], "dtn2": ["OUTPUT", "INPUT"]}[end]
    assert [ln.split()[5] for ln in rules] == want[:2 if loss != "0%" else 1], rules
    assert all(prefix in ln for ln in rules), rules
    at = [ln for ln in cmds if ln.startswith(f"@{end} ")]
    assert any("rig.realization.emul.engine" in ln for ln in at)
    assert any(f"ip link add {prefix}-0ifb type ifb" in ln for ln in at)
    assert not any("FORWARD" in ln or "ip_forward" in ln for ln in cmds)
    assert f"host {end}: emulates path wan on its" in res.stderr
    assert {n: _state(x) for n, x in (("dtn1", s), ("dtn2", c))} == before
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()


def test_sigkill_then_rig_clean_leaves_nothing_on_the_end_host(two, tmp_path):
    s, c, link = two
    before = _state(s)
    # the rules go in last: then all is in place
    prefix = run_then_sigkill(_scenario(tmp_path, two, "dtn1", iperf_s=20, loss="0.1%"),
                              tmp_path / "out", "applying userspace emulation",
                              lambda: len(_state(s)["rules"]) >= 2)
    assert prefix, "the run did not reach the hosts"
    said: list[str] = []
    try:
        during = _state(s)
        assert during["forward"] == "0" and len(during["rules"]) == 2 and \
            during["qdiscs"] == ["clsact", "tbf", "tbf"] and \
            during["ifbs"] == [f"{prefix}-0ifb"], ("nothing to remove: proves nothing", during)
        assert pids_with(f"{prefix}-wan-engine"), "no engine running on dtn1"
        # the rig's SSH connection to dtn1 while its rules are in force: alive, and none
        # of its bytes (16 MiB here) queued
        q0 = _rule_bytes(s)
        r = subprocess.run(["ssh", "-i", str(s.identity), "-o", "BatchMode=yes",
                            "-o", f"UserKnownHostsFile={s.known_hosts}",
                            "-o", "StrictHostKeyChecking=yes", f"root@{s.addr}",
                            "head -c 16777216 /dev/zero"], capture_output=True, timeout=60)
        assert r.returncode == 0 and len(r.stdout) == 16 << 20, r.stderr[-500:]
        assert _rule_bytes(s) - q0 < 1 << 20, (q0, _rule_bytes(s))
    finally:   # while the hosts exist: a failed assertion leaves no state behind them
        clean.clean(say=said.append, prefixes=[prefix])
    assert sum("removed NFQUEUE rule" in ln for ln in said) == 2, said
    assert sum("removed root qdisc" in ln for ln in said) == 1, said
    assert any(f"removed {prefix}-0ifb" in ln for ln in said), said
    assert not any("ip_forward" in ln for ln in said), said
    assert _state(s) == before
    gone_after_clean(prefix, _leftovers)


def test_the_path_interface_carrying_ssh_is_refused_and_nothing_is_made(two, tmp_path):
    s, c, link = two
    before = _state(s)
    f = _scenario(tmp_path, two, "dtn1")
    d = yaml.safe_load(f.read_text())
    ssh_dev = f"{s.prefix}-9hp"          # dtn1's end of the veth its sshd listens on
    d["paths"][0]["router_iface"] = ssh_dev
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    out = tmp_path / "out"
    res = subprocess.run([*RIG, "run", str(f), "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (
        f"rig: {f}: paths[0].router_iface: carries the rig's own SSH connection to "
        f"host dtn1 ({s.addr}): delay or loss there would cut the rig off (got '{ssh_dev}')")
    assert not out.exists()
    assert _state(s) == before
    assert not any(Path(SHM, h).exists() and any(Path(SHM, h).iterdir())
                   for h in ("dtn1", "dtn2"))
