"""`rig plan` prints what `rig run` executes (issue 39): the default scenario run for
real, every command of its commands.log found in the plan with its placeholders filled
in (tests/planlog.py), and the engine started once."""
import subprocess
import sys
from pathlib import Path

import planlog
import pytest

from rig.description import scenario
from rig.orchestration.plan import build_plan

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "scenarios/quick.yaml"


def test_the_quick_run_executes_only_what_its_plan_prints(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(SCEN), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    ran = planlog.executed(out / "commands.log")
    plan = build_plan(scenario.load(SCEN))
    miss = planlog.missing(plan, ran)
    assert len(ran) > 200 and not miss, "not in the plan:\n" + "\n".join(miss)
    engine = [c for c in ran if "-m rig.realization.emul.engine" in c]
    shown = [line for line in plan.lines() if "-m rig.realization.emul.engine" in line]
    assert len(engine) == len(shown) <= 1      # started once where it runs, shown once
