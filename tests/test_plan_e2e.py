"""`rig run` executes the plan `rig plan` prints (issue 25): a real run of a reduced
scenario (real namespaces, xrootd, xrdcp, curl), its stored actions compared with the
printed plan's, each timed, the teardown last; the report shows the time budget."""
import subprocess
import sys
from pathlib import Path

import planlog
import pytest

from rig.description import scenario
from rig.orchestration.plan import build_plan
from rig.realization import netns
from rig.results.budget import budget
from rig.results.store import Store

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/plan-small.yaml"


def test_the_run_executes_the_printed_plan(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(SCEN), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    st = Store.open(out)
    try:
        done, env, transfers = st.actions(), st.environment(), st.transfers()
    finally:
        st.close()
    assert not [n for n in netns.list_namespaces() if n.startswith(env["prefix"])]
    plan = build_plan(scenario.load(SCEN))
    # the same actions, in the same order, as `rig plan` shows them
    assert [a.action for a in done] == [a.id for a in plan.executed()]
    assert [a.kind for a in done] == [a.kind for a in plan.executed()]
    assert [a.seq for a in done] == list(range(len(done)))
    assert {a.outcome for a in done} == {"ok"}, [a for a in done if a.outcome != "ok"]
    # one after the other, each inside the run, the teardown last
    for a, b in zip(done, done[1:]):
        assert a.started_at <= a.ended_at <= b.started_at + 1e-3, (a, b)
    assert done[-1].action == "teardown" and done[-1].duration_s > 0
    groups = [a for a in done if a.kind == "group"]
    assert len(groups) == len(transfers) == 4
    # every transfer ran inside its group's action
    for t, g in zip(sorted(transfers, key=lambda t: t.started_at), groups):
        assert g.started_at - 1e-3 <= t.started_at <= g.ended_at, (t, g)
    b = budget(done)
    assert b is not None and 0 < b.by_phase["transfers"] < b.wall_s
    assert b.between_s < 0.05 * b.wall_s, b       # nearly all the time is in an action
    page = (out / "report.html").read_text()       # `rig run` draws it
    assert "<h2>Time budget</h2>" in page and "outside transfers" in page
    # every command it executed is one the plan prints, its placeholders filled in (issue 39)
    ran = planlog.executed(out / "commands.log")
    miss = planlog.missing(plan, ran)
    assert len(ran) > 50 and not miss, "not in the plan:\n" + "\n".join(miss)
