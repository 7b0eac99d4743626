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
one system call (~1 us) per thread per tick; the tree (new processes and threads) is
rescanned every RESCAN_S. bench/thread_sampling.py measures it.

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
RESCAN_S = 0.5


def parse_schedstat(text: str) -> tuple[int, int]:
    """(run_ns, wait_ns) of one schedstat line."""
    f = text.split()
    return int(f[0]), int(f[1])


def parse_task_stat(text: str) -> tuple[float, float]:
    """(user_s, sys_s) of one /proc/PID/task/TID/stat line (the thread's own, no
    children). The name (field 2) may hold spaces and ')': counted from the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) / TICK, int(rest[12]) / TICK


def _children(root: Path, pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(root / str(pid) / "task"):
            try:
                out += [int(c) for c in
                        (root / str(pid) / "task" / task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def tree(pid: int, root: Path = Path("/proc")) -> list[int]:
    """pid and its descendants."""
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo += _children(root, p)
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


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
    user0: float | None = None    # stat at discovery and at the last read
    sys0: float | None = None
    user1: float | None = None
    sys1: float | None = None
    fd: int | None = None         # schedstat, kept open while the thread lives
    gone: bool = False

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


class ThreadWatch:
    """The threads of some process trees, sampled on demand (not thread-safe: one
    sampler thread calls add/tick/finish)."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root
        self.roots: dict[int, str] = {}          # pid -> key
        self.threads: dict[tuple[int, int], ThreadSeries] = {}
        self.last_scan = -1e18
        self.reads = 0                           # schedstat reads (the cost's unit)

    def add(self, pid: int, key: str) -> None:
        self.roots[pid] = key

    def _task(self, pid: int, tid: int | str) -> Path:
        return self.root / str(pid) / "task" / str(tid)

    def rescan(self, now: float) -> None:
        """Find new processes and threads; refresh the user/sys split of known ones."""
        self.last_scan = now
        for root_pid, key in list(self.roots.items()):
            for pid in tree(root_pid, self.root):
                try:
                    tids = os.listdir(self.root / str(pid) / "task")
                except OSError:
                    continue
                pcomm = (_read(self.root / str(pid) / "comm") or "?").strip()
                for t in tids:
                    if not t.isdigit():
                        continue
                    k = (pid, int(t))
                    s = self.threads.get(k)
                    if s is None:
                        self._found(key, pid, int(t), pcomm, now)
                    elif not s.gone:
                        self._stat(s, last=True)

    def _found(self, key: str, pid: int, tid: int, pcomm: str, now: float) -> None:
        d = self._task(pid, tid)
        try:
            fd = os.open(d / "schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        s = ThreadSeries(key, pid, tid, pcomm, (_read(d / "comm") or "?").strip(),
                         _cpus_allowed(_read(d / "status")), fd=fd)
        self._stat(s, last=False)
        self.threads[(pid, tid)] = s
        self._sample(s, now)

    def _stat(self, s: ThreadSeries, *, last: bool) -> None:
        text = _read(self._task(s.pid, s.tid) / "stat")
        if text is None:
            return
        try:
            u, y = parse_task_stat(text)
        except (ValueError, IndexError):
            return
        if not last or s.user0 is None:
            s.user0, s.sys0 = u, y
        s.user1, s.sys1 = u, y
        comm = (_read(self._task(s.pid, s.tid) / "comm") or "").strip()
        if comm:
            s.comm = comm          # a thread names itself after it starts

    def _sample(self, s: ThreadSeries, now: float) -> None:
        assert s.fd is not None
        if s.t and s.t[-1] >= now:       # found by this tick's rescan: sampled already
            return
        try:
            run, wait = parse_schedstat(os.pread(s.fd, 128, 0).decode())
        except (OSError, ValueError, IndexError):
            self._close(s)
            return
        self.reads += 1
        s.t.append(now)
        s.run_ns.append(run)
        s.wait_ns.append(wait)

    def _close(self, s: ThreadSeries) -> None:
        if s.fd is not None:
            os.close(s.fd)
        s.fd, s.gone = None, True

    def tick(self, now: float) -> None:
        if now - self.last_scan >= RESCAN_S:
            self.rescan(now)
        for s in list(self.threads.values()):
            if not s.gone:
                self._sample(s, now)

    def finish(self, now: float) -> list[ThreadSeries]:
        """A last sample and user/sys read of every live thread; closes every fd."""
        for s in self.threads.values():
            if not s.gone:
                self._sample(s, now)
                self._stat(s, last=True)
            self._close(s)
        return list(self.threads.values())

    def close(self) -> None:
        for s in self.threads.values():
            self._close(s)

