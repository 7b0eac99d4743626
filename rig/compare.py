"""Regression check between two stored runs (`rig compare BASELINE CANDIDATE`).

Measurements are matched on (path, configured RTT, client configuration, streams,
concurrency). For each pair the change is the relative difference of the mean
throughputs, with a 95 % bootstrap interval from the repeats of both runs (resampling
each run's repeats independently, seeded so that results are reproducible).

A pair is a *regression* when the candidate dropped by more than `threshold` AND the
drop is outside the noise (the interval's upper end is below zero), or when every
candidate repeat failed where the baseline worked. With a single repeat on either side
the noise is unknown and the threshold alone decides (the report says so).
Exit code: 0 nothing regressed, 1 something did; unusable input raises InputError (2).

Writes compare.md, compare.csv, compare.html and, when matplotlib is importable,
overlay charts. The verdict never needs matplotlib.

Must not import rig.netns, rig.proc, rig.services or rig.emul (nor matplotlib at import).
"""
from __future__ import annotations

import difflib
import json
import math
import random
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ExitStatus, InputError
from .report.model import SETTINGS, Key, Point, Run, key_order, load_run
from .report.verdict import verdict

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95

REGRESSION, IMPROVEMENT, UNCHANGED, NOISE = "regression", "improvement", "unchanged", "noise"
FAILED, NO_BASELINE = "failed", "no-baseline"


@dataclass(frozen=True)
class Pair:
    """One matched measurement: baseline vs candidate."""
    key: Key
    base: tuple[float, ...]             # aggregate bits/s per successful repeat
    cand: tuple[float, ...]
    change: float                       # mean(cand) / mean(base) - 1; nan without data
    low: float | None                   # bootstrap interval of `change`, None: no repeats
    high: float | None
    status: str
    base_failed: int = 0
    cand_failed: int = 0
    base_verdict: str = ""
    cand_verdict: str = ""
    settings: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def regressed(self) -> bool:
        return self.status in (REGRESSION, FAILED)

    def interval_text(self) -> str:
        if self.low is None or self.high is None:
            return "n/a (1 repeat)"
        return f"[{self.low:+.1%}, {self.high:+.1%}]"


@dataclass
class CompareResult:
    baseline: Path
    candidate: Path
    out_dir: Path
    threshold: float
    pairs: list[Pair]
    only_baseline: list[Key]
    only_candidate: list[Key]
    env_diffs: list[str]
    scenario_diff: list[str]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Pair]:
        return [p for p in self.pairs if p.regressed]

    @property
    def exit_code(self) -> int:
        return int(ExitStatus.REGRESSION if self.regressions else ExitStatus.OK)

    def summary(self) -> str:
        n, r = len(self.pairs), len(self.regressions)
        head = (f"REGRESSION: {r} of {n} matched measurements dropped by more than "
                f"{self.threshold:.0%} outside the noise" if r else
                f"no regression: {n} matched measurements, none dropped by more than "
                f"{self.threshold:.0%} outside the noise")
        better = sum(1 for p in self.pairs if p.status == IMPROVEMENT)
        noisy = sum(1 for p in self.pairs if p.status == NOISE)
        return head + f" ({better} improved, {noisy} within noise)"


def bootstrap_change(base: list[float], cand: list[float], seed: int,
                     resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """Percentile interval of mean(cand)/mean(base) - 1; None with < 2 repeats a side."""
    if len(base) < 2 or len(cand) < 2:
        return None
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        b = statistics.fmean(rng.choices(base, k=len(base)))
        c = statistics.fmean(rng.choices(cand, k=len(cand)))
        stats.append(c / b - 1 if b > 0 else math.inf)
    stats.sort()
    tail = (1 - CONFIDENCE) / 2
    return stats[int(tail * (resamples - 1))], stats[int((1 - tail) * (resamples - 1))]


def classify(change: float, interval: tuple[float, float] | None, threshold: float) -> str:
    if change < -threshold:
        return REGRESSION if interval is None or interval[1] < 0 else NOISE
    if change > threshold:
        return IMPROVEMENT if interval is None or interval[0] > 0 else NOISE
    return UNCHANGED


def _settings_diff(b: Point, c: Point) -> dict[str, tuple[Any, Any]]:
    out = {}
    for name in SETTINGS:
        bv, cv = b.settings.get(name, set()), c.settings.get(name, set())
        if bv != cv:
            out[name] = (_one(bv), _one(cv))
    return out


def _one(values: set) -> Any:
    return next(iter(values)) if len(values) == 1 else sorted(map(str, values))


def compare_points(b: Point, c: Point, threshold: float, base_run: Run,
                   cand_run: Run) -> Pair:
    base, cand = list(b.samples_bps), list(c.samples_bps)
    common = dict(base_failed=b.failed, cand_failed=c.failed,
                  base_verdict=verdict(b, base_run).kind,
                  cand_verdict=verdict(c, cand_run).kind, settings=_settings_diff(b, c))
    if not base:
        return Pair(b.key, (), tuple(cand), math.nan, None, None, NO_BASELINE, **common)
    if not cand:
        return Pair(b.key, tuple(base), (), -1.0, None, None, FAILED, **common)
    change = statistics.fmean(cand) / statistics.fmean(base) - 1
    interval = bootstrap_change(base, cand, zlib.crc32(b.key.label().encode()))
    low, high = interval if interval else (None, None)
    return Pair(b.key, tuple(base), tuple(cand), change, low, high,
                classify(change, interval, threshold), **common)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def environment_diffs(base: dict, cand: dict) -> tuple[list[str], list[str]]:
    """(one line per differing environment value, unified diff of the scenario text)."""
    text_keys = ("scenario_text", "scenario")
    b = _flat({k: v for k, v in base.items() if k not in text_keys})
    c = _flat({k: v for k, v in cand.items() if k not in text_keys})
    lines = []
    for k in sorted(set(b) | set(c)):
        if b.get(k) != c.get(k):
            lines.append(f"{k}: {_short(b.get(k, '(absent)'))} -> "
                         f"{_short(c.get(k, '(absent)'))}")
    bt, ct = _text(base), _text(cand)
    diff = list(difflib.unified_diff(bt.splitlines(), ct.splitlines(), "baseline",
                                     "candidate", lineterm="", n=1))
    if diff:
        lines.append("scenario text differs (diff below)")
    return lines, diff[:200]


def _text(env: dict) -> str:
    v = env.get("scenario_text", env.get("scenario", ""))
    return v if isinstance(v, str) else json.dumps(v, indent=2, sort_keys=True)


def _short(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v)
    return s if len(s) <= 120 else s[:117] + "..."


def settings_lines(pairs: list[Pair]) -> list[str]:
    """Per-measurement settings that changed (window, tcp_rmem, congestion control...)."""
    counts: dict[tuple[str, str, str], int] = {}
    for p in pairs:
        for name, (bv, cv) in p.settings.items():
            k = (name, _short(bv), _short(cv))
            counts[k] = counts.get(k, 0) + 1
    return [f"{name}: {bv} -> {cv} in {n} of {len(pairs)} matched measurements"
            for (name, bv, cv), n in sorted(counts.items())]


def _load(d: Path, role: str) -> Run:
    d = Path(d)
    if not d.exists():
        raise InputError(f"{role} run directory does not exist", file=str(d))
    run = load_run(d)
    if not run.points:
        raise InputError(f"{role} run has no transfers", file=str(d))
    return run


def match(base: Run, cand: Run, threshold: float) -> tuple[list[Pair], list[Key], list[Key]]:
    bmap = {p.key: p for p in base.points}
    cmap = {p.key: p for p in cand.points}
    common = sorted(set(bmap) & set(cmap), key=key_order)
    pairs = [compare_points(bmap[k], cmap[k], threshold, base, cand) for k in common]
    return (pairs, sorted(set(bmap) - set(cmap), key=key_order),
            sorted(set(cmap) - set(bmap), key=key_order))


def compare(baseline_dir: Path, candidate_dir: Path, out_dir: Path | None = None, *,
            threshold: float = 0.10) -> CompareResult:
    """Compare two runs, write compare.{md,csv,html} (+ charts) into out_dir
    (default: CANDIDATE/compare), return the result; .exit_code is 0 or 1."""
    if not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise InputError("threshold must be a fraction between 0 and 1", key="threshold",
                         value=threshold)
    base, cand = _load(baseline_dir, "baseline"), _load(candidate_dir, "candidate")
    pairs, only_b, only_c = match(base, cand, threshold)
    if not pairs:
        raise InputError("no measurement in common (matched on path, RTT, client, streams, "
                         "concurrency)", file=f"{baseline_dir} vs {candidate_dir}")
    env_lines, scen_diff = environment_diffs(base.env, cand.env)
    out = Path(out_dir) if out_dir is not None else cand.dir / "compare"
    out.mkdir(parents=True, exist_ok=True)
    result = CompareResult(base.dir, cand.dir, out, threshold, pairs, only_b, only_c,
                           env_lines + settings_lines(pairs), scen_diff)
    from .report import compare_report
    result.files = compare_report.write_all(result, base, cand)
    return result
