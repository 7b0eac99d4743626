"""What a scenario with a cache (a server kind with `caches`, i.e. xcache) must say, checked
when it is loaded (pure; one-line InputError naming file, key and value):

- a cache names its `origin:`, an existing non-cache server that serves root://; no other
  kind takes `origin:`;
- it runs in a topology built here, in a server node on the client's LAN (the link that
  holds the client), with its origin on the other side of the router: client — cache —
  emulated WAN — origin (topology `xcache`: the client and node `x` share a bridge in the
  router's namespace, so client <-> cache never crosses the emulation);
- on paths whose servers run on this host (the cache directory and its bitmap are read
  here);
- a client's `cache: cold|warm` reads through a cache.

Must not import anything that runs.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from rig.description import kinds, schema as S
from rig.description.topology import Topology


class Scenario(Protocol):
    """What these checks read of a rig.description.scenario.Scenario (which calls them:
    naming the type here would make the two modules import each other)."""
    @property
    def servers(self) -> Sequence[Any]: ...
    @property
    def clients(self) -> Sequence[Any]: ...
    @property
    def paths(self) -> Sequence[Any]: ...
    @property
    def topology(self) -> Topology: ...


def is_cache(kind: str) -> bool:
    return bool(kinds.server(kind).caches)


def check(ctx: S.Ctx, sc: "Scenario") -> None:
    servers = {s.name: s for s in sc.servers}
    for i, s in enumerate(sc.servers):
        sctx = ctx.child("servers").child(i)
        if not is_cache(s.kind):
            if s.origin is not None:
                raise sctx.child("origin").error(
                    f"only a cache (kind xcache) has an origin; a {s.kind} server serves "
                    "its own files", s.origin)
            continue
        if s.origin is None:
            raise sctx.child("origin").error(
                f"a {s.kind} server needs origin: (the server whose files it caches)")
        o = servers.get(s.origin)
        if o is None:
            raise sctx.child("origin").error("no server of that name", s.origin)
        if o.name == s.name or is_cache(o.kind) or \
                "root" not in kinds.server(o.kind).ports:
            can = ", ".join(n for n, x in servers.items() if _can_origin(x.kind)) or "none"
            raise sctx.child("origin").error(
                f"a cache reads root:// from an origin that is not a cache (here: {can})",
                s.origin)
        _check_placement(sctx, sc, s, o)
    for i, c in enumerate(sc.clients):
        if c.cache is None:
            continue
        srv = servers.get(c.server or "")
        if srv is None or not is_cache(srv.kind):
            raise ctx.child("clients").child(i).child("cache").error(
                "only for a client reading through a cache (a kind xcache server)", c.cache)


def _can_origin(kind: str) -> bool:
    return not is_cache(kind) and "root" in kinds.server(kind).ports


def _check_placement(sctx: S.Ctx, sc: "Scenario", s, o) -> None:
    t = sc.topology
    if t.layout != "netns":
        raise sctx.child("kind").error(f"a {s.kind} server needs a topology built here "
                                       "(topology: xcache)", s.kind)
    for p in sc.paths:
        if p.server_host != "local":
            raise sctx.child("kind").error(
                f"a {s.kind} server runs on this host only (path {p.name} puts its "
                f"servers on {p.server_host})", s.kind)
    client = t.by_role("client")[0].name
    lan = next(ln for ln in t.links if client in ln.ends)
    near = sorted(e for e in lan.ends if t.node(e).role == "server")
    if s.node is None or s.node not in near:
        where = (f"node: {', '.join(near)}" if near else
                 f"a topology with a server node on the client's LAN (topology xcache); "
                 f"{t.name} has none")
        raise sctx.child("node").error(f"a {s.kind} server sits on the client's side of the "
                                       f"emulated WAN: give it {where}", s.node)
    if o.node is not None and o.node in near:
        raise sctx.child("origin").error(
            f"origin {o.name} is on the client's LAN (node {o.node}): put it behind the "
            "router (no node:, or a server node there) so the cache reads over the WAN",
            s.origin)
