"""Prepare: the run's environment recorded in the store (this host's kernel, sysctls
read from /proc/sys, the tool versions: the commands it runs), its subnet leased."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from rig.description import steps as S
from rig.description.scenario.queries import path_tuning
from rig.orchestration import hostinfo
from rig.orchestration.actions import Action, Item, cmd, comment, text
from rig.orchestration.context import Context
from rig.realization import netns


@dataclass(frozen=True)
class Prepare(Action):
    kind: str = "prepare"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _env_snapshot(ctx, stack)
        ctx.subnet = netns.lease_subnet(ctx.prefix)


def items() -> list[Item]:
    return [text(comment("this host's tool versions, each where installed:")),
            *(cmd(a) for a in hostinfo.probe_argvs())]


def _env_snapshot(ctx: Context, stack: contextlib.ExitStack) -> None:
    st = ctx.store
    info = hostinfo.summary()
    for k in ("kernel", "machine", "hostname", "cpus", "tools"):
        st.set_env(k, info[k])
    st.set_env("sysctls_before", info["sysctls"])
    st.set_env("scenario_text", ctx.sc.text)
    st.set_env("scenario_file", ctx.sc.source)
    st.set_env("report_unit", ctx.sc.report.unit)     # the report's one throughput unit
    if ctx.sc.reference is not None:   # `rig report` redraws "against the study" from it
        st.set_env("reference", {"file": ctx.sc.reference.source,
                                 "text": ctx.sc.reference.text})
    st.set_env("tuning", dataclasses.asdict(ctx.sc.tuning))
    if any(p.tuning is not None for p in ctx.sc.paths):   # paths tuned their own way
        st.set_env("path_tuning", {p.name: dataclasses.asdict(path_tuning(ctx.sc, p))
                                   for p in ctx.sc.paths if p.tuning is not None})
    st.set_env("prefix", ctx.prefix)
    swept = {p.name: {"path": p.copy_of, "origins": p.origins, "server_cpus": p.server_cpus}
             for p in ctx.sc.paths if p.origins or p.server_cpus}
    if swept:       # sweep.origins / server_cpus: each copy's configuration (the report)
        st.set_env("server_sweep", swept)
    if ctx.sc.together:    # paths run together: which steps ran at once (the report)
        steps = S.expand(ctx.sc)
        st.set_env("together", {"paths": ctx.sc.together, "sets": [
            [m.index for m in S.members(steps, s)] for s in steps if s.joint == s.index]})
    stack.callback(lambda: st.set_env("sysctls_after", hostinfo.sysctls()))

