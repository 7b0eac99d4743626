"""Action timing (rig.orchestration.timing) into a real results.sqlite, and the time
budget (rig.results.budget) from its rows. Pure: no root, nothing outside tmp_path."""
import time

import pytest

from rig.orchestration.actions import Action
from rig.orchestration.timing import ActionClock, Teardown
from rig.results.budget import budget, budget_rows
from rig.results import check
from rig.results.store import ActionRow, Store


def test_each_action_is_stored_as_it_ends_and_the_teardown_even_on_error(tmp_path):
    st = Store.create(tmp_path / "results.sqlite", "r1")
    said: list[str] = []
    clock = ActionClock(lambda: st, "r1", said.append)
    undone: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        with Teardown(clock, Action("teardown", "teardown")) as build:
            build.callback(undone.append, "path")
            with clock.timed(Action("path:wan", "path", path="wan")):
                time.sleep(0.02)
            with clock.timed(Action("step:0:group:0", "group", step=0, group=0)):
                raise RuntimeError("boom\nsecond line")
    assert undone == ["path"]          # what was built was undone, after the failure
    rows = st.actions()
    assert [(r.seq, r.action, r.outcome) for r in rows] == [
        (0, "path:wan", "ok"), (1, "step:0:group:0", "failed"), (2, "teardown", "ok")]
    assert rows[0].duration_s >= 0.02 and rows[0].phase == "setup"
    assert "\n" not in rows[1].error and "boom" in rows[1].error
    assert rows[1].group_index == 0 and rows[1].phase == "transfers"
    st.finish()
    check.check(tmp_path / "results.sqlite")       # the format's reader accepts it
    b = budget(rows)
    assert b is not None and b.failed == 1 and b.actions == 3
    assert b.by_phase["setup"] == pytest.approx(rows[0].duration_s)
    assert [r[0] for r in budget_rows(b)][:5] == ["setup", "emulation", "checks",
                                                  "transfers", "teardown"]


def test_the_budget_sums_by_phase_against_the_wall():
    def row(kind, phase, t0, t1, outcome="ok"):
        return ActionRow(kind=kind, phase=phase, started_at=t0, ended_at=t1,
                         duration_s=t1 - t0, outcome=outcome)
    rows = [row("path", "setup", 0, 10), row("check", "checks", 10, 20),
            row("group", "transfers", 20, 70), row("check", "checks", 70, 75, "skipped"),
            row("teardown", "teardown", 80, 100)]
    b = budget(rows)
    assert b is not None
    assert (b.wall_s, b.by_phase["transfers"], b.between_s) == (100, 50, 5)
    assert b.outside_transfers == pytest.approx(0.5) and b.skipped == 1
    assert budget([]) is None
