"""Regression check between two stored runs (`rig compare BASELINE CANDIDATE`).

Measurements are matched on (path, configured RTT, client configuration, streams,
concurrency). Each pair gets a verdict -- regressed, improved, same, undecided (failed,
no-baseline) -- with the change of the geometric mean throughput and its 95 % interval;
how is said in rig.report.compare_decide (moderated t on log throughput, Holm over the
grid, magnitude floor, equivalence margin, repeats that would decide an undecided point).
The runs' metadata (kernel, host, backends, tool versions, tuning, scenario hash) is
checked by rig.report.compare_meta: differences are named first; under strict=True an
environment difference nobody expected is bad input (exit 2, nothing written).

Exit code: 1 when a pair regressed or failed, else 0 -- also when some pairs are only
undecided (the summary line says so); unusable input raises InputError (2).

Writes compare.md, compare.csv, compare.html and, when matplotlib is importable,
overlay charts. The verdict never needs matplotlib.

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul (nor matplotlib at import).
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from rig.description import userpath
from rig.errors import InputError, InputErrors
from rig.report.model import SETTINGS, Key, Point, Run, key_order, load_run
from rig.report.verdict import verdict
from rig.report import compare_meta, compare_report
from rig.report.compare_model import CompareResult, Pair, summary_line  # noqa: F401  (re-exported)
from rig.report.compare_decide import (  # noqa: F401  (re-exported: tests, charts, report)
    ALPHA, CONFIDENCE, FAILED, FLOOR, IMPROVEMENT, MARGIN, MIN_REPEATS, NO_BASELINE,
    REGRESSION, SAME, UNDECIDED, Decision, Draft, check_bounds, decide, needed_text)


def _settings_diff(b: Point, c: Point) -> dict[str, tuple[Any, Any]]:
    out = {}
    for name in SETTINGS:
        bv, cv = b.settings.get(name, set()), c.settings.get(name, set())
        if bv != cv:
            out[name] = (_one(bv), _one(cv))
    return out


def _one(values: set) -> Any:
    return next(iter(values)) if len(values) == 1 else sorted(map(str, values))


def compare_points(b: Point, c: Point, base_run: Run, cand_run: Run) -> Pair:
    """The pair before decide(): status and change are filled in by match()."""
    return Pair(b.key, tuple(b.samples_bps), tuple(c.samples_bps), math.nan, None, None,
                UNDECIDED, base_failed=b.failed, cand_failed=c.failed,
                base_verdict=verdict(b, base_run).kind,
                cand_verdict=verdict(c, cand_run).kind, settings=_settings_diff(b, c))


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
    if not d.is_dir():
        raise InputError(f"{role} run folder does not exist" if not d.exists() else
                         f"{role} run is not a folder", file=str(d))
    run = load_run(d)
    if not run.points:
        raise InputError(f"{role} run has no transfers", file=str(d))
    return run


def _out_dir(out_dir: Path | None, cand: Run) -> Path:
    out = Path(out_dir) if out_dir is not None else cand.dir / "compare"
    for parent in (out, *out.parents):
        if parent.exists():
            if not parent.is_dir():
                raise InputError("output folder is a file" if parent == out else
                                 f"output folder's parent {parent} is a file",
                                 file=str(out), key="--out")
            break
    return out


def match(base: Run, cand: Run, threshold: float = FLOOR, margin: float = MARGIN
          ) -> tuple[list[Pair], list[Key], list[Key]]:
    bmap = {p.key: p for p in base.points}
    cmap = {p.key: p for p in cand.points}
    common = sorted(set(bmap) & set(cmap), key=key_order)
    raw = [compare_points(bmap[k], cmap[k], base, cand) for k in common]
    decisions = decide([Draft(p.base, p.cand, p.base_failed, p.cand_failed) for p in raw],
                       threshold, margin)
    pairs = [replace(p, status=d.status, change=d.change, low=d.low, high=d.high, p=d.p,
                     p_holm=d.p_holm, needed=d.needed, why=d.why)
             for p, d in zip(raw, decisions)]
    return (pairs, sorted(set(bmap) - set(cmap), key=key_order),
            sorted(set(cmap) - set(bmap), key=key_order))


def paired(run: Run, client: str, label: str) -> Run:
    """The run's points of one client configuration, renamed `label` (--pair)."""
    pts = [replace(p, key=replace(p.key, client=label)) for p in run.points
           if p.key.client == client]
    return replace(run, points=pts)


def compare(baseline_dir: Path, candidate_dir: Path, out_dir: Path | None = None, *,
            threshold: float = FLOOR, margin: float = MARGIN, strict: bool = False,
            expect: Sequence[str] = (), pair: tuple[str, str] | None = None
            ) -> CompareResult:
    """Compare two runs, write compare.{md,csv,html} (+ charts) into out_dir
    (default: CANDIDATE/compare), return the result; .exit_code is 0 or 1. threshold is
    the magnitude floor; strict: an unexpected environment difference is an InputError;
    pair=(B, C): the baseline's client configuration B against the candidate's C (two
    releases measured in one run: pass the run twice)."""
    check_bounds(threshold, margin)
    base, cand = _load(baseline_dir, "baseline"), _load(candidate_dir, "candidate")
    if pair is not None:
        label = f"{pair[0]} vs {pair[1]}"
        for run, client, role in ((base, pair[0], "baseline"), (cand, pair[1], "candidate")):
            if client not in {p.key.client for p in run.points}:
                raise InputError(f"no client configuration {client!r} in the {role} run",
                                 file=str(run.dir), key="--pair", value=f"{pair[0]}={pair[1]}")
        base, cand = paired(base, pair[0], label), paired(cand, pair[1], label)
    meta = compare_meta.metadata_diffs(base, cand)
    bad = compare_meta.unexpected(meta, expect)
    if strict and bad:
        raise InputErrors([InputError(
            f"{d.name} differs from the baseline: {compare_meta.short(d.base)} -> "
            f"{compare_meta.short(d.cand)} (--expect {d.name} if intended)",
            file=str(candidate_dir), key="--strict") for d in bad])
    pairs, only_b, only_c = match(base, cand, threshold, margin)
    if not pairs:
        raise InputError("no measurement in common (matched on path, RTT, client, streams, "
                         "concurrency)", file=f"{baseline_dir} vs {candidate_dir}")
    env_lines, scen_diff = environment_diffs(base.env, cand.env)
    out = _out_dir(out_dir, cand)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the output folder ({e.strerror})", file=str(out),
                         key="--out") from e
    userpath.check_out_dir(out, key="--out")
    result = CompareResult(base.dir, cand.dir, out, threshold, pairs, only_b, only_c,
                           env_lines + settings_lines(pairs), scen_diff, margin=margin,
                           metadata=meta)
    result.files = compare_report.write_all(result, base, cand)
    return result
