"""`rig compare` must not cry wolf: simulated comparisons whose truth is known.

Each comparison has 12 matched points with lognormal run-to-run noise (sigma of log
throughput = the noise level); it goes through rig.report.compare.decide(), the same code
`rig compare` runs. Pure, seeded, a few seconds.
"""
from __future__ import annotations

import math
import random

import pytest

from rig.report.compare import FAILED, REGRESSION, Draft, decide

POINTS = 12
COMPARISONS = 400
THRESHOLD = 0.10


def _samples(rng: random.Random, level: float, n: int, sigma: float) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def _simulate(seed: int, sigma: float, repeats: int, factors: list[float]
              ) -> tuple[float, float]:
    """(share of comparisons that exit 1, share of truly dropped points flagged)."""
    rng = random.Random(seed)
    failing, found, dropped = 0, 0, 0
    for _ in range(COMPARISONS):
        levels = [rng.uniform(0.2e9, 5e9) for _ in factors]
        drafts = [Draft(_samples(rng, lv, repeats, sigma), _samples(rng, lv * f, repeats,
                                                                    sigma))
                  for lv, f in zip(levels, factors)]
        statuses = [d.status for d in decide(drafts, THRESHOLD)]
        failing += any(s in (REGRESSION, FAILED) for s in statuses)
        for f, s in zip(factors, statuses):
            if f < 1 - THRESHOLD:
                dropped += 1
                found += s == REGRESSION
    return failing / COMPARISONS, (found / dropped if dropped else math.nan)


@pytest.mark.parametrize("sigma", [0.05, 0.10, 0.15])
def test_identical_setups_rarely_fail(sigma: float) -> None:
    false_alarms, _ = _simulate(12, sigma, 3, [1.0] * POINTS)
    assert false_alarms < 0.05, (f"noise {sigma:.0%}, 3 repeats, {POINTS} points: "
                                 f"{false_alarms:.1%} of {COMPARISONS} comparisons exit 1")


def test_a_twenty_percent_drop_is_found() -> None:
    """A setup-wide 20 % drop (every point), 10 % noise, 5 repeats: the comparison fails."""
    caught, per_point = _simulate(20, 0.10, 5, [0.8] * POINTS)
    assert caught > 0.90, (f"20 % drop at 10 % noise, 5 repeats: exit 1 in {caught:.1%} "
                           f"of comparisons ({per_point:.1%} of dropped points flagged)")


def test_a_drop_at_some_points_is_usually_found() -> None:
    """Only 4 of 12 points drop by 20 %: Holm over 12 costs sensitivity per point; the
    comparison still fails most of the time, and nothing else is called a regression."""
    factors = [0.8] * 4 + [1.0] * (POINTS - 4)
    caught, per_point = _simulate(21, 0.10, 5, factors)
    assert caught > 0.75, (f"4 of 12 points dropped 20 %: exit 1 in {caught:.1%}, "
                           f"{per_point:.1%} of dropped points flagged")
    assert per_point > 0.30, f"{per_point:.1%} of dropped points flagged"
