"""`rig compare`'s word on the points it cannot decide (issue 41 item 2): how many repeats
a side would decide them if change and noise stay as measured, and that one repeat gives
no spread to judge by. Pure: fake repeats, rig.report.compare_decide alone."""
from __future__ import annotations

import math
import statistics

import pytest

from rig.report.compare_decide import (ALPHA, MAX_NEEDED, Draft, decide, repeats_needed,
                                       undecided_line)


def _sample(level: float, n: int, sigma: float) -> list[float]:
    """n repeats whose log has mean log(level) and sample deviation sigma exactly
    (half above, half below; one at the mean when n is odd)."""
    half = n // 2
    a = sigma * math.sqrt((n - 1) / (2 * half))
    logs = [a] * half + [-a] * half + [0.0] * (n - 2 * half)
    return [level * math.exp(x) for x in logs]


def _line(drafts: list[Draft]) -> str | None:
    ds = decide(drafts)
    return undecided_line([(d.status, d.change, d.needed, min(len(x.base), len(x.cand)), d.why)
                           for d, x in zip(ds, drafts)])


def test_a_drop_inside_the_noise_says_the_repeats_that_would_decide_it():
    draft = Draft(_sample(1e9, 3, 0.10), _sample(0.9e9, 3, 0.10))
    [d] = decide([draft])
    assert d.status == "undecided" and d.low is not None and d.low < 0 < d.high
    # the oracle: one point, no grid prior (Welch), Bonferroni over one test, the normal
    # approximation: n = 2 (z sigma / |log change|)^2
    z = statistics.NormalDist().inv_cdf(1 - ALPHA / 2)
    want = math.ceil(2 * (z * 0.10 / abs(math.log(0.9))) ** 2)
    assert d.needed == want == 7
    assert _line([draft]) == (
        "1 undecided: about 7 repeats a side would decide it (as a change) if change and "
        "noise stay as measured (sweep.repeats: 7 in both runs)")


@pytest.mark.parametrize("level", [0.9, 1.0, 1.02])
def test_the_number_said_is_one_that_decides(level):
    """Measured again with that many repeats (and a quarter more, for the normal
    approximation against the t), at the same change and spread, the point is decided;
    with a third of them it is not."""
    [d] = decide([Draft(_sample(1e9, 3, 0.10), _sample(level * 1e9, 3, 0.10))])
    n = d.needed
    assert n is not None and 3 < n <= MAX_NEEDED
    more = math.ceil(n * 1.25)
    [again] = decide([Draft(_sample(1e9, more, 0.10), _sample(level * 1e9, more, 0.10))])
    assert again.status == ("regressed" if level < 0.95 else "same")
    [fewer] = decide([Draft(_sample(1e9, max(3, n // 3), 0.10),
                            _sample(level * 1e9, max(3, n // 3), 0.10))])
    assert fewer.status == "undecided"


def test_equal_means_are_decided_as_the_same_by_enough_repeats():
    """Equal means are not undecidable here: compare's equivalence test (the 90 %
    interval inside +-margin) calls them the same once the interval is narrow enough."""
    draft = Draft(_sample(1e9, 3, 0.10), _sample(1e9, 3, 0.10))
    [d] = decide([draft])
    assert d.status == "undecided" and d.change == pytest.approx(0.0, abs=1e-12)
    z = statistics.NormalDist().inv_cdf(0.95)
    assert d.needed == math.ceil(2 * (z * 0.10 / math.log1p(0.05)) ** 2) == 23
    assert _line([draft]) == (
        "1 undecided: about 23 repeats a side would decide it (as the same) if change and "
        "noise stay as measured (sweep.repeats: 23 in both runs)")


def test_one_repeat_gives_no_spread_and_says_three_are_needed():
    drafts = [Draft([1e9], [0.7e9])] + [Draft([1e9 + i], [1e9]) for i in range(15)]
    ds = decide(drafts)
    assert all(d.status == "undecided" and d.needed is None for d in ds)
    assert _line(drafts) == (
        "16 undecided: one repeat gives no spread to judge by: at least 3 successful repeats "
        "a side (sweep.repeats: 3) before anything can be decided")


def test_two_repeats_a_side_are_judged_by_their_own_spread():
    draft = Draft(_sample(1e9, 2, 0.10), _sample(0.9e9, 2, 0.10))
    [d] = decide([draft])
    z = statistics.NormalDist().inv_cdf(1 - ALPHA / 2)
    assert d.status == "undecided" and d.low is None
    assert d.needed == max(3, math.ceil(2 * (z * 0.10 / abs(math.log(0.9))) ** 2)) == 7


def test_points_with_one_repeat_beside_tested_ones_take_the_grids_noise():
    tested = [Draft(_sample(1e9, 3, 0.05), _sample(0.97e9, 3, 0.05)) for _ in range(4)]
    single = Draft([1e9], [0.8e9])
    ds = decide(tested + [single])
    assert ds[-1].status == "undecided" and ds[-1].needed is not None
    assert "one repeat" not in (_line(tested + [single]) or "")


def test_a_mixed_grid_says_each_part():
    drafts = ([Draft(_sample(1e9, 3, 0.10), _sample(0.9e9, 3, 0.10)) for _ in range(3)]
              + [Draft(_sample(1e9, 3, 0.10), _sample(1e9, 3, 0.10))]
              + [Draft([1e9, 1e9], [], base_failed=2)])
    line = _line(drafts)
    assert line is not None and line.startswith("5 undecided: about ")
    assert "would decide 4 of them (1 as the same, 3 as a change" in line
    assert line.endswith("; 1 that more repeats alone will not decide (the baseline failed "
                         "as often as it worked)")


def test_noise_far_beyond_the_change_is_said_as_more_than_the_cap():
    draft = Draft(_sample(1e9, 3, 0.60), _sample(0.94e9, 3, 0.60))
    [d] = decide([draft])
    assert d.status == "undecided" and d.needed is not None and d.needed > MAX_NEEDED
    assert _line([draft]) == ("1 undecided: 1 would need more than 100 (noise large against "
                              "the change)")


def test_nothing_undecided_says_nothing():
    draft = Draft(_sample(1e9, 5, 0.01), _sample(0.8e9, 5, 0.01))
    assert decide([draft])[0].status == "regressed"
    assert _line([draft]) is None
    assert repeats_needed(-0.2, 0.01, floor=0.05, margin=0.05, tests=1) == 3
