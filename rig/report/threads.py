"""Where the CPU goes, per thread: the thread_cpu rows of a run (client processes and
the server, rig.orchestration.threadsample) turned into busy shares, the verdicts that
use them, CPU per GB per thread and per end, and the data of the timeline charts.

Definitions (docs/results-format.md, thread_cpu):
  busy time     the sample intervals in which the process (all its threads) used at
                least BUSY_CORE of a core: the transfer's working time, not its start-up
                or its wait for a slow peer.
  share         a thread's CPU seconds in the busy intervals / busy seconds, in cores
                (schedstat's on-CPU time); `wait` the same for its run-queue wait.
  single thread one thread on a CPU or waiting for one >= HOT of the busy time, at least
                HOT_ON_CPU of it on a CPU, and every other thread on a CPU < IDLE:
                seed 000's poller thread (Fig. 10). For the client: single-thread-bound;
                for the server: server-thread-bound.
  server CPU    the server's threads on a CPU or waiting for one >= SATURATED x the cores
                it may use (the union of its threads' Cpus_allowed_list), at least
                HOT_ON_CPU x those cores on a CPU: server-cpu-bound. The same demand
                with threads that waited longer than they ran is server-cpu-bound,
                said "contended", only for a point no other bound explains: the cores it
                may use were busy with it and with others (the client, the engine on
                the same cores); elsewhere it is the contention note.
  contended     threads that waited for a CPU longer than they ran: a note on the verdict
                (the host's CPUs were the limit, whoever used them).
  capped        over the intervals its threads were on a CPU or waiting for one >=
                BUSY_CORE, they did so >= SATURATED of a core, waiting >= CAP_WAIT, while the
                host had CPU spare (its busy share < HOST_SPARE): not contention but the
                process's own CPU allowance (a cgroup quota, cpu.max, or a cpuset shared
                with its own threads) held it. Client: single-thread-bound when one thread
                carries the demand (HOT of the busy time, on a CPU or waiting, the others
                < IDLE), else client-CPU-bound; server: server-cpu-bound. Not the busy
                time: a quota's throttled periods are not busy intervals
                (ground truth, docs/ground-truth.md: xrdcp capped at 0.3 core ran 0.34 of
                a core and waited 0.68 over its busy time, the host 40 % busy).
                With every CPU of the host busy the same signature is host-CPU-bound:
                others' work or its allowance, the threads cannot tell which.
  cores/Gbit/s  CPU seconds per Gbit moved / cores the process may use: the share of
                that end's cores each Gbit/s costs (seed 004's unit).

A point (Key) is judged by the majority of its transfers (client) or groups (server).

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from rig.report.model import WINDOW_FILL, Key, Point, Run, _key
from rig.results.store import ThreadCpu

BUSY_CORE = 0.25
HOT = 0.90
HOT_ON_CPU = 0.50
IDLE = 0.30
SATURATED = 0.85
# kinds the thread evidence does not replace (it is added to `also`): the path, the
# emulator or the round trips limited, or nothing ran
CAP_WAIT = 0.30      # waiting for a CPU >= 30 % of its span (a 0.5-core quota: ~50 %)
HOST_SPARE = 0.90    # the host's CPUs busy < 90 % (verdict.HOST_NEAR): a CPU was spare
KEEP = ("failed", "emulator-limited", "path-limited", "latency-bound", "loss-limited")
THREAD_KINDS = ("single-thread-bound", "server-thread-bound", "server-cpu-bound")


@dataclass
class ThreadUse:
    name: str
    tid: int
    cpu: float            # share of a core over the busy time
    wait: float
    cpu_s: float          # over the whole sampled span


@dataclass
class ProcUse:
    """One end of one transfer (client) or group (server)."""
    side: str
    transfer_id: int
    busy_s: float
    span_s: float
    cpu_s: float
    wait_s: float
    cores: int | None
    bytes: int
    threads: list[ThreadUse] = field(default_factory=list)   # busiest first
    wall_s: float | None = None     # client replay: its own wall (duration_s), not the process's
    # the intervals in which its threads were on a CPU or waiting for one >= BUSY_CORE
    # (a quota's throttled periods count: they wait): seconds, and the core-seconds of
    # CPU and of waiting in them
    want_s: float = 0.0
    want_cpu_s: float = 0.0
    want_wait_s: float = 0.0

    def about_transfer(self) -> bool:
        """Its busy time is mostly the transfer's: a client whose transfer's wall is less
        than WINDOW_FILL of it was busy with something else (a replay of 20 ms after 0.3 s of
        planning in the same process): its threads say nothing of the transfer."""
        return self.wall_s is None or self.busy_s <= 0 or self.wall_s >= WINDOW_FILL * self.busy_s

    def hot(self) -> ThreadUse | None:
        if not self.threads or self.busy_s <= 0:
            return None
        top, rest = self.threads[0], self.threads[1:]
        if top.cpu + top.wait >= HOT and top.cpu >= HOT_ON_CPU and all(
                t.cpu < IDLE for t in rest):
            return top
        return None

    def demand(self) -> float:
        """Cores the threads used or waited for, over the busy time."""
        return sum(t.cpu + t.wait for t in self.threads)

    def on_cpu(self) -> float:
        """Cores the threads used, over the busy time."""
        return sum(t.cpu for t in self.threads)

    def saturated(self) -> bool:
        """Its threads used or waited for SATURATED of its cores, at least HOT_ON_CPU of
        them really used (threads that mostly wait are starved by others: contention)."""
        cores = self.cores or 0
        return cores > 0 and self.busy_s > 0 and self.demand() >= SATURATED * cores \
            and self.on_cpu() >= HOT_ON_CPU * cores

    def contended(self) -> bool:
        """Its threads waited for a CPU longer than they ran."""
        return self.busy_s > 0 and self.demand() - self.on_cpu() > self.on_cpu()

    def starved(self) -> bool:
        """Its threads used or waited for SATURATED of its cores, mostly waiting: the
        cores it may use had no time left for it (others ran on them too)."""
        cores = self.cores or 0
        return cores > 0 and self.contended() and self.demand() >= SATURATED * cores

    def capped(self) -> bool:
        """Over its whole sampled span, on a CPU or waiting for one >= SATURATED of a
        core, waiting for one >= CAP_WAIT of it (the caller checks that the host had CPU
        spare)."""
        if self.want_s <= 0:
            return False
        return (self.want_cpu_s + self.want_wait_s) / self.want_s >= SATURATED \
            and self.want_wait_s >= CAP_WAIT * self.want_s

    def one_thread(self) -> ThreadUse | None:
        """The thread that carries the demand: on a CPU or waiting >= HOT of the busy
        time, every other thread on a CPU < IDLE."""
        if not self.threads or self.busy_s <= 0:
            return None
        top, rest = self.threads[0], self.threads[1:]
        return top if top.cpu + top.wait >= HOT and all(t.cpu < IDLE for t in rest) \
            else None

    def s_per_gb(self, cpu_s: float | None = None) -> float | None:
        c = self.cpu_s if cpu_s is None else cpu_s
        return c / (self.bytes / 1e9) if self.bytes else None


def cpu_set(spec: str | None) -> set[int] | None:
    """CPUs of a Cpus_allowed_list ("0-3,6")."""
    if not spec:
        return None
    out: set[int] = set()
    try:
        for part in spec.split(","):
            a, _, b = part.partition("-")
            out |= set(range(int(a), int(b or a) + 1))
    except ValueError:
        return None
    return out


def cpu_count(spec: str | None) -> int | None:
    s = cpu_set(spec)
    return len(s) if s is not None else None


def _series(row: ThreadCpu) -> tuple[list[float], list[float], list[float]]:
    try:
        d = json.loads(row.series or "{}")
        t, c, w = d["t"], d["cpu_ms"], d["wait_ms"]
    except (ValueError, KeyError, TypeError):
        return [], [], []
    if not (len(t) == len(c) == len(w)):
        return [], [], []
    return [float(x) for x in t], [float(x) / 1e3 for x in c], [float(x) / 1e3 for x in w]


def _at(t: list[float], y: list[float], x: float) -> float:
    """y(x), linear between samples, constant outside them (cumulative counters)."""
    if not t or x <= t[0]:
        return y[0] if y else 0.0
    if x >= t[-1]:
        return y[-1]
    lo, hi = 0, len(t) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if t[mid] <= x:
            lo = mid
        else:
            hi = mid
    if t[hi] == t[lo]:
        return y[hi]
    return y[lo] + (y[hi] - y[lo]) * (x - t[lo]) / (t[hi] - t[lo])


def matrix(rows: list[ThreadCpu]) -> tuple[list[float], list[ThreadCpu], list[list[float]],
                                          list[list[float]]]:
    """(grid, rows, cpu share per thread per interval, wait share ...) of one process
    tree's threads on the union of their sample times."""
    ser = [_series(r) for r in rows]
    grid = sorted({round(x, 4) for t, _, _ in ser for x in t})
    cpu, wait = [], []
    for t, c, w in ser:
        cc = [_at(t, c, x) for x in grid]
        ww = [_at(t, w, x) for x in grid]
        dts = [b - a for a, b in zip(grid, grid[1:])]
        cpu.append([(b - a) / dt if dt > 0 else 0.0 for a, b, dt in zip(cc, cc[1:], dts)])
        wait.append([(b - a) / dt if dt > 0 else 0.0 for a, b, dt in zip(ww, ww[1:], dts)])
    return grid, rows, cpu, wait


def proc_use(rows: list[ThreadCpu], side: str, nbytes: int) -> ProcUse:
    grid, rows, cpu, wait = matrix(rows)
    dts = [b - a for a, b in zip(grid, grid[1:])]
    total = [sum(c[i] for c in cpu) for i in range(len(dts))]
    busy = [i for i, x in enumerate(total) if x >= BUSY_CORE]
    busy_s = sum(dts[i] for i in busy)
    threads = []
    for r, c, w in zip(rows, cpu, wait):
        on = sum(c[i] * dts[i] for i in busy)
        wt = sum(w[i] * dts[i] for i in busy)
        threads.append(ThreadUse(f"{r.comm}[{r.tid}]" if r.pid != r.tid
                                 else f"{r.comm}[main]", int(r.tid),
                                 on / busy_s if busy_s else 0.0,
                                 wt / busy_s if busy_s else 0.0, float(r.cpu_s or 0)))
    threads.sort(key=lambda u: (-u.cpu, -u.cpu_s))
    waits = [sum(w[i] for w in wait) for i in range(len(dts))]
    want = [i for i in range(len(dts)) if total[i] + waits[i] >= BUSY_CORE]
    # the cores the tree may use: the union over its threads (two origins pinned to one
    # core each may use two)
    allowed = set().union(*(cpu_set(r.cpus_allowed) or set() for r in rows))
    cores = len(allowed) or None
    return ProcUse(side, int(rows[0].transfer_id), busy_s,
                   (grid[-1] - grid[0]) if grid else 0.0,
                   sum(float(r.cpu_s or 0) for r in rows),
                   sum(float(r.wait_s or 0) for r in rows), cores, nbytes, threads,
                   want_s=sum(dts[i] for i in want),
                   want_cpu_s=sum(total[i] * dts[i] for i in want),
                   want_wait_s=sum(waits[i] * dts[i] for i in want))


@dataclass
class PointThreads:
    client: list[ProcUse] = field(default_factory=list)
    server: list[ProcUse] = field(default_factory=list)


def _group_bytes(run: Run) -> dict[tuple, int]:
    out: dict[tuple, int] = defaultdict(int)
    for t in run.transfers:
        if t.ok:
            out[(_key(t), t.step, t.repeat)] += int(t.bytes or 0)
    return out


def evidence(run: Run) -> dict[Key, PointThreads]:
    """ProcUse of every transfer's client and every group's server, per point (cached)."""
    cached = getattr(run, "_thread_evidence", None)
    if cached is not None:
        return cached
    by: dict[tuple[int, str], list[ThreadCpu]] = defaultdict(list)
    for r in run.threads:
        if r.ok:
            by[(int(r.transfer_id), r.side)].append(r)
    gbytes = _group_bytes(run)
    out: dict[Key, PointThreads] = defaultdict(PointThreads)
    for (_, side), rows in by.items():
        r0 = rows[0]
        k = _key(r0)
        if side == "client":
            use = proc_use(rows, side, int(r0.bytes or 0))
            # a replay's wall leaves out the planning its process did first
            if r0.cache_mode is not None and r0.duration_s is not None:
                use.wall_s = float(r0.duration_s)
            out[k].client.append(use)
        else:
            out[k].server.append(proc_use(rows, side, gbytes.get((k, r0.step, r0.repeat), 0)))
    cached = dict(out)
    run._thread_evidence = cached       # type: ignore[attr-defined]
    return cached


def _majority(uses: list[ProcUse], test) -> list[tuple[ProcUse, Any]]:
    hits = [(u, x) for u in uses if (x := test(u))]
    return hits if uses and len(hits) * 2 > len(uses) else []


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _hot_text(hits: list[tuple[ProcUse, ThreadUse]], n: int, side: str) -> str:
    name = Counter(t.name.split("[")[0] for _, t in hits).most_common(1)[0][0]
    cpu = statistics.median(t.cpu for _, t in hits)
    wait = statistics.median(t.wait for _, t in hits)
    other = max((o.cpu for u, _ in hits for o in u.threads[1:]), default=0.0)
    busy = statistics.median(u.busy_s for u, _ in hits)
    nthreads = statistics.median(len(u.threads) for u, _ in hits)
    return (f"{side} thread '{name}' on a CPU {_pct(cpu)} of a core (+{_pct(wait)} waiting "
            f"for one) over the {busy:.2g} s busy time, the other {nthreads - 1:.0f} "
            f"thread(s) <= {_pct(other)} ({len(hits)} of {n})")


def client_hot(p: PointThreads) -> str | None:
    uses = [u for u in p.client if u.about_transfer()]
    hits = _majority(uses, ProcUse.hot)
    return _hot_text(hits, len(uses), "client") if hits else None


def server_hot(p: PointThreads) -> str | None:
    hits = _majority(p.server, ProcUse.hot)
    return _hot_text(hits, len(p.server), "server") if hits else None


def server_saturated(p: PointThreads, test=ProcUse.saturated) -> str | None:
    hits = _majority(p.server, test)
    if not hits:
        return None
    u = hits[0][0]
    dem = statistics.median(x.demand() for x, _ in hits)
    on = statistics.median(sum(t.cpu for t in x.threads) for x, _ in hits)
    return (f"server threads on a CPU {on:.2f} cores (+{dem - on:.2f} waiting) of the "
            f"{u.cores} it may use, over its busy time; busiest '{u.threads[0].name}' "
            f"{_pct(u.threads[0].cpu)} ({len(hits)} of {len(p.server)} groups)")


def server_starved(p: PointThreads) -> str | None:
    """The server's threads wanted SATURATED of the cores they may use but mostly waited:
    those cores were busy with others too (the client, the engine). Only a point no
    other bound explains takes it as its verdict: elsewhere it is a note."""
    d = server_saturated(p, ProcUse.starved)
    return None if d is None else (d + "; contended: its threads waited longer than they "
                                   "ran, the cores it may use busy with others too")


def host_spare(point: Point) -> float | None:
    """The host's median busy share over the point's groups when below HOST_SPARE (a CPU
    was spare), None when busier or not recorded."""
    shares = [g.share for g in point.host_cpu.values()]
    if not shares:
        return None
    share = statistics.median(shares)
    return share if share < HOST_SPARE else None


def capped(p: PointThreads, point: Point, side: str) -> tuple[str, str] | None:
    """(kind, detail) when most of the side's processes were held by their own CPU
    allowance (ProcUse.capped while the host had a CPU spare)."""
    spare = host_spare(point)
    uses = [u for u in (p.client if side == "client" else p.server)
            if side == "server" or u.about_transfer()]
    hits = _majority(uses, ProcUse.capped)
    if not hits or not point.host_cpu:
        return None
    on = statistics.median(u.want_cpu_s / u.want_s for u, _ in hits)
    wait = statistics.median(u.want_wait_s / u.want_s for u, _ in hits)
    if spare is None:
        # every CPU of the host busy: others' work took the CPU it waited for, or its own
        # allowance did; the threads cannot tell which, the host's CPUs were the limit
        share = statistics.median(g.share for g in point.host_cpu.values())
        return "host-CPU-bound", (
            f"{side} on a CPU {on:.2f} cores and waiting for one {wait:.2f} while runnable, "
            f"the host's CPUs {share:.0%} busy: starved of CPU (the host's other work or "
            f"its own allowance; {len(hits)} of {len(uses)} "
            f"{'transfers' if side == 'client' else 'groups'})")
    text = (f"{side} on a CPU {on:.2f} cores and waiting for one {wait:.2f} while runnable "
            f"while the host's CPUs were only {spare:.0%} busy: its own CPU allowance (a "
            f"cgroup quota or a shared cpuset) held it ({len(hits)} of {len(uses)} "
            f"{'transfers' if side == 'client' else 'groups'})")
    if side == "server":
        return "server-cpu-bound", text
    ones = [t for u, _ in hits if (t := u.one_thread())]
    if len(ones) * 2 > len(hits):
        return "single-thread-bound", (f"{text}; one thread carries it: "
                                       f"'{ones[0].name.split('[')[0]}' on a CPU "
                                       f"{statistics.median(t.cpu for t in ones):.0%} (+"
                                       f"{statistics.median(t.wait for t in ones):.0%} "
                                       f"waiting) of its busy time, the others idle")
    return "client-CPU-bound", text


def notes(p: PointThreads, kind: str) -> list[str]:
    """What the threads say about a verdict they do not change: CPU contention (threads
    waited longer than they ran), and a client CPU bound that no single thread carries."""
    out = []
    clients = [u for u in p.client if u.about_transfer()]
    for side, uses in (("client", clients), ("server", p.server)):
        hits = _majority(uses, ProcUse.contended)
        if hits:
            on = statistics.median(u.on_cpu() for u, _ in hits)
            wait = statistics.median(u.demand() - u.on_cpu() for u, _ in hits)
            out.append(f"{side} threads waited for a CPU longer than they ran ({on:.2f} cores "
                       f"on a CPU, {wait:.2f} waiting, over the busy time): the host's CPUs "
                       f"were contended")
    if kind == "client-CPU-bound" and clients and not _majority(clients, ProcUse.hot):
        tops = [u.threads[0] for u in clients if u.threads]
        busy = [len([t for t in u.threads if t.cpu >= 0.05]) for u in clients]
        if tops:
            out.append(f"no single client thread is the ceiling: the CPU is spread over "
                       f"{statistics.median(busy):.0f} busy thread(s), the busiest "
                       f"'{tops[0].name.split('[')[0]}' on a CPU "
                       f"{statistics.median(t.cpu for t in tops):.0%} of a core")
    return out


def findings(point: Point, run: Run) -> list[tuple[str, str]]:
    """(kind, detail) of each thread-based bound that holds for the point, in order."""
    p = evidence(run).get(point.key)
    if p is None:
        return []
    out = []
    for kind, fn in (("single-thread-bound", client_hot), ("server-thread-bound", server_hot),
                     ("server-cpu-bound", server_saturated)):
        d = fn(p)
        if d:
            out.append((kind, d))
    for side in ("client", "server"):
        c = capped(p, point, side)
        if c and c[0] not in (k for k, _ in out):
            out.append(c)
    return out


def refine(v, point: Point, run: Run):
    """The verdict `v` (rig.report.verdict.Verdict) with the thread evidence: the first
    thread bound found replaces a kind not in KEEP (the replaced one goes to `also`);
    with a kind in KEEP the thread bounds are listed in `also` only."""
    found = findings(point, run)
    p = evidence(run).get(point.key)
    if not found and v.kind == "unexplained" and p is not None:
        starved = server_starved(p)
        if starved:
            found = [("server-cpu-bound", starved)]
    if p is not None:
        extra = notes(p, found[0][0] if found and v.kind not in KEEP else v.kind)
        v = dataclasses.replace(v, notes=tuple(dict.fromkeys(v.notes + tuple(extra))))
    if not found:
        return v
    if v.kind in KEEP:
        return dataclasses.replace(v, also=tuple(dict.fromkeys(
            v.also + tuple(k for k, _ in found))))
    kind, detail = found[0]
    also = (v.kind,) + v.also + tuple(k for k, _ in found[1:])
    return dataclasses.replace(v, kind=kind, detail=f"{detail}; totals: {v.detail}",
                               also=tuple(dict.fromkeys(a for a in also if a != kind)))
