"""Server instances of one path: which node each runs in, its ports and CPU set.

A scenario server may stand for several instances (origins, `count:`); the pure
placement rule is rig.description.scenario.placements. Here each placement meets the
realized path (its node's namespace and address); `rig run` starts these plans and
`rig plan` prints them, so both agree. Must not import reports.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from rig.description.scenario.document import Scenario
from rig.description.scenario.queries import placements, upload_servers
from rig.realization.netns import RealizedPath
from rig.errors import RigError
from rig.services import servers

# (kind, instance index in the scenario, namespace, address, ports taken there already)
#   -> protocol -> port
Ports = Callable[[str, int, "str | None", str, "frozenset[int]"], dict[str, int]]


def _default_ports(kind: str, k: int, ns: str | None, addr: str,
                   avoid: frozenset[int]) -> dict[str, int]:
    return servers.default_ports(kind, k, avoid=avoid)


def server_plans(sc: Scenario, path: RealizedPath, workdir: Path, datadir: Path,
                 ports: Ports = _default_ports) -> dict[str, list[servers.ServerPlan]]:
    """Scenario server name -> its instances' plans, in instance order."""
    out: dict[str, list[servers.ServerPlan]] = {}
    taken: dict[str, set[int]] = {}     # address -> ports its servers (and iperf3) listen on
    writers = upload_servers(sc)
    spec = next((p for p in sc.paths if p.name == path.name), None)
    for pl in placements(sc, spec):
        node = path.node(pl.node) if pl.node and path.links else path.server
        assert node.addr is not None, "a server node has an address"
        used = taken.setdefault(node.addr, {servers.IPERF3_PORT})
        mine = servers.given_ports(pl.spec, pl.k, servers.default_ports(pl.spec.kind, 0,
                                                                        tls=True))
        clash = [f"{p} {v}" for p, v in mine.items() if v in used]
        if clash:
            raise RigError(f"server {pl.name} ({pl.spec.kind}): ports: {', '.join(clash)} on "
                           f"{node.addr} taken by another server of the run or its iperf3")
        got = ports(pl.spec.kind, pl.index, node.ns, node.addr,
                    frozenset(used | set(mine.values())))
        got = servers.get(pl.spec.kind).plan_ports(
            pl.spec, {**got, **{p: v for p, v in mine.items() if p in got}})
        used.update(got.values())
        plan = servers.ServerPlan(pl.spec, node.ns, node.addr, got,
                                  workdir / f"{path.name}-{pl.name}", datadir,
                                  name=pl.name, cpus=pl.cpus, uploads=pl.spec.name in writers,
                                  tls_dir=workdir / f"{path.name}-tls" if pl.spec.tpc else None)
        out.setdefault(pl.spec.name, []).append(plan)
    return with_upstreams(out)


def with_upstreams(plans: dict[str, list[servers.ServerPlan]]
                   ) -> dict[str, list[servers.ServerPlan]]:
    """A cache's instance k reads from instance k mod K of its `origin:` server (pure)."""
    out = {}
    for name, ps in plans.items():
        up = ps[0].spec.origin if ps and servers.get(ps[0].spec.kind).caches else None
        ups = plans.get(up or "", [])
        out[name] = [dataclasses.replace(p, upstream=f"{ups[k % len(ups)].addr}:"
                                                     f"{ups[k % len(ups)].ports['root']}")
                     if ups else p for k, p in enumerate(ps)]
    return out
