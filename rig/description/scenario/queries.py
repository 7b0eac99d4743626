"""Questions asked of a loaded scenario: which directions, TLS modes, stream counts,
concurrencies and repeats a client runs, which servers run on a path and where each
instance is placed, how many transfer groups the sweep makes. Pure, no I/O.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rig.description import kinds, schema as S, tuningspec
from rig.description.scenario.auth import needs_https
from rig.description.scenario.clients import BackgroundSpec, ClientSpec, ServerSpec
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import PathSpec
from rig.description.tuningspec import Tuning


def client_directions(sc: Scenario, c: ClientSpec) -> list[str]:
    """Directions client `c` runs: its own `direction:`, else `sweep.direction` as far as
    its tool can (uploads; an extreme copy does not), else download."""
    if c.direction is not None:
        return [c.direction]
    if sc.sweep.direction and kinds.client(c.tool).caps.upload and not c.option("sources"):
        return list(sc.sweep.direction)
    return ["download"]


def instance_cpus(c: ClientSpec, instance: int) -> str | None:
    """The CPU set instance `instance` of client `c` runs on (None: any)."""
    if isinstance(c.cpus, tuple):
        return c.cpus[instance]
    return c.cpus


def background_on(sc: Scenario, p: PathSpec) -> list[BackgroundSpec]:
    """The competing flows of path `p` (their own `path:`, else every path)."""
    return [b for b in sc.background if b.path in (None, p.name)]


def upload_servers(sc: Scenario) -> set[str]:
    """Servers some client uploads to (they get a writable upload/ folder)."""
    return {c.server for c in sc.clients if c.server and "upload" in client_directions(sc, c)}


def tls_modes(sc: Scenario, c: ClientSpec) -> list[str]:
    """The TLS modes client `c` runs: its own `tls:`, else the swept modes its tool can
    use (`off` always), else off."""
    if c.tls is not None:
        return [c.tls]
    if needs_https(sc, c):
        return ["all"]
    if not sc.sweep.tls:
        return ["off"]
    return [m for m in sc.sweep.tls if m == "off" or _can_tls(sc, c, m)] or ["off"]


def _can_tls(sc: Scenario, c: ClientSpec, mode: str) -> bool:
    """Whether client `c` can run TLS mode `mode`: its tool can, and its server serves TLS."""
    if mode not in kinds.client(c.tool).caps.tls:
        return False
    kind = next((s.kind for s in sc.servers if s.name == c.server), None)
    return kind is None or bool(kinds.server(kind).tls_ports)


def uses_tls(sc: Scenario) -> bool:
    """Whether the run needs a CA and TLS endpoints on its servers (a server with `auth:`
    has its certificate from the run's CA)."""
    return any(m != "off" for c in sc.clients for m in tls_modes(sc, c)) or uses_x509(sc)


def uses_x509(sc: Scenario) -> bool:
    """Whether the run makes X.509 users and proxies (rig.realization.x509)."""
    return any(s.auth == "x509" for s in sc.servers)


def path_servers(sc: Scenario, p: PathSpec | None = None) -> list[ServerSpec]:
    """The servers that run on path `p`: the scenario's, or on a copy made by
    sweep.origins / server_cpus, every origin server (not a cache) with that copy's
    instance count and CPUs (origin k on CPUs k*C .. k*C+C-1 of this host's, round)."""
    if p is None or (p.origins is None and p.server_cpus is None):
        return sc.servers
    cpus = sorted(S.host_cpus())
    out = []
    for s in sc.servers:
        if kinds.server(s.kind).caches:
            out.append(s)
            continue
        n = p.origins or s.count
        sets = None if p.server_cpus is None else [
            ",".join(str(cpus[(k * p.server_cpus + j) % len(cpus)])
                     for j in range(p.server_cpus)) for k in range(n)]
        out.append(dataclasses.replace(s, count=n, cpus=sets))
    return out


def server_count(sc: Scenario, p: PathSpec | None = None) -> int:
    """Server instances of the scenario on path `p` (what a `count: servers` node expands
    to; None: the scenario's own)."""
    return sum(s.count for s in path_servers(sc, p))


@dataclass(frozen=True)
class Placement:
    """One server instance: its spec, index among the spec's instances, name, the
    topology node it runs in (None: the path's primary server), its CPU set, and its
    index among all instances of the scenario (which selects its ports)."""
    spec: ServerSpec
    k: int
    name: str
    node: str | None
    cpus: str | None
    index: int


def placements(sc: Scenario, p: PathSpec | None = None) -> list[Placement]:
    """Where every server instance of path `p` runs (pure): with a counted topology
    (multi-origin) instance j of the scenario takes server node j+1; otherwise an instance
    runs in its spec's `node:` or the primary server node, instances sharing a node on
    their own ports."""
    t = sc.topology
    counted = [n for n in t.by_role("server") if n.count == "servers"] \
        if t.layout == "netns" else []
    out: list[Placement] = []
    for s in path_servers(sc, p):
        for k, inst in enumerate(s.instances):
            j = len(out)
            node = f"{counted[0].name}{j + 1}" if counted else s.node
            out.append(Placement(s, k, inst, node, s.cpus_of(k), j))
    return out


def measurements(sc: Scenario) -> int:
    """Transfer groups of the whole sweep (what rig.description.steps expands), counted without
    expanding them."""
    total = 0
    for p in sc.paths:
        steps = 1 if p.kind == "real" else len(p.rtts_s)
        total += steps * sum(len(client_streams(sc, c)) * len(client_concurrency(sc, c))
                             * (len(sc.sweep.branches) if sc.sweep.branches
                                and c.option("branches") is None
                                and "branches" in kinds.option_keys(c.tool) else 1)
                             * len(tls_modes(sc, c)) * client_repeats(sc, c)
                             * len(client_directions(sc, c))
                             for c in sc.clients if runs_on(c, p))
    return total


def client_repeats(sc: Scenario, c: ClientSpec) -> int:
    """Repeats of client `c`: its own `sweep.repeats`, else the scenario's."""
    if c.sweep is not None and c.sweep.repeats is not None:
        return c.sweep.repeats
    return sc.sweep.repeats


def runs_on(c: ClientSpec, p: PathSpec) -> bool:
    """Does client `c` run on path `p` (its own `paths:`, else every path)?"""
    return c.paths is None or p.name in c.paths


def client_streams(sc: Scenario, c: ClientSpec) -> list[int]:
    """Stream counts client `c` runs: its own `sweep.streams`, else the scenario's for a
    multi-stream tool, else its `streams` (1 unset)."""
    if c.sweep is not None and c.sweep.streams:
        return list(c.sweep.streams)
    if sc.sweep.streams and kinds.client(c.tool).caps.max_streams > 1:
        return list(sc.sweep.streams)   # limits checked when the scenario was loaded
    return [c.streams or 1]


def client_concurrency(sc: Scenario, c: ClientSpec) -> list[int]:
    """Concurrencies client `c` runs: its own `sweep.concurrency`, else the scenario's."""
    if c.sweep is not None and c.sweep.concurrency:
        return list(c.sweep.concurrency)
    return list(sc.sweep.concurrency)


def path_tuning(sc: Scenario, p: PathSpec) -> Tuning:
    """The tuning of path `p`'s namespaces: its own `tuning:` keys over the scenario's."""
    return tuningspec.merged(sc.tuning, p.tuning)


def path_mtu(sc: Scenario, p: PathSpec) -> int:
    """The MTU of path `p`'s links: its own `mtu:`, else `tuning.mtu`."""
    return p.mtu if p.mtu is not None else sc.tuning.mtu


def sweep_notes(sc: Scenario) -> list[str]:
    """Where a scenario's sweep axis does not reach a client, one line per axis and
    reason: its tool cannot honour the axis (curl has one stream, scp no TLS, wget does
    not upload), or the client's own key keeps it out (`tls:`, `direction:`,
    `branches:`). `rig plan` prints them, `rig run` says them as its sweep starts; an
    axis that reaches no client at all is refused when the scenario loads (rules)."""
    said: dict[tuple[str, str], list[str]] = {}
    for c in sc.clients:
        for what, why in _not_applied(sc, c):
            said.setdefault((what, why), []).append(c.name)
    return [f"{_clients(names)}: sweep.{what} not applied: {why}"
            for (what, why), names in said.items()]


def _clients(names: list[str], shown: int = 6) -> str:
    if len(names) == 1:
        return f"client {names[0]}"
    more = f" and {len(names) - shown + 1} more" if len(names) > shown else ""
    return f"clients {', '.join(names[:shown - 1] if more else names)}{more}"


def _not_applied(sc: Scenario, c: ClientSpec) -> list[tuple[str, str]]:
    """(axis and values, reason) of each swept value client `c` does not run."""
    sw, out = sc.sweep, []
    if sw.streams and not (c.sweep is not None and c.sweep.streams) \
            and kinds.client(c.tool).caps.max_streams == 1:
        out.append((f"streams {S.fmt_list(sw.streams)}", f"{c.tool} has one stream"))
    if sw.tls:
        out += _tls_left(sc, c)
    if sw.direction:
        if c.direction is not None:
            out.append((f"direction {S.fmt_list(sw.direction)}",
                        f"own direction: {c.direction}"))
        elif set(sw.direction) - set(client_directions(sc, c)):
            out.append(("direction upload", "an extreme copy (sources:) downloads"
                        if c.option("sources") else f"{c.tool} does not upload"))
    if sw.branches:
        vals = f"branches {S.fmt_list(sw.branches, S.fmt_pct)}"
        if "branches" not in kinds.option_keys(c.tool):
            users = sorted(t.name for t in kinds.CLIENTS.all()
                           if "branches" in kinds.option_keys(t.name))
            out.append((vals, f"only {', '.join(users)} reads branches"))
        elif c.option("branches") is not None:
            out.append((vals, f"own branches: {S.fmt_pct(c.option('branches'))}"))
    return out


def _tls_left(sc: Scenario, c: ClientSpec) -> list[tuple[str, str]]:
    """The swept TLS modes client `c` does not run, and why."""
    modes = sc.sweep.tls or []
    if c.tls is not None:
        return [(f"tls {S.fmt_list(modes)}", f"own tls: {c.tls}")]
    left = [m for m in modes if m not in tls_modes(sc, c)]
    if not left:
        return []
    kind = next((s.kind for s in sc.servers if s.name == c.server), None)
    if kind is not None and not kinds.server(kind).tls_ports:
        why = f"server {c.server}{f' ({kind})' if kind != c.server else ''} serves no TLS"
    else:
        why = f"{c.tool} cannot use TLS mode{'s' if len(left) > 1 else ''} {', '.join(left)}"
    return [(f"tls {', '.join(left)}", why)]
