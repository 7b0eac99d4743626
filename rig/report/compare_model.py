"""What `rig compare` finds (rig.report.compare computes it; compare_report, compare_charts
and compare_timeline write it): one Pair per matched measurement and the result. Pure
data on the decisions of rig.report.compare_decide.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rig.errors import ExitStatus
from rig.report import compare_meta
from rig.report.compare_decide import (FAILED, IMPROVEMENT, MARGIN, REGRESSION, SAME,
                                       UNDECIDED, needed_text, undecided_line)
from rig.report.model import Key

TIMELINE_PREFIX = "compare_timeline_"


@dataclass(frozen=True)
class Pair:
    """One matched measurement: baseline vs candidate."""
    key: Key
    base: tuple[float, ...]             # aggregate bits/s per successful repeat
    cand: tuple[float, ...]
    change: float                       # geometric mean change; nan without data
    low: float | None                   # 95 % Welch interval of `change`, None: untested
    high: float | None
    status: str
    base_failed: int = 0
    cand_failed: int = 0
    base_verdict: str = ""
    cand_verdict: str = ""
    settings: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    p: float | None = None              # two-sided Welch p-value, None: untested
    p_holm: float | None = None         # Holm-adjusted over every tested pair
    needed: int | None = None           # undecided: repeats a side that would decide it
    why: str = ""                       # undecided: why, in one phrase

    @property
    def regressed(self) -> bool:
        return self.status in (REGRESSION, FAILED)

    def needed_text(self) -> str:
        return needed_text(self.needed, self.status, self.why)

    def interval_text(self) -> str:
        if self.low is None or self.high is None:
            return "n/a (< 3 repeats)" if self.base and self.cand else "n/a"
        return f"[{self.low:+.1%}, {self.high:+.1%}]"


@dataclass
class CompareResult:
    baseline: Path
    candidate: Path
    out_dir: Path
    threshold: float                    # magnitude floor
    pairs: list[Pair]
    only_baseline: list[Key]
    only_candidate: list[Key]
    env_diffs: list[str]
    scenario_diff: list[str]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    margin: float = MARGIN
    metadata: list[compare_meta.MetaDiff] = field(default_factory=list)

    @property
    def regressions(self) -> list[Pair]:
        return [p for p in self.pairs if p.regressed]

    @property
    def undecided(self) -> list[Pair]:
        return [p for p in self.pairs if p.status == UNDECIDED]

    @property
    def exit_code(self) -> int:
        return int(ExitStatus.REGRESSION if self.regressions else ExitStatus.OK)

    def summary(self) -> str:
        return summary_line(self.pairs, self.threshold)

    def undecided_line(self) -> str | None:
        """How many repeats a side would decide the undecided points (None: none)."""
        return undecided_line([(p.status, p.change, p.needed,
                                min(len(p.base), len(p.cand)), p.why) for p in self.pairs],
                              self.threshold)


def summary_line(pairs: Sequence[Pair], threshold: float) -> str:
    n = len(pairs)
    count = {s: sum(1 for p in pairs if p.status == s) for s in
             (REGRESSION, FAILED, IMPROVEMENT, SAME, UNDECIDED)}
    r = count[REGRESSION] + count[FAILED]
    if r:
        head = (f"REGRESSION: {r} of {n} matched measurements dropped by {threshold:.0%} "
                f"or more beyond the noise")
        if count[FAILED]:
            head += f" ({count[FAILED]} of them failed in every candidate repeat)"
    elif count[UNDECIDED] and not count[SAME] + count[IMPROVEMENT]:
        head = (f"UNDECIDED (exit 0): no regression shown, but none of {n} matched "
                f"measurements could be decided")
    else:
        head = (f"no regression: {n} matched measurements, none dropped by {threshold:.0%} "
                f"or more beyond the noise")
    tail = (f"{count[IMPROVEMENT]} improved, {count[SAME]} same, "
            f"{count[UNDECIDED]} undecided")
    return f"{head} ({tail})"
