"""An end held back by its own cgroup CPU quota (rig.process.cgroupcpu reads it,
rig.report.quota judges it): the reading code on fake /proc and cgroup trees, and on a
real cgroup where the host lets the test make one; the verdict rule where the answer is
YES and where it is NO (issue 38, docs/ground-truth.md)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures_results import Client, make_run
from rig.process import cgroupcpu as C
from rig.report import quota as Q
from rig.report.model import load_run
from rig.report.verdict import verdicts

# ---------------------------------------------------------------- reading the kernel


def _fake(tmp: Path, mountinfo: str, cgroup: str, pid: int = 4242) -> Path:
    proc = tmp / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/mountinfo").write_text(mountinfo)
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "cgroup").write_text(cgroup)
    return proc


def test_v1_chain_limits_and_counters(tmp_path: Path) -> None:
    cpu = tmp_path / "cg/cpu"
    mi = (f"32 31 0:29 / {cpu} rw,relatime - cgroup cgroup rw,cpu\n"
          f"41 31 0:38 / {tmp_path}/cg/unified rw,relatime - cgroup2 cgroup2 rw\n")
    proc = _fake(tmp_path, mi, "4:memory:/x\n1:cpu:/pod/ctr\n0::/\n")
    leaf = cpu / "pod/ctr"
    leaf.mkdir(parents=True)
    (cpu / "pod/cpu.cfs_quota_us").write_text("30000\n")
    (cpu / "pod/cpu.cfs_period_us").write_text("100000\n")
    (leaf / "cpu.cfs_quota_us").write_text("-1\n")        # none on the container itself
    (leaf / "cpu.cfs_period_us").write_text("100000\n")
    (cpu / "pod/cpu.stat").write_text("nr_periods 10\nnr_throttled 8\nthrottled_time "
                                      "500000000\nnr_bursts 0\nburst_time 0\n")
    assert C.cgroup_chain(4242, proc) == [leaf, cpu / "pod", cpu]
    assert C.read_limit(leaf) is None
    lim = C.read_limit(cpu / "pod")
    assert lim is not None and lim.cores == pytest.approx(0.3)
    assert lim.file == "cpu.cfs_quota_us"
    st = C.read_stat(cpu / "pod")
    assert st == C.Stat(10, 8, 500000.0, None)


def test_v2_chain_limits_and_counters(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mi = f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n"
    proc = _fake(tmp_path, mi, "0::/kubepods/pod1/ctr\n")
    leaf = root / "kubepods/pod1/ctr"
    leaf.mkdir(parents=True)
    (leaf / "cpu.max").write_text("max 100000\n")
    (root / "kubepods/pod1/cpu.max").write_text("50000 100000\n")
    (root / "kubepods/pod1/cpu.stat").write_text(
        "usage_usec 900000\nuser_usec 1\nsystem_usec 1\nnr_periods 20\nnr_throttled 5\n"
        "throttled_usec 120000\n")
    assert C.cgroup_chain(4242, proc)[:2] == [leaf, root / "kubepods/pod1"]
    assert C.read_limit(leaf) is None                  # "max": no quota
    lim = C.read_limit(root / "kubepods/pod1")
    assert lim is not None and lim.cores == 0.5 and lim.file == "cpu.max"
    assert C.read_stat(root / "kubepods/pod1") == C.Stat(20, 5, 120000.0, 900000.0)


def test_gone_process_has_no_chain(tmp_path: Path) -> None:
    proc = _fake(tmp_path, "", "0::/\n")
    assert C.cgroup_chain(999, proc) == []


def test_a_window_of_the_readings_is_interpolated() -> None:
    lim = C.Limit(20000, 100000, "cpu.max")
    q = C.Quota(Path("/x"), lim, 0, [(0.0, C.Stat(0, 0, 0.0, 0.0)),
                                     (1.0, C.Stat(10, 8, 4e5, 2e5)),
                                     (2.0, C.Stat(20, 8, 4e5, 3e5))])
    u = q.over(0.5, 1.5)
    assert (u.periods, u.throttled, u.span_s) == (10, 4, 1.0)
    assert u.usage_s == pytest.approx(0.15)
    whole = q.over(-5, 9)            # clipped to the readings
    assert whole.span_s == 2.0 and whole.throttled == 8


def _cpu_hierarchy() -> tuple[Path, str] | None:
    """A hierarchy this test may make a quota cgroup in: v1 `cpu`, or v2 with `cpu`."""
    v1, v2 = C.cpu_mounts()
    if v1 is not None and (v1.point / "cpu.cfs_quota_us").exists():
        return v1.point, "v1"
    if v2 is not None and "cpu" in (v2.point / "cgroup.subtree_control").read_text().split():
        return v2.point, "v2"
    return None


def test_a_real_process_in_a_real_quota_is_read_back() -> None:
    """A busy loop in a cgroup of this test's own (0.2 core): read back as the kernel
    throttled it, near its quota; the cgroup removed after."""
    found = _cpu_hierarchy() if os.geteuid() == 0 else None
    if found is None:
        pytest.skip("needs root and a cpu controller to make a cgroup in")
    root, kind = found
    d = root / f"rigtest-quota-{os.getpid()}"
    d.mkdir()
    p = None
    try:
        if kind == "v1":
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text("20000")
        else:
            (d / "cpu.max").write_text("20000 100000")
        p = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.time()\nwhile time.time() - t < 1.2: pass"])
        (d / "cgroup.procs").write_text(str(p.pid))
        w = C.QuotaWatch()
        w.add(p.pid, "client")
        t0 = time.monotonic()
        while p.poll() is None and time.monotonic() - t0 < 10:
            w.tick()
            time.sleep(0.05)
        (q,) = [x for x in w.finish()["client"] if x.path == d]
        u = q.over()
        assert u.limit.cores == pytest.approx(0.2) and u.depth == 0
        assert u.periods >= 5 and u.throttled >= 0.8 * u.periods
        if u.usage_s is not None:
            assert u.usage_s / u.span_s == pytest.approx(0.2, rel=0.3)
    finally:
        if p is not None:
            p.kill()
            p.wait(timeout=5)
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# ---------------------------------------------------------------- the verdict rule


def _rec(cores: float, periods: float, throttled: float, use: float | None,
         path: str = "/sys/fs/cgroup/cpu.max/ctr", depth: int = 0, span: float = 4.0) -> dict:
    return {"path": path, "quota_us": int(cores * 100000), "period_us": 100000,
            "file": "cpu.max", "depth": depth, "periods": periods, "throttled": throttled,
            "throttled_s": 0.0, "usage_s": None if use is None else use * span,
            "span_s": span}


def _run(tmp: Path, quota: dict, host_share: float = 0.97,
         engine: dict | None = None, cpu_s: float | None = None) -> str:
    """A point at 20 ms far below every bound (unexplained by the totals), each row's
    extra.cpu_quota `quota`, its host `host_share` busy; its verdict."""
    d = make_run(tmp, rtts=(20,), clients=(Client("xrdcp", "xrdcp"),), repeats=3,
                 rate_bps=None, factor=lambda *a: 0.05, engine_stats=engine)
    con = sqlite3.connect(d / "results.sqlite")
    rows = con.execute("SELECT rowid, duration_s, extra FROM transfers").fetchall()
    for rowid, dur, extra in rows:
        e = json.loads(extra or "{}")
        e["cpu_quota"] = quota
        con.execute("UPDATE transfers SET extra=?, host_cpu_share=?, host_cpus=2, "
                    "host_cpu_wall_s=?, server_cpu_user_s=0.1, server_cpu_sys_s=0.0 "
                    "WHERE rowid=?", (json.dumps(e), host_share, dur, rowid))
        if cpu_s is not None:
            con.execute("UPDATE transfers SET cpu_user_s=?, cpu_sys_s=0 WHERE rowid=?",
                        (cpu_s * dur, rowid))
    con.commit()
    con.close()
    (v,) = verdicts(load_run(d)).values()
    return v.text()


def test_a_throttled_client_at_its_quota_is_client_cpu_bound_despite_host_load(tmp_path):
    text = _run(tmp_path, {"client": [_rec(0.3, 40, 34, 0.29)]}, host_share=0.97)
    assert text.startswith("client-CPU-bound: client capped at 0.30 core by cpu.max of its "
                           "cgroup")
    assert "throttled in 85% of periods" in text and "using 0.29 core" in text


def test_without_the_cgroup_usage_the_clients_own_cpu_is_its_use(tmp_path):
    text = _run(tmp_path, {"client": [_rec(0.3, 40, 34, None)]}, cpu_s=0.29)
    assert text.startswith("client-CPU-bound: client capped at 0.30 core")


@pytest.mark.parametrize("what, quota", [
    # the host was busy, the quota never bit: the host's doing, not the quota's
    ("unthrottled under host load", {"client": [_rec(0.5, 40, 0, 0.45)]}),
    # a quota there but far from reached: it held nothing
    ("quota never reached", {"client": [_rec(2.0, 40, 0, 0.3)]}),
    # throttled in bursts (a checksum at the end) but idle most of the transfer
    ("bursts, far below the quota", {"client": [_rec(0.5, 40, 12, 0.2)]}),
    # one throttled period is one burst
    ("one throttle", {"client": [_rec(0.3, 3, 1, 0.3)]}),
])
def test_a_quota_that_did_not_hold_is_not_quota_bound(tmp_path, what, quota):
    text = _run(tmp_path, quota, host_share=0.97)
    assert "capped at" not in text, what
    assert not text.startswith(("client-CPU-bound", "single-thread-bound",
                                "server-cpu-bound")), what


def test_a_quota_never_reached_on_a_quiet_host_is_not_quota_bound(tmp_path):
    text = _run(tmp_path, {"client": [_rec(1.0, 40, 0, 0.2)]}, host_share=0.3)
    assert "capped at" not in text and not text.startswith("client-CPU-bound")


def test_a_throttle_on_the_other_end_names_that_end(tmp_path):
    text = _run(tmp_path, {"client": [_rec(1.0, 40, 0, 0.3)],
                           "server": [_rec(0.2, 40, 36, 0.2)]})
    assert text.startswith("server-cpu-bound: server capped at 0.20 core")
    assert "client capped" not in text


def test_a_quota_on_an_ancestor_is_found_the_tightest_that_throttled(tmp_path):
    text = _run(tmp_path, {"client": [
        _rec(4.0, 40, 0, 0.3, path="/cg/pod/ctr"),                # its own: loose
        _rec(0.3, 40, 30, 0.3, path="/cg/pod", depth=1),          # the pod's: bit
        _rec(0.25, 40, 0, 0.3, path="/cg", depth=2)]})            # tighter, never bit
    assert text.startswith("client-CPU-bound: client capped at 0.30 core by cpu.max of an "
                           "ancestor cgroup (1 up) (30000 of 100000 us, /cg/pod)")


ENGINE_LATE = {"forward": {"seen": 10_000, "dropped_queue": 12}}


def test_the_engines_quota_is_never_an_ends_bound(tmp_path):
    """Emulator late (the engine capped): emulator-limited, the quota a note; never the
    client's or the server's CPU, even when an end was throttled too."""
    text = _run(tmp_path / "a", {"engine": [_rec(0.1, 40, 38, 0.1)]}, engine=ENGINE_LATE)
    assert text.startswith("emulator-limited:")
    assert "the emulation engine capped at 0.10 core" in text
    both = _run(tmp_path / "b", {"engine": [_rec(0.1, 40, 38, 0.1)],
                                 "client": [_rec(0.3, 40, 34, 0.3)]}, engine=ENGINE_LATE)
    assert both.startswith("emulator-limited:") and "client-CPU-bound" in both   # also


def test_the_engines_quota_alone_is_a_note(tmp_path):
    text = _run(tmp_path, {"engine": [_rec(0.1, 40, 38, 0.1)]}, host_share=0.3)
    assert not text.startswith(("client-CPU-bound", "server-cpu-bound",
                                "single-thread-bound"))
    assert "the emulation engine capped at 0.10 core" in text


def test_held_needs_both_throttling_and_use():
    h = Q.tightest([_rec(0.3, 40, 8, 0.3)], "client", None)
    assert h is not None and h.share == 0.2 and h.bound()
    assert not Q.tightest([_rec(0.3, 40, 7.9, 0.3)], "client", None).bound()
    assert not Q.tightest([_rec(0.3, 40, 20, 0.25)], "client", None).bound()
    assert Q.tightest([_rec(0.3, 40, 0, 0.3)], "client", None) is None
