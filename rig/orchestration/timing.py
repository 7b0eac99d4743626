"""Every executed action of the run plan timed into the `actions` table (issue 25):
its start, end and outcome, written as it ends. The teardown is one action too: the
unwinding of the stack the setup filled (`Teardown`), timed whatever ended the run.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

from rig.errors import RigError
from rig.orchestration.actions import Action
from rig.orchestration.faults import one_line
from rig.results.budget import budget, summary
from rig.results.store import ActionRow, Store


class ActionClock:
    """Numbers the actions as they run and stores one row each."""

    def __init__(self, store: Callable[[], Store], run_id: str,
                 say: Callable[[str], None]) -> None:
        self._store, self.run_id, self.say = store, run_id, say
        self.seq = 0
        self.done: list[str] = []        # ids, in the order executed
        self.rows: list[ActionRow] = []  # as stored (the console's time budget)
        self.lost = 0

    def record(self, a: Action, t0: float, m0: float, outcome: str,
               error: BaseException | None = None) -> None:
        row = ActionRow(run_id=self.run_id, seq=self.seq, action=a.id, kind=a.kind,
                        phase=a.phase, host=a.host, path=a.path, step=a.step,
                        group_index=a.group, started_at=t0,
                        ended_at=t0 + (time.monotonic() - m0),
                        duration_s=round(time.monotonic() - m0, 6), outcome=outcome,
                        error=None if error is None else one_line(
                            error if str(error) else type(error).__name__))
        self.seq += 1
        self.done.append(a.id)
        self.rows.append(row)
        try:
            self._store().add_action(row)
        except RigError as e:       # a full output folder: the run's own rows come first
            if not self.lost:
                self.say(f"  action timings not stored ({one_line(e)})")
            self.lost += 1

    @contextlib.contextmanager
    def timed(self, a: Action) -> Iterator[None]:
        t0, m0 = time.time(), time.monotonic()
        try:
            yield
        except BaseException as e:
            self.record(a, t0, m0, "failed", e)
            raise
        self.record(a, t0, m0, "ok")

    def skipped(self, a: Action) -> None:
        self.record(a, time.time(), time.monotonic(), "skipped")


class Teardown:
    """An ExitStack whose unwinding is the plan's teardown action, timed and stored
    whether the run ended well, failed or was interrupted."""

    def __init__(self, clock: ActionClock, action: Action) -> None:
        self.clock, self.action = clock, action
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> contextlib.ExitStack:
        return self.stack.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        t0, m0 = time.time(), time.monotonic()
        try:
            suppressed = self.stack.__exit__(*exc)
        except BaseException as e:
            self.clock.record(self.action, t0, m0, "failed", e)
            raise
        self.clock.record(self.action, t0, m0, "ok")
        b = budget(self.clock.rows)
        if b is not None:
            self.clock.say(f"time: {summary(b)}")
        return bool(suppressed)
