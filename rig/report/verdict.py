"""The bottleneck verdict of each measurement, from what was recorded alone.

For one point (path, RTT, client configuration, streams, concurrency), in this order:
  failed             no repeat succeeded
  emulator-limited   the engine's own statistics show queue overflows, unexplained
                     drops, late releases (linkstats.emulation_late) or a saturated
                     engine CPU; or the path was not what the step says: the step's
                     fastest ping (rtt_ms_min, before or after its transfers) off the
                     configured RTT by more than PATH_OFF_MS or PATH_OFF_FRACTION of it
                     (an engine delaying more than its label, whatever its own timing
                     says; the minimum, not the mean, so a loaded host's slow pings are
                     not taken for it). A smaller ping offset is reported with its size
                     (a note on the verdict) and never relabels a transfer by itself
  window-limited     throughput near concurrency x streams x window / RTT, or the same
                     bytes in flight (throughput x RTT) at RTTs far apart: a window below
                     the configured one (autotuning, slow start of a short transfer)
  path-limited       throughput near the step's validated iperf3 capacity or the
                     configured rate, whichever is lower
  client-CPU-bound   the client's CPU time is about the wall time of one thread
  host-CPU-bound     the host's CPUs were busy (>= 90 %, /proc/stat, steal included) over
                     the point's groups: client, server, engine and kernel together
                     left no CPU spare (a 2-vCPU VM that runs all of them); the detail
                     says who used how many cores. Or, seen from the client (replays,
                     which measure it over their own wall, however short): it was
                     runnable >= 85 % of its wall, on a CPU or waiting in a run queue
                     for one (>= 5 % waiting), so it never waited for the network
  storage-bound      (storage: disk) throughput near the step's storage check: dd's
                     cold sequential read of the served file (rig.orchestration.storagecheck)
  latency-bound      (caching-mode replays) round trips x RTT explain at least half of
                     the wall time: the reads wait for the network, not for bandwidth.
                     Round trips: the plan's synchronous ones, plus those slow start
                     needs at least for the replay's rounds on its fresh connection (from
                     Linux's initial window of 10 segments of the path's MSS, growing by
                     what is acknowledged, round after round). Or, where
                     the round trips are short (0 ms): they, the client's own time (on
                     a CPU or waiting for one, as the replay measures it) and, with
                     several rounds, the server's threads' CPU over the group make up
                     >= 85 % of the wall: each round waited for the two ends'
                     turnarounds and the network, nothing else
  unexplained        none of the above; the detail says how far from each bound it was
Then the per-thread CPU (thread_cpu, rig.report.threads) may name the bound more closely:
  single-thread-bound   one client thread >= 90 % of a core over the busy time, the
                        others mostly idle (seed 000's poller thread), cited by name
  server-thread-bound   the same test on the server's threads
  server-cpu-bound      the server's threads use (or wait for) its cores
Last, each end's own CPU quota (extra.cpu_quota, rig.report.quota), the kernel's account of
its cgroup: an end throttled in >= 20 % of its quota's periods while using >= 85 % of
the quota is client-CPU-bound (single-thread-bound where one thread carries it) or
server-cpu-bound "capped at 0.30 core by cpu.max of its cgroup ...", before
host-CPU-bound and whatever else it replaces; never over emulator-limited, path-limited,
loss-limited, latency-bound or failed (threads.KEEP: listed in `also`). The engine's
quota is a note only.
When several bounds fit, the tightest is the verdict and the others are listed in `also`.

When the run sampled the sending side's tcp_info (tcp_samples), the kernel's own account
decides after the emulator check (rig.report.tcpevidence): window-limited,
sender-buffer-limited, loss-limited, cwnd-limited or application-limited, citing the
shares ("rwnd_limited 91 % of busy time"). A cwnd/loss limit at the path's capacity is
path-limited (a loss limit on a lossy path only near a configured rate: elsewhere iperf3's
capacity is loss-limited itself); a closed window or idle sender with the client's CPU saturated is
client-CPU-bound (a receiver that cannot keep up shows at the sender that way).
Seed 000 needed a profiler to find its CPU-bound poller thread; this makes it a column.

Engine evidence comes from the typed stats contract (rig.description.linkstats), never from key
names: a counter renamed in a backend breaks the contract test, not the verdict.

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

from rig.description.linkstats import EMULATOR_DROPS, DirStats, EmulStats, UnreadableStats, \
    emulation_late, engine_busy, load_stats
from rig.description.steps import shown_step
from rig.report.model import Point, Run
from rig.results.store import EngineStatsRow
from rig.report.tcpevidence import Evidence, evidence_by_key
from rig.report import quota
from rig.report.threads import KEEP, THREAD_KINDS, refine
from rig.report.threads import evidence as thread_evidence
from rig.description.units import show_throughput

# Lateness that moves a transfer's throughput visibly, and so makes the emulator the
# bottleneck: a mean of more than 5 % of the RTT (or 0.5 ms) per round trip. Smaller
# lateness beyond the RTT tolerance flags the step "emulation late" (a fidelity note on
# the verdict, with its numbers) without relabelling the transfer.
LATE_MS = 0.5
LATE_RTT_FRACTION = 0.05

# A path whose every ping (the fastest of the step's check) is this far off its label was
# not the path the step claims: its transfers measured another RTT (issue 38).
PATH_OFF_MS = 1.0
PATH_OFF_FRACTION = 0.05

NEAR = 0.85          # at >= 85 % of a bound, the bound is what limits
ABOVE = 1.15         # more than 15 % above a "bound" means it was not the bound
CPU_NEAR = 0.85      # CPU seconds >= 85 % of wall seconds: one thread saturated
HOST_NEAR = 0.90     # the host's CPUs busy >= 90 % of the group's wall: none spare
RUNQ_MIN = 0.05      # a client runnable >= CPU_NEAR of its wall, >= 5 % of it waiting for a CPU
OTHER_LOAD = 0.5     # processes outside the run used >= half of that: other work's doing
# A window limit shows as the same bytes in flight (throughput x RTT) at several RTTs.
BDP_SPREAD = 0.12
BDP_POINTS = 2
BDP_RTT_SPAN = 1.8
MIN_RTT_S = 0.002

LATENCY_SHARE = 0.5  # round trips x RTT >= half the wall: latency is what the time is made of
INITIAL_WINDOW = 10  # segments: Linux's initial congestion window (RFC 6928), the rig sets no other
IP_TCP_OVERHEAD = 52  # IPv4 + TCP headers with timestamps: MSS = MTU - 52 (IPv6's is 20 B less:
                      # a larger MSS than the real one only weakens the slow-start bound)
MIN_ROUNDS = 4       # per-round times (extra.round_s) worth a median
LATE_ROUNDS_RTT = 1.8   # median round >= 1.8 RTT: the answers come one RTT late

KINDS: tuple[str, ...] = ("window-limited", "path-limited", "client-CPU-bound", "latency-bound",
         "emulator-limited", "unexplained", "failed", "sender-buffer-limited", "loss-limited",
         "cwnd-limited", "application-limited", "storage-bound", "host-CPU-bound")

# What the emulator's own drops were called in the evidence text before the stats were
# typed; kept so reports read the same.
_EVIDENCE = {"dropped_queue": "dropped_queue", "nfq_queue_dropped": "queue_dropped",
             "nfq_user_dropped": "user_dropped"}
_LOSS_DROPS = (("dropped_loss", "dropped_loss"), ("dropped_unattributed", "netem drops"))
KINDS += THREAD_KINDS       # rig.report.threads (issue 27)


@dataclass(frozen=True)
class Verdict:
    kind: str
    detail: str
    also: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)   # the witnesses' disagreements

    def text(self) -> str:
        extra = f" (also {', '.join(self.also)})" if self.also else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return f"{self.kind}: {self.detail}{extra}{notes}"


def _gbit(bps: float) -> str:
    """A throughput in the report's unit (rig.description.units.current_unit)."""
    return show_throughput(bps, digits=3)


def engine_issues(stats: EmulStats | UnreadableStats, rtt_ms: float | None,
                  loss: float | None) -> list[str]:
    """Signs in a backend's typed stats that the emulator itself limited the path:
    its own queue overflowed (the userspace engine's dropped_queue, the kernel NFQUEUE's
    queue_dropped/user_dropped), drops beyond the configured loss (dropped_loss, netem's
    drops net of its rate limiter's), late releases (linkstats.emulation_late: mean
    round-trip lateness or the share of packets beyond the RTT tolerance), an engine
    thread busy all the step, an engine that was not alive or answered with an error. Rate-limiter
    (TBF/HTB) drops are the path's own bottleneck queue: never the emulator's fault.
    Unreadable stats are no evidence either way."""
    if not isinstance(stats, EmulStats):
        return []
    issues = []
    if stats.alive is False:
        issues.append("engine not alive")
    if stats.error:
        issues.append(f"engine error: {stats.error[:120]}")
    for d in stats.directions:
        issues += _direction_issues(d, rtt_ms, loss)
    late = [d.lateness for d in stats.directions if d.lateness and d.lateness.count]
    rtt_late_ms = sum(x.mean_s for x in late) * 1e3
    target_ms = max(LATE_MS, LATE_RTT_FRACTION * (rtt_ms or 0.0))
    if late and rtt_late_ms > target_ms:
        issues.append(f"engine adds {rtt_late_ms:.3g} ms mean release lateness per round "
                      f"trip, > {target_ms:.3g} ms")
    if busy := engine_busy(stats):
        issues.append(busy)
    return issues


def _direction_issues(d: DirStats, rtt_ms: float | None, loss: float | None) -> list[str]:
    at = f" ({d.direction})"
    issues = [f"engine {_EVIDENCE[name]}={v:g}{at}" for name in EMULATOR_DROPS
              if (v := getattr(d, name))]
    for name, label in _LOSS_DROPS:
        v = getattr(d, name)
        if v and d.seen and v / d.seen > (loss or 0.0) * 1.1 + 0.001:
            issues.append(f"engine {label}={v:g} is {v / d.seen:.2%} of packets "
                          f"(configured loss {(loss or 0):.2%}){at}")
    return issues


# The phases whose engine timing judges a step's transfers: a run since session 7 stores
# a row per phase of a step (check-before, transfers, check-after), older runs one row
# per step (phase NULL) that covered the path check too.
TRANSFER_PHASES: tuple[str | None, ...] = (None, "transfers")
ALL_PHASES: tuple[str | None, ...] = (None, "check-before", "transfers", "check-after")


def engine_phase_rows(run: Run, step: int, phases: tuple[str | None, ...] = TRANSFER_PHASES
                      ) -> list[tuple[EngineStatsRow, EmulStats | UnreadableStats]]:
    """(row, stats) of one step's engine rows of these phases, typed, each differenced
    against the same engine's previous row (the userspace engine and tc count from their
    start, not per step or phase)."""
    rows = sorted((r for r in run.engine if r.step <= step),
                  key=lambda r: (r.step, r.taken_at or 0))
    out: list[tuple[EngineStatsRow, EmulStats | UnreadableStats]] = []
    for i, r in enumerate(rows):
        if r.step != step or r.phase not in phases:
            continue
        cur = load_stats(r.stats, r.backend)
        prev = next((load_stats(q.stats, q.backend) for q in reversed(rows[:i])
                     if q.path == r.path and q.backend == r.backend), None)
        out.append((r, cur.since(prev) if isinstance(cur, EmulStats) else cur))
    return out


def step_engine_stats(run: Run, step: int) -> list[EmulStats | UnreadableStats]:
    """Engine stats of one step's transfers (TRANSFER_PHASES), typed and differenced."""
    return [st for _, st in engine_phase_rows(run, step)]


def ping_notes(point: Point, run: Run, engine_late: bool) -> list[str]:
    """What the independent witness (ping, iperf3 of path validation) found wrong with
    the point's steps, with its size; says so when the engine's own timing disagrees."""
    notes = []
    for v in run.validations_for(point.steps):
        if not v.flagged:
            continue
        conf, meas = v.rtt_ms_configured, v.rtt_ms_measured
        if conf is not None and meas is not None and "RTT" in (v.flag_reason or ""):
            note = (f"ping RTT off by {meas - conf:+.3f} ms ({meas:.3f} vs {conf:g} ms, "
                    f"{v.phase})")
        else:
            note = f"path validation ({v.phase}) flagged: {v.flag_reason or '?'}"
        if not engine_late:
            note += "; the engine's own timing was within tolerance"
        notes.append(note)
    return list(dict.fromkeys(notes))


def late_notes(point: Point, run: Run) -> list[str]:
    """The point's steps whose emulation was late (linkstats.emulation_late), with by
    how much: shown on the verdict even when too small to be the bottleneck."""
    out: list[str] = []
    for step in sorted(point.steps):
        for stats in step_engine_stats(run, step):
            out += [f"step {shown_step(step)}: {r}" for r in emulation_late(
                stats, None if point.key.rtt_ms is None else point.key.rtt_ms / 1e3)]
    return list(dict.fromkeys(out))


FLAG_KINDS = ("path validation", "emulation late", "emulation late in a path check",
              "transfers failed")


def step_flags(run: Run) -> dict[str, list[int]]:
    """Every kind of flag a step can carry, with the steps (as shown) that carry it:
    path validation (ping or iperf3 off the configured path), emulation late during the
    transfers (the console's EMULATION LATE) or during a path check, failed transfers."""
    by: dict[str, set[int]] = {k: set() for k in FLAG_KINDS}
    for v in run.validations:
        if v.flagged:
            by["path validation"].add(shown_step(v.step))
    for step in sorted({int(r.step) for r in run.engine}):
        rtt = next((x.rtt_ms_configured for x in run.validations + run.transfers
                    if x.step == step and x.rtt_ms_configured is not None), None)
        for r, st in engine_phase_rows(run, step, ALL_PHASES):
            # as the run judged it (its console line), or as the report's tables do
            late = bool(r.emulation_late) or (isinstance(st, EmulStats) and bool(
                emulation_late(st, None if rtt is None else rtt / 1e3)))
            if late:
                check = (r.phase or "").startswith("check")
                by["emulation late in a path check" if check else "emulation late"].add(
                    shown_step(step))
    for t in run.transfers:
        if not t.ok:
            by["transfers failed"].add(shown_step(t.step))
    return {k: sorted(v) for k, v in by.items() if v}


def flag_headline(run: Run) -> str:
    """One sentence: how many steps each kind of flag marks, and which."""
    flags = step_flags(run)
    if not flags:
        return "No step flagged."
    steps = sorted({s for v in flags.values() for s in v})
    parts = [f"{k}: {len(v)} ({', '.join(f'step {s}' for s in v)})" for k, v in flags.items()]
    return f"{len(steps)} step(s) flagged, by kind: {'; '.join(parts)}."


def path_off_reasons(point: Point, run: Run) -> list[str]:
    """The point's steps whose fastest ping was off the configured RTT by more than
    max(PATH_OFF_MS, PATH_OFF_FRACTION x RTT): the path was not what its label says."""
    out = []
    for v in run.validations_for(point.steps):
        conf, low = v.rtt_ms_configured, v.rtt_ms_min
        if conf is None or low is None or not v.flagged:
            continue
        tol = max(PATH_OFF_MS, PATH_OFF_FRACTION * conf)
        if abs(low - conf) > tol:
            out.append(f"the path is not what step {shown_step(v.step)} says: its fastest "
                       f"ping took {low:.3g} ms for a configured {conf:g} ms RTT "
                       f"({low - conf:+.3g} ms, > {tol:.3g} ms; {v.phase} its transfers)")
    return list(dict.fromkeys(out))


def emulator_reasons(point: Point, run: Run) -> list[str]:
    """The engine's evidence that it limited this point (never a ping flag alone)."""
    reasons: list[str] = []
    for step in sorted(point.steps):
        for stats in step_engine_stats(run, step):
            reasons.extend(engine_issues(stats, point.key.rtt_ms, point.loss_configured))
    return list(dict.fromkeys(reasons))


def _rtt_s(p: Point) -> float:
    return (p.rtt_ms_measured or p.key.rtt_ms or 0.0) / 1e3


def effective_window(point: Point, run: Run) -> tuple[float, int] | None:
    """(bytes in flight, number of RTTs) when throughput x RTT of this configuration is
    the same (within BDP_SPREAD) at >= BDP_POINTS RTTs, including this one, spanning
    a factor BDP_RTT_SPAN in RTT: the signature
    of a window limit, even one below the configured maximum (receive-buffer autotuning,
    the kernel's share of the buffer kept for overhead, slow start of a short transfer)."""
    k = point.key
    if not point.n or _rtt_s(point) < MIN_RTT_S:
        return None
    mine = point.mean_bps * _rtt_s(point) / 8
    same = [q for q in run.points if q.n and _rtt_s(q) >= MIN_RTT_S
            and (q.key.path, q.key.client, q.key.streams, q.key.concurrency)
            == (k.path, k.client, k.streams, k.concurrency)]
    agree = [(q.mean_bps * _rtt_s(q) / 8, _rtt_s(q)) for q in same]
    agree = [(b, r) for b, r in agree if abs(b / mine - 1) <= BDP_SPREAD]
    rtts = [r for _, r in agree]
    # equal bytes in flight at RTTs far apart: a constant rate (path, CPU) cannot do that
    if len(agree) < BDP_POINTS or max(rtts) < BDP_RTT_SPAN * min(rtts):
        return None
    bdp = sorted(b for b, _ in agree)[len(agree) // 2]
    configured = (point.window_bytes or 0) * k.streams * k.concurrency
    if configured and bdp > ABOVE * configured:
        return None
    return bdp, len(agree)


def _window(point: Point, run: Run) -> tuple[float, str] | None:
    mean, w = point.mean_bps, point.window_bound_bps()
    rtt = _rtt_s(point) * 1e3
    if w and NEAR * w <= mean <= ABOVE * w:
        adv = point.window() != point.window_bytes
        return w, (f"{_gbit(mean)} is {mean / w:.0%} of {point.key.concurrency}x"
                   f"{point.key.streams}x{(point.window() or 0) / 2**20:.3g} MiB"
                   + (" (the receiver's advertised window)" if adv else "")
                   + f"/{rtt:.3g} ms = {_gbit(w)}")
    eff = effective_window(point, run)
    if eff is None:
        return None
    bdp, n = eff
    share = (f", {bdp * 8 / _rtt_s(point) / w:.0%} of the configured bound {_gbit(w)}"
             if w else "")
    return (bdp * 8 / _rtt_s(point),
            f"throughput x RTT is constant at {bdp / 2**20:.3g} MiB in flight over {n} "
            f"RTTs (effective window below the configured one{share})")


def _bounds(point: Point, run: Run) -> list[tuple[str, float, str]]:
    """(kind, bound, description) of each bound the measurement is near, tightest first."""
    out = []
    mean = point.mean_bps
    win = _window(point, run)
    if win:
        out.append(("window-limited", *win))
    p = point.path_bound_bps()
    if p and NEAR * p <= mean <= ABOVE * p:
        what = ("validated iperf3 capacity" if p == point.capacity_bps
                else "configured rate")
        out.append(("path-limited", p, f"{_gbit(mean)} is {mean / p:.0%} of the {what} "
                                       f"{_gbit(p)}"))
    d = point.storage_bps
    if d and NEAR * d <= mean <= ABOVE * d:
        out.append(("storage-bound", d, f"{_gbit(mean)} is {mean / d:.0%} of the storage "
                                        f"check's cold read {d / 8e6:.0f} MB/s"))
    cpu = max(point.cpu_ratio, default=0.0)
    starved = client_starved(point) if cpu < CPU_NEAR else None
    lat = _latency(point, path_mss(run, point.key.path), server_cpu_s(point, run),
                   cpu_said=cpu >= CPU_NEAR or starved is not None)
    if lat:
        # synchronous round trips also keep throughput x RTT constant: that is the
        # latency, not an effective window, when round trips x RTT explain the time
        out = [b for b in out if not b[2].startswith("throughput x RTT is constant")]
        out.append(("latency-bound", *lat))
    if cpu >= CPU_NEAR:
        out.append(("client-CPU-bound", float("inf"),
                    f"client CPU {cpu:.0%} of wall time (one thread saturated)"))
    host = host_busy(point) or starved
    if host:
        out.append(("host-CPU-bound", float("inf"), host))
    return sorted(out, key=lambda t: t[1])


def own_time(point: Point) -> tuple[float, float] | None:
    """The client's own account of its wall (replays, extra.cpu_wait_s): the medians over
    its processes of (on a CPU, waiting in a run queue for one) / wall; None without it."""
    if not point.runnable:
        return None
    return (statistics.median(c for c, _ in point.runnable),
            statistics.median(w for _, w in point.runnable))


def client_starved(point: Point) -> str | None:
    """The client, by its own account over its wall (median over its processes), was
    runnable >= CPU_NEAR of the time, >= RUNQ_MIN of it waiting in a run queue: it never
    waited for the network, and the host's other work (server, engine, interrupts) kept
    it from a CPU. For transfers too short for the host's /proc/stat marks (10 ms ticks)
    or its group's window (a 20 ms replay in a 0.45 s process)."""
    own = own_time(point)
    if own is None:
        return None
    cpu, wait = own
    if cpu + wait < CPU_NEAR or wait < RUNQ_MIN:
        return None
    return (f"the client was runnable {cpu + wait:.0%} of its wall: on a CPU {cpu:.0%}, "
            f"waiting in a run queue for one {wait:.0%} (no CPU spare: the server, the "
            f"engine and the kernel's network work share the host)")


def host_busy(point: Point) -> str | None:
    """The host's CPUs saturated over the point's groups (median share >= HOST_NEAR):
    who used them, in cores (medians over the groups); None when it had CPU spare or
    the run did not record it."""
    groups = list(point.host_cpu.values())
    if not groups:
        return None
    share = statistics.median(g.share for g in groups)
    if share < HOST_NEAR:
        return None
    def cores(vals: list[float | None]) -> float | None:
        have = [v for v in vals if v is not None]
        return statistics.median(have) if have else None
    cpus = next((g.cpus for g in groups if g.cpus), None)
    parts = [(name, cores([g.cores(getattr(g, attr)) for g in groups]))
             for name, attr in (("client", "client_s"), ("server", "server_s"),
                                ("engine", "engine_s"))]
    if cpus:
        parts += [(name, cores([None if getattr(g, attr) is None else getattr(g, attr) * cpus
                                for g in groups]))
                  for name, attr in (("interrupts", "irq_share"), ("steal", "steal_share"))]
    named = [(n, c) for n, c in parts if c is not None]
    text = (f"the host's {cpus or '?'} CPUs were {share:.0%} busy over the transfers ("
            + ", ".join(f"{n} {c:.2f}" for n, c in named) + " cores")
    # no engine figure: netem (its work is interrupt time) or no emulation
    if cpus and all(c is not None or n == "engine" for n, c in parts):
        # what neither the run's processes nor the kernel's interrupts nor the hypervisor
        # account for: other processes (and kernel threads) on the host
        rest = share * cpus - sum(c for _, c in named)
        text += f", other processes {max(0.0, rest):.2f})"
        if rest >= OTHER_LOAD * share * cpus:
            text += ("; the host was busy with other work: this point measured the "
                     "contention, not the transfer")
        return text
    return text + "; the rest kernel and other processes)"


def slow_start_flights(nbytes: float, mss: int, iw: int = INITIAL_WINDOW) -> int:
    """Round trips a fresh TCP connection needs at least to deliver `nbytes`: slow start
    from an initial window of `iw` segments at most doubles it each round trip, so k
    flights carry at most iw x mss x (2^k - 1) bytes (delayed ACKs, HyStart, a small
    receive window only slow it further)."""
    if nbytes <= 0 or mss <= 0:
        return 0
    return math.ceil(math.log2(nbytes / (iw * mss) + 1))


def slow_start_rounds(sizes: list[int], mss: int, iw: int = INITIAL_WINDOW) -> int:
    """Flights a fresh connection needs at least for synchronous rounds of these sizes
    (bytes each round asks for, in order): every round at least one; a flight carries at
    most the congestion window, which slow start grows by what was acknowledged (RFC
    5681), from `iw` segments, and which persists from round to round (a turnaround is
    far below the RTO that would restart it). Delayed ACKs, HyStart, ssthresh and the
    receive window only add flights."""
    cwnd, flights = iw * mss, 0
    for left in sizes:
        while True:
            sent = min(cwnd, left)
            left -= sent
            cwnd += sent
            flights += 1
            if left <= 0:
                break
    return flights


def _flights(point: Point, rt: int, mss: int | None) -> int:
    """The replay's round trips on its fresh connection: its rounds' sizes through
    slow_start_rounds when the replay recorded them (extra.round_bytes), else the most a
    round count and a byte count say for sure: max(synchronous rounds, slow start's
    flights for all the bytes)."""
    if not mss:
        return rt
    if point.round_bytes:
        return max(rt, slow_start_rounds(point.round_bytes[0], mss))
    if point.bytes_ok and point.durations_s:
        return max(rt, slow_start_flights(point.bytes_ok / len(point.durations_s), mss))
    return rt


def path_mss(run: Run, path: str) -> int | None:
    """The path's TCP MSS from the run's stored tuning (its MTU), None when not stored."""
    env = run.env if isinstance(run.env, dict) else {}
    per = (env.get("path_tuning") or {}).get(path) or {}
    mtu = per.get("mtu") or (env.get("tuning") or {}).get("mtu")
    return int(mtu) - IP_TCP_OVERHEAD if isinstance(mtu, (int, float)) and mtu > 100 else None


def _latency(point: Point, mss: int | None = None, server_s: float | None = None,
             cpu_said: bool = False) -> tuple[float, str] | None:
    """A replay whose round trips x RTT make up most of its wall time; the bound is the
    throughput if nothing but the round trips took time. Round trips: the plan's
    synchronous ones, and with `mss` (the path's) those slow start adds on the replay's
    fresh connection (_flights)."""
    rtt = _rtt_s(point)
    if not point.round_trips or rtt <= 0:
        return None
    rt = sorted(point.round_trips)[len(point.round_trips) // 2]
    wall = sorted(point.durations_s)[len(point.durations_s) // 2]
    extra = _flights(point, rt, mss) - rt
    waited = (rt + extra) * rtt
    what = f"{rt} synchronous round trips" + (
        f" + {extra} more of slow start ({point.bytes_ok / len(point.durations_s) / 1e6:.3g} MB "
        f"from an initial window of {INITIAL_WINDOW} x {mss} B"
        + (", round by round" if point.round_bytes else "") + ")" if extra else "")
    if waited >= LATENCY_SHARE * wall:
        return point.mean_bps * wall / waited, (
            f"{what} x {rtt * 1e3:.3g} ms = {waited:.3g} s of the {wall:.3g} s wall "
            f"({waited / wall:.0%})" + _rounds_note(point, rtt))
    # the client's own account of its wall (replays): runnable (on a CPU or waiting for
    # one) or blocked; blocked no longer than the round trips take means it waited for
    # nothing else (not bandwidth): each synchronous round is the client's turnaround
    # plus one network round trip, and, with several rounds, the server's turnaround
    # (its threads' CPU over the group, the open included: an upper bound)
    mine = None if cpu_said else own_time(point)   # cpu_said: a CPU verdict is the bound
    if mine is None:
        return None
    cpu, queue = mine
    own = (cpu + queue) * wall
    srv = server_s if server_s is not None and rt >= 2 else 0.0
    if waited + own + srv < NEAR * wall:
        return None
    ends = (f"the client's own time (on a CPU {cpu:.0%}, waiting for one {queue:.0%})"
            + (f", the server's threads' CPU ({srv / wall:.0%}, over its group)" if srv
               else ""))
    return (point.mean_bps * wall / (waited + own + srv),
            f"{ends} and {what} x {rtt * 1e3:.3g} ms make {(waited + own + srv) / wall:.0%} "
            f"of the {wall:.3g} s wall: each synchronous round waits for the client's "
            + ("and the server's turnaround" if srv else "turnaround")
            + " and a network round trip" + _rounds_note(point, rtt))


def server_cpu_s(point: Point, run: Run) -> float | None:
    """The server's threads' CPU seconds per transfer over the point's groups (schedstat,
    the thread sampler's; median over groups, divided by the group's transfers); None
    when the run did not sample them."""
    p = thread_evidence(run).get(point.key)
    uses = [u.cpu_s / max(1, point.key.concurrency) for u in (p.server if p else [])]
    return statistics.median(uses) if uses else None


def _rounds_note(point: Point, rtt: float) -> str:
    """The median round in RTTs (extra.round_s), and why when it is two: the answers come
    one RTT late. Seen with Debian's nginx (sendfile + tcp_nopush): nginx clears
    TCP_NODELAY and corks each answer; on uncork, Nagle holds the last sub-MSS segment until
    the ACK of the previous one (docs/caching-modes.md)."""
    rounds = sorted(x for rs in point.rounds_s for x in rs)
    if len(rounds) < MIN_ROUNDS:
        return ""
    per = rounds[len(rounds) // 2] / rtt
    note = f"; median round {per:.2g} RTT"
    if per >= LATE_ROUNDS_RTT and rtt >= MIN_RTT_S:     # at ~0 ms a round is processing
        note += (" (each answer one RTT late: a server that holds its answer's last "
                 "segment for an ACK, e.g. nginx with tcp_nopush on)")
    return note


def _distances(point: Point) -> str:
    parts = [f"{_gbit(point.mean_bps)}"]
    w, p = point.window_bound_bps(), point.path_bound_bps()
    if w:
        parts.append(f"{point.mean_bps / w:.0%} of window bound {_gbit(w)}")
    if p:
        parts.append(f"{point.mean_bps / p:.0%} of path {_gbit(p)}")
    if point.storage_bps:
        parts.append(f"{point.mean_bps / point.storage_bps:.0%} of storage "
                     f"{_gbit(point.storage_bps)}")
    if point.cpu_ratio:
        parts.append(f"client CPU {max(point.cpu_ratio):.0%} of wall")
    if point.runnable:
        parts.append("waiting for a CPU "
                     f"{statistics.median(w for _, w in point.runnable):.0%} of wall")
    return ", ".join(parts)


def tcp_evidence(run: Run) -> dict:
    """Kernel evidence per point Key, computed once per loaded run."""
    cached = getattr(run, "_tcp_evidence", None)
    if cached is None:
        cached = evidence_by_key(run.tcp)
        run._tcp_evidence = cached      # type: ignore[attr-defined]
    return cached


def _from_kernel(point: Point, ev: Evidence, bounds: list[tuple[str, float, str]]) -> Verdict:
    kind, why = ev.classify()
    found = {k: d for k, _, d in bounds}
    if "latency-bound" in found and kind != "loss-limited":
        # a request/response replay: its sender idles between requests or never leaves
        # slow start on short answers; the synchronous round trips explain the time
        return Verdict("latency-bound", f"{found['latency-bound']}; kernel: {why}",
                       tuple(k for k in found if k != "latency-bound"))
    if "storage-bound" in found and kind in (None, "application-limited"):
        # the sender had nothing to send: it waited for the disk, at the disk's rate
        kind, why = "storage-bound", f"{found['storage-bound']}; {why}"
    elif "client-CPU-bound" in found and kind in (None, "application-limited",
                                                  "window-limited"):
        kind, why = "client-CPU-bound", f"{found['client-CPU-bound']}; {why}"
    elif "host-CPU-bound" in found and kind in (None, "application-limited"):
        # the sender had nothing to send while no CPU of the host was spare (a window
        # the receiver kept closed is the kernel's own account: it stays the verdict)
        kind, why = "host-CPU-bound", f"{found['host-CPU-bound']}; {why}"
    elif kind in ("cwnd-limited", "loss-limited") and "path-limited" in found and not (
            kind == "loss-limited" and point.loss_configured and not (
                point.rate_bps and NEAR * point.rate_bps <= point.mean_bps
                <= ABOVE * point.rate_bps)):
        # (on a lossy path without a rate below it, iperf3's "capacity" is itself loss-
        # limited: near it says nothing, the loss is the cause)
        kind, why = "path-limited", f"{found['path-limited']}; {why}"
    elif kind is None:
        return Verdict("unexplained", f"{_distances(point)}; {why}", tuple(found))
    elif kind in found:
        why = f"{why}; {found[kind]}"
    return Verdict(kind, why, tuple(k for k in found if k != kind))


def verdict(point: Point, run: Run) -> Verdict:
    return by_quota(refine(_verdict(point, run), point, run), point, run)


def by_quota(v: Verdict, point: Point, run: Run) -> Verdict:
    """The verdict with each end's own CPU quota (rig.report.quota): an end its cgroup's
    quota throttled, at that quota, is CPU-bound by it, whatever else ran on the host
    (before host-CPU-bound and the thread and kernel readings it replaces); a kind in
    threads.KEEP (the emulator, the path, loss, round trips, a failure) stays, the quota
    listed in `also`. The engine's quota is a note, never an end's bound."""
    note = quota.engine_note(point, run)
    if note:
        v = dataclasses.replace(v, notes=tuple(dict.fromkeys(v.notes + (note,))))
    q = quota.bound(point, run)
    if q is None:
        return v
    kind, detail = q
    if v.kind in KEEP:
        return dataclasses.replace(v, also=tuple(dict.fromkeys(v.also + (kind,))))
    if v.kind == kind:
        return dataclasses.replace(v, detail=f"{detail}; {v.detail}")
    return dataclasses.replace(v, kind=kind, detail=f"{detail}; otherwise: {v.kind}: {v.detail}",
                               also=tuple(dict.fromkeys(a for a in (v.kind,) + v.also
                                                        if a != kind)))


def _verdict(point: Point, run: Run) -> Verdict:
    if not point.samples_bps:
        err = point.errors[0] if point.errors else "no successful repeat"
        return Verdict("failed", err[:200])
    bounds = _bounds(point, run)
    emul = emulator_reasons(point, run) + path_off_reasons(point, run)
    step_late = late_notes(point, run)
    notes = tuple(ping_notes(point, run, bool(emul) or bool(step_late))) + (
        () if emul else tuple(step_late))
    if emul:
        return Verdict("emulator-limited", "; ".join(emul[:3]),
                       tuple(k for k, _, _ in bounds), notes)
    ev = tcp_evidence(run).get(point.key)
    if ev is not None:
        return dataclasses.replace(_from_kernel(point, ev, bounds), notes=notes)
    if bounds:
        kind, _, detail = bounds[0]
        return Verdict(kind, detail, tuple(k for k, _, _ in bounds[1:]), notes)
    return Verdict("unexplained", _distances(point), (), notes)


def verdicts(run: Run) -> dict:
    """Verdict of every point of the run, keyed by the point's Key."""
    return {p.key: verdict(p, run) for p in run.points}
