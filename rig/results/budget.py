"""Where a run's wall time went (issue 25): the `actions` table summed by phase --
setup, emulation, checks, transfers, teardown -- and the share outside transfers.
Pure: works on the stored rows (rig.results.store.ActionRow); the report's
"Time budget" and the run's last console line.
"""
from __future__ import annotations

from dataclasses import dataclass

from rig.results.store import ActionRow

PHASE_ORDER = ("setup", "emulation", "checks", "transfers", "teardown")


@dataclass(frozen=True)
class Budget:
    wall_s: float                  # first action's start to the last one's end
    by_phase: dict[str, float]     # seconds per phase, PHASE_ORDER
    by_kind: dict[str, float]      # seconds per action kind
    between_s: float               # wall time in no action (the runner's own code)
    actions: int
    failed: int
    skipped: int

    @property
    def outside_transfers(self) -> float:
        """Share of the wall time not spent in transfer groups, 0..1."""
        return 1.0 - self.by_phase.get("transfers", 0.0) / self.wall_s if self.wall_s else 0.0


def budget(rows: list[ActionRow]) -> Budget | None:
    """None for a run stored before the actions table (or with no action)."""
    if not rows:
        return None
    wall = max(r.ended_at for r in rows) - min(r.started_at for r in rows)
    phase = {p: 0.0 for p in PHASE_ORDER}
    kind: dict[str, float] = {}
    for r in rows:
        phase[r.phase] = phase.get(r.phase, 0.0) + r.duration_s
        kind[r.kind] = kind.get(r.kind, 0.0) + r.duration_s
    return Budget(wall, phase, kind, max(0.0, wall - sum(phase.values())), len(rows),
                  sum(r.outcome == "failed" for r in rows),
                  sum(r.outcome == "skipped" for r in rows))


def budget_rows(b: Budget) -> list[tuple[str, str, str]]:
    """(phase, seconds, % of wall) lines of the report's table."""
    def pct(s: float) -> str:
        return f"{100 * s / b.wall_s:.1f} %" if b.wall_s else "n/a"
    out = [(p, f"{s:.2f}", pct(s)) for p, s in b.by_phase.items()]
    out.append(("between actions", f"{b.between_s:.2f}", pct(b.between_s)))
    out.append(("wall (first action to teardown end)", f"{b.wall_s:.2f}", "100 %"))
    return out


def summary(b: Budget) -> str:
    phases = ", ".join(f"{p} {s:.1f} s" for p, s in b.by_phase.items())
    return (f"{b.wall_s:.1f} s wall, {100 * b.outside_transfers:.1f} % outside transfers "
            f"({phases}); {b.actions} actions, {b.failed} failed, {b.skipped} skipped")
