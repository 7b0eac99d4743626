"""`rig run SCENARIO --out OUT` as a user runs it, for the e2e tests: one subprocess with
a deadline, exit 0 asserted (its stderr's tail otherwise), nothing of the run's left
behind (no namespace with its prefix), and every command of its commands.log one that
`rig plan` prints (tests/planlog.py, issue 39; `check_plan=False` where that comparison
is not made yet). Each test adds its own checks of what it ran."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rig.realization import netns
from rig.results.store import Store


@dataclass(frozen=True)
class RigRun:
    out: Path
    prefix: str
    stdout: str
    stderr: str


def rig_run(scenario: str | Path, out: Path, *, timeout: float = 900,
            args: tuple[str, ...] = (), check_plan: bool = True) -> RigRun:
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(scenario), "--out", str(out),
                        *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    st = Store.open(out)
    try:
        prefix = st.environment()["prefix"]
    finally:
        st.close()
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    if check_plan:
        plan_check(scenario, out)
    return RigRun(Path(out), prefix, r.stdout, r.stderr)


def plan_check(scenario: str | Path, out: Path) -> None:
    """Every command the run executed is in the scenario's plan, placeholders filled."""
    import planlog
    from rig.description import scenario as loader
    from rig.orchestration.plan import build_plan
    ran = planlog.executed(Path(out) / "commands.log")
    miss = planlog.missing(build_plan(loader.load(Path(scenario))), ran)
    assert ran and not miss, "not in the plan:\n" + "\n".join(miss[:40])
