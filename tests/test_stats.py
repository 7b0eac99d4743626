"""rig.report.stats against published values (Student's t tables, closed forms)."""
from __future__ import annotations

import math
import random

import pytest

from rig.report.stats import betainc, holm, t_cdf, t_ppf, welch_log

# Two-sided 95 % and 99 % critical values of Student's t (any statistics textbook table).
T_TABLE = [(1, 0.975, 12.706), (2, 0.975, 4.303), (3, 0.975, 3.182), (4, 0.975, 2.776),
           (5, 0.975, 2.571), (8, 0.975, 2.306), (10, 0.975, 2.228), (20, 0.975, 2.086),
           (30, 0.975, 2.042), (120, 0.975, 1.980), (3, 0.995, 5.841), (10, 0.995, 3.169),
           (5, 0.95, 2.015), (2, 0.9, 1.886)]


@pytest.mark.parametrize("df,q,t", T_TABLE)
def test_t_quantile_and_cdf_match_the_table(df: float, q: float, t: float) -> None:
    assert t_ppf(q, df) == pytest.approx(t, abs=6e-4)
    assert t_cdf(t, df) == pytest.approx(q, abs=1e-4)     # the table rounds t to 3 places
    assert t_ppf(1 - q, df) == pytest.approx(-t, abs=6e-4)


def test_closed_forms() -> None:
    for t in (-3.0, -0.4, 0.0, 0.7, 2.5, 40.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)   # 1 - sum binomials
    assert betainc(1, 1, 0.3) == pytest.approx(0.3, abs=1e-14)
    assert t_ppf(0.975, 1e6) == pytest.approx(1.959966, abs=1e-5)  # normal limit


def test_welch_interval_covers_at_three_repeats() -> None:
    """Coverage of the 95 % interval with 3 lognormal repeats a side, no true change."""
    rng = random.Random(3)
    n, covered = 2000, 0
    for _ in range(n):
        w = welch_log([math.exp(rng.gauss(0, 0.1)) for _ in range(3)],
                      [math.exp(rng.gauss(0, 0.1)) for _ in range(3)])
        covered += w.low <= 0 <= w.high
    assert 0.94 <= covered / n <= 0.985, f"coverage {covered / n:.3f} of {n}"


def test_holm_matches_hand_computation() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
