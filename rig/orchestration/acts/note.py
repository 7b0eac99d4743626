"""Note: lines `rig plan` prints that no action executes (a replay client's read plan,
computed from the ROOT file's baskets)."""
from __future__ import annotations

from dataclasses import dataclass

from rig.description import steps as S
from rig.description.scenario.document import Scenario
from rig.orchestration.actions import Action, comment


@dataclass(frozen=True)
class Note(Action):
    kind: str = "note"


def replay_plans(sc: Scenario) -> list[str]:
    """Each replay client's read plan summary (computed from the ROOT file's baskets; a
    generated file is made once, into the cache, to read them)."""
    from rig.realization.data import root_source
    from rig.services.tools.replay import plan_for
    out, seen = [], set()
    for g in S.groups(sc):
        c = g.client
        if c.tool != "replay" or c.name in seen:
            continue
        seen.add(c.name)
        assert c.file is not None, "a replay client names its file"
        f = sc.file(c.file)
        src = root_source(f, generate=False)
        if src is None:       # never generate here: a plan may name any size
            spec = f.root_spec()
            out.append(comment(
                f"replay {c.name}: {f.name} is not generated yet (rig run makes it once); "
                f"to see the plan now: rig plan --generate --size {spec.size_bytes} "
                f"--nbranches {spec.n_branches} --cluster {spec.cluster_bytes} "
                f"--seed {spec.seed} --mode {c.option('mode')} "
                f"--percent {(c.option('branches') or 1.0) * 100:g}"))
            continue
        p = plan_for(c, str(src))
        out.append(comment(f"replay {c.name} ({c.option('library')}, {c.server}):"))
        out += [comment("  " + line) for line in p.summary().splitlines()]
    return out
