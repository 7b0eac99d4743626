"""The bottleneck verdict of each measurement, from what was recorded alone.

For one point (path, RTT, client configuration, streams, concurrency), in this order:
  failed             no repeat succeeded
  emulator-limited   the step's validation was flagged, or the engine statistics show
                     queue overflows, unexplained drops or late releases
  window-limited     throughput near concurrency x streams x window / RTT
  path-limited       throughput near the step's validated iperf3 capacity or the
                     configured rate, whichever is lower
  client-CPU-bound   the client's CPU time is about the wall time of one thread
  unexplained        none of the above; the detail says how far from each bound it was
When several bounds fit, the tightest is the verdict and the others are listed in `also`.
Seed 000 needed a profiler to find its CPU-bound poller thread; this makes it a column.

Pure Python: must not import matplotlib, rig.netns, rig.proc, rig.services or rig.emul.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from .model import Point, Run

NEAR = 0.85          # at >= 85 % of a bound, the bound is what limits
ABOVE = 1.15         # more than 15 % above a "bound" means it was not the bound
CPU_NEAR = 0.85      # CPU seconds >= 85 % of wall seconds: one thread saturated
LATE_FRACTION = 0.01

KINDS = ("window-limited", "path-limited", "client-CPU-bound", "emulator-limited",
         "unexplained", "failed")

_OVERFLOW = re.compile(r"overflow|queue_?full|tail_?drop|(drop\w*_(queue|full))|"
                       r"((queue|full)\w*_drop)")
_TOTAL = re.compile(r"^(packets|pkts|seen|received|released|forwarded|enqueued)(_total)?$")


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


def _flatten(d: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}{k}." if isinstance(v, dict) else f"{prefix}{k}")
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix, float(d)


def engine_issues(stats: dict, rtt_ms: float | None, loss: float | None) -> list[str]:
    """Read a backend's stats() JSON for signs that the emulator itself limited the path.

    Key names differ between backends, so this matches on words: overflow/queue-full
    drops (never expected), drops beyond the configured loss, and late releases
    (a lateness in ms beyond the RTT target, or > 1 % of packets late).
    """
    flat = dict(_flatten(stats))
    leaf = {k: (k.rsplit(".", 1)[-1].lower(), v) for k, v in flat.items()}
    totals = [v for _, (name, v) in leaf.items() if _TOTAL.match(name)]
    total = max(totals) if totals else None
    issues = []
    for k, (name, v) in leaf.items():
        if v <= 0:
            continue
        if _OVERFLOW.search(name):
            issues.append(f"engine {k}={v:g}")
        elif "late" in name:
            issues.extend(_late_issue(k, name, v, rtt_ms, total))
        elif name.startswith("drop") and total:
            allowed = (loss or 0.0) * 1.1 + 0.001
            if v / total > allowed:
                issues.append(f"engine {k}={v:g} is {v / total:.2%} of packets "
                              f"(configured loss {(loss or 0):.2%})")
    return issues


def _late_issue(k: str, name: str, v: float, rtt_ms: float | None,
                total: float | None) -> list[str]:
    if name.endswith("_ms") or "_ms_" in name:
        limit = max(0.2, 0.02 * (rtt_ms or 0.0))
        return [f"engine {k}={v:g} ms (> {limit:g} ms)"] if v > limit else []
    if name.endswith("_us") or "_us_" in name:
        limit = max(200.0, 20.0 * (rtt_ms or 0.0))
        return [f"engine {k}={v:g} us (> {limit:g} us)"] if v > limit else []
    if any(t in name for t in ("frac", "ratio", "pct", "share")):
        return [f"engine {k}={v:g}"] if v > LATE_FRACTION else []
    if total and v / total > LATE_FRACTION:
        return [f"engine {k}={v:g} ({v / total:.1%} of packets late)"]
    return []


def emulator_reasons(point: Point, run: Run) -> list[str]:
    reasons: list[str] = []
    for v in run.validations_for(point.steps):
        if v.get("flagged"):
            reasons.append(f"path validation flagged: {v.get('flag_reason') or '?'}")
    for stats in run.engine_stats_for(point.steps):
        reasons.extend(engine_issues(stats, point.key.rtt_ms, point.loss_configured))
    return list(dict.fromkeys(reasons))


def _bounds(point: Point) -> list[tuple[str, float, str]]:
    """(kind, bound, description) of each bound the measurement is near, tightest first."""
    out = []
    mean = point.mean_bps
    w = point.window_bound_bps()
    if w and NEAR * w <= mean <= ABOVE * w:
        rtt = point.rtt_ms_measured or point.key.rtt_ms
        out.append(("window-limited", w,
                    f"{_gbit(mean)} is {mean / w:.0%} of {point.key.concurrency}x"
                    f"{point.key.streams}x{point.window_bytes / 2**20:.3g} MiB/"
                    f"{rtt:.3g} ms = {_gbit(w)}"))
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
    bounds = _bounds(point)
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
