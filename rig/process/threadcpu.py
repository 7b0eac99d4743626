"""Per-thread CPU of running process trees, sampled from /proc (no process is started).

For every thread (/proc/PID/task/TID) of every process of a tree:
  schedstat  "run_ns wait_ns timeslices": time on a CPU and time runnable but waiting in
             a run queue, in nanoseconds (the scheduler's own clock: exact at any rate,
             where stat's ticks are 10 ms). Read every tick.
  stat       utime/stime ticks (the user/system split), read when the thread is found,
             at every rescan and at the end.
  comm       the thread's name ("XrdCl poller" style names come from pthread_setname_np).
  status     Cpus_allowed_list, read once per thread.

Cost: each thread's schedstat is opened once and re-read with pread(fd, 0) each tick,
one system call (~1 us) per thread per tick, its bytes kept and parsed only at the end;
a sleeping thread is read every IDLE_EVERY-th tick.
New threads show as a change of /proc/PID/task's link count (2 + threads), one stat per
process per tick; new processes (children of any thread) are looked for every
RESCAN_S. Names and the user/system split are read when a thread is found and at the
end. bench/thread_sampling.py measures it.

Remote hosts: the same reader is plain stdlib over /proc, so the agent
(rig.process.remote) can run it there and hand back `ThreadSeries.to_json()`; the run
samples local processes only today (docs/results-format.md, thread_cpu).

Must not import anything above rig.process.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
RESCAN_S = 1.0
# A thread whose schedstat did not change for QUIET reads (asleep) is read every
# IDLE_EVERY-th tick only, until it changes again; its CPU is then spread over the longer
# interval (at most IDLE_EVERY ticks). Most threads of a transfer sleep (seed 000 Fig. 10).
QUIET = 3
IDLE_EVERY = 5
# a thread still carrying its process's name is asked its own again on its first reads
NAME_READS = 5


def parse_schedstat(text: str) -> tuple[int, int]:
    """(run_ns, wait_ns) of one schedstat line."""
    f = text.split()
    return int(f[0]), int(f[1])


def own_wait_ns(root: Path | str = "/proc") -> int | None:
    """Nanoseconds this process's threads have been runnable but waiting in a run queue
    (schedstat's second field, summed over /proc/self/task); None when the kernel shows
    none. A caller takes it before and after a phase: a thread that ends between the two
    takes its wait along (the replay's threads live through it)."""
    try:
        tasks = os.listdir(f"{root}/self/task")
    except OSError:
        return None
    total, seen = 0, False
    for tid in tasks:
        text = _read(f"{root}/self/task/{tid}/schedstat")
        if text is None:
            continue
        try:
            total += parse_schedstat(text)[1]
        except (ValueError, IndexError):
            continue
        seen = True
    return total if seen else None


def parse_task_stat(text: str) -> tuple[float, float]:
    """(user_s, sys_s) of one /proc/PID/task/TID/stat line (the thread's own, no
    children). The name (field 2) may hold spaces and ')': counted from the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) / TICK, int(rest[12]) / TICK


def _read(path: str) -> str | None:
    """A small /proc file's text (os-level: this runs hundreds of times a second)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _children(root: str, pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"{root}/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        text = _read(f"{root}/{pid}/task/{task}/children")
        if text:
            try:
                out += [int(c) for c in text.split()]
            except ValueError:
                continue
    return out


def tree(pid: int, root: Path | str = "/proc") -> list[int]:
    """pid and its descendants."""
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo += _children(str(root), p)
    return out


def _cpus_allowed(status: str | None) -> str | None:
    for line in (status or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass
class ThreadSeries:
    """One thread's samples: t (the caller's clock), cumulative run/wait ns."""
    key: str                      # who it belongs to (a client instance, "server", ...)
    pid: int
    tid: int
    process: str                  # comm of the process (its main thread)
    comm: str                     # comm of the thread
    cpus_allowed: str | None
    t: list[float] = field(default_factory=list)
    run_ns: list[int] = field(default_factory=list)
    wait_ns: list[int] = field(default_factory=list)
    user0: float | None = None    # stat when found and at the end (None: it ended first)
    sys0: float | None = None
    user1: float | None = None
    sys1: float | None = None
    fd: int | None = None         # schedstat, kept open while the thread lives
    gone: bool = False
    raw: list[bytes] = field(default_factory=list)     # schedstat as read
    idx: list[int] = field(default_factory=list)       # ... at these ThreadWatch.times
    quiet: int = 0                # reads in a row that found it unchanged

    @property
    def cpu_s(self) -> float:
        return (self.run_ns[-1] - self.run_ns[0]) / 1e9 if self.run_ns else 0.0

    @property
    def wait_s(self) -> float:
        return (self.wait_ns[-1] - self.wait_ns[0]) / 1e9 if self.wait_ns else 0.0

    @property
    def user_s(self) -> float | None:
        return None if self.user1 is None or self.user0 is None else self.user1 - self.user0

    @property
    def sys_s(self) -> float | None:
        return None if self.sys1 is None or self.sys0 is None else self.sys1 - self.sys0

    def parse(self, times: list[float]) -> None:
        """Fill t, run_ns, wait_ns from the raw reads (unreadable ones left out)."""
        self.t, self.run_ns, self.wait_ns = [], [], []
        for i, b in zip(self.idx, self.raw):
            try:
                run, wait = parse_schedstat(b.decode())
            except (ValueError, IndexError, UnicodeDecodeError):
                continue
            self.t.append(times[i])
            self.run_ns.append(run)
            self.wait_ns.append(wait)


class ThreadWatch:
    """The threads of some process trees, sampled on demand (not thread-safe: one
    sampler thread calls add/tick/finish)."""

    def __init__(self, root: Path | str = "/proc") -> None:
        self.root = str(root)
        self.roots: dict[int, str] = {}          # pid -> key
        self.procs: dict[int, tuple[str, int]] = {}   # pid -> (key, task link count)
        self.pcomm: dict[int, str] = {}
        self.threads: dict[tuple[int, int], ThreadSeries] = {}
        self.live: list[ThreadSeries] = []
        self.times: list[float] = []             # the tick times
        self.last_scan = -1e18
        self.reads = 0                           # schedstat reads (the cost's unit)

    def add(self, pid: int, key: str) -> None:
        self.roots[pid] = key

    def _task(self, pid: int, tid: int | str) -> str:
        return f"{self.root}/{pid}/task/{tid}"

    def rescan(self, now: float) -> None:
        """Find new processes in the trees (and their threads); names again (a process
        found between fork and exec, as `ip netns exec` or `taskset`, changes it)."""
        self.last_scan = now
        for root_pid, key in list(self.roots.items()):
            for pid in tree(root_pid, self.root):
                if pid not in self.procs:
                    self.procs[pid] = (key, -1)
                else:
                    self._name(pid)

    def _name(self, pid: int) -> str:
        """The process's comm, given to its threads and as its main thread's name."""
        pcomm = (_read(f"{self.root}/{pid}/comm") or "").strip()
        if pcomm and self.pcomm.get(pid) != pcomm:
            self.pcomm[pid] = pcomm
            for s in self.live:
                if s.pid == pid:
                    s.process = pcomm
                    if s.tid == pid:
                        s.comm = pcomm
        return pcomm or "?"

    def _threads_of(self, pid: int, key: str) -> None:
        """New threads of a process whose task link count changed."""
        try:
            tids = os.listdir(f"{self.root}/{pid}/task")
        except OSError:
            return
        pcomm = self._name(pid)
        for t in tids:
            if t.isdigit() and (pid, int(t)) not in self.threads:
                self._found(key, pid, int(t), pcomm)

    def _found(self, key: str, pid: int, tid: int, pcomm: str) -> None:
        d = self._task(pid, tid)
        try:
            fd = os.open(f"{d}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        s = ThreadSeries(key, pid, tid, pcomm, (_read(f"{d}/comm") or "?").strip(),
                         _cpus_allowed(_read(f"{d}/status")), fd=fd)
        self._stat(s, last=False)
        self.threads[(pid, tid)] = s
        self.live.append(s)

    def _stat(self, s: ThreadSeries, *, last: bool) -> None:
        text = _read(f"{self._task(s.pid, s.tid)}/stat")
        if text is None:
            return
        try:
            u, y = parse_task_stat(text)
        except (ValueError, IndexError):
            return
        if not last:
            s.user0, s.sys0 = u, y
            return
        s.user1, s.sys1 = u, y
        comm = (_read(f"{self._task(s.pid, s.tid)}/comm") or "").strip()
        if comm:
            s.comm = comm          # a thread names itself after it starts

    def _close(self, s: ThreadSeries) -> None:
        if s.fd is not None:
            os.close(s.fd)
        s.fd, s.gone = None, True

    def tick(self, now: float) -> None:
        if now - self.last_scan >= RESCAN_S:
            self.rescan(now)
        for pid, (key, links) in list(self.procs.items()):
            try:
                n = os.stat(f"{self.root}/{pid}/task").st_nlink
            except OSError:
                del self.procs[pid]
                continue
            if n != links:
                self.procs[pid] = (key, n)
                self._threads_of(pid, key)
        self._read_all(now, last=False)

    def _read_all(self, now: float, *, last: bool) -> None:
        n = len(self.times)
        self.times.append(now)
        ended = False
        pread = os.pread
        reads = 0
        for s in self.live:
            if s.quiet >= QUIET and n % IDLE_EVERY and not last:
                continue
            try:
                b = pread(s.fd, 128, 0)       # type: ignore[arg-type]
            except OSError:
                self._close(s)
                ended = True
                continue
            reads += 1
            if s.raw and b == s.raw[-1]:
                s.quiet += 1
                if len(s.raw) >= 2 and s.raw[-2] == b:
                    s.idx[-1] = n          # still asleep: keep the first and last read
                    continue
            else:
                s.quiet = 0
            s.raw.append(b)
            s.idx.append(n)
            if len(s.raw) <= NAME_READS and s.comm == s.process:
                # a thread names itself just after it starts (pthread_setname_np): one
                # found before that, which ends before the last read, kept its process's
                # name (CI saw a 1 s spinning thread sampled only as "python3")
                comm = (_read(f"{self._task(s.pid, s.tid)}/comm") or "").strip()
                if comm:
                    s.comm = comm
        self.reads += reads
        if ended:
            self.live = [s for s in self.live if not s.gone]

    def finish(self, now: float) -> list[ThreadSeries]:
        """A last sample, the user/sys split and the name of every live thread, the
        series parsed; closes every fd."""
        self._read_all(now, last=True)
        for pid in list(self.procs):
            self._name(pid)
        for s in self.live:
            self._stat(s, last=True)
        for s in self.threads.values():
            self._close(s)
            s.parse(self.times)
        self.live = []
        return list(self.threads.values())

    def close(self) -> None:
        for s in self.threads.values():
            self._close(s)
