"""Tune: the scenario's host-global sysctls on this host, as far as its kernel allows;
each value read before it is written (the state file has it for `rig clean`), restored
at the end."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from rig.description.scenario.document import Scenario
from rig.orchestration.actions import Action, Item, cmd
from rig.orchestration.context import Context
from rig.realization import tuning


@dataclass(frozen=True)
class Tune(Action):
    kind: str = "tune"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _global_tuning(ctx, stack)


def wanted(sc: Scenario) -> dict[str, str]:
    """The host-global sysctls the run writes (the host's allowed list a placeholder)."""
    own_cc = tuple(p.tuning.congestion_control for p in sc.paths
                   if p.tuning is not None and p.tuning.congestion_control)
    return tuning.global_wanted(sc.tuning, "<host's list>", own_cc)


def items(sc: Scenario) -> list[Item]:
    return [cmd(tuning.write_argv(None, k, v)) for k, v in wanted(sc).items()]


def _global_tuning(ctx: Context, stack: contextlib.ExitStack) -> None:
    if not ctx.sc.tunes_local():    # every path between remote hosts: tuned there
        return
    t, lacking = tuning.as_far_as_kernel_allows(ctx.sc.tuning, ctx.sc.source)
    for k, why in lacking.items():
        ctx.say(f"tuning: {k} not applied ({why}; it came from profile {t.profile})")
    paths = []
    for i, p in enumerate(ctx.sc.paths):      # a path's own tuning, the same way
        if p.tuning is not None:
            pt, lack = tuning.as_far_as_kernel_allows(p.tuning, ctx.sc.source,
                                                      at=f"paths[{i}].tuning")
            for k, why in lack.items():
                ctx.say(f"path {p.name}: tuning {k} not applied ({why}; it came from "
                        f"profile {pt.profile})")
                lacking[f"{p.name}.{k}"] = why
            p = dataclasses.replace(p, tuning=pt)
        paths.append(p)
    ctx.store.set_env("tuning_not_applied", lacking)
    ctx.sc = dataclasses.replace(ctx.sc, tuning=t, paths=paths)
    own_cc = tuple(p.tuning.congestion_control for p in paths
                   if p.tuning is not None and p.tuning.congestion_control)
    for ti in (ctx.sc.tuning, *(p.tuning for p in paths if p.tuning is not None)):
        tuning.check_cc_available(ti)
    wrote = tuning.global_wanted(ctx.sc.tuning, tuning.host_allowed_cc(), own_cc)
    before = tuning.read(wrote)
    # recorded before writing, so `rig clean` can restore after a SIGKILL at any point
    ctx.state.record_sysctls(before, wrote)
    stack.callback(tuning.restore_global, before, wrote)
    tuning.apply_global(wrote)

