"""Is a stalled local process deadlocked? Threads that wait for each other's mutex.

A thread blocked acquiring a contended glibc mutex sits in futex(FUTEX_WAIT, 2) on the
mutex's lock word (/proc/PID/task/TID/syscall gives the address), and the mutex names its
owner: `__owner`, the owning thread's id, 8 bytes past the lock word on 64-bit Linux
(read from /proc/PID/mem). A cycle in that wait-for graph never resolves by itself.
Seen: xrdcp 5.5 `-y K` (extreme copy) with two sources stealing work from each other,
each holding its own lock and waiting for the other's (XrdCl's XCpSrc::Steal; fixed in
XRootD 5.9.2, xrootd/xrootd#2619); the copy then waits until its deadline.

Reads /proc only (as root, or as the child's owner); starts nothing. `cycle()` is pure.
Must not import anything above rig.process.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

SYS_FUTEX = 202                  # x86_64; other architectures: no detection (None)
FUTEX_CMD_MASK = 0x7f            # without FUTEX_PRIVATE_FLAG / FUTEX_CLOCK_REALTIME
FUTEX_WAIT = 0
CONTENDED = 2                    # glibc's lock word value with waiters
OWNER_OFFSET = 8                 # pthread_mutex_t.__data.__owner (x86_64, aarch64)


@dataclass(frozen=True)
class Deadlock:
    pid: int
    comm: str
    cycle: tuple[int, ...]       # thread ids, each waiting for a mutex the next one holds
    waiting: int                 # threads blocked on a mutex
    threads: int

    def describe(self) -> str:
        ids = ", ".join(str(t) for t in self.cycle)
        return (f"threads {ids} of pid {self.pid} ({self.comm}) wait for each other's "
                f"mutex; {self.waiting} of {self.threads} threads blocked on a mutex")


def mutex_waits(pid: int) -> tuple[dict[int, int], int] | None:
    """{thread id: lock word address it waits to acquire}, and the thread count; None
    when /proc cannot tell (gone, no permission, not x86_64 syscall numbers)."""
    if os.uname().machine != "x86_64":
        return None
    waits: dict[int, int] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                words = f.read().split()
        except OSError:
            continue
        if len(words) >= 4 and words[0] == str(SYS_FUTEX) \
                and int(words[2], 16) & FUTEX_CMD_MASK == FUTEX_WAIT \
                and int(words[3], 16) == CONTENDED:
            waits[tid] = int(words[1], 16)
    return waits, len(tids)


def owners(pid: int, addrs: set[int]) -> dict[int, int]:
    """{lock word address: owning thread id} read from the process's memory."""
    out: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for a in addrs:
                try:
                    mem.seek(a + OWNER_OFFSET)
                    out[a] = struct.unpack("<i", mem.read(4))[0]
                except (OSError, struct.error, ValueError, OverflowError):
                    continue
    except OSError:
        pass
    return out


def cycle(waits: dict[int, int], owner: dict[int, int]) -> tuple[int, ...] | None:
    """The first cycle of the wait-for graph (thread → owner of the mutex it waits for),
    rotated to start at its smallest thread id; None when there is none."""
    for start in sorted(waits):
        path: list[int] = []
        t: int | None = start
        while t is not None and t in waits and t not in path:
            path.append(t)
            t = owner.get(waits[t])
        if t is not None and t in path:
            ring = path[path.index(t):]
            i = ring.index(min(ring))
            return tuple(ring[i:] + ring[:i])
    return None


def find(pid: int) -> Deadlock | None:
    """A mutex cycle among the threads of `pid` right now, or None."""
    got = mutex_waits(pid)
    if not got or len(got[0]) < 2:
        return None
    waits, nthreads = got
    ring = cycle(waits, owners(pid, set(waits.values())))
    if ring is None:
        return None
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        comm = "?"
    return Deadlock(pid, comm, ring, len(waits), nthreads)


_THREAD = re.compile(r"^Thread \d+ \(.*\(LWP (\d+)\)")
_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S.*?) \(")


def frames(gdb_bt: str, tids: tuple[int, ...], depth: int = 10) -> list[str]:
    """From gdb's `thread apply all bt`: one line per thread of `tids`, its innermost
    `depth` function names, innermost first ("1234: lock_wait < Steal < GetWork")."""
    got: dict[int, list[str]] = {}
    cur: list[str] | None = None
    for line in gdb_bt.splitlines():
        m = _THREAD.match(line)
        if m:
            cur = got.setdefault(int(m.group(1)), []) if int(m.group(1)) in tids else None
            continue
        f = _FRAME.match(line)
        if cur is not None and f and len(cur) < depth:
            cur.append(re.sub(r"\(.*\)$", "", f.group(1)))
    return [f"{t}: " + " < ".join(got[t]) for t in tids if got.get(t)]
