"""The progress line's time left (rig.orchestration.reporter.Progress): groups of a kind
that takes longer (a 46 s storage replay beside 1 s downloads, seen in session 17: "~1m13s
left" with seven replays to go) count at their own kind's mean, not at the mean of all.
Pure, with a fake clock."""
from __future__ import annotations

from rig.orchestration.reporter import Progress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_time_left_counts_each_kind_at_its_own_mean():
    c = Clock()
    kinds = ["get"] * 10 + ["replay"] * 8
    p = Progress(len(kinds), clock=c, kinds=kinds)
    for _ in range(10):
        c.t += 1.0
        p.advance("get")
    c.t += 46.0
    line = p.advance("replay")
    # seven replays left at 46 s each: 5m22s; the mean of all groups would say ~35 s
    assert line == "11/18, ~5m22s left", line


def test_an_unseen_kind_counts_at_the_mean_of_all_and_without_kinds_as_before():
    c = Clock()
    p = Progress(4, clock=c, kinds=["a", "a", "b", "b"])
    c.t += 2.0
    assert p.advance("a") == "1/4, ~6s left"      # a 2 s; b unseen at the mean, 2 s
    c.t += 10.0
    assert p.advance("b") == "2/4, ~12s left"     # one a (2 s) and one b (10 s) left
    q = Progress(3, clock=c)
    c.t += 3.0
    assert q.advance() == "1/3, ~6s left"
    c.t += 3.0
    q.advance()
    c.t += 3.0
    assert q.advance() == "3/3"
