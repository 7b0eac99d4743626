"""`rig plan`: every command a run of a scenario would execute, run nothing.

The plan is the list of typed actions `rig run` executes in this order; each kind's
module (rig.orchestration.acts) renders its own lines here and executes them there.
Names carry a placeholder prefix (`rig0000`) and addresses the first range, since the
real ones are leased at run time. Must not import reports.
"""
from __future__ import annotations

import dataclasses

from rig.description import steps as S
from rig.description.profile import LinkProfile
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.description.scenario.queries import background_on, runs_on, sweep_notes, uses_tls
from rig.orchestration.actions import PREFIX, Action, Item, Plan, comment, fmt, text
from rig.orchestration.acts import background, check, data, emulate, endpoint, group, hosts
from rig.orchestration.acts import note
from rig.orchestration.acts import path as path_act
from rig.orchestration.acts import pinning, prepare, servers, teardown, tls, tune
from rig.realization import netns

__all__ = ["PREFIX", "build_plan", "plan_lines"]

_fmt, _comment = fmt, comment      # the names older callers import


def plan_lines(sc: Scenario) -> list[str]:
    """What `rig plan` prints: the plan's lines."""
    return build_plan(sc).lines()


class _Draft:
    """The plan as it is written: its actions so far, each after the one before unless
    it says what it needs."""

    def __init__(self, sc: Scenario) -> None:
        self.sc, self.wd = sc, netns.STATE_DIR / PREFIX
        self.acts: list[Action] = []
        self.names: dict[str, netns.RealizedPath] = {}     # path -> its names, addresses
        self.last: dict[str, str] = {}        # path -> its latest action
        self.emulated: dict[str, LinkProfile] = {}    # path -> the profile in force
        self.steps = S.expand(sc)

    def add(self, a: Action, deps: list[str] | tuple[str, ...] | None = None) -> str:
        if deps is None:
            deps = [self.acts[-1].id] if self.acts else []
        self.acts.append(_with(a, deps=tuple(deps)))
        return a.id


def _with(a: Action, **kw: object) -> Action:
    return dataclasses.replace(a, **kw)     # type: ignore[arg-type]


def build_plan(sc: Scenario) -> Plan:
    """The run's actions in the order `rig run` executes them (rig.orchestration.run)."""
    d = _Draft(sc)
    header = _header(sc)
    _setup(d)
    for step in d.steps:
        if step.joint is not None and step.joint != step.index:
            continue                  # run with the first of its joint set
        _step(d, step)
    # it undoes what the setup built, once the last action is done
    shown = [(p, d.names[p.name], d.emulated.get(p.name)) for p in sc.paths]
    d.add(teardown.Teardown("teardown", items=tuple(teardown.items(sc, d.wd, shown))),
          deps=list(dict.fromkeys([a.id for a in d.acts if a.phase == "setup"]
                                  + [d.acts[-1].id])))
    plan = Plan(header, tuple(d.acts))
    plan.check()
    return plan


def _header(sc: Scenario) -> tuple[str, ...]:
    header: tuple[str, ...] = (comment(f"scenario {sc.name} ({sc.source}); prefix {PREFIX} "
                                       "stands for the run's"),)
    # where the sweep does not reach a client: said here, and as the run's sweep starts
    header += tuple(comment(n) for n in sweep_notes(sc))
    if sc.tuning.from_profile:
        header += (comment(f"tuning profile {sc.tuning.profile}: " + ", ".join(
            sc.tuning.from_profile) + " applied as far as this kernel allows (what it lacks "
            "is said at run time and left out)"),)
    return header


def _setup(d: _Draft) -> None:
    """Prepare, tune, hosts, data, pinning, then each path, its TLS and its servers."""
    sc = d.sc
    d.add(prepare.Prepare("prepare", items=tuple(prepare.items())))   # store, environment, subnet
    if sc.tunes_local():
        d.add(tune.Tune("tune", items=tuple(tune.items(sc))))
    if sc.remote_hosts():       # SSH connections, run directories, data, tuning there
        d.add(hosts.Hosts("hosts", items=tuple(hosts.items(sc))))
    if any(p.server_host == LOCAL for p in sc.paths):
        d.add(data.Data("data", items=tuple(data.items(sc, d.wd))))
    replay = note.replay_plans(sc)
    if replay:
        d.add(note.Note("note:replay", items=tuple(text(ln) for ln in replay)), deps=())
    setup = [a.id for a in d.acts if a.runs]
    if pinning.pins(sc):
        d.add(pinning.Pinning("pinning"), deps=setup)
        setup.append("pinning")
    for i, p in enumerate(sc.paths):
        n, out = path_act.items(sc, i, p, d.wd)
        d.names[p.name] = n
        d.add(path_act.PathUp(f"path:{p.name}", items=tuple(out), host=p.router_host or LOCAL,
                              path=p.name), deps=setup)
        if endpoint.has_endpoint(sc):      # its server namespace routes on to it, checked
            d.add(endpoint.EndpointUp(f"endpoint:{p.name}", items=tuple(endpoint.items(sc, n)),
                                      path=p.name))
        if p.router_host is None and p.kind != "real" and uses_tls(sc):
            d.add(tls.Tls(f"tls:{p.name}", items=tuple(tls.items(sc, d.wd, p.name,
                                                                 n.server_addr)),
                          path=p.name))
        swd = path_act.host_wd(sc, p.server_host, d.wd)
        d.add(servers.Servers(f"servers:{p.name}", items=tuple(servers.items(
            sc, n, swd, p.server_host)), host=p.server_host, path=p.name))


def _step(d: _Draft, step: S.Step) -> None:
    """A step (or a joint set of them): emulation and check before on each path, its
    groups, then each path's check after."""
    ms = S.members(d.steps, step)
    for m in ms:
        _before(d, m)
    k = step.index
    if step.joint is None:
        for gi, g in enumerate(S.groups(d.sc, step.path)):
            d.add(group.Group(f"step:{k}:group:{gi}", items=tuple(_group_items(d, step, g)),
                              host=step.path.client_host, path=step.path.name, step=k,
                              group=gi))
    else:                         # `together:` each group on every path at once
        for gi, g in enumerate(S.joint_groups(d.sc, ms)):
            items = [group.joint_note(ms)]
            for m in ms:
                if runs_on(g.client, m.path):
                    items += _group_items(d, m, g)
            d.add(group.Group(f"step:{k}:group:{gi}", items=tuple(items),
                              host=step.path.client_host, path=step.path.name, step=k,
                              group=gi))
    for m in ms:
        _after(d, m)


def _group_items(d: _Draft, step: S.Step, g: S.Group) -> list[Item]:
    return group.items(d.sc, g, d.names[step.path.name], step, d.wd,
                       path_act.host_wd(d.sc, step.path.server_host, d.wd))


def _before(d: _Draft, step: S.Step) -> None:
    n, sc, k = d.names[step.path.name], d.sc, step.index
    host, name = step.path.client_host, step.path.name
    prev = [d.last.get(name, f"servers:{name}")] + (
        [d.acts[-1].id] if d.acts[-1].id != d.last.get(name) else [])
    out = [text(f"# step {step.number}: {step.label()}")]
    if n.site is not None and step.profile is not None:
        rhost = step.path.router_host or LOCAL
        out += [i if not i.argv else _with_host(i, rhost)
                for i in emulate.items(step, n.site, d.emulated.get(name))]
        d.emulated[name] = step.profile
    d.add(emulate.Emulate(f"step:{k}:emulate", items=tuple(out),
                          host=step.path.router_host or LOCAL, path=name, step=k),
          deps=list(dict.fromkeys(prev)))
    d.add(check.CheckBefore(f"step:{k}:check-before", items=tuple(check.before_items(
        sc, d.steps, step, n)), host=host, path=name, step=k))
    if background_on(sc, step.path):     # competing flows over the step's transfers
        d.add(background.BackgroundStart(f"step:{k}:background:start", items=tuple(
            background.start_items(sc, step, n)), host=host, path=name, step=k))


def _after(d: _Draft, step: S.Step) -> None:
    k, host, name = step.index, step.path.client_host, step.path.name
    if background_on(d.sc, step.path):
        d.add(background.BackgroundStop(f"step:{k}:background:stop", items=tuple(
            background.stop_items()), host=host, path=name, step=k))
    d.last[name] = d.add(check.CheckAfter(f"step:{k}:check-after", items=tuple(
        check.after_items(d.sc, step, d.names[name])), host=host, path=name, step=k))


def _with_host(i: Item, host: str) -> Item:
    return dataclasses.replace(i, host=host)
