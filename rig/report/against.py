"""The run against the study: each claim of a reference file (rig.description.reference)
evaluated on the run's points, scale-free.

    compare(reference, points, verdicts, srtt_ms, artefacts) -> Against

A claim comes out:
  agrees / disagrees     on the means, and at both ends of each series' 90 % confidence
                         interval of its mean (Student's t over the repeats; for
                         `statistic: max` the second best and the best): every series
                         low or high, or one series low, high, rising or falling along x
  undecided              the outcome flips within that spread, or a point has one repeat
  rig artefact           every x it could be compared at holds a point the rig itself
                         spoiled (`artefacts`: its step's path check flagged, the engine
                         late, an emulator-limited verdict, a server that did not answer
                         as the one named): never compared with the study. Such x are
                         left out of every claim, and said.
  not comparable here    the series lacks a capability, or the run has no rows for it
A disagreement is **explained** when an ablation of the claim (the same points with one
suspected cause removed) closed at least half its gap, **plausible** when a specific
bound's model predicts it (rig.report.explain: the pair rule), **unexplained** otherwise.
A claim marked `inference:` is the rig's reading, not the study's statement: evaluated
and shown, counted apart, never toward a row's status.

Pure: reads Points, verdicts (anything with `kind` and `detail`) and the artefact map,
never the host. Must not import matplotlib, rig.realization, rig.process, rig.services.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from rig.description.reference import UNITS, Claim, Reference, Series, Table
from rig.report import explain
from rig.report.explain import EXPLAINED, PLAUSIBLE, UNEXPLAINED
from rig.report.model import Key, Point, Run
from rig.report.stats import t_ppf
from rig.description.units import current_unit, in_unit

AGREES, DISAGREES, NOT_COMPARABLE = "agrees", "disagrees", "not comparable here"
UNDECIDED, ARTEFACT = "undecided", "rig artefact"
VERDICTS = (AGREES, DISAGREES, UNDECIDED, ARTEFACT, NOT_COMPARABLE)
NO_EXPLANATION = ("unexplained", "failed")
X_TOL = 1e-6
DETAIL_CHARS = 140       # a verdict's detail as evidence, cut to stay readable
MAX_EVIDENCE = 6         # points cited per disagreement (the rest counted)
MAX_EXTREME_SERIES = 6   # up to 2^6 views of the series' extremes in the spread test


# --- the rig's side of a series -------------------------------------------------------
def point_x(p: Point, axis: str) -> float | None:
    if axis == "rtt_ms":
        return p.x_rtt_ms
    if axis == "concurrency":
        return float(p.key.concurrency)
    if axis == "streams":
        return float(p.key.streams)
    if axis == "branches_percent":
        return None if p.branch_fraction is None else round(p.branch_fraction * 100, 6)
    raise ValueError(axis)


def client_name(p: Point) -> str:
    """The scenario's client name: a replay row is stored as `name@P%` per branch fraction."""
    name = p.base_client or p.key.client
    if p.branch_fraction is not None:
        name = re.sub(r"@[0-9.]+%$", "", name)
    return name


def _column(p: Point, key: str) -> Any:
    return {"client": client_name(p), "tool": p.tool, "tls": p.tls,
            "streams": p.key.streams, "concurrency": p.key.concurrency, "path": p.key.path,
            "mode": p.cache_mode, "library": p.read_library, "server": p.server,
            "branches_percent": None if p.branch_fraction is None
            else round(p.branch_fraction * 100, 6),
            "rtt_ms": p.key.rtt_ms, "measure": p.measure}[key]


def matches(p: Point, select: Mapping[str, Any]) -> bool:
    for k, want in select.items():
        have = _column(p, k)
        if isinstance(want, float) and isinstance(have, (int, float)):
            if abs(have - want) > X_TOL:
                return False
        elif have != want:
            return False
    return True


def storage_points(run: Run) -> list[Point]:
    """The storage checks of a `storage: disk` run as points a reference can select
    (`measure:`): per path and RTT, the cold dd read and the cached one of every served
    file (each check a sample), and the write of each file as the run wrote it (random
    bytes generated as they go, fdatasync every 256 MiB: a lower bound of the disk's
    write rate, where the study's dd wrote zeros)."""
    out: dict[tuple, Point] = {}
    cap: dict[tuple, list[float]] = {}       # the path check's capacity beside it
    for v in run.validations:
        if v.phase in ("before", "after") and v.capacity_bps:
            cap.setdefault((v.path, v.rtt_ms_configured), []).append(
                float(v.capacity_bps))

    def add(path: str, rtt: float | None, measure: str, bps: float) -> None:
        k = Key(path, rtt, measure, 1, 1)
        c = cap.get((path, rtt))
        p = out.setdefault((k, measure), Point(key=k, tool="dd", measure=measure,
                                               capacity_bps=statistics.fmean(c) if c else None))
        p.samples_bps.append(bps)

    for v in run.validations:
        if v.phase != "storage" or not v.storage_bps:
            continue
        rtt = v.rtt_ms_configured
        add(v.path, rtt, "storage-read", float(v.storage_bps))
        cached = json.loads(v.raw or "{}").get("cached_bps")
        if cached:
            add(v.path, rtt, "storage-cached", float(cached))
    storage = run.env.get("storage") if isinstance(run.env, dict) else None
    written = (storage or {}).get("written") or {}
    paths = sorted({(v.path, v.rtt_ms_configured) for v in run.validations
                    if v.phase == "storage"}, key=str)
    for w in written.values():
        if isinstance(w, dict) and w.get("bytes") and w.get("seconds"):
            for path, rtt in paths:
                add(path, rtt, "storage-write", w["bytes"] * 8 / w["seconds"])
    return list(out.values())


Pick = str | None      # a view of a point's repeats: None (the figure), "lo", "hi"
CONFIDENCE = 0.90      # the spread test: both ends of this confidence interval of a mean


def value(p: Point, unit: str, statistic: str = "mean", rep: Pick = None) -> float | None:
    """The point's figure in the reference unit (throughput or mean duration); `max`:
    the best repeat (highest throughput, shortest duration). `rep`, for the spread test:
    the low or high end ("lo", "hi") of the mean's CONFIDENCE interval (Student's t over
    the repeats), or for `max` the second best and the best repeat."""
    quantity, factor = UNITS[unit]
    best = statistic == "max"
    vals = list(p.durations_s) if quantity == "duration" else list(p.samples_bps)
    if not vals:
        return None
    if rep in ("lo", "hi") and len(vals) > 1:
        vals = sorted(vals)
        if best:        # the best, or the best of the others
            good = vals[-1] if quantity == "throughput" else vals[0]
            high = rep == ("hi" if quantity == "throughput" else "lo")
            vals = [good] if high else [vals[-2] if quantity == "throughput" else vals[1]]
        else:
            m = statistics.fmean(vals)
            half = t_ppf(0.5 + CONFIDENCE / 2, len(vals) - 1) * statistics.stdev(vals) \
                / math.sqrt(len(vals))
            vals = [max(0.0, m - half) if rep == "lo" else m + half]
    if quantity == "duration":
        return min(vals) if best else statistics.fmean(vals)
    return (max(vals) if best else statistics.fmean(vals)) * factor


def repeats(p: Point) -> int:
    return len(p.durations_s) if p.durations_s and not p.samples_bps else p.n


@dataclass
class RigSeries:
    """The rig's points for one study series, by x."""
    series: Series
    points: dict[float, list[Point]] = field(default_factory=dict)

    def value(self, x: float, unit: str, rep: Pick = None) -> float | None:
        vals = [v for p in self.points.get(x, [])
                if (v := value(p, unit, self.series.statistic, rep)) is not None]
        return statistics.fmean(vals) if vals else None

    def xs(self) -> list[float]:
        return sorted(self.points)


def rig_series(points: list[Point], s: Series, axis: str) -> RigSeries:
    out = RigSeries(s)
    if s.select is None:
        return out
    for p in points:
        if matches(p, s.select):
            x = point_x(p, axis)
            if x is not None:
                out.points.setdefault(x, []).append(p)
    return out


def _near(x: float, xs: list[float]) -> float | None:
    return next((y for y in xs if abs(y - x) <= X_TOL), None)


# --- results --------------------------------------------------------------------------
@dataclass(frozen=True)
class Gap:
    """One piece of a disagreement: at x the study has series `held` `size` times higher
    relative to series `other` than the rig measured (`other` None: a claim on one
    series; `size` None: a disagreement with no size, e.g. an onset at another x)."""
    x: float
    held: int
    other: int | None = None
    size: float | None = None


@dataclass(frozen=True)
class Outcome:
    claim: Claim
    verdict: str
    rig: str                  # the rig's numbers
    study: str                # the study's numbers
    ratio: str = ""           # rig / study where that means something
    why: str = ""             # not comparable, undecided, rig artefact: why
    evidence: tuple[str, ...] = ()
    level: str = ""           # a disagreement: explained, plausible or unexplained
    explanation: str = ""     # the rule's words for `level` (rig.report.explain)
    closed: float | None = None              # share of the gap the best ablation closed
    # points left out as rig artefacts: (the point, why), at the x the claim compares
    left_out: tuple[tuple[str, str], ...] = ()
    gaps: tuple[Gap, ...] = ()

    @property
    def unexplained(self) -> bool:
        return self.verdict == DISAGREES and self.level == UNEXPLAINED

    @property
    def explained(self) -> bool:
        return self.verdict == DISAGREES and self.level == EXPLAINED

    @property
    def reading(self) -> bool:
        """The rig's reading (a claim the study does not state): counted apart."""
        return self.claim.inference is not None


@dataclass(frozen=True)
class Cell:
    x: float
    rig: float | None
    study: float | None

    @property
    def ratio(self) -> float | None:
        if self.rig is None or not self.study:
            return None
        return self.rig / self.study


@dataclass(frozen=True)
class TableRow:
    sid: str
    label: str
    cells: tuple[Cell, ...]
    lacks: str | None = None
    rig_xs: tuple[float, ...] = ()           # every x the rig measured for this series
    rig_values: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class TableResult:
    table: Table
    rows: tuple[TableRow, ...]


@dataclass(frozen=True)
class Counts:
    """Outcomes of the study's own claims (the rig's readings only in `reading`)."""
    agrees: int = 0
    disagrees: int = 0
    undecided: int = 0
    artefact: int = 0
    not_comparable: int = 0
    explained: int = 0
    plausible: int = 0
    unexplained: int = 0
    reading: int = 0              # claims marked `inference:`: the rig's reading
    reading_agrees: int = 0

    @property
    def compared(self) -> int:
        return self.agrees + self.disagrees + self.undecided + self.artefact

    def status(self) -> str:
        """Y: most of the study's own claims compared here agree, or every disagreement
        was explained by an ablation and those with the agreements are most; P: some
        compared (or only the rig's readings); N: none."""
        if not self.compared:
            return "P" if self.reading else "N"
        if 2 * self.agrees > self.compared:
            return "Y"
        if self.disagrees and self.explained == self.disagrees and \
                2 * (self.agrees + self.explained) > self.compared:
            return "Y"
        return "P"


def count(outcomes: list[Outcome]) -> Counts:
    own = [o for o in outcomes if not o.reading]
    c = Counter(o.verdict for o in own)
    lv = Counter(o.level for o in own if o.verdict == DISAGREES)
    read = [o for o in outcomes if o.reading]
    return Counts(c[AGREES], c[DISAGREES], c[UNDECIDED], c[ARTEFACT], c[NOT_COMPARABLE],
                  lv[EXPLAINED], lv[PLAUSIBLE], lv[UNEXPLAINED], len(read),
                  sum(o.verdict == AGREES for o in read))


@dataclass(frozen=True)
class Against:
    reference: Reference
    outcomes: tuple[Outcome, ...]
    tables: tuple[TableResult, ...]

    def counts(self) -> dict[str, Counts]:
        """Per experiment id (in E order), plus 'all'."""
        return {exp: count([o for o in self.outcomes if exp in ("all", o.claim.experiment)])
                for exp in self.reference.experiments() + ["all"]}


# --- evidence -------------------------------------------------------------------------
def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:.0f}"


def point_evidence(p: Point, verdicts: Mapping[Any, Any]) -> tuple[str, bool]:
    """One line of the rig's evidence for a point, and whether it names a bound."""
    if p.measure is not None:       # a storage check: both sides of it are measured here
        cap = p.path_bound_bps()
        line = (f"{p.measure} at {_fmt(p.x_rtt_ms)} ms: {p.mean_bps / 8e9:.2f} GB/s "
                f"({in_unit(p.mean_bps):.1f} {current_unit()}, dd on this host's disk)")
        if cap:
            line += (f", {p.mean_bps / cap:.0%} of the validated path {in_unit(cap):.2f} {current_unit()}: "
                     "namespaces on one host over veth, memory speed, not a wire")
        return line, cap is not None
    v = verdicts.get(p.key)
    kind = getattr(v, "kind", None)
    parts = [f"{p.key.client} at {_fmt(p.x_rtt_ms)} ms"
             f"{'' if p.key.concurrency == 1 else f' x{p.key.concurrency}'}: "
             f"{kind or 'no verdict'}"]
    detail = str(getattr(v, "detail", ""))
    head = 2 if detail else 1
    if detail:
        parts.append(f"({detail if len(detail) <= DETAIL_CHARS else detail[:DETAIL_CHARS - 1] + '…'})")
    if p.cpu_ratio:
        parts.append(f"client CPU {max(p.cpu_ratio):.2f} s per wall s")
    if (cores := cores_together(p)) is not None:
        parts.append(f"{cores:.2f} cores together (client x{p.key.concurrency} + server)")
    if p.host_cpu:
        share = statistics.median(g.share for g in p.host_cpu.values())
        parts.append(f"host CPUs {share:.0%} busy")
    if (g := p.cpu_s_per_gb()) is not None:
        parts.append(f"{g:.2f} s/GB client")
    if (g := p.server_cpu_s_per_gb()) is not None:
        parts.append(f"{g:.2f} s/GB server")
    if p.samples_bps:
        for name, bound in (("window bound", p.window_bound_bps()),
                            ("validated path", p.path_bound_bps())):
            if bound and p.mean_bps >= 0.01 * bound:   # far below a bound: not what limits
                parts.append(f"{p.mean_bps / bound:.0%} of {name} {in_unit(bound):.2f} {current_unit()}")
    return " ".join(parts[:head]) + "".join(f", {x}" for x in parts[head:]), kind is not None and kind not in NO_EXPLANATION


def cores_together(p: Point) -> float | None:
    """CPU of all the point's client processes and its server, over the wall time: on a
    small host the shared CPU binds before any one process saturates a core."""
    walls = [c / r for c, r in zip(p.cpu_s, p.cpu_ratio) if r > 0]
    if not walls or not sum(walls):
        return None
    # N concurrent processes share one wall per repeat
    return (sum(p.cpu_s) + sum(p.server_cpu_s)) * p.key.concurrency / sum(walls)


def _evidence(points: list[Point], verdicts: Mapping[Any, Any]) -> tuple[str, ...]:
    lines = [point_evidence(p, verdicts)[0] for p in points]
    if len(lines) > MAX_EVIDENCE:
        lines = lines[:MAX_EVIDENCE] + [f"... and {len(lines) - MAX_EVIDENCE} more point(s) "
                                        "(the run's verdict table)"]
    return tuple(lines)


# --- claims ---------------------------------------------------------------------------
def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two equally long lists (ties counted as tau-b does)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else math.nan


class _Ctx:
    """One claim on the run's points: its series (or, for an ablation, the ablated ones in
    their place), the study's numbers, one repeat's view (`rep`) or the means, and the x
    left out because a point there is a rig artefact."""

    def __init__(self, ref: Reference, points: list[Point], verdicts: Mapping[Any, Any],
                 claim: Claim, srtt_ms: Mapping[Any, float] | None = None, *,
                 rep: Pick | tuple[str, ...] = None,
                 artefacts: Mapping[Any, str] | None = None,
                 series: list[str] | None = None) -> None:
        self.ref, self.claim, self.verdicts, self.rep = ref, claim, verdicts, rep
        self.srtt_ms = srtt_ms or {}
        self.table = ref.table(claim.table) if claim.table else None
        self.axis = self.table.x if self.table else str(claim.x)
        self.unit = self.table.unit if self.table else "MB/s"
        self.rs = [rig_series(points, ref.series[s], self.axis) for s in series or claim.series]
        # series the run has no rows for at all (another scenario of the study runs them):
        # not comparable here, whatever the run's artefacts
        self.absent = [r.series for r in self.rs if not r.points]
        self.left_out: dict[float, list[tuple[str, str]]] = {}
        wanted = claim.at or (self.table.at if self.table else None)
        for r in self.rs:
            for x, pts in r.points.items():
                if wanted is not None and _near(x, wanted) is None:
                    continue
                why = [(f"{p.key.client} at {_x(x, self.axis)}", artefacts[p.key])
                       for p in pts if artefacts and p.key in artefacts]
                if why:
                    self.left_out.setdefault(x, []).extend(why)
        for r in self.rs:       # an x with an artefact in any series is left out of all
            for x in list(r.points):
                if _near(x, list(self.left_out)) is not None:
                    del r.points[x]

    def label(self, i: int) -> str:
        return self.rs[i].series.label

    def study(self, i: int, x: float) -> float | None:
        return self.table.value(self.claim.series[i], x) if self.table else None

    def xs(self) -> list[float]:
        """x values where every series has a rig value (and a study value with a table)."""
        cand = self.claim.at or (self.table.at if self.table else self.rs[0].xs())
        out = []
        for x in cand:
            if all(_near(x, r.xs()) is not None for r in self.rs) and \
                    (self.table is None or all(self.study(i, x) is not None
                                               for i in range(len(self.rs)))):
                out.append(x)
        return out

    def pick(self, i: int, x: float | None = None) -> Pick:
        """Series i's view of its repeats at x: "lo", "hi", or along x "rise" (low below
        the middle x, high above) and "fall" (the reverse); one per series in a tuple."""
        p = self.rep[i] if isinstance(self.rep, tuple) else self.rep
        if p in ("rise", "fall") and x is not None:
            xs = self.rs[i].xs()
            mid = xs[len(xs) // 2] if xs else 0.0
            return ("lo" if x < mid else "hi") if p == "rise" else ("hi" if x < mid else "lo")
        return p

    def rig(self, i: int, x: float) -> float | None:
        near = _near(x, self.rs[i].xs())
        return None if near is None else self.rs[i].value(near, self.unit, self.pick(i, x))

    def points_of(self, i: int, x: float) -> list[Point]:
        near = _near(x, self.rs[i].xs())
        return list(self.rs[i].points.get(near, [])) if near is not None else []

    def points_at(self, xs: list[float]) -> list[Point]:
        return [p for i in range(len(self.rs)) for x in xs for p in self.points_of(i, x)]

    def outcome(self, ok: bool, rig: str, study: str, ratio: str = "",
                xs: list[float] | None = None, gaps: list[Gap] | None = None) -> Outcome:
        if ok:
            return Outcome(self.claim, AGREES, rig, study, ratio)
        xs = xs if xs is not None else self.xs()
        gaps = gaps if gaps is not None else [Gap(x, i) for x in xs for i in range(len(self.rs))]
        level, why = self.judge(gaps)
        return Outcome(self.claim, DISAGREES, rig, study, ratio,
                       evidence=_evidence(self.points_at(xs), self.verdicts),
                       level=level, explanation=why, gaps=tuple(gaps))

    def judge(self, gaps: list[Gap]) -> tuple[str, str]:
        """plausible when the rig's bounds predict every piece of the gap
        (rig.report.explain), unexplained otherwise (with the first reason)."""
        if not gaps:
            return UNEXPLAINED, "no gap the rig's bounds could be tested on"
        whys: list[str] = []
        for g in gaps:
            held = self.points_of(g.held, g.x)
            if g.other is None:
                j = explain.single(held, self.verdicts, g.size)
            elif g.size is None:
                return UNEXPLAINED, "the study gives no size for this gap"
            else:
                js = [explain.pair(h, o, g.size, self.verdicts)
                      for h in held for o in self.points_of(g.other, g.x)]
                j = next((j for j in js if j.level == UNEXPLAINED), None) or \
                    (js[0] if js else explain.Judgement(UNEXPLAINED, "no points"))
            if j.level == UNEXPLAINED:
                return UNEXPLAINED, j.why
            whys.append(j.why)
        uniq = list(dict.fromkeys(whys))
        return PLAUSIBLE, "; ".join(uniq[:3]) + (f"; ... {len(uniq) - 3} more"
                                                 if len(uniq) > 3 else "")


def _x(x: float, axis: str) -> str:
    unit = {"rtt_ms": " ms", "branches_percent": " %"}.get(axis, "")
    return f"{_fmt(x)}{unit}" if axis != "concurrency" else f"x{_fmt(x)}"


def _order(labels: list[str], vals: list[float]) -> str:
    pairs = sorted(zip(vals, labels), key=lambda t: -t[0])
    return " > ".join(f"{lab} {_fmt(v)}" for v, lab in pairs)


def _ranking(c: _Ctx) -> Outcome:
    # only where every series has a point: an `at` whose points were left out as rig
    # artefacts (or never measured) is not a tie of zeros (issue 38: seed 002's x32)
    xs = c.xs()
    if not xs:
        return _missing(c)
    rig_parts, study_parts, bad = [], [], []
    gaps: list[Gap] = []
    n = len(c.rs)
    for x in xs:
        rv = [c.rig(i, x) or 0.0 for i in range(n)]
        sv = [c.study(i, x) or 0.0 for i in range(n)] if c.table else \
            [float(n - i) for i in range(n)]    # listed best first
        tau = kendall_tau(rv, sv)
        labels = [c.label(i) for i in range(n)]
        if math.isnan(tau):       # every pair tied on one side: no order to compare
            rig_parts.append(f"{_x(x, c.axis)}: tied, not ranked ({_order(labels, rv)})")
            study_parts.append(f"{_x(x, c.axis)}: " + _order(labels, sv))
            continue
        rig_parts.append(f"{_x(x, c.axis)}: τ={tau:+.2f} ({_order(labels, rv)})")
        study_parts.append(f"{_x(x, c.axis)}: " + (_order(labels, sv) if c.table
                                                   else " > ".join(labels)))
        if tau < c.claim.min_tau:
            bad.append(x)
            gaps += _discordant(x, rv, sv, bool(c.table))
    return c.outcome(not bad, "; ".join(rig_parts), "; ".join(study_parts),
                     f"τ ≥ {c.claim.min_tau:g} wanted", xs=bad, gaps=gaps)


def _discordant(x: float, rv: list[float], sv: list[float], sized: bool) -> list[Gap]:
    """Each pair the rig orders against the study: the one the study puts higher is held;
    the gap is the study's ratio over the rig's (without the study's numbers: what would
    tie the two)."""
    out = []
    for i in range(len(rv)):
        for j in range(len(rv)):
            if sv[i] > sv[j] and rv[i] < rv[j]:
                rig_r = rv[i] / rv[j]
                size = (sv[i] / sv[j]) / rig_r if sized and sv[j] > 0 and rig_r > 0 else \
                    (1 / rig_r if rig_r > 0 else math.inf)
                out.append(Gap(x, i, j, size))
    return out


def _common_xs(c: _Ctx) -> list[float]:
    sets = [set(r.xs()) for r in c.rs]
    return sorted(set.intersection(*sets)) if sets else []


def _ratio(c: _Ctx) -> Outcome:
    xs = c.xs() if c.table else (c.claim.at or _common_xs(c))
    xs = [x for x in xs if c.rig(0, x) is not None and c.rig(1, x)]
    if not xs:
        return _missing(c)
    rig_parts, study_parts, bad = [], [], []
    gaps: list[Gap] = []
    for x in xs:
        r = (c.rig(0, x) or 0.0) / (c.rig(1, x) or 1.0)
        if c.table:
            s = (c.study(0, x) or 0.0) / (c.study(1, x) or math.inf)
            lo, hi = s / c.claim.factor, s * c.claim.factor
            study_parts.append(f"{_x(x, c.axis)}: {_fmt(s)}")
        else:
            lo, hi = c.claim.band or (0.0, math.inf)
        if c.claim.band and c.table:
            lo, hi = c.claim.band
        rig_parts.append(f"{_x(x, c.axis)}: {_fmt(r)}")
        if not lo <= r <= hi:
            bad.append(x)
            gaps.append(Gap(x, 0, 1, lo / r if r > 0 else math.inf) if r < lo
                        else Gap(x, 1, 0, r / hi))
    head = f"{c.label(0)} / {c.label(1)}"
    band = (f"band {_fmt(c.claim.band[0])}–{_fmt(c.claim.band[1])}" if c.claim.band
            else f"within x{c.claim.factor:g} of the study's")
    study = "; ".join(study_parts) if study_parts else band
    return c.outcome(not bad, f"{head} {'; '.join(rig_parts)}", study, band, xs=bad,
                     gaps=gaps)


def collapse_x(xs: list[float], vals: list[float], fraction: float) -> float | None:
    """The first x where the series falls below `fraction` of its value at the first x."""
    if not xs or vals[0] <= 0:
        return None
    return next((x for x, v in zip(xs, vals) if v < fraction * vals[0]), None)


def plateau_x(xs: list[float], vals: list[float], within: float) -> float | None:
    """The first x whose value is within `within` of the series' maximum."""
    if not xs:
        return None
    top = max(vals)
    return next(x for x, v in zip(xs, vals) if v >= (1 - within) * top)


def _onset(c: _Ctx, kind: str) -> Outcome:
    r = c.rs[0]
    xs = sorted(x for x in (c.claim.at or r.xs()) if _near(x, r.xs()) is not None)
    vals = [c.rig(0, x) for x in xs]
    pairs = [(x, v) for x, v in zip(xs, vals) if v is not None]
    if len(pairs) < 2:
        return _missing(c)
    rx, rv = [p[0] for p in pairs], [p[1] for p in pairs]
    fn = (lambda a, b: collapse_x(a, b, c.claim.fraction)) if kind == "collapse" else \
        (lambda a, b: plateau_x(a, b, c.claim.within))
    rig_x = fn(rx, rv)
    if c.table:
        sx = [x for x in (c.claim.at or c.table.at) if c.study(0, x) is not None]
        study_x = fn(sx, [c.study(0, x) or 0.0 for x in sx])
    else:
        study_x = c.claim.study_value
    what = (f"below {c.claim.fraction:.0%} of its {_x(rx[0], c.axis)} value"
            if kind == "collapse" else f"within {c.claim.within:.0%} of its maximum")
    rig = f"{c.label(0)} {what} at {_x(rig_x, c.axis) if rig_x is not None else 'no x'}" \
          f" (measured {_x(rx[0], c.axis)}..{_x(rx[-1], c.axis)})"
    study = f"at {_x(study_x, c.axis)}" if study_x is not None else "never in its range"
    if rig_x is None and study_x is not None and rx[-1] < study_x:
        return Outcome(c.claim, NOT_COMPARABLE, rig, study,
                       why=f"the run stops at {_x(rx[-1], c.axis)}, before the study's x")
    if rig_x is None or study_x is None:
        ok = rig_x is None and study_x is None
    else:
        lo, hi = sorted((rig_x, study_x))
        ok = lo == hi or (lo > 0 and hi / lo <= c.claim.factor)
    ratio = f"{rig_x / study_x:.2f}" if rig_x and study_x else ""
    return c.outcome(ok, rig, study, ratio, xs=rx)


def _flat(c: _Ctx) -> Outcome:
    r = c.rs[0]
    xs = [x for x in (c.claim.at or r.xs()) if c.rig(0, x) is not None]
    if len(xs) < 2:
        return _missing(c)
    rv = [c.rig(0, x) or 0.0 for x in xs]
    spread = (max(rv) - min(rv)) / max(rv) if max(rv) > 0 else 0.0
    rig = f"{c.label(0)} spread {spread:.0%} over {_x(xs[0], c.axis)}..{_x(xs[-1], c.axis)}"
    if c.table:
        sv = [c.study(0, x) or 0.0 for x in (c.claim.at or c.table.at)]
        s_spread = (max(sv) - min(sv)) / max(sv) if max(sv) > 0 else 0.0
        study = f"spread {s_spread:.0%}"
        ok = (spread <= c.claim.within) == (s_spread <= c.claim.within)
    else:
        study = f"flat within {c.claim.within:.0%}"
        ok = spread <= c.claim.within
    return c.outcome(ok, rig, study, xs=xs)


def _alike(c: _Ctx) -> Outcome:
    """Every series within `within` of the best at each x: (max - min) / max."""
    xs = c.xs()
    if not xs:
        return _missing(c)
    rig_parts, study_parts, bad = [], [], []
    gaps: list[Gap] = []
    for x in xs:
        rv = [c.rig(i, x) or 0.0 for i in range(len(c.rs))]
        spread = (max(rv) - min(rv)) / max(rv) if max(rv) > 0 else 0.0
        rig_parts.append(f"{_x(x, c.axis)}: {spread:.0%}")
        want = True
        if c.table:
            sv = [c.study(i, x) or 0.0 for i in range(len(c.rs))]
            s_spread = (max(sv) - min(sv)) / max(sv) if max(sv) > 0 else 0.0
            study_parts.append(f"{_x(x, c.axis)}: {s_spread:.0%}")
            want = s_spread <= c.claim.within
        if (spread <= c.claim.within) != want:
            bad.append(x)
            gaps += _unalike(c, x, rv)
    study = "spread " + ("; ".join(study_parts) if study_parts
                         else f"within {c.claim.within:.0%}")
    return c.outcome(not bad, "spread (max-min)/max " + "; ".join(rig_parts), study,
                     f"alike: spread ≤ {c.claim.within:.0%}", xs=bad, gaps=gaps)


def _unalike(c: _Ctx, x: float, rv: list[float]) -> list[Gap]:
    """The rig spread where the study is alike: its slowest is held by the factor beyond
    the spread allowed. The rig alike where the study spread: the study's fastest is held
    (with the study's numbers; without, no size)."""
    if max(rv) > 0 and (max(rv) - min(rv)) / max(rv) > c.claim.within:
        h, o = rv.index(min(rv)), rv.index(max(rv))
        return [Gap(x, h, o, (rv[o] / rv[h]) * (1 - c.claim.within) if rv[h] > 0
                    else math.inf)]
    if not c.table:
        return [Gap(x, 0, 1, None)]
    sv = [c.study(i, x) or 0.0 for i in range(len(c.rs))]
    h, o = sv.index(max(sv)), sv.index(min(sv))
    if sv[o] <= 0 or rv[o] <= 0 or rv[h] <= 0:
        return [Gap(x, h, o, None)]
    return [Gap(x, h, o, (sv[h] / sv[o]) / (rv[h] / rv[o]))]


def _share(c: _Ctx) -> Outcome:
    r = c.rs[0]
    xs = [x for x in (c.claim.at or r.xs()) if _near(x, r.xs()) is not None]
    parts, bad = [], []
    gaps: list[Gap] = []
    lo, hi = c.claim.band or (0.0, math.inf)
    for x in xs:
        pts = [p for p in r.points[_near(x, r.xs()) or x] if p.samples_bps]
        pairs = [((value(p, "Gbit/s", "mean", c.pick(0, x)) or 0.0) * 1e9, bound) for p in pts
                 if (bound := {"capacity": p.path_bound_bps(), "window": p.window_bound_bps(),
                               "rate": p.rate_bps}[str(c.claim.bound)])]
        if not pairs:
            continue
        if c.claim.joint:
            # the paths of one joint step: what the site moved over what all its links hold
            paths = sorted({p.key.path for p in pts})
            if len(paths) < 2 or len(pairs) < len(pts):
                continue
            s = sum(m for m, _ in pairs) / sum(b for _, b in pairs)
            parts.append(f"{_x(x, c.axis)}: {s:.0%} ({_fmt(in_unit(sum(m for m, _ in pairs)))} "
                         f"of {_fmt(in_unit(sum(b for _, b in pairs)))} {current_unit()} over "
                         f"{', '.join(paths)})")
        else:
            s = statistics.fmean(m / b for m, b in pairs)
            parts.append(f"{_x(x, c.axis)}: {s:.0%}")
        if not lo <= s <= hi:
            bad.append(x)
            if s < lo:      # above the band: no bound of the rig's says why the study was lower
                gaps.append(Gap(x, 0, None, lo / s if s > 0 else math.inf))
    if not parts:
        return _missing(c, "its points are not the paths of one joint step (together:), "
                           f"each with its {c.claim.bound} bound" if c.claim.joint
                        else f"no {c.claim.bound} bound recorded for its points")
    study = f"{lo:.0%}–{hi:.0%} of {c.claim.bound}" + (
        f" (states {_fmt(c.claim.study_value)})" if c.claim.study_value is not None else "")
    return c.outcome(not bad, f"{c.label(0)} share of {c.claim.bound}: " + "; ".join(parts),
                     study, xs=bad, gaps=gaps)


def _inflation(c: _Ctx) -> Outcome:
    """The sender's smoothed RTT over the step's validated ping RTT, in ms, at each x."""
    r = c.rs[0]
    bound = float(c.claim.study_value or 0.0)
    parts, bad = [], []
    for x in [x for x in (c.claim.at or r.xs()) if _near(x, r.xs()) is not None]:
        vals = [c.srtt_ms[p.key] - (p.rtt_ms_measured if p.rtt_ms_measured is not None
                                    else p.key.rtt_ms or 0.0)
                for p in r.points[_near(x, r.xs()) or x] if p.key in c.srtt_ms]
        if not vals:
            continue
        v = statistics.fmean(vals)
        parts.append(f"{_x(x, c.axis)}: {v:+.2f} ms")
        if v > bound:
            bad.append(x)
    if not parts:
        return _missing(c, "no sender srtt recorded for its points (tcp sampling off, "
                           "or a tool that reports none)")
    return c.outcome(not bad, f"{c.label(0)} srtt - ping RTT " + "; ".join(parts),
                     f"< {_fmt(bound)} ms", xs=bad)


def _verdict_kind(c: _Ctx) -> Outcome:
    """The rig's bottleneck verdict of the series' points at each x against the one the
    study names: agrees where it is the verdict, or a bound that also holds (`also`)."""
    r, want = c.rs[0], str(c.claim.verdict)
    parts, bad = [], []
    for x in [x for x in (c.claim.at or r.xs()) if _near(x, r.xs()) is not None]:
        vs = [c.verdicts.get(p.key) for p in r.points[_near(x, r.xs()) or x]]
        kinds = [getattr(v, "kind", None) or "no verdict" for v in vs]
        hold = [getattr(v, "kind", None) == want or want in getattr(v, "also", ())
                for v in vs]
        parts.append(f"{_x(x, c.axis)}: {', '.join(dict.fromkeys(kinds))}"
                     + ("" if all(k == want for k in kinds) else
                        f" ({want} " + ("also holds" if all(hold) else "holds for some"
                                        if any(hold) else "does not hold") + ")"))
        if not all(hold):
            bad.append(x)
    if not parts:
        return _missing(c)
    return c.outcome(not bad, f"{c.label(0)} verdict " + "; ".join(parts), want, xs=bad)


def _missing(c: _Ctx, why: str = "") -> Outcome:
    if not why:
        empty = c.absent or [r.series for r in c.rs if not r.points]
        why = ("the run has no rows for " + ", ".join(
            f"{s.label} ({', '.join(f'{k}={v}' for k, v in (s.select or {}).items())})"
            for s in empty)) if empty else "no x at which every series was measured"
    return Outcome(c.claim, NOT_COMPARABLE, "—", _study_summary(c), why=why)


def _study_summary(c: _Ctx) -> str:
    if c.table is None:
        return c.claim.text
    xs = c.claim.at or c.table.at
    return "; ".join(f"{c.label(i)} {_fmt(c.study(i, xs[0]))}@{_x(xs[0], c.axis)}"
                     for i in range(len(c.rs)))


KIND_FN = {"ranking": _ranking, "ratio": _ratio, "collapse": lambda c: _onset(c, "collapse"),
           "plateau": lambda c: _onset(c, "plateau"), "flat": _flat, "share": _share, "alike": _alike,
           "inflation": _inflation, "verdict": _verdict_kind}


def evaluate(ref: Reference, points: list[Point], verdicts: Mapping[Any, Any],
             claim: Claim, srtt_ms: Mapping[Any, float] | None = None,
             artefacts: Mapping[Any, str] | None = None) -> Outcome:
    lacks = [ref.series[s] for s in claim.series if ref.series[s].lacks]
    if claim.lacks or lacks:
        why = claim.lacks or "; ".join(f"{s.label}: {s.lacks}" for s in lacks)
        return Outcome(claim, NOT_COMPARABLE, "—", claim.text, why=f"needs {why}")

    def ctx(rep: Pick | tuple[str, ...] = None, series: list[str] | None = None) -> _Ctx:
        return _Ctx(ref, points, verdicts, claim, srtt_ms, rep=rep, artefacts=artefacts,
                    series=series)

    c = ctx()
    if c.absent:        # never a rig artefact: the series belongs to another run
        return _missing(c)
    left = tuple(w for ws in c.left_out.values() for w in ws)
    if any(not r.points for r in c.rs):
        out = _missing(c)
    else:
        out = KIND_FN[claim.kind](c)
    if out.verdict == NOT_COMPARABLE and left:
        return dataclasses.replace(out, verdict=ARTEFACT, left_out=left, why=(
            "every x it could be compared at holds a point the rig spoiled: "
            + artefact_summary(left)))
    out = dataclasses.replace(out, left_out=left)
    if out.verdict not in (AGREES, DISAGREES):
        return out
    out = _spread(out, c, ctx)
    if out.verdict == DISAGREES and claim.ablations:
        out = _ablate(out, ctx)
    return out


def artefact_summary(left: tuple[tuple[str, str], ...] | list[tuple[str, str]],
                     most: int = 3) -> str:
    """The left-out points grouped by why: 'why: a, b, c'."""
    by: dict[str, list[str]] = {}
    for point, why in left:
        by.setdefault(why, []).append(point)
    parts = [f"{why}: {', '.join(pts[:6])}" + (f" (+{len(pts) - 6})" if len(pts) > 6 else "")
             for why, pts in by.items()]
    return "; ".join(parts[:most]) + (f"; ... {len(parts) - most} more" if len(parts) > most
                                       else "")


def _spread(out: Outcome, c: _Ctx, ctx: Any) -> Outcome:
    """The outcome on the means must hold at both ends of each series' CONFIDENCE
    interval: every series low or high (claims on 2 to MAX_EXTREME_SERIES series), or for
    one series all low, all high, rising and falling along x; undecided if one view flips
    it, or a point has a single repeat (no spread to decide from)."""
    pts = [p for i in range(len(c.rs)) for x in (c.claim.at or c.rs[i].xs())
           for p in c.points_of(i, x)]
    n = min((repeats(p) for p in pts), default=0)
    if n < 2:
        return dataclasses.replace(out, verdict=UNDECIDED, why=(
            f"{out.verdict} on the means, but a point has {n} repeat(s): no spread to "
            "decide from"))
    ns = len(c.rs)
    views: list[tuple[str, ...]] = [("lo",), ("hi",), ("rise",), ("fall",)] if ns == 1 else \
        list(itertools.product(("lo", "hi"), repeat=ns)) if ns <= MAX_EXTREME_SERIES else []
    for view in views:
        if KIND_FN[c.claim.kind](ctx(rep=view)).verdict != out.verdict:
            shown = ", ".join(f"{c.label(i)} {v}" for i, v in enumerate(view))
            return dataclasses.replace(out, verdict=UNDECIDED, why=(
                f"{out.verdict} on the means (at least {n} repeats per point), not with "
                f"{shown} ({CONFIDENCE:.0%} confidence interval of each mean): within "
                "the spread"))
    return out


def _ablate(out: Outcome, ctx: Any) -> Outcome:
    """The share of the disagreement's gap each ablation closed (rig.report.explain); the
    best one at or above ABLATION_CLOSES makes it explained."""
    best: tuple[float, str] | None = None
    notes = []
    for ab in out.claim.ablations:
        c2 = ctx(series=[ab.series.get(s, s) for s in out.claim.series])
        if any(not r.points for r in c2.rs):
            notes.append(f"ablation '{ab.cause}': no rows for its series in this run")
            continue
        o2 = KIND_FN[out.claim.kind](c2)
        shares = []
        for g in out.gaps:
            idx = [g.held] + ([g.other] if g.other is not None else [])
            if any(c2.rig(i, g.x) is None for i in idx):
                shares.append(0.0)
                continue
            after = [g2 for g2 in o2.gaps if abs(g2.x - g.x) <= X_TOL and g2.held == g.held
                     and g2.other == g.other]
            if g.size is None or (after and after[0].size is None):
                shares.append(0.0 if after else 1.0)
            else:
                shares.append(explain.closed_share(g.size, after[0].size if after and
                                                   after[0].size is not None else 1.0))
        if not shares:
            shares = [1.0 if o2.verdict == AGREES else 0.0]
        closed = statistics.median(shares)
        did = (f"closed {min(closed, 1.0):.0%} of the gap" if closed >= 0
               else "widened the gap instead of closing it")
        notes.append(f"ablation '{ab.cause}' {did} (ablated: {o2.rig})")
        if best is None or closed > best[0]:
            best = (closed, ab.cause)
    if best is not None and best[0] >= explain.ABLATION_CLOSES:
        return dataclasses.replace(out, level=EXPLAINED, closed=best[0],
                                   explanation="; ".join(notes) + f"; before: {out.explanation}")
    return dataclasses.replace(out, closed=None if best is None else best[0],
                               explanation="; ".join(notes + [out.explanation]))


def table_result(ref: Reference, points: list[Point], t: Table) -> TableResult:
    rows = []
    for sid, vals in t.rows.items():
        s = ref.series[sid]
        rs = rig_series(points, s, t.x)
        cells = tuple(Cell(x, None if (n := _near(x, rs.xs())) is None else rs.value(n, t.unit),
                           v) for x, v in zip(t.at, vals))
        rows.append(TableRow(sid, s.label, cells, s.lacks, tuple(rs.xs()),
                             tuple(rs.value(x, t.unit) for x in rs.xs())))
    return TableResult(t, tuple(rows))


def compare(ref: Reference, points: list[Point], verdicts: Mapping[Any, Any],
            srtt_ms: Mapping[Any, float] | None = None,
            artefacts: Mapping[Any, str] | None = None) -> Against:
    """Every claim and table of `ref` against the run's points; `srtt_ms`: the sender's
    mean smoothed RTT per point Key (for `inflation` claims); `artefacts`: per point Key,
    why the rig spoiled it (rig.report.verdict.artefacts): left out of every claim."""
    return Against(ref, tuple(evaluate(ref, points, verdicts, c, srtt_ms, artefacts)
                              for c in ref.claims),
                   tuple(table_result(ref, points, t) for t in ref.tables))
