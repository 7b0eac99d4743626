"""What `rig history` finds (rig.report.history computes it, rig.report.history_report
and history_chart write it): one Series per measurement point, one Level per run, and
the result with its change points. Pure data; imports only the change-point types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rig.errors import ExitStatus
from rig.report import changepoint
from rig.report.model import Key, Run

MAX_PANELS = 24


@dataclass(frozen=True)
class Level:
    """One point in one run."""
    mean: float | None           # geometric mean bits/s; None: no successful repeat
    low: float | None            # 95 % interval of the geometric mean (t on log)
    high: float | None
    n: int
    failed: int


@dataclass
class Series:
    key: Key
    levels: list[Level]
    samples: list[list[float]]
    changes: list[changepoint.Change] = field(default_factory=list)

    @property
    def dropped(self) -> list[changepoint.Change]:
        return [c for c in self.changes if c.change < 0]


@dataclass
class HistoryResult:
    runs: list[Run]
    out_dir: Path
    floor: float
    series: list[Series]
    splits: list[changepoint.Split]
    last_only: bool = False
    only_some: list[Key] = field(default_factory=list)    # points missing from some run
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def counted(self) -> list[tuple[Series, changepoint.Change]]:
        last = len(self.runs) - 1
        return [(s, c) for s in self.series for c in s.dropped
                if not self.last_only or c.at == last]

    @property
    def exit_code(self) -> int:
        return int(ExitStatus.REGRESSION if self.counted() else ExitStatus.OK)

    def run_label(self, i: int) -> str:
        return self.runs[i].dir.name

    def summary(self) -> str:
        n, r = len(self.series), len(self.runs)
        drops = self.counted()
        if drops:
            ats = sorted({c.at for _, c in drops})
            where = ", ".join(f"run {i + 1} ({self.run_label(i)})" for i in ats)
            return (f"REGRESSION: {len({id(s) for s, _ in drops})} of {n} points dropped "
                    f"by {self.floor:.0%} or more at {where} ({r} runs)")
        ups = sum(1 for s in self.series for c in s.changes if c.change > 0)
        scope = " at the last run" if self.last_only else ""
        return (f"no regression: {n} points over {r} runs, no drop of {self.floor:.0%} or "
                f"more{scope} ({len(self.splits)} change point(s), {ups} rise(s))")


def panel_order(result: HistoryResult) -> list[Series]:
    """Points with a change first, then the rest, at most MAX_PANELS."""
    ordered = sorted(result.series, key=lambda s: not s.changes)
    return ordered[:MAX_PANELS]
