"""Change points in a series of runs: binary segmentation with a permutation test.

A history is a grid of measurement points (path, RTT, client, streams, concurrency), each
measured in every run; runs are given in order (one per release, one per night) and each
contributes the log throughput of its successful repeats. Within a segment of runs, every
split *between two runs* is scored by the sum over the grid's points of the squared
two-sample t of log throughput (pooled variance) -- a release changes many points at the
same run, and their evidence adds up. The largest score is tested against the largest
scores of R permutations that shuffle each point's samples within the segment (runs keep
their sizes): the permutation p-value accounts for having picked the best of all splits
(no closed form does), and assumes nothing of the noise's shape. When the split is
significant, both sides are searched again (binary segmentation, the hierarchy of Otava
and e.divisive). Then each split is judged against its adjacent segments (between the
neighbouring splits): a point changed there when its t on log throughput (noise shrunk
toward the grid's, as in `rig compare`) is significant after Holm over the points and
its geometric mean moved by the magnitude floor or more; a split where no point did is
dropped.

Why not E-divisive means (Otava): E-divisive scores a change of the whole distribution by
an energy distance between single observations and wants some 30 of them per segment
(e.divisive's min.size); a release history has 3-30 runs of 3-5 repeats, the change that
matters is a shift of the level, and a split can only fall between runs. A mean-shift
score at run boundaries, summed over the grid, keeps power at 5 runs of 3 repeats, where a
permutation test of one point alone cannot even reach Holm's level (C(15, 3) = 455
arrangements). Like E-divisive's, the permutation test assumes a segment's samples
exchangeable under "no change": run-to-run drift beyond the repeats' spread would be found
as a change, which is why a change must also clear the magnitude floor.

Each segment is tested at 5 % (the hierarchical procedure of e.divisive); the points
named at a split are Holm-adjusted over the grid. Seeded: the same runs, the same answer.

Pure Python; imports only rig.report.stats.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Sequence

from rig.report.stats import holm, moderated_log, noise_prior, pooled_log_variance

ALPHA = 0.05
FLOOR = 0.05


@dataclass(frozen=True)
class Change:
    at: int                  # index of the first run after the change
    change: float            # geometric mean after / before - 1
    low: float | None        # 95 % interval of the change (the two sides of the split)
    high: float | None
    p: float                 # this point's p-value at the split, Holm-adjusted over points


def _tsq(xs: list[float], bounds: list[int]) -> list[float]:
    """Squared two-sample t (pooled variance) of xs split at each sample index in bounds;
    0 where a side is empty or the split cannot be scored."""
    n = len(xs)
    if n < 3:
        return [0.0] * len(bounds)
    total, total2 = sum(xs), sum(x * x for x in xs)
    out = []
    csum = csum2 = 0.0
    i = 0
    for b in bounds:
        while i < b:
            csum += xs[i]
            csum2 += xs[i] * xs[i]
            i += 1
        nl, nr = b, n - b
        if nl == 0 or nr == 0:
            out.append(0.0)
            continue
        ml, mr = csum / nl, (total - csum) / nr
        var = max(0.0, (csum2 - nl * ml * ml) + (total2 - csum2 - nr * mr * mr)) / (n - 2)
        diff = ml - mr
        if var <= 1e-24:
            out.append(1e12 if abs(diff) > 1e-9 else 0.0)
        else:
            out.append(diff * diff / (var * (1 / nl + 1 / nr)))
    return out


@dataclass
class _Segment:
    xs: list[list[float]]            # per point: the samples of the segment's runs
    bounds: list[list[int]]          # per point: sample index of each run boundary


def _segment(logs: list[list[list[float]]], a: int, b: int) -> _Segment:
    xs, bounds = [], []
    for point in logs:
        flat, bd, acc = [], [], 0
        for r in range(a, b):
            if r > a:
                bd.append(acc)
            flat.extend(point[r])
            acc += len(point[r])
        xs.append(flat)
        bounds.append(bd)
    return _Segment(xs, bounds)


def _grid_score(xs: list[list[float]], bounds: list[list[int]]) -> tuple[float, int]:
    """(largest summed t^2 over the run boundaries, which boundary)."""
    total = [0.0] * len(bounds[0])
    for x, bd in zip(xs, bounds):
        for j, v in enumerate(_tsq(x, bd)):
            total[j] += v
    j = max(range(len(total)), key=lambda i: total[i])
    return total[j], j


def split_test(logs: list[list[list[float]]], a: int, b: int, permutations: int,
               rng: random.Random, alpha: float = ALPHA) -> tuple[int, float] | None:
    """Best split of runs [a, b) and its permutation p-value: (first run after it, p);
    None when there is nothing to split. Stops early once more than alpha x (R + 1)
    permutations scored as high (the split cannot be significant: p is then an
    estimate above alpha)."""
    if b - a < 2:
        return None
    seg = _segment(logs, a, b)
    observed, j = _grid_score(seg.xs, seg.bounds)
    if observed <= 0:
        return a + j + 1, 1.0
    pools = [list(x) for x in seg.xs]
    hits, done = 0, 0
    give_up = alpha * (permutations + 1)        # past this many hits, p > alpha for sure
    for done in range(1, permutations + 1):
        for pool in pools:
            rng.shuffle(pool)
        if _grid_score(pools, seg.bounds)[0] >= observed * (1 - 1e-12):
            hits += 1
            if hits > give_up:                  # not significant: stop early
                return a + j + 1, (hits + 1) / (done + 1)
    return a + j + 1, (hits + 1) / (permutations + 1)


def _sides(pt: list[list[float]], a: int, at: int, b: int) -> tuple[list[float], list[float]]:
    return ([math.exp(x) for r in pt[a:at] for x in r],
            [math.exp(x) for r in pt[at:b] for x in r])


def _changes(logs: list[list[list[float]]], a: int, at: int, b: int
             ) -> list[tuple[float, float | None, float | None, float | None]]:
    """Per point: (change of the geometric mean, 95 % interval, p) across the split, by
    the t on log throughput whose noise is shrunk toward the grid's (as `rig compare`)."""
    sides = [_sides(pt, a, at, b) for pt in logs]
    ok = [i for i, (x, y) in enumerate(sides) if len(x) >= 2 and len(y) >= 2]
    pooled = [pooled_log_variance(*sides[i]) for i in ok]
    prior = noise_prior([v for v, _ in pooled], [d for _, d in pooled])
    out: list[tuple[float, float | None, float | None, float | None]] = []
    for i, (x, y) in enumerate(sides):
        if i in ok:
            w = moderated_log(x, y, prior)
            out.append((w.change, w.low, w.high, w.p))
        elif x and y:
            out.append((math.expm1(statistics.fmean(map(math.log, y))
                                   - statistics.fmean(map(math.log, x))), None, None, None))
        else:
            out.append((math.nan, None, None, None))
    return out


@dataclass(frozen=True)
class Split:
    """A significant split of the grid: the run it starts at, its p-value, and every
    point's change there (Change or None where that point did not change)."""
    at: int
    p: float
    changes: list[Change | None]


def detect(series: Sequence[Sequence[Sequence[float]]], *, floor: float = FLOOR,
           alpha: float = ALPHA, permutations: int = 999, seed: int = 1) -> list[Split]:
    """Change points of a grid: series[point][run] = positive throughputs of that run's
    successful repeats (empty: none); every point has the same runs, in order."""
    rng = random.Random(seed)
    logs = [[[math.log(v) for v in run if v > 0] for run in s] for s in series]
    runs = len(logs[0]) if logs else 0
    cuts: list[tuple[int, float]] = []
    todo = [(0, runs)]
    while todo:                          # segmentation: where the grid changed
        a, b = todo.pop()
        res = split_test(logs, a, b, permutations, rng, alpha)
        if res is None or res[1] > alpha:
            continue
        cuts.append(res)
        todo += [(a, res[0]), (res[0], b)]
    cuts.sort()
    bounds = [0] + [at for at, _ in cuts] + [runs]
    found: list[Split] = []
    for j, (at, p) in enumerate(cuts):   # each change against its adjacent segments
        a, b = bounds[j], bounds[j + 2]
        stats = _changes(logs, a, at, b)
        tested = [i for i, st in enumerate(stats) if st[3] is not None]
        adjusted = dict(zip(tested, holm([stats[i][3] for i in tested])))  # type: ignore[misc]
        changes: list[Change | None] = []
        for i, (change, low, high, _) in enumerate(stats):
            ok = i in adjusted and adjusted[i] <= alpha and abs(change) >= floor
            changes.append(Change(at, change, low, high, adjusted[i]) if ok else None)
        if any(changes):
            found.append(Split(at, p, changes))
    return found
