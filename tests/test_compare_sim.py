"""`rig compare` and `rig history` on simulated runs whose truth is known, built from the
points of a real run.

tests/data/compare/quick-real.json holds the 16 points of a real `rig run
scenarios/quick.yaml` (4 clients x RTT 0/20/60/120 ms through the emulated path; extracted
by bench/real_points.py; where and when it ran is in its "source"). Each simulated run
keeps those 16 levels (geometric mean of the real repeats) and draws every repeat with
10 % lognormal noise (sigma of log throughput 0.10). Every comparison goes through
rig.report.compare.decide(), the code `rig compare` runs; pure, seeded, ~20 s.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rig.report.compare import FAILED, REGRESSION, Draft, decide

DATA = Path(__file__).parent / "data" / "compare" / "quick-real.json"
COMPARISONS = 400
SIGMA = 0.10


def _levels() -> list[float]:
    doc = json.loads(DATA.read_text())
    out = []
    for p in doc["points"]:
        s = p["samples_bps"]
        assert s, f"{DATA}: a point without a successful repeat: {p}"
        out.append(math.exp(sum(math.log(v) for v in s) / len(s)))
    return out


def _samples(rng: random.Random, level: float, n: int, sigma: float) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def _simulate(seed: int, repeats: int, factors: list[float], sigma: float = SIGMA
              ) -> tuple[float, list[float]]:
    """(share of comparisons with any regression, share of comparisons in which each
    point was called regressed)."""
    rng = random.Random(seed)
    levels = _levels()
    assert len(levels) == len(factors)
    failing, per_point = 0, [0] * len(levels)
    for _ in range(COMPARISONS):
        drafts = [Draft(_samples(rng, lv, repeats, sigma), _samples(rng, lv * f, repeats,
                                                                    sigma))
                  for lv, f in zip(levels, factors)]
        statuses = [d.status for d in decide(drafts)]
        failing += any(s in (REGRESSION, FAILED) for s in statuses)
        for i, s in enumerate(statuses):
            per_point[i] += s == REGRESSION
    return failing / COMPARISONS, [n / COMPARISONS for n in per_point]


def test_the_real_run_has_sixteen_points() -> None:
    assert len(_levels()) == 16 and min(_levels()) > 1e6


@pytest.mark.parametrize("sigma", [0.05, SIGMA, 0.15])
def test_a_against_a_rarely_fails_at_three_repeats(sigma: float) -> None:
    false_alarms, _ = _simulate(12, 3, [1.0] * 16, sigma)
    assert false_alarms <= 0.05, (f"noise {sigma:.0%}, 3 repeats, 16 points: "
                                  f"{false_alarms:.1%} of {COMPARISONS} comparisons exit 1")


def test_a_fifteen_percent_drop_everywhere_is_found() -> None:
    """Every point 15 % slower, 5 repeats: the comparison exits 1 in >= 90 %."""
    caught, per_point = _simulate(20, 5, [0.85] * 16)
    assert caught >= 0.90, (f"15 % drop at every point, 5 repeats: exit 1 in {caught:.1%} "
                            f"(per point: {min(per_point):.0%}-{max(per_point):.0%})")


def test_a_thirty_percent_drop_at_one_point_of_sixteen_is_found() -> None:
    """One point (curl at 60 ms) 30 % slower, 5 repeats: called regressed in >= 80 %, and
    the other 15 points stay clear."""
    points = json.loads(DATA.read_text())["points"]
    at = next(i for i, p in enumerate(points) if p["client"] == "curl"
              and p["rtt_ms"] == 60.0)
    factors = [0.7 if i == at else 1.0 for i in range(16)]
    _, per_point = _simulate(21, 5, factors)
    assert per_point[at] >= 0.80, f"the dropped point was found in {per_point[at]:.1%}"
    false_calls = sum(per_point) - per_point[at]      # per comparison, over 15 points
    assert false_calls <= 0.05, per_point
