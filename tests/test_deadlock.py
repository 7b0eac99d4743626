"""Deadlocked children are found and ended early (rig.process.deadlock, proc.IoWatch):
the wait-for graph on captured and on synthetic data, then real processes whose two
threads hold one pthread mutex each and wait for the other's (the shape of xrdcp 5.5's
extreme-copy hang), against a control whose threads wait without a cycle."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.description import scenario
from rig.orchestration import transfer
from rig.process import deadlock, proc
from rig.services.tools import Job

DATA = Path(__file__).resolve().parent / "data"

# two threads, each holding one pthread mutex and then asking for the other's; ctypes
# lets the GIL go during the call, so both block in the kernel for good
ABBA = """
import ctypes, threading, time
libc = ctypes.CDLL("libc.so.6")
a, b = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)
def take(x, y):
    libc.pthread_mutex_lock(x); time.sleep(0.2); libc.pthread_mutex_lock(y)
for x, y in ((a, b), (b, a)):
    threading.Thread(target=take, args=(x, y), daemon=True).start()
time.sleep(3600)
"""
# control: one thread holds the mutex and sleeps, another waits for it; no cycle
HELD = """
import ctypes, threading, time
libc = ctypes.CDLL("libc.so.6")
a = ctypes.create_string_buffer(64)
def hold():
    libc.pthread_mutex_lock(a); time.sleep(3600)
threading.Thread(target=hold, daemon=True).start()
time.sleep(0.2)
threading.Thread(target=libc.pthread_mutex_lock, args=(a,), daemon=True).start()
time.sleep(3600)
"""


def test_cycle_of_the_wait_for_graph():
    # 11 waits for lock A held by 12, 12 for B held by 11
    assert deadlock.cycle({11: 0xA, 12: 0xB}, {0xA: 12, 0xB: 11}) == (11, 12)
    assert deadlock.cycle({7: 1, 5: 2, 6: 3}, {1: 5, 2: 6, 3: 7}) == (5, 6, 7)
    # a chain that ends at a thread not waiting (the owner runs or sleeps): no deadlock
    assert deadlock.cycle({11: 0xA, 12: 0xB}, {0xA: 12, 0xB: 13}) is None
    assert deadlock.cycle({11: 0xA}, {}) is None                 # owner unknown
    # a waiter behind the cycle is not part of it
    assert deadlock.cycle({3: 1, 11: 0xA, 12: 0xB}, {1: 11, 0xA: 12, 0xB: 11}) == (11, 12)


def test_frames_from_captured_gdb_output():
    text = (DATA / "gdb-xrdcp-y4-deadlock.txt").read_text()
    got = deadlock.frames(text, (16833, 16834))
    assert len(got) == 2 and got[0].startswith("16833: futex_wait < ")
    assert all(" < XrdCl::XCpSrc::Steal < " in g and g.endswith("< XrdCl::XCpSrc::Run")
               for g in got)
    assert deadlock.frames(text, (1,)) == []                      # no such thread


def _until(fn, seconds: float = 10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    return None


@pytest.fixture
def child():
    procs: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code])
        procs.append(p)
        return p
    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_find_names_both_threads_of_a_real_deadlock(child):
    p = child(ABBA)
    d = _until(lambda: deadlock.find(p.pid))
    assert d is not None and d.pid == p.pid and len(d.cycle) == 2
    assert d.waiting == 2 and d.threads == 3
    assert all(t != p.pid for t in d.cycle)                       # the two threads, not main
    assert "wait for each other's mutex" in d.describe()


def test_no_deadlock_when_the_owner_is_not_waiting(child):
    p = child(HELD)
    assert _until(lambda: (deadlock.mutex_waits(p.pid) or ({},))[0]) is not None  # blocked
    assert deadlock.find(p.pid) is None
    time.sleep(0.5)
    assert deadlock.find(p.pid) is None


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(proc.IoWatch, "STALL_S", 0.3)
    monkeypatch.setattr(proc.IoWatch, "RECHECK_S", 0.3)


@pytest.mark.slow
def test_a_deadlocked_child_is_ended_before_its_deadline(quick):
    # idle: stall 0.3 s + two looks 0.3 s apart + TERM, ~1 s; the 60 s deadline is the hang
    # guard, and `not r.timed_out` says the deadlock watch, not the deadline, ended it
    r = proc.run([sys.executable, "-c", ABBA], timeout=60, io_target=1 << 30)
    assert r.deadlock and "wait for each other's mutex" in r.deadlock
    assert not r.timed_out and not r.ok


@pytest.mark.slow
def test_a_child_blocked_without_a_cycle_runs_to_its_deadline(quick):
    r = proc.run([sys.executable, "-c", HELD], timeout=2.5, io_target=1 << 30)
    assert r.timed_out and r.deadlock is None and r.wall_s >= 2.5


def test_a_deadlocked_extreme_copy_row_says_so_with_the_known_bug():
    sc = scenario.load(DATA / "scenarios" / "extreme-small.yaml")
    y4 = next(c for c in sc.clients if c.name == "xrdcp-y4")
    job = Job(client=y4, streams=1, file_bytes=8 << 20, timeout_s=60)
    res = proc.Result(["xrdcp"], -15, "", "", 3.3, 0.1, 0.1, io_wchar=337,
                      deadlock="threads 1, 2 of pid 3 (xrdcp) wait for each other's mutex",
                      deadlock_stacks=["1: a < b"])
    m = transfer.measure(transfer.Outcome(job, ["xrdcp"], {}, res, 0.0, 0.0))
    assert not m["ok"] and m["error"].startswith("deadlocked, ended after 3.3s: threads 1, 2")
    assert "xrootd/xrootd#2619" in m["error"] and m["extra"]["deadlock_stacks"] == ["1: a < b"]
    # one source cannot steal from another: no known bug to name
    y1 = Job(client=dataclasses.replace(y4, options=dataclasses.replace(y4.options, sources=None)), streams=1, file_bytes=8 << 20)
    m1 = transfer.measure(transfer.Outcome(y1, ["xrdcp"], {}, res, 0.0, 0.0))
    assert "deadlocked" in m1["error"] and "#2619" not in m1["error"]
