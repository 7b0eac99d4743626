"""`rig history RUN...`: a series of stored runs (one per release, one per night), in the
order given, read from their results.sqlite alone.

Per measurement point (matched as `rig compare` matches: path, RTT, client, streams,
concurrency) the geometric mean throughput of each run with its 95 % interval (t on log
throughput over the run's repeats), and change points found by rig.report.changepoint
(binary segmentation over the runs, permutation test summed over the grid, points named
by the moderated t with Holm and the magnitude floor).

Exit code: 1 when a point dropped at a change point (by the floor or more), else 0;
--last: only a change at the last run counts (a nightly job: did tonight regress?).
Bad input, one line each: fewer than 2 runs, runs of different scenarios, no point in
common.

Pure Python but the chart (rig.report.history_report draws it); must not import rig.realization, rig.process,
rig.services or rig.orchestration.
"""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Sequence

from rig.errors import InputError
from rig.report import changepoint
from rig.report import history_report
from rig.report.history_model import HistoryResult, Level, Series  # noqa: F401  (re-exported)
from rig.report.model import Key, Run, key_order, load_run
from rig.report.stats import t_ppf

MIN_RUNS = 2


def scenario_name(run: Run) -> str | None:
    text = run.env.get("scenario_text")
    if isinstance(text, str):
        m = re.search(r"^name:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(#.*)?$", text, re.M)
        if m:
            return m.group(1).strip()
    return None


def level(samples: Sequence[float], failed: int) -> Level:
    if not samples:
        return Level(None, None, None, 0, failed)
    logs = [math.log(v) for v in samples]
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return Level(math.exp(m), None, None, 1, failed)
    half = t_ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Level(math.exp(m), math.exp(m - half), math.exp(m + half), len(logs), failed)


def _load(dirs: Sequence[Path]) -> list[Run]:
    if len(dirs) < MIN_RUNS:
        raise InputError(f"a history needs at least {MIN_RUNS} runs, got {len(dirs)}",
                         file=str(dirs[0]) if dirs else None, key="RUN")
    runs = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise InputError("run folder does not exist" if not d.exists() else
                             "run is not a folder", file=str(d))
        run = load_run(d)
        if not run.points:
            raise InputError("run has no transfers", file=str(d))
        runs.append(run)
    names = [scenario_name(r) for r in runs]
    first = names[0]
    for run, name in zip(runs[1:], names[1:]):
        if name != first:
            raise InputError(f"scenario {name!r} differs from the first run's {first!r} "
                             f"({runs[0].dir}): a history compares runs of one scenario",
                             file=str(run.dir))
    return runs


def build(runs: list[Run]) -> tuple[list[Series], list[Key]]:
    maps = [{p.key: p for p in r.points} for r in runs]
    every = set(maps[0]).intersection(*maps[1:])
    some = set().union(*maps) - every
    series = []
    for k in sorted(every, key=key_order):
        pts = [m[k] for m in maps]
        series.append(Series(k, [level(p.samples_bps, p.failed) for p in pts],
                             [list(p.samples_bps) for p in pts]))
    return series, sorted(some, key=key_order)


def history(dirs: Sequence[Path], out_dir: Path | None = None, *,
            floor: float = changepoint.FLOOR, last_only: bool = False,
            permutations: int = 999) -> HistoryResult:
    if not (isinstance(floor, (int, float)) and 0 < floor < 1):
        raise InputError("must be a fraction between 0 and 1", key="--floor", value=floor)
    runs = _load(dirs)
    series, some = build(runs)
    if not series:
        raise InputError("no measurement in every run (matched on path, RTT, client, "
                         "streams, concurrency)", file=str(runs[-1].dir))
    splits = changepoint.detect([s.samples for s in series], floor=floor,
                                permutations=permutations)
    for sp in splits:
        for s, c in zip(series, sp.changes):
            if c is not None:
                s.changes.append(c)
    out = Path(out_dir) if out_dir is not None else runs[-1].dir / "history"
    if out.exists() and not out.is_dir():
        raise InputError("output folder is a file", file=str(out), key="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the output folder ({e.strerror})", file=str(out),
                         key="--out") from e
    result = HistoryResult(runs, out, floor, series, splits, last_only, some)
    result.files = history_report.write_all(result)
    return result
