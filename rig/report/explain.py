"""What a bottleneck verdict predicts, and whether it can explain a disagreement with a study.

A verdict's label alone explains nothing: every point has one. A bound explains the rig's
side of a comparison only where its **model** gives a number from what was recorded
independently of the throughput it explains:

  window-limited       concurrency x streams x window / RTT (the configured window)
  path-limited         the validated iperf3 capacity or the configured rate
  storage-bound        the storage check's cold read (dd)
  loss-limited         Mathis: streams x concurrency x MSS / RTT x 1.22 / sqrt(loss)
  latency-bound        the bytes over (round trips x RTT) (rig.report.verdict._latency)
  client-CPU-bound,    one core over the client's CPU seconds per bit: the throughput of
  single-thread-bound  a saturated thread (mean / CPU share of the wall)
  server-cpu-bound,    the same with the server's CPU seconds
  server-thread-bound
  host-CPU-bound       the host's CPUs over what the point's processes used of them

cwnd-limited, application-limited, sender-buffer-limited (no send buffer is recorded per
point), unexplained and failed have no model here: they can never make a disagreement
plausible. emulator-limited is the rig's own fault: a rig artefact, never an explanation.

**The pair rule** (rankings, ratios, alike). The study puts series H (the *held* one)
higher relative to series O than the rig measured, by a factor G > 1 (the gap: the study's
ratio over the rig's; for an order without numbers, what would tie the two). The rig's
bound on H plausibly explains that gap only when:
  1. H's verdict has a model above, and the model accounts for H's throughput: it
     reaches at least MODEL_REACHED of the model and at most rig.report.verdict.ABOVE
     (the bound is what holds it, not a label stuck on it);
  2. O's verdict is a different kind (a label both share cannot say why one beats the
     other);
  3. lifting H's bound could close at least half the gap on a log scale: H's headroom up
     to the next ceiling it would meet, the validated path (capacity or rate), is at
     least sqrt(G). A path-limited H has no headroom here: the study's link differs, and
     the comparison is scale-free.
A single-series claim (share, collapse, plateau, flat, inflation, verdict) is plausible
when every point it rests on passes rule 1, and for `share` the headroom rule too.

**Explained** needs an ablation: the same points with the suspected cause removed
(`ablations:` of a claim, reproductions/README.md). The share of the gap it closed is
1 - log(G') / log(G) with G' the gap left with the ablated series; >= ABLATION_CLOSES
is explained.

Pure: reads Points and verdicts, never the host. Must not import matplotlib,
rig.realization, rig.process, rig.services.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from rig.report.model import Point
from rig.report.verdict import ABOVE
from rig.description.units import show_throughput

MODEL_REACHED = 2 / 3     # a model accounts for a throughput that reaches 2/3 of it ...
MODEL_ABOVE = ABOVE       # ... and exceeds it by at most 15 % (above it, it was no bound)
ABLATION_CLOSES = 0.5     # an ablation explains a gap when it closes at least this share
MSS_DEFAULT = 1448        # MTU 1500 less IP and TCP headers with timestamps
MATHIS_C = math.sqrt(1.5)     # 1.22: Mathis et al. 1997, periodic loss, delayed ACKs off

EXPLAINED, PLAUSIBLE, UNEXPLAINED = "explained", "plausible", "unexplained"
LEVELS = (EXPLAINED, PLAUSIBLE, UNEXPLAINED)
NO_MODEL = ("cwnd-limited", "application-limited", "sender-buffer-limited", "unexplained",
            "failed", "no verdict")
ARTEFACT_KINDS = ("emulator-limited",)


def _rtt_s(p: Point) -> float:
    return (p.rtt_ms_measured or p.key.rtt_ms or 0.0) / 1e3


def _cpu_model(p: Point, shares: list[float]) -> tuple[float, str] | None:
    share = max(shares, default=0.0)
    if share <= 0 or not p.samples_bps:
        return None
    return p.mean_bps / share, f"{show_throughput(p.mean_bps, digits=3)} at {share:.0%} of a core"


def _server_share(p: Point) -> list[float]:
    walls = [c / r for c, r in zip(p.cpu_s, p.cpu_ratio) if r > 0]
    if not walls or not p.server_cpu_s:
        return []
    wall = statistics.fmean(walls)
    return [s / wall for s in p.server_cpu_s if wall > 0]


def model(p: Point, kind: str | None) -> tuple[float, str] | None:
    """(the throughput the named bound predicts, bits/s; how) or None: no model."""
    if kind is None or kind in NO_MODEL or kind in ARTEFACT_KINDS or not p.samples_bps:
        return None
    rtt = _rtt_s(p)
    if kind == "window-limited":
        w = p.window_bound_bps()
        return (w, f"window {(p.window() or 0) / 2**20:.3g} MiB x "
                   f"{p.key.streams * p.key.concurrency} / {rtt * 1e3:.3g} ms") if w else None
    if kind == "path-limited":
        b = p.path_bound_bps()
        return (b, "validated path") if b else None
    if kind == "storage-bound":
        return (p.storage_bps, "storage check's cold read") if p.storage_bps else None
    if kind == "loss-limited":
        loss = p.loss_configured
        if not loss or loss <= 0 or rtt <= 0:
            return None
        n = p.key.streams * p.key.concurrency
        bps = n * MSS_DEFAULT * 8 / rtt * MATHIS_C / math.sqrt(loss)
        return bps, f"Mathis: {n} x {MSS_DEFAULT} B / {rtt * 1e3:.3g} ms x 1.22 / sqrt({loss:.3g})"
    if kind == "latency-bound":
        if not p.round_trips or rtt <= 0 or not p.durations_s:
            return None
        rt = sorted(p.round_trips)[len(p.round_trips) // 2]
        wall = sorted(p.durations_s)[len(p.durations_s) // 2]
        waited = rt * rtt
        if waited <= 0:
            return None
        return p.mean_bps * wall / waited, f"{rt} round trips x {rtt * 1e3:.3g} ms"
    if kind in ("client-CPU-bound", "single-thread-bound"):
        return _cpu_model(p, list(p.cpu_ratio) + [c + w for c, w in p.runnable])
    if kind in ("server-cpu-bound", "server-thread-bound"):
        return _cpu_model(p, _server_share(p))
    if kind == "host-CPU-bound":
        groups = list(p.host_cpu.values())
        shares = [g.share for g in groups] + [c + w for c, w in p.runnable]
        share = statistics.median(shares) if shares else 0.0
        if share <= 0:
            return None
        return p.mean_bps / share, f"the host's CPUs {share:.0%} busy"
    return None


@dataclass(frozen=True)
class Judgement:
    level: str            # plausible or unexplained (explained comes from an ablation)
    why: str


def accounts(p: Point, kind: str | None) -> tuple[float | None, str]:
    """The model's prediction when it accounts for the point's throughput, with why not."""
    m = model(p, kind)
    if m is None:
        return None, f"{kind or 'no verdict'} has no model that predicts a throughput"
    bps, how = m
    if not bps or not math.isfinite(bps) or bps <= 0:
        return None, f"{kind}: no finite bound ({how})"
    r = p.mean_bps / bps
    if not MODEL_REACHED <= r <= MODEL_ABOVE:
        return None, (f"the throughput is {r:.0%} of {kind}'s model ({how}: "
                      f"{show_throughput(bps, digits=3)}), outside {MODEL_REACHED:.0%}-"
                      f"{MODEL_ABOVE:.0%}: not what holds it")
    return bps, f"{kind} ({how}: {show_throughput(bps, digits=3)}, {r:.0%} reached)"


def headroom(p: Point, kind: str | None) -> float | None:
    """How far the point could rise with its bound lifted: to the validated path."""
    if kind == "path-limited":
        return None
    cap = p.path_bound_bps()
    if not cap or not p.samples_bps or p.mean_bps <= 0:
        return None
    return max(1.0, cap / p.mean_bps)


def pair(held: Point, other: Point, gap: float, verdicts: Any) -> Judgement:
    """Whether `held`'s bound plausibly explains that the study has it `gap` times higher
    relative to `other` than the rig measured (the pair rule in the module's docstring)."""
    kh = getattr(verdicts.get(held.key), "kind", None)
    ko = getattr(verdicts.get(other.key), "kind", None)
    name = f"{held.key.client} at {_x(held)}"
    bps, why = accounts(held, kh)
    if bps is None:
        return Judgement(UNEXPLAINED, f"{name}: {why}")
    if kh == ko:
        return Judgement(UNEXPLAINED, f"{name} and {other.key.client} are both {kh}: a "
                                      "shared label cannot say why one beats the other")
    room = headroom(held, kh)
    if room is None:
        return Judgement(UNEXPLAINED, f"{name}: {why}; no headroom known above it "
                                      "(the study's path differs)")
    if gap > 1 and room < math.sqrt(gap):
        return Judgement(UNEXPLAINED, f"{name}: {why}, but lifting it reaches the path "
                                      f"at x{room:.3g}, short of half the gap x{gap:.3g} "
                                      "(log scale)")
    return Judgement(PLAUSIBLE, f"{name}: {why}, {other.key.client} {ko}; headroom "
                                f"x{room:.3g} for a gap of x{gap:.3g}")


def single(points: list[Point], verdicts: Any, gap: float | None = None) -> Judgement:
    """Every point accounted for by its own bound's model (and, with a gap, headroom)."""
    if not points:
        return Judgement(UNEXPLAINED, "no points")
    whys = []
    for p in points:
        k = getattr(verdicts.get(p.key), "kind", None)
        bps, why = accounts(p, k)
        name = f"{p.key.client} at {_x(p)}"
        if bps is None:
            return Judgement(UNEXPLAINED, f"{name}: {why}")
        if gap is not None and gap > 1:
            room = headroom(p, k)
            if room is None or room < math.sqrt(gap):
                return Judgement(UNEXPLAINED, f"{name}: {why}, headroom "
                                              f"{'unknown' if room is None else f'x{room:.3g}'}"
                                              f" short of half the gap x{gap:.3g}")
        whys.append(f"{name}: {why}")
    return Judgement(PLAUSIBLE, "; ".join(whys[:3]) + (f"; ... {len(whys) - 3} more"
                                                       if len(whys) > 3 else ""))


def closed_share(gap: float, gap_after: float) -> float:
    """The share of a gap (>1) that an ablation closed, on a log scale (1: all of it)."""
    if gap <= 1:
        return 1.0
    return 1.0 - math.log(max(gap_after, 1e-12)) / math.log(gap)


def _x(p: Point) -> str:
    return f"{p.x_rtt_ms:.3g} ms" + ("" if p.key.concurrency == 1 else f" x{p.key.concurrency}")
