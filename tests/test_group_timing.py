"""Issue 38: the engine's timing judged per transfer group, not per step. A step's
transfers phase mixes its groups: a heavy transfer's late releases made every light replay
of the step a rig artefact, and a late group hid in a step whose mean kept time. Rows
carry extra.engine_late (the group's reasons, [] when it kept time); the artefact rule
reads it where every row of a point's step has it, and the step's phase otherwise."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

from fixtures_results import make_run
from test_fidelity import _typed

from rig.description.linkstats import EmulStats
from rig.orchestration.samplers import EngineTiming
from rig.report import load_run, verdicts
from rig.report.artefacts import artefacts

# 0.4 ms each way at 60 ms: beyond the 0.6 ms RTT tolerance, far below 5 % of the RTT:
# the step is flagged "emulation late" but the verdict stays what it was (not emulator-
# limited), so only the artefact rule can set its points apart.
SLIGHTLY_LATE = _typed(0.4e-3, {"0..50us": 700, "0.5..1ms": 100, "1..2ms": 200},
                       tol_s=0.6e-3, over=300)
GROUP_LATE = ["emulation late (wire audit): mean lateness 0.900 ms per round trip"]


def _mark(db: Path, client: str, step: int, late, *, first_only: bool = False) -> None:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT rowid, extra FROM transfers WHERE client=? AND step=? "
                         "ORDER BY rowid", (client, step)).fetchall()
        for i, (rowid, extra) in enumerate(rows):
            if first_only and i:
                break
            d = json.loads(extra) if extra else {}
            d["engine_late"] = late
            c.execute("UPDATE transfers SET extra=? WHERE rowid=?", (json.dumps(d), rowid))


def _why(run, client: str, rtt: float) -> str | None:
    a = artefacts(run, verdicts(run))
    key = next(p.key for p in run.points if p.key.client == client and p.key.rtt_ms == rtt)
    return a.get(key)


def test_groups_decide_where_every_row_carries_their_timing(tmp_path: Path) -> None:
    d = make_run(tmp_path / "r", engine_by_step={2: SLIGHTLY_LATE}, flagged_steps=(3,))
    db = d / "results.sqlite"
    _mark(db, "curl", 2, [])                  # kept time in a late step: clean
    _mark(db, "xrdcp", 2, GROUP_LATE)         # its own groups late: an artefact
    _mark(db, "xrdcp-S4", 2, [], first_only=True)   # one row without: the step decides
    # davix-get at step 2 has none: the step decides
    _mark(db, "curl", 1, GROUP_LATE)          # late in a step whose mean kept time
    _mark(db, "davix-get", 1, [])
    _mark(db, "curl", 3, [])                  # kept time, but the path check was flagged
    run = load_run(d)
    assert _why(run, "curl", 60) is None
    assert "this point's own transfers (emulation late (wire audit)" in _why(run, "xrdcp", 60)
    assert "the engine was late during the transfers" in _why(run, "xrdcp-S4", 60)
    assert "the engine was late during the transfers" in _why(run, "davix-get", 60)
    assert "this point's own transfers" in _why(run, "curl", 20)
    assert _why(run, "davix-get", 20) is None
    assert _why(run, "xrdcp", 20) is None           # no timing, a step on time
    assert "path check flagged" in _why(run, "curl", 120)


def test_a_run_without_group_timing_is_judged_by_its_step(tmp_path: Path) -> None:
    run = load_run(make_run(tmp_path / "r", engine_by_step={2: SLIGHTLY_LATE}))
    for c in ("curl", "xrdcp", "davix-get"):
        assert "the engine was late during the transfers" in _why(run, c, 60)
        assert _why(run, c, 20) is None


def _stats(late_ms: float, hist: dict[str, int]) -> EmulStats:
    return EmulStats.from_json(_typed(late_ms / 1e3, hist, tol_s=0.3e-3))


class _Backend:
    def __init__(self, *snaps: EmulStats) -> None:
        self.snaps = list(snaps)

    def stats(self, site):
        return self.snaps.pop(0)


def _live(backend, applied: bool = True):
    return SimpleNamespace(site=object(), applied=applied, backend=backend)


def _row():
    return SimpleNamespace(extra=json.dumps({"a": 1}))


def test_engine_timing_differences_its_own_group() -> None:
    # before: 1000 packets on time; after: 1000 more, 30 % of them 1-2 ms late
    before = _stats(0.01, {"0..50us": 1000})
    after_late = EmulStats.from_json(_typed(
        0.4e-3, {"0..50us": 1700, "1..2ms": 300}, tol_s=0.3e-3))
    t = EngineTiming(_live(_Backend(before, after_late)), 20.0)
    t.start()
    t.stop()
    rows = [_row(), _row()]
    t.annotate(rows)
    for r in rows:
        extra = json.loads(r.extra)
        assert extra["a"] == 1 and extra["engine_late"]
        assert any("of packets > 1 ms late" in x for x in extra["engine_late"])


def test_engine_timing_on_time_says_so_and_no_engine_says_nothing() -> None:
    before = _stats(0.01, {"0..50us": 1000})
    after = _stats(0.01, {"0..50us": 2000})
    t = EngineTiming(_live(_Backend(before, after)), 20.0)
    t.start()
    t.stop()
    rows = [_row()]
    t.annotate(rows)
    assert json.loads(rows[0].extra)["engine_late"] == []
    # netem / none: nothing runs, no directions: no claim either way
    nothing = EmulStats("netem")
    t = EngineTiming(_live(_Backend(nothing, nothing)), 20.0)
    t.start()
    t.stop()
    rows = [_row()]
    t.annotate(rows)
    assert "engine_late" not in json.loads(rows[0].extra)
    # an emulation not applied (a real path, a 0 ms step without an engine)
    t = EngineTiming(_live(_Backend(), applied=False), 20.0)
    t.start()
    t.stop()
    t.annotate(rows)
    assert "engine_late" not in json.loads(rows[0].extra)
