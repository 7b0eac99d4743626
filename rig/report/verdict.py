"""The bottleneck verdict of each measurement, from what was recorded alone.

For one point (path, RTT, client configuration, streams, concurrency), in this order:
  failed             no repeat succeeded
  emulator-limited   the step's validation was flagged, or the engine statistics show
                     queue overflows, unexplained drops or late releases
  window-limited     throughput near concurrency x streams x window / RTT, or the same
                     bytes in flight (throughput x RTT) at RTTs far apart: a window below
                     the configured one (autotuning, slow start of a short transfer)
  path-limited       throughput near the step's validated iperf3 capacity or the
                     configured rate, whichever is lower
  client-CPU-bound   the client's CPU time is about the wall time of one thread
  unexplained        none of the above; the detail says how far from each bound it was
When several bounds fit, the tightest is the verdict and the others are listed in `also`.
Seed 000 needed a profiler to find its CPU-bound poller thread; this makes it a column.

Pure Python: must not import matplotlib, rig.netns, rig.proc, rig.services or rig.emul.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .model import Point, Run

NEAR = 0.85          # at >= 85 % of a bound, the bound is what limits
ABOVE = 1.15         # more than 15 % above a "bound" means it was not the bound
CPU_NEAR = 0.85      # CPU seconds >= 85 % of wall seconds: one thread saturated
# Lateness that moves a window-limited result visibly: > 5 % of the RTT (or 0.5 ms).
# The design's accuracy target (max(0.2 ms, 2 %)) is checked by path validation; this
# asks whether the engine, under the load of the transfers, became the bottleneck.
# A window limit shows as the same bytes in flight (throughput x RTT) at several RTTs.
BDP_SPREAD = 0.12
BDP_POINTS = 2
BDP_RTT_SPAN = 1.8
MIN_RTT_S = 0.002
LATE_MS = 0.5
LATE_RTT_FRACTION = 0.05

KINDS = ("window-limited", "path-limited", "client-CPU-bound", "emulator-limited",
         "unexplained", "failed")

_OVERFLOW = re.compile(r"overflow|queue_?full|tail_?drop|drop\w*_(queue|full)|"
                       r"(queue|full|user)_drop")
_TOTAL = ("seen", "packets", "pkts", "received", "released", "forwarded", "enqueued")
_RATE_LIMITERS = ("tbf", "htb")     # their drops are the path's bottleneck queue, by design
# Cumulative counters of a backend's stats(); consecutive snapshots are differenced.
_COUNTERS = {"seen", "released", "dropped_loss", "dropped_queue", "duplicated",
             "queue_dropped", "user_dropped", "packets", "drops", "bytes", "overlimits",
             "requeues"}

@dataclass(frozen=True)
class Verdict:
    kind: str
    detail: str
    also: tuple[str, ...] = field(default_factory=tuple)

    def text(self) -> str:
        extra = f" (also {', '.join(self.also)})" if self.also else ""
        return f"{self.kind}: {self.detail}{extra}"


def _gbit(bps: float) -> str:
    return f"{bps / 1e9:.3g} Gbit/s"


def engine_issues(stats: Any, rtt_ms: float | None, loss: float | None,
                  where: str = "") -> list[str]:
    """Signs in a backend's stats() JSON that the emulator itself limited the path.

    Walks the JSON; in each object, judged against that object's own packet count:
    queue-overflow drops (the userspace engine's dropped_queue, the kernel NFQUEUE's
    queue_dropped/user_dropped), drops beyond the configured loss (netem's drops,
    dropped_loss), a mean release lateness beyond max(0.5 ms, 5 % of the RTT),
    and an engine that was not alive or
    answered with an error. TBF/HTB drops are the path's own bottleneck queue: ignored.
    """
    if isinstance(stats, list):
        return [i for n, v in enumerate(stats)
                for i in engine_issues(v, rtt_ms, loss, f"{where}[{n}]")]
    if not isinstance(stats, dict):
        return []
    issues = _object_issues(stats, rtt_ms, loss, where)
    for k, v in stats.items():
        if isinstance(v, (dict, list)) and str(k) not in _RATE_LIMITERS and k != "late_hist":
            issues += engine_issues(v, rtt_ms, loss, f"{where}.{k}" if where else str(k))
    return issues


def _num_items(d: dict) -> dict[str, float]:
    return {str(k).lower(): float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _object_issues(d: dict, rtt_ms: float | None, loss: float | None,
                   where: str) -> list[str]:
    at = f" ({where})" if where else ""
    issues = []
    if d.get("alive") is False:
        issues.append(f"engine not alive{at}")
    if isinstance(d.get("error"), str):
        issues.append(f"engine error{at}: {d['error'][:120]}")
    nums = _num_items(d)
    total = max((nums[k] for k in _TOTAL if k in nums), default=0.0)
    target_ms = max(LATE_MS, LATE_RTT_FRACTION * (rtt_ms or 0.0))
    for name, v in nums.items():
        if v <= 0:
            continue
        if _OVERFLOW.search(name):
            issues.append(f"engine {name}={v:g}{at}")
        elif name.startswith("drop") and total:
            if v / total > (loss or 0.0) * 1.1 + 0.001:
                issues.append(f"engine {name}={v:g} is {v / total:.2%} of packets "
                              f"(configured loss {(loss or 0):.2%}){at}")
        elif name in ("late_mean_s", "late_mean_ms"):
            ms = v * 1e3 if name.endswith("_s") else v
            if ms > target_ms:
                issues.append(f"engine adds {ms:.3g} ms mean release lateness, "
                              f"> {target_ms:.3g} ms{at}")
    return issues


def stats_delta(cur: Any, prev: Any) -> Any:
    """What happened between two snapshots of cumulative counters (same engine): counters
    and late_hist bins subtracted, late_mean_s recomputed over the new releases."""
    if not isinstance(cur, dict) or not isinstance(prev, dict):
        return cur
    out: dict = {}
    for k, v in cur.items():
        p = prev.get(k)
        if k in _COUNTERS and _is_num(v) and _is_num(p) and v >= p:
            out[k] = v - p
        elif k == "late_hist" and isinstance(v, dict) and isinstance(p, dict):
            out[k] = {b: n - p.get(b, 0) for b, n in v.items() if _is_num(n)}
        elif isinstance(v, dict):
            out[k] = stats_delta(v, p)
        elif isinstance(v, list) and isinstance(p, list) and len(v) == len(p):
            out[k] = [stats_delta(a, b) for a, b in zip(v, p)]
        else:
            out[k] = v
    rel, prel = cur.get("released"), prev.get("released")
    if all(_is_num(x) for x in (rel, prel, cur.get("late_mean_s"), prev.get("late_mean_s"))):
        if rel > prel:
            out["late_mean_s"] = ((cur["late_mean_s"] * rel - prev["late_mean_s"] * prel)
                                  / (rel - prel))
    return out


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def step_engine_stats(run: Run, step: int) -> list[dict]:
    """Engine stats of one step, differenced against the same engine's previous snapshot
    (the userspace engine and tc count from their start, not per step)."""
    rows = sorted((r for r in run.engine if r["step"] <= step),
                  key=lambda r: (r["step"], r.get("taken_at") or 0))
    out = []
    for r in (r for r in rows if r["step"] == step):
        cur = _json(r["stats"])
        prev = next((_json(q["stats"]) for q in reversed(rows) if q["step"] < step
                     and q["path"] == r["path"] and q["backend"] == r["backend"]), None)
        same = prev is not None and cur.get("pid") is not None and prev.get("pid") == cur.get("pid")
        out.append(stats_delta(cur, prev) if same else cur)
    return out


def _json(text: Any) -> dict:
    try:
        v = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def emulator_reasons(point: Point, run: Run) -> list[str]:
    reasons: list[str] = []
    for v in run.validations_for(point.steps):
        if v.get("flagged"):
            reasons.append(f"path validation flagged: {v.get('flag_reason') or '?'}")
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
        return w, (f"{_gbit(mean)} is {mean / w:.0%} of {point.key.concurrency}x"
                   f"{point.key.streams}x{point.window_bytes / 2**20:.3g} MiB/"
                   f"{rtt:.3g} ms = {_gbit(w)}")
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
    cpu = max(point.cpu_ratio, default=0.0)
    if cpu >= CPU_NEAR:
        out.append(("client-CPU-bound", float("inf"),
                    f"client CPU {cpu:.0%} of wall time (one thread saturated)"))
    return sorted(out, key=lambda t: t[1])


def _distances(point: Point) -> str:
    parts = [f"{_gbit(point.mean_bps)}"]
    w, p = point.window_bound_bps(), point.path_bound_bps()
    if w:
        parts.append(f"{point.mean_bps / w:.0%} of window bound {_gbit(w)}")
    if p:
        parts.append(f"{point.mean_bps / p:.0%} of path {_gbit(p)}")
    if point.cpu_ratio:
        parts.append(f"client CPU {max(point.cpu_ratio):.0%} of wall")
    return ", ".join(parts)


def verdict(point: Point, run: Run) -> Verdict:
    if not point.samples_bps:
        err = point.errors[0] if point.errors else "no successful repeat"
        return Verdict("failed", err[:200])
    bounds = _bounds(point, run)
    emul = emulator_reasons(point, run)
    if emul:
        return Verdict("emulator-limited", "; ".join(emul[:3]),
                       tuple(k for k, _, _ in bounds))
    if bounds:
        kind, _, detail = bounds[0]
        return Verdict(kind, detail, tuple(k for k, _, _ in bounds[1:]))
    return Verdict("unexplained", _distances(point))


def verdicts(run: Run) -> dict:
    """Verdict of every point of the run, keyed by the point's Key."""
    return {p.key: verdict(p, run) for p in run.points}
