"""Expansion of a scenario into sweep steps and transfer groups (pure).

A step is one path at one RTT; within it every client configuration runs for each
stream count, concurrency and repeat. Paths run `together` make joint sets of steps,
one per path, whose groups run at the same time. `plan_lines` renders every command a run would
execute, for `rig plan`. Must not import anything that runs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rig.description.profile import LinkProfile
from rig.description.scenario.clients import ClientSpec
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import PathSpec
from rig.description.scenario.queries import (client_concurrency, client_directions,
                                              client_repeats, client_streams, runs_on, tls_modes)
from rig.description import kinds


def shown_step(index: int) -> int:
    """A step as users see it: stored from 0 (`index`, the results' `step` column), shown
    from 1. The console's `[step N/M]`, `rig plan`, the report's tables, headline and
    verdicts all number steps through here, so one step has one number everywhere."""
    return int(index) + 1


@dataclass(frozen=True)
class Step:
    index: int
    path: PathSpec
    path_index: int
    rtt_s: float | None          # None: real path (measured, not configured)
    profile: LinkProfile | None
    joint: int | None = None     # `together:` the first step of the set it runs with

    @property
    def rtt_ms(self) -> float | None:
        return None if self.rtt_s is None else self.rtt_s * 1e3

    @property
    def number(self) -> int:
        return shown_step(self.index)

    def label(self) -> str:
        rtt = "real" if self.rtt_s is None else f"rtt={self.rtt_s * 1e3:g}ms"
        return f"{self.path.name} {rtt}"


@dataclass(frozen=True)
class Group:
    """`concurrency` identical client processes started together."""
    client: ClientSpec
    streams: int
    concurrency: int
    repeat: int
    tls: str = "off"             # off | control | all


def expand(sc: Scenario) -> list[Step]:
    """Steps in the order they run: each path's RTTs in turn; paths run `together`
    where the first of them stands, their k-th RTTs as one joint set of steps."""
    steps: list[Step] = []
    joint = [(pi, p) for pi, p in enumerate(sc.paths) if p.name in sc.together]
    for pi, p in enumerate(sc.paths):
        if p.name in sc.together:
            if pi != joint[0][0]:
                continue
            for k in range(len(p.rtts_s)):
                first = len(steps)
                for qi, q in joint:
                    steps.append(Step(len(steps), q, qi, q.rtts_s[k], q.profile(q.rtts_s[k]),
                                      joint=first))
            continue
        if p.kind == "real":
            steps.append(Step(len(steps), p, pi, None, None))
            continue
        for rtt in p.rtts_s:
            steps.append(Step(len(steps), p, pi, rtt, p.profile(rtt)))
    return steps


def joint_groups(sc: Scenario, members: list[Step]) -> list[Group]:
    """Transfer groups of a joint set of steps (`together:`): every client that runs on
    one of its paths, each group run on each of them at once."""
    return [g for g in groups(sc) if any(runs_on(g.client, m.path) for m in members)]


def members(steps: list[Step], step: Step) -> list[Step]:
    """The steps that run at the same time as `step` (itself included, in order)."""
    if step.joint is None:
        return [step]
    return [s for s in steps if s.joint == step.joint]


def stream_counts(sc: Scenario, c: ClientSpec) -> list[int]:
    return client_streams(sc, c)


def branch_configs(sc: Scenario, c: ClientSpec) -> list[ClientSpec]:
    """`sweep.branches` applied to a client that reads branches (tool replay): one
    configuration per fraction, named `NAME@F%` so each is a point of its own. A client's
    own `branches:` wins over the sweep (as its own `tls:` does): one configuration."""
    if not sc.sweep.branches or "branches" not in kinds.option_keys(c.tool):
        return [c]
    own = c.option("branches")
    if own is not None:
        return [dataclasses.replace(c, name=f"{c.name}@{own * 100:g}%")]
    return [dataclasses.replace(c, name=f"{c.name}@{f * 100:g}%",
                                options=dataclasses.replace(c.options, branches=f))
            for f in sc.sweep.branches]


def direction_configs(sc: Scenario, c: ClientSpec) -> list[ClientSpec]:
    """One configuration per direction it runs: a download keeps the client's name, an
    upload beside it is `NAME@upload` (a point of its own); a client's own `direction:`
    keeps its name."""
    dirs = client_directions(sc, c)
    if c.direction is not None or dirs == ["download"]:
        return [dataclasses.replace(c, direction=dirs[0])]
    return [dataclasses.replace(c, direction=d, name=c.name if d == "download"
                                else f"{c.name}@upload") for d in dirs]


def groups(sc: Scenario, path: PathSpec | None = None) -> list[Group]:
    """Transfer groups of one step (on `path`: the clients that run there; None: every
    client), in the order they run: repeats outermost, so a slow drift of the host spreads
    over every configuration instead of biasing one."""
    out = []
    for rep in range(max(client_repeats(sc, c) for c in sc.clients)):
        for c0 in sc.clients:
            if rep >= client_repeats(sc, c0) or (path is not None and not runs_on(c0, path)):
                continue
            for c in (d for b in branch_configs(sc, c0) for d in direction_configs(sc, b)):
                for s in stream_counts(sc, c):
                    for n in client_concurrency(sc, c):
                        # TLS innermost: with and without it run back to back, side by side
                        for t in tls_modes(sc, c):
                            out.append(Group(c, s, n, rep, t))
    return out
