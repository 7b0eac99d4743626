"""Fault tier (issue 31): each fault is injected during a reduced real run
(tests/data/scenarios/faults-small.yaml: userspace engine, two RTTs, one 16 MiB file),
then: one console line says what happened, the stored rows say it too (validations
phase `fault` / `not-run`, or the engine's `emulation_late_reason`), every row
measured before the fault is kept, later steps ran or are recorded as not run with the
reason, the exit code is docs/commands.md's, nothing of the run is left, and a namespace and
a process the rig did not make survive. Runs synchronise on events (a line, a process
in the run's namespace, a row), never on sleeps; the only sleep is the 2 s SIGSTOP."""
import os
import signal
import subprocess
import time

import pytest

from faultrig import CLEAN, RIG, FaultRun, leftovers, proc_state
from rig.realization import tuning

pytestmark = [pytest.mark.faults, pytest.mark.e2e]


@pytest.fixture
def decoy():
    """A namespace and a process in it that the rig did not make, named like its own."""
    ns = f"rigdecoy{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=20)
    p = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "3600"], start_new_session=True)
    try:
        yield ns, p
    finally:
        alive = p.poll() is None
        p.kill()
        p.wait(timeout=30)
        listed = ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                      timeout=20).stdout
        subprocess.run(["ip", "netns", "delete", ns], timeout=20)
        assert alive and listed, f"the decoy was touched: process alive {alive}, ns {listed}"


RUN_RMEM = str(48 << 20)     # faults-small.yaml's tuning.core_rmem_max


@pytest.fixture
def sysctls():
    """The run's host-global sysctl is not left in force. (Not `after == before`: on a
    shared host another run may change the key meanwhile; this value is the run's own.)"""
    before = tuning.read(["net.core.rmem_max"])["net.core.rmem_max"]
    yield
    after = tuning.read(["net.core.rmem_max"])["net.core.rmem_max"]
    assert after == before or after != RUN_RMEM, f"net.core.rmem_max left at {after}"


def _rows(out, table="validations"):
    import sqlite3
    c = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    c.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in c.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        c.close()


def _phases(out):
    return [(v["step"], v["phase"]) for v in _rows(out)]


def _finish(r: FaultRun) -> int:
    try:
        rc = r.finish()
    finally:
        r.kill_if_running()
    left = leftovers(r.prefix)
    # what the run did, for the closing table (shown with pytest -rP)
    print(f"exit {rc}; leftovers {left}")
    print("\n".join(ln for ln in r.err if not ln.startswith("report:")))
    if (r.out / "results.sqlite").exists():
        print("validations:", [(v["step"], v["phase"], v["flag_reason"]) for v in _rows(r.out)])
        print("transfers:", [(t["step"], t["ok"], t["error"]) for t in _rows(r.out, "transfers")])
        print("engine late:", [(e["step"], e["phase"], e["emulation_late_reason"])
                               for e in _rows(r.out, "engine_stats") if e["emulation_late"]])
    assert "Traceback" not in "\n".join(r.err), "\n".join(r.err[-30:])
    assert left == CLEAN
    return rc


def _curl(r: FaultRun, after: int = 0) -> list[int]:
    return r.wait(lambda: r.procs("c", "curl"), "the transfer's curl in the client namespace")


def test_origin_killed_mid_step(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        _curl(r)
        origins = r.procs("s", "xrootd")
        assert origins
        for pid in origins:
            os.kill(pid, signal.SIGKILL)
    finally:
        rc = _finish(r)
    assert rc == 1
    assert any(ln.startswith("  FAULT (origin-died): origin xrootd") and "SIGKILL" in ln
               for ln in r.err), r.err[-10:]
    assert r.err[-1].startswith("rig: origin xrootd") and "cannot go on" in r.err[-1]
    assert _phases(r.out) == [(0, "before"), (0, "fault"), (1, "not-run")]
    t = _rows(r.out, "transfers")
    assert [(x["step"], x["ok"]) for x in t] == [(0, 0)]
    v = _rows(r.out)
    assert v[0]["rtt_ms_measured"] > 0           # measured before the fault: kept
    assert "origin-died" in v[1]["flag_reason"] and "SIGKILL" in v[2]["flag_reason"]
    # the stopped run still reports, from its rows alone
    rep = subprocess.run([*RIG, "report", str(r.out)], capture_output=True, text=True,
                         timeout=300)
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr[-2000:]


def _control_backlog(r: FaultRun) -> int:
    """Connections waiting on the engine's control socket (its Recv-Q while listening)."""
    got = subprocess.run(["ip", "netns", "exec", f"{r.prefix}-0r", "ss", "-xlH"],
                         capture_output=True, text=True, timeout=20).stdout
    for line in got.splitlines():
        f = line.split()
        if len(f) > 4 and f[4].startswith(f"/run/rig/{r.prefix}/") and f[4].endswith(".sock"):
            return int(f[2])
    return 0


def test_engine_stopped_for_2s_then_continued(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        _curl(r)
        engines = r.procs("r", None)     # the router namespace holds the engine only
        assert engines, "no engine process in the router namespace"
        for pid in engines:
            os.kill(pid, signal.SIGSTOP)
        # the rig's watchdog pings the engine every 0.5 s: once a ping waits in the control
        # socket's backlog, the stop is seen, however slowly the loaded host runs the rig
        r.wait(lambda: _control_backlog(r) > 0, "a watchdog ping waiting on the engine")
        time.sleep(2.0)           # the fault itself: 2 s stopped
        for pid in engines:
            os.kill(pid, signal.SIGCONT)
    finally:
        rc = _finish(r)
    assert rc == 0, r.err[-5:]
    assert any(ln.startswith("  EMULATION LATE (transfers)") and "engine did not answer" in ln
               for ln in r.err), r.err
    eng = [e for e in _rows(r.out, "engine_stats") if e["step"] == 0 and e["phase"] == "transfers"]
    assert eng and eng[0]["emulation_late"] == 1
    assert "engine did not answer" in eng[0]["emulation_late_reason"]
    assert _phases(r.out) == [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    assert len(_rows(r.out, "transfers")) == 2        # both steps ran


def test_engine_killed(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        _curl(r)
        engines = r.procs("r", None)     # the router namespace holds the engine only
        assert engines, "no engine process in the router namespace"
        for pid in engines:
            os.kill(pid, signal.SIGKILL)
    finally:
        rc = _finish(r)
    assert rc == 0, r.err[-5:]
    assert any(ln.startswith("  step aborted:") and "engine died" in ln for ln in r.err)
    assert not [ln for ln in r.err if ln.startswith("engine:")]   # its log: not a line of its own
    t = _rows(r.out, "transfers")
    assert [(x["step"], x["ok"]) for x in t] == [(0, 0), (1, 1)]   # step 2 on a new engine
    assert "emulation not in force" in t[0]["error"]
    assert _phases(r.out) == [(0, "before"), (0, "aborted"), (1, "before"), (1, "after")]


def test_output_filesystem_full(tmp_path, decoy, sysctls):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", f"rigfaults{os.getpid()}", str(mnt)],
                   check=True, timeout=20)
    try:
        r = FaultRun(mnt / "out")
        try:
            r.wait(lambda: r.rows("transfers"), "step 1's transfer row")
            # something else fills the disk; unbuffered, so that closing the file does not
            # retry a write the full disk refused (that OSError came from the test itself)
            with open(mnt / "filler", "wb", buffering=0) as f:
                with pytest.raises(OSError):
                    while True:
                        f.write(bytes(1 << 16))
        finally:
            rc = _finish(r)
        assert rc == 1
        assert any(ln.startswith("  FAULT (output-full)") for ln in r.err), r.err[-10:]
        assert r.err[-1].startswith("rig: output folder") and "is full" in r.err[-1]
        ph = _phases(r.out)
        assert ph[0] == (0, "before") and (0, "fault") in ph and ph[-1] == (1, "not-run")
        assert [(x["step"], x["ok"]) for x in _rows(r.out, "transfers")] == [(0, 1)]
        assert not (r.out / ".rig-reserve").exists()
    finally:
        subprocess.run(["umount", str(mnt)], timeout=30)
    assert not any(str(mnt) in ln for ln in open("/proc/mounts"))


def test_client_stopped_hangs_until_its_deadline(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        for pid in _curl(r):
            os.kill(pid, signal.SIGSTOP)
    finally:
        rc = _finish(r)
    assert rc == 0, r.err[-5:]
    said = "FAILED: deadline of 15s passed; the client was stopped (state T), not writing"
    assert any("curl" in ln and said in ln for ln in r.err), r.err
    t = _rows(r.out, "transfers")
    assert [(x["step"], x["ok"]) for x in t] == [(0, 0), (1, 1)]
    assert "stopped (state T)" in t[0]["error"]
    assert _phases(r.out) == [(0, "before"), (0, "after"), (1, "before"), (1, "after")]


def test_router_namespace_deleted_by_something_else(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        _curl(r)
        subprocess.run(["ip", "netns", "delete", f"{r.prefix}-0r"], check=True, timeout=20)
    finally:
        rc = _finish(r)
    assert rc == 1
    assert any(ln.startswith("  step aborted:") and "was deleted under the run" in ln
               for ln in r.err), r.err[-10:]
    assert r.err[-1].startswith("rig: emulation on path wan cannot be restored: namespace")
    assert _phases(r.out) == [(0, "before"), (0, "aborted"), (1, "not-run")]
    t = _rows(r.out, "transfers")
    assert [(x["step"], x["ok"]) for x in t] == [(0, 0)]
    assert "deleted under the run" in _rows(r.out)[2]["flag_reason"]


def test_sigterm_during_teardown(tmp_path, decoy, sysctls):
    r = FaultRun(tmp_path / "out")
    try:
        r.wait(lambda: len(r.rows("validations", "step = 1 AND phase = 'before'")),
               "step 2's first check")
        pids = [p for p, argv0 in r.state().get("pids", []) if argv0 == "iperf3"]
        assert pids
        # the teardown stops the servers first (the iperf3 server, started last): once it
        # has ended, the rig is in its teardown; held (SIGSTOP), the SIGTERM lands there
        r.wait(lambda: all(proc_state(p) in (None, "Z") for p in pids), "the servers' stop")
        os.kill(r.p.pid, signal.SIGSTOP)
        os.kill(r.p.pid, signal.SIGTERM)
        os.kill(r.p.pid, signal.SIGCONT)
    finally:
        rc = _finish(r)
    assert rc == 130
    assert any("signal 15 during teardown: finishing the teardown first" in ln for ln in r.err)
    assert r.err[-1].startswith("rig: interrupted (signal 15 during teardown")
    assert _phases(r.out) == [(0, "before"), (0, "after"), (1, "before"), (1, "after"),
                              (1, "fault")]
    assert len(_rows(r.out, "transfers")) == 2
