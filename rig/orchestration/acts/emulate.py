"""Emulate: a sweep step's link profile on its path: applied at the path's first
emulated step, updated at the next ones (rig.realization.emul); rebuilt for the next
step when it died mid-step (`recover`)."""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from typing import Any

from rig.description import steps as S
from rig.description.kinds import AUTO
from rig.errors import RigError
from rig.orchestration import faults
from rig.description.profile import LinkProfile
from rig.orchestration.actions import Action, Item, cmd, comment, text
from rig.orchestration.transfer import WATCH_INTERVAL_S
from rig.orchestration.context import Context, Live
from rig.realization.emul import chain, netem, userspace
from rig.realization.emul import registry as emul_registry
from rig.realization.emul.base import LinkSite, qdisc_del_argv
from rig.realization.emul.choose import auto_backend_name


@dataclass(frozen=True)
class Emulate(Action):
    kind: str = "emulate"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        ctx.background_halt()           # a step aborted before its flows stopped
        _emulate(ctx, ctx.step_of(self))


def chosen(be: str, router_host: str | None = None) -> list[Any]:
    """The backend class(es) a path's `backend:` runs: `auto` resolved as `rig doctor`
    does, by probing this host; both where that cannot be known here (a router host
    decides on its own kernel, or this host cannot probe: not root)."""
    if be != AUTO:
        return [emul_registry.get(be)]
    name = None if router_host is not None else auto_here()
    return [emul_registry.get(name)] if name else emul_registry.ranked()


@functools.cache
def auto_here() -> str | None:
    """What `auto` picks on this host, None: not known (the probes need root)."""
    if os.geteuid() != 0:
        return None
    try:
        return auto_backend_name()
    except RigError:
        return None


def items(step: S.Step, site: Any, prev: LinkProfile | None) -> list[Item]:
    """The step's emulation: applied at the path's first emulated step (`prev` None),
    updated from `prev` at the next ones; then what the watchdog runs meanwhile."""
    be = step.path.backend
    out: list[Item] = []
    if step.profile is None:
        return out
    shown = chosen(be, step.path.router_host)
    for b in shown:
        lines = _lines(b, site, step.profile, prev)
        watch = _watch(b, site, step.profile)
        if lines or watch:
            out.append(text(f"# backend {b.name}" + (f" (auto: {b.auto_note})"
                                                     if be == AUTO and len(shown) > 1 else
                                                     " (auto, as probed here)"
                                                     if be == AUTO else "")
                            + ("" if prev is None else ": updated from the step before")))
            if b.name == "userspace" and prev is None:
                # which engine holds the packets, and why (engine/native.py)
                out.append(text(f"# engine {b().engine_choice(site)[1]}"))
            out += [cmd(a) for a in lines]
        if watch:
            out.append(text(comment(f"the watchdog, every {WATCH_INTERVAL_S:g} s while the "
                                    "step runs, and the engine's counters per phase:")))
            out += [cmd(a) for a in watch]
    return out


def removed(be: str, router_host: str | None, site: Any, last: LinkProfile) -> list[Item]:
    """What the teardown runs to take the emulation away (`last`: the last profile)."""
    out: list[Item] = []
    for b in chosen(be, router_host):
        out += [cmd(a) for a in _remove(b, site, last)]
    return out


def _hops(site: LinkSite, profile: LinkProfile) -> list[tuple[LinkSite, LinkProfile]]:
    return list(site.hops) if site.hops else [(site, profile)]


def _rules(hop: LinkSite, prof: LinkProfile) -> list[tuple[str, str, int]]:
    """The userspace engine's NFQUEUE rules for a profile (a passthrough direction none)."""
    prof = userspace.end_profile(hop, prof)
    return sorted({(i, o, q) for _, i, o, q, d in userspace.legs(hop, prof)
                   if not userspace.is_passthrough(d)})


def _lines(b: Any, site: LinkSite, profile: LinkProfile,
           prev: LinkProfile | None) -> list[list[str]]:
    if prev is None or b.name not in ("userspace", "netem"):
        return chain.over(b(), site).plan(site, profile)
    if b.name == "netem":        # an update installs every qdisc again
        return [a for hop, prof in _hops(site, profile) for a in netem.plan_argv(hop, prof)]
    out: list[list[str]] = []    # the engine runs on: rates and rules that changed
    for (hop, prof), (_, was) in zip(_hops(site, profile), _hops(site, prev)):
        prof, was = userspace.end_profile(hop, prof), userspace.end_profile(hop, was)
        devs = {d for d, _ in userspace.rate_devs(hop, prof)}
        out += userspace.rate_argv(hop, prof) + [
            qdisc_del_argv(hop.router_ns, d) for d, _ in userspace.rate_devs(hop, was)
            if d not in devs]
        now, before = _rules(hop, prof), _rules(hop, was)
        out += [userspace.nfqueue_rule_argv(hop, "-I", *r) for r in now if r not in before]
        out += [userspace.nfqueue_rule_argv(hop, "-D", *r) for r in before if r not in now]
    return out


def _watch(b: Any, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
    if b.name == "userspace":
        return [userspace.nfqueue_rule_argv(hop, "-C", *r)
                for hop, prof in _hops(site, profile) for r in _rules(hop, prof)]
    if b.name == "netem":
        return [netem.show_argv(hop.router_ns, dev) for hop, _ in _hops(site, profile)
                for _, dev, _ in netem.egresses(hop, LinkProfile())]
    return []


def _remove(b: Any, site: LinkSite, last: LinkProfile) -> list[list[str]]:
    out: list[list[str]] = []
    for hop, prof in _hops(site, last):
        if b.name == "userspace":
            out += [userspace.nfqueue_rule_argv(hop, "-D", *r) for r in _rules(hop, prof)]
            out += [qdisc_del_argv(hop.router_ns, d) for d, _ in userspace.rate_devs(
                hop, userspace.end_profile(hop, prof))]
        elif b.name == "netem":
            out += [qdisc_del_argv(hop.router_ns, dev)
                    for _, dev, _ in netem.egresses(hop, LinkProfile())]
            out += [netem.gso_segs_argv(ns, dev, netem.GSO_MAX_SEGS)
                    for ns, dev, one in netem.segmenting(hop, prof) if one]
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

