"""Golden plans: every shipped scenario's run plan (rig.orchestration.plan.build_plan),
its actions, their kinds, hosts and dependencies, and every line `rig plan` prints, as
committed in tests/golden/plans/<scenario>.txt (issue 25). Pure: no root, nothing created.

A change of what a run does shows here as a diff of the golden file; regenerate them on
purpose with `.venv/bin/python tests/test_plan_golden.py` and read the diff.
Host-dependent parts are made fixed: this Python's path reads `<python>`, the checkout's
`<repo>`, two CPUs, no cpuset hierarchy (taskset pins), no cached generated ROOT file,
and `backend: auto` picks the userspace engine (a kernel without sch_netem, as here).
"""
from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

from rig.description import scenario
from rig.orchestration import plan as rplan
from rig.orchestration.actions import PHASES, Plan

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden" / "plans"
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def fixed_host(mp) -> None:
    from rig.description import schema
    from rig.realization import cgroups, data
    mp.setattr(schema, "host_cpus", lambda: {0, 1})     # this VM's 2 (sweep.server_cpus)
    mp.setattr(cgroups, "detect", lambda: None)
    mp.setattr(data, "root_source", lambda f, generate=False: None)
    from rig.orchestration.acts import emulate
    mp.setattr(emulate, "auto_here", lambda: "userspace")
    from rig.realization.emul.engine import native      # the native engine, built
    mp.setattr(native, "path", lambda: str(native.REPO_BUILD))
    mp.delenv("RIG_ENGINE", raising=False)


def render(p: Plan) -> str:
    """What `rig plan --actions` prints, made host-independent."""
    text = "\n".join(p.described()) + "\n"
    return text.replace(sys.executable, "<python>").replace(str(REPO), "<repo>")


def _plan(path: Path) -> Plan:
    return rplan.build_plan(scenario.load(path))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_plan_is_the_golden_one(path, monkeypatch):
    fixed_host(monkeypatch)
    want = GOLDEN / f"{path.stem}.txt"
    assert want.is_file(), f"no golden plan for {path.name}: run tests/test_plan_golden.py"
    got = render(_plan(path))
    if got != want.read_text():
        diff = difflib.unified_diff(want.read_text().splitlines(), got.splitlines(),
                                    str(want.relative_to(REPO)), "now", lineterm="", n=1)
        pytest.fail(f"{path.name}: the plan changed; if on purpose, regenerate with "
                    "`.venv/bin/python tests/test_plan_golden.py` and read the diff:\n"
                    + "\n".join(list(diff)[:60]), pytrace=False)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_printed_lines_are_the_actions_lines(path, monkeypatch):
    """`rig plan` prints exactly the actions' items, in the plan's order: no line that
    is not an action's, every command with its argv kept as data."""
    fixed_host(monkeypatch)
    p = _plan(path)
    assert rplan.plan_lines(scenario.load(path)) == p.lines()
    kinds = {a.kind for a in p.actions}
    assert kinds <= set(PHASES) and {"prepare", "path", "servers", "emulate", "check",
                                     "group", "teardown"} <= kinds
    assert p.actions[-1].kind == "teardown" and set(p.actions[-1].deps) == {
        a.id for a in p.executed() if a.phase == "setup"} | {p.actions[-2].id}
    for a in p.actions:
        for i in a.items:
            assert bool(i.argv) != bool(i.text), (a.id, i)     # a command or a line
    # each step: emulate, check before, its groups (between the start and the stop of
    # its competing flows, if any), check after -- in that order
    steps = sorted({a.step for a in p.actions if a.step is not None})
    for k in steps:
        seq = [a.kind for a in p.actions if a.step == k]
        mid = seq[2:-1]
        if mid and mid[0] == "background":
            assert mid[-1] == "background", (k, seq)
            mid = mid[1:-1]
        assert seq[:2] == ["emulate", "check"] and seq[-1] == "check" and \
            set(mid) <= {"group"}, (k, seq)


def test_auto_shows_one_backend_where_known_both_where_not(monkeypatch):
    """`backend: auto` prints the backend this host's probe picks (as `rig doctor` says);
    both only where the choice cannot be known here (the probes need root)."""
    from rig.orchestration.acts import emulate
    fixed_host(monkeypatch)
    sc = scenario.load(REPO / "scenarios/quick.yaml")
    text = "\n".join(rplan.plan_lines(sc))
    assert "# backend userspace (auto, as probed here)" in text and "netem limit" not in text
    assert text.count("-m rig.realization.emul.engine") == 1      # started once, updated after
    monkeypatch.setattr(emulate, "auto_here", lambda: None)
    text = "\n".join(rplan.plan_lines(sc))
    assert "# backend netem (auto: " in text and "# backend userspace (auto: " in text


def test_a_broken_plan_is_refused():
    from rig.orchestration.actions import Action
    with pytest.raises(AssertionError, match="needs"):
        Plan((), (Action("a", "path", deps=("b",)), Action("b", "data"))).check()
    with pytest.raises(AssertionError, match="twice"):
        Plan((), (Action("a", "path"), Action("a", "path"))).check()


if __name__ == "__main__":     # regenerate: .venv/bin/python tests/test_plan_golden.py
    mp = pytest.MonkeyPatch()
    fixed_host(mp)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for s in SCENARIOS:
        (GOLDEN / f"{s.stem}.txt").write_text(render(_plan(s)))
        print(f"wrote {GOLDEN / (s.stem + '.txt')}")
    mp.undo()
