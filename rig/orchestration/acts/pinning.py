"""Pinning: `cpus:` as cgroup v2 or v1 cpusets where this host has them, else taskset;
the clients' cgroups (local ones) are made here, the servers' as they start. `pinned`
renders a CPU set the way the run applies it."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.orchestration.actions import Action
from rig.orchestration.context import Context
from rig.process.proc import pinned_argv
from rig.realization import cgroups


@dataclass(frozen=True)
class Pinning(Action):
    kind: str = "pinning"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _pinning(ctx, stack)


def pinned(prefix: str, what: str, cpus: str | None, argv: list[str],
           local: bool) -> tuple[list[str], list[str]]:
    """A CPU set as the run applies it: a cgroup where this host has a cpuset hierarchy
    (rig.realization.cgroups), else taskset."""
    h = cgroups.detect() if cpus and local else None
    if h is None:
        return [], pinned_argv(cpus, argv)
    d = h.path(cgroups.cgroup_name(prefix, what))
    return [f"# mkdir {d}; cpuset.cpus={cpus}; the process below moved in as it starts "
            f"({h.method})"], list(argv)


def pins(sc: Scenario) -> bool:
    """Does the run pin anything to CPUs: a server's or a client's `cpus:`, or a path copy
    of sweep.server_cpus (its origins' CPU sets)?"""
    return (any(s.cpus for s in sc.servers) or any(c.cpus for c in sc.clients)
            or any(p.server_cpus for p in sc.paths))


def _pinning(ctx: Context, stack: contextlib.ExitStack) -> None:
    """cgroup v2 or v1 cpusets where this host has them, else taskset; the clients'
    cgroups (local ones) are made here, the servers' as they start."""
    if not pins(ctx.sc):
        return
    ctx.pinning = cgroups.detect()
    if ctx.pinning is not None:
        ctx.pin_env["method"] = ctx.pinning.method
    ctx.store.set_env("cpu_pinning", ctx.pin_env)
    ctx.say(f"cpus: pinned by {ctx.pin_env['method']}"
            + (f" ({ctx.pinning.root})" if ctx.pinning else ""))
    local = {p.client_host for p in ctx.sc.paths} == {LOCAL}
    for c in ctx.sc.clients:
        # one set for every instance: a cgroup; one per instance: taskset each
        cg = (ctx.cgroup(stack, f"client-{c.name}", c.cpus)
              if local and isinstance(c.cpus, str) else None)
        if cg is not None:
            ctx.client_cgroups[c.name] = cg

