"""Emulate: a sweep step's link profile on its path: applied at the path's first
emulated step, updated at the next ones (rig.realization.emul); rebuilt for the next
step when it died mid-step (`recover`)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from rig.description import steps as S
from rig.description.kinds import AUTO
from rig.errors import RigError
from rig.orchestration import faults
from rig.orchestration.actions import Action, Item, cmd, text
from rig.orchestration.context import Context, Live
from rig.realization.emul import chain
from rig.realization.emul import registry as emul_registry


@dataclass(frozen=True)
class Emulate(Action):
    kind: str = "emulate"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        ctx.background_halt()           # a step aborted before its flows stopped
        _emulate(ctx, ctx.step_of(self))


def items(step: S.Step, site: Any) -> list[Item]:
    be = step.path.backend
    out: list[Item] = []
    if step.profile is None:
        return out
    shown = emul_registry.ranked() if be == AUTO else [emul_registry.get(be)]
    for b in shown:
        lines = chain.over(b(), site).plan(site, step.profile)
        if lines:
            out.append(text(f"# backend {b.name}" + (f" (auto: {b.auto_note})"
                                                     if be == AUTO else "")))
            out += [cmd(a) for a in lines]
    return out


def _emulate(ctx: Context, step: S.Step) -> None:
    live = ctx.lives[step.path_index]
    ctx.at = (step, live)
    ctx.say(f"[step {step.number}/{len(ctx.all_steps)}] {step.label()}: applying "
             f"{live.backend.name} emulation")
    if live.site is not None and step.profile is not None:
        if live.applied:
            live.backend.update(live.site, step.profile)
        else:
            live.backend.apply(live.site, step.profile)
            live.applied = True


def recover(ctx: Context, live: Live, step: S.Step) -> None:
    """After the emulation died mid-step: rebuild it for the next step, or stop."""
    if live.site is None or step.profile is None:
        return
    live.backend.remove(live.site)
    live.applied = False
    lost = faults.gone(n.ns for n in live.path.nodes)
    if lost:
        raise RigError(f"emulation on path {live.spec.name} cannot be restored: namespace "
                       f"{', '.join(lost)} was deleted under the run (not by the rig)")
    try:
        live.backend.apply(live.site, step.profile)
        live.applied = True
    except RigError as e:
        raise RigError(f"emulation on path {live.spec.name} cannot be restored: "
                       f"{faults.one_line(e)}") from e

