"""One step number everywhere, and a headline that counts every kind of flag (issue 31.4).

The console says `[step 2/4] wan rtt=20ms`; the report's tables, verdict notes, charts'
names and headline must call that step "step 2" too (stored `step` is 0-based, shown
from 1 through rig.description.steps.shown_step).
"""
import csv
import dataclasses
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.description import scenario, steps
from rig.description.linkstats import LATENESS_LABELS
from rig.report import load_run, render, verdicts
from rig.report.tables import engine_rows, timing_rows, validation_rows
from rig.report.verdict import flag_headline, late_notes, step_flags

REPO = Path(__file__).resolve().parent.parent


def _late(mean_s: float = 2e-3) -> dict:
    """A typed engine snapshot, late both ways (30 % of packets > 0.6 ms)."""
    hist = {"0..50us": 700, "0.5..1ms": 100, "5..10ms": 200}
    late = {"count": 1000, "mean_s": mean_s, "max_s": 9e-3,
            "hist": [hist.get(b, 0) for b in LATENESS_LABELS], "tol_s": 0.6e-3, "over_tol": 300}
    dirs = [{"direction": d, "seen": 1000, "released": 1000, "dropped_loss": 0,
             "dropped_queue": 0, "applied_delay_mean_s": 0.02, "lateness": late}
            for d in ("forward", "reverse")]
    return {"stats_version": 2, "backend": "userspace", "alive": True, "instance": 7,
            "directions": dirs}


@pytest.mark.slow
def test_the_console_s_step_number_is_the_step_the_report_shows(tmp_path):
    sc = scenario.load(REPO / "scenarios/quick.yaml")        # rtt 0, 20, 60, 120 ms
    sweep = steps.expand(sc)
    at20 = next(s for s in sweep if s.rtt_ms == 20.0)
    assert (at20.number, f"[step {at20.number}/{len(sweep)}] {at20.label()}") == \
        (2, "[step 2/4] wan rtt=20ms")
    # the same sweep stored (step = index), late at 20 ms, ping-flagged at 20 ms
    d = make_run(tmp_path / "r", rtts=(0, 20, 60, 120), flagged_steps=[at20.index],
                 engine_by_step={at20.index: _late()})
    run = load_run(d)
    for rows in (validation_rows(run), engine_rows(run), timing_rows(run)):
        assert {r["step"] for r in rows} == {"1", "2", "3", "4"}
    assert {r["emulation"] for r in timing_rows(run) if r["step"] == "2"} == {"LATE"}
    assert {r["flagged"] for r in validation_rows(run) if r["step"] == "2"} == {"FLAGGED"}
    notes = [n for p in run.points if p.key.rtt_ms == 20.0 for n in late_notes(p, run)]
    assert notes and all(n.startswith("step 2: ") for n in notes), notes
    assert verdicts(run)        # and the verdicts draw on them
    render(d)
    with open(d / "validations.csv") as f:
        assert {r["step"] for r in csv.DictReader(f) if r["flagged"] == "FLAGGED"} == {"2"}
    page = (d / "report.html").read_text()
    assert "1 step(s) flagged, by kind: path validation: 1 (step 2); " \
           "emulation late: 1 (step 2)." in page


def test_the_headline_counts_every_kind_of_flag_by_kind(tmp_path):
    d = make_run(tmp_path / "r", rtts=(0, 20, 60, 120), flagged_steps=[3],
                 engine_by_step={1: _late()}, failing=[("curl", 60.0)])
    run = load_run(d)
    assert step_flags(run) == {"path validation": [4], "emulation late": [2],
                               "transfers failed": [3]}
    assert flag_headline(run) == ("3 step(s) flagged, by kind: path validation: 1 (step 4); "
                                  "emulation late: 1 (step 2); transfers failed: 1 (step 3).")


def test_a_late_path_check_is_its_own_kind_and_a_clean_run_says_none(tmp_path):
    clean = load_run(make_run(tmp_path / "c"))
    assert step_flags(clean) == {} and flag_headline(clean) == "No step flagged."
    run = load_run(make_run(tmp_path / "r"))
    run.engine.append(dataclasses.replace(run.engine[1], phase="check-before", emulation_late=True,
                                          taken_at=(run.engine[1].taken_at or 0.0) - 0.5))
    assert step_flags(run) == {"emulation late in a path check": [2]}
