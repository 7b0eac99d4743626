"""Per-thread CPU of a transfer group's client processes and of its server, sampled in
one thread at `sampling.threads` (rig.process.threadcpu), turned into thread_cpu rows
(rig.results.store.ThreadCpuRow).

The client processes are told as they start (`track`, the runner's on_start); the
server's processes (every origin of it) are known before the group. Only processes on
this host are sampled: a remote end is left out and said so in
environment.thread_sampling (`remote_ends`).

The sampler's own CPU time (thread_time) is counted against the wall time it ran, and
stored with the run (environment.thread_sampling.cpu_share, in cores).

The run calls `group(...)` (a context manager) around a group and `store_rows(...)`
after its transfers rows are stored (the Threads sampler of rig.orchestration.samplers).

Must not import reports.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from rig.process.threadcpu import ThreadSeries, ThreadWatch
from rig.results.store import THREAD_CPU_VERSION, Store, ThreadCpuRow

SERVER = "server"


class GroupThreads:
    """Samples one group's processes in a thread until stopped."""

    def __init__(self, interval_s: float, server_pids: list[int], *,
                 clients: bool = True) -> None:
        self.interval_s, self.clients = interval_s, clients
        self.watch = ThreadWatch()
        self._lock = threading.Lock()
        self._pending: list[tuple[int, str]] = [(p, SERVER) for p in server_pids]
        self.ticks, self.cpu_s, self.errors = 0, 0.0, 0
        self.t0 = time.monotonic()
        self.series: list[ThreadSeries] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="threads")

    def track(self, instance: int, pid: int) -> None:
        """A client process of the group started (called from its runner thread);
        ignored when the clients run on another host."""
        if not self.clients:
            return
        with self._lock:
            self._pending.append((pid, str(instance)))

    def start(self) -> "GroupThreads":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        nxt = time.monotonic()
        try:
            while not self._stop.wait(max(0.0, nxt - time.monotonic())):
                c0 = time.thread_time()
                with self._lock:
                    new, self._pending = self._pending, []
                for pid, key in new:
                    self.watch.add(pid, key)
                if new:
                    self.watch.rescan(time.monotonic())
                try:
                    self.watch.tick(time.monotonic())
                except OSError:
                    self.errors += 1
                self.cpu_s += time.thread_time() - c0
                self.ticks += 1
                nxt = max(nxt + self.interval_s, time.monotonic())
            c0 = time.thread_time()
            self.series = self.watch.finish(time.monotonic())
            self.cpu_s += time.thread_time() - c0
        finally:
            self.watch.close()

    def of(self, key: str) -> list[ThreadSeries]:
        return [s for s in self.series if s.key == key and len(s.t) >= 1]


def _series_json(s: ThreadSeries, t_start: float) -> str:
    r0, w0 = s.run_ns[0], s.wait_ns[0]
    return json.dumps({"t": [round(t - t_start, 4) for t in s.t],
                       "cpu_ms": [round((r - r0) / 1e6, 3) for r in s.run_ns],
                       "wait_ms": [round((w - w0) / 1e6, 3) for w in s.wait_ns]},
                      separators=(",", ":"))


def thread_rows(series: list[ThreadSeries], transfer_id: int, side: str,
                t_start: float) -> list[ThreadCpuRow]:
    """thread_cpu rows of one process tree's threads; times from t_start (monotonic)."""
    out = []
    for s in series:
        if not s.t:
            continue
        out.append(ThreadCpuRow(
            transfer_id=transfer_id, side=side, pid=s.pid, tid=s.tid, process=s.process,
            comm=s.comm, cpus_allowed=s.cpus_allowed, t_first_s=round(s.t[0] - t_start, 4),
            t_last_s=round(s.t[-1] - t_start, 4), cpu_s=round(s.cpu_s, 6),
            wait_s=round(s.wait_s, 6),
            user_s=None if s.user_s is None else round(s.user_s, 3),
            sys_s=None if s.sys_s is None else round(s.sys_s, 3),
            series=_series_json(s, t_start)))
    return out


@dataclass
class Cost:
    """What the sampling cost over a run (environment.thread_sampling)."""
    interval_s: float | None = None
    groups: int = 0
    ticks: int = 0
    threads: int = 0
    reads: int = 0
    rows: int = 0
    errors: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    remote_ends: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"version": THREAD_CPU_VERSION, "interval_s": self.interval_s,
                "groups": self.groups, "ticks": self.ticks, "threads": self.threads,
                "schedstat_reads": self.reads, "rows": self.rows, "errors": self.errors,
                "cpu_s": round(self.cpu_s, 6), "wall_s": round(self.wall_s, 6),
                "cpu_share": round(self.cpu_s / self.wall_s, 6) if self.wall_s else None,
                "remote_ends": sorted(set(self.remote_ends))}


@contextlib.contextmanager
def group(interval_s: float | None, server_pids: list[int], *, client_local: bool,
          server_local: bool, cost: Cost) -> Iterator[GroupThreads | None]:
    """A running sampler for one group (None when off, or when neither end is here)."""
    if not client_local:
        cost.remote_ends.append("client")
    if not server_local:
        cost.remote_ends.append("server")
    if not interval_s or not (client_local or server_local):
        yield None
        return
    g = GroupThreads(interval_s, server_pids if server_local else [],
                     clients=client_local).start()
    try:
        yield g
    finally:
        g.stop()
        cost.interval_s = interval_s
        cost.groups += 1
        cost.ticks += g.ticks
        cost.threads += len(g.series)
        cost.reads += g.watch.reads
        cost.errors += g.errors
        cost.cpu_s += g.cpu_s
        cost.wall_s += time.monotonic() - g.t0


def store_rows(store: Store, g: GroupThreads | None, ids: list[tuple[int, int, float]],
               cost: Cost) -> None:
    """Store a finished group's threads: `ids` is (instance, transfer rowid, t_start) of
    each transfer; the server's threads go with the first, timed from the earliest start."""
    if g is None or not ids:
        return
    rows: list[ThreadCpuRow] = []
    for inst, tid, t_start in ids:
        rows += thread_rows(g.of(str(inst)), tid, "client", t_start)
    first = min(ids, key=lambda x: x[0])
    rows += thread_rows(g.of(SERVER), first[1], SERVER, min(t for _, _, t in ids))
    store.add_thread_cpu(rows)
    cost.rows += len(rows)
    store.set_env("thread_sampling", cost.to_json())


def on_start(*fns: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
    """One on_start callback calling each given one (None: none given)."""
    live = [f for f in fns if f is not None]
    if not live:
        return None

    def each(i: int, pid: int) -> None:
        for f in live:
            f(i, pid)
    return each
