"""Topology descriptions: nodes with roles and the links between them, as pure data.

A topology file (`topologies/*.yaml`) either says `layout: host` (real paths only,
nothing is built) or lists `nodes` and `links`, which rig.realization.netns realizes for each path:

    nodes:                       # name: 1-2 lowercase letters, used in namespace and
      - {name: c, role: client}  #   interface names; role: client | router | server
      - {name: r, role: router}
      - {name: s, role: server, count: servers}   # count: N, or `servers` (one per
                                                  # scenario server): s1, s2, ...
    links:
      - {ends: [c, r], emulated: true}            # veth pair (two single nodes)
      - {kind: bridge, ends: [r, s], emulated: true}
                                 # a bridge in the first end's namespace (the router's
                                 # address lives on it) and one veth port per other end
    addressing: {block: 8}       # optional: addresses per path (power of two)

Addresses: path i takes the block [i*block, (i+1)*block) of the run's leased /24; inside
it every link, in file order, gets the smallest aligned subnet that holds its ends (a
veth pair a /30), and its ends take the host addresses in order (.1, .2, ...). The
router's interfaces on the two `emulated` links are where emulation applies: the one
whose link holds the client is the client side, the other the server side. MTU comes
from the scenario's tuning. Every non-router node sits on exactly one link, which holds
the router; its default route points at the router.

Must not import anything that runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rig.description import schema as S

ROLES = ("client", "router", "server")
LINK_KINDS = ("veth", "bridge")
MAX_COUNT = 16
_NODE_NAME = re.compile(r"[a-z]{1,2}")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    role: str
    count: int | str | None = None     # None: one node named `name`; N or "servers": name1..

    def instances(self, servers: int | None = None) -> list[str]:
        """Node names this entry stands for, given the scenario's number of servers."""
        if self.count is None:
            return [self.name]
        n = self.count
        if n == "servers":
            if servers is None:
                raise ValueError(f"node {self.name} has count: servers; "
                                 "say how many servers")
            n = servers
        if not 1 <= int(n) <= MAX_COUNT:
            raise ValueError(f"node {self.name}: count must be 1..{MAX_COUNT} (got {n})")
        return [f"{self.name}{k}" for k in range(1, int(n) + 1)]


@dataclass(frozen=True)
class LinkSpec:
    ends: tuple[str, ...]          # node names (templates); a bridge's holder first
    kind: str = "veth"
    emulated: bool = False


@dataclass(frozen=True)
class Topology:
    name: str
    layout: str                    # netns (built from nodes and links) | host (real paths)
    description: str = ""
    nodes: tuple[NodeSpec, ...] = ()
    links: tuple[LinkSpec, ...] = ()
    block: int | None = None       # addresses per path; None: the smallest that fits
    # layout "mininet": the Topo read from a user's file (rig.description.mininet.MininetTopo);
    # `nodes` then holds its hosts (client, server, other hosts as servers), no links
    mininet: Any = None

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def by_role(self, role: str) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == role]

    @property
    def router(self) -> NodeSpec:
        return self.by_role("router")[0]

    @property
    def counted(self) -> bool:
        """Whether the number of nodes depends on the scenario (count: servers)."""
        return any(n.count == "servers" for n in self.nodes)

    def server_slots(self) -> int:
        """How many server nodes the topology has (count: servers counts as one)."""
        return sum(len(n.instances(1)) for n in self.by_role("server"))


# --- parsing ------------------------------------------------------------------------

def _count(v: Any) -> int | str:
    if v == "servers":
        return v
    return S.integer(1, MAX_COUNT)(v)


def _node(ctx: S.Ctx, v: Any) -> NodeSpec:
    d = S.check_mapping(ctx, v, {"name": S.Field(S.text), "role": S.Field(S.choice(*ROLES)),
                                 "count": S.Field(_count, None)})
    if not _NODE_NAME.fullmatch(d["name"]):
        raise ctx.child("name").error("expected 1-2 lowercase letters", d["name"])
    if d["count"] is not None and d["role"] != "server":
        raise ctx.child("count").error("only servers come in numbers", d["count"])
    return NodeSpec(**d)


def _link(ctx: S.Ctx, v: Any) -> LinkSpec:
    d = S.check_mapping(ctx, v, {"ends": S.Field(S.list_of(S.text, min_len=2, scalar_ok=False)),
                                 "kind": S.Field(S.choice(*LINK_KINDS), "veth"),
                                 "emulated": S.Field(S.boolean, False)})
    if d["kind"] == "veth" and len(d["ends"]) != 2:
        raise ctx.child("ends").error("a veth pair has two ends", d["ends"])
    if len(set(d["ends"])) != len(d["ends"]):
        raise ctx.child("ends").error("a node appears twice", d["ends"])
    return LinkSpec(ends=tuple(d["ends"]), kind=d["kind"], emulated=d["emulated"])


def _block(v: Any) -> int:
    n = S.integer(4, 256)(v)
    if n & (n - 1):
        raise ValueError("must be a power of two")
    return n


def parse(data: Any, *, source: str) -> Topology:
    """A topology document -> Topology; one-line InputError naming file, key and value."""
    ctx = S.Ctx(source)
    d = S.check_mapping(ctx, data, {
        "name": S.Field(S.name), "description": S.Field(S.text, ""),
        "layout": S.Field(S.choice("netns", "host"), None),
        "nodes": S.Field(S.list_of(S.with_ctx(_node), scalar_ok=False), None),
        "links": S.Field(S.list_of(S.with_ctx(_link), scalar_ok=False), None),
        "addressing": S.Field(S.with_ctx(lambda c, v: S.check_mapping(
            c, v, {"block": S.Field(_block, None)})), None)})
    layout = d["layout"] or ("netns" if d["nodes"] is not None else None)
    if layout is None:
        raise ctx.child("nodes").error("required key is missing (or say layout: host)")
    if layout == "host":
        for k in ("nodes", "links", "addressing"):
            if d[k] is not None:
                raise ctx.child(k).error("layout host builds nothing", d[k])
        return Topology(d["name"], "host", d["description"])
    if d["nodes"] is None or d["links"] is None:
        raise ctx.child("nodes" if d["nodes"] is None else "links").error(
            "required key is missing")
    topo = Topology(d["name"], "netns", d["description"], tuple(d["nodes"]), tuple(d["links"]),
                    (d["addressing"] or {}).get("block"))
    _check(ctx, topo)
    return topo


def _check(ctx: S.Ctx, t: Topology) -> None:
    S.unique_names(ctx.child("nodes"), list(t.nodes), "node")
    for role, want in (("client", 1), ("router", 1)):
        if len(t.by_role(role)) != want:
            raise ctx.child("nodes").error(f"needs exactly {want} {role}",
                                           [n.name for n in t.by_role(role)])
    if not t.by_role("server"):
        raise ctx.child("nodes").error("needs at least one server")
    names = {n.name for n in t.nodes}
    router = t.router.name
    on: dict[str, int] = {}
    for i, ln in enumerate(t.links):
        lc = ctx.child("links").child(i)
        for e in ln.ends:
            if e not in names:
                raise lc.child("ends").error("no node of that name", e)
            on[e] = on.get(e, 0) + 1
        if router not in ln.ends:
            raise lc.child("ends").error("every link reaches the router", list(ln.ends))
        if ln.kind == "bridge" and ln.ends[0] != router:
            raise lc.child("ends").error("a bridge lives in the router: name it first",
                                         list(ln.ends))
        if ln.kind == "veth" and any(t.node(e).count is not None for e in ln.ends):
            raise lc.child("kind").error("counted nodes need a bridge", ln.kind)
    for n in t.nodes:
        if n.role != "router" and on.get(n.name, 0) != 1:
            raise ctx.child("nodes").error(f"node {n.name} must sit on exactly one link "
                                           f"(is on {on.get(n.name, 0)})")
    emulated = [ln for ln in t.links if ln.emulated]
    client = t.by_role("client")[0].name
    client_side = [ln for ln in emulated if client in ln.ends]
    server_side = [ln for ln in emulated if client not in ln.ends
                   and any(t.node(e).role == "server" for e in ln.ends)]
    if len(emulated) != 2 or len(client_side) != 1 or len(server_side) != 1:
        raise ctx.child("links").error(
            "mark exactly two links emulated: the client's and one holding a server",
            [list(ln.ends) for ln in emulated])
    try:
        lay_out(t, 1)
    except ValueError as e:
        raise ctx.error(str(e)) from None


# --- the naming and address rule (pure) ---------------------------------------------

# A path's names are `<prefix><index>` + a suffix of at most this many characters
# (interface names are limited to 15: 'rig3f2a' + two digits + 6).
SUFFIX_MAX = 6


@dataclass(frozen=True)
class LinkLayout:
    """One link of one path, relative to the path: name suffixes and address offsets."""
    kind: str
    emulated: bool
    members: tuple[str, ...]   # node names in address order (a bridge's holder first)
    devs: tuple[str, ...]      # per member, the suffix of the device holding its address
    ports: tuple[str, ...]     # bridge: per other member, the holder-side port's suffix
    offset: int                # the link's subnet: offset inside the path's block ...
    size: int                  # ... and its size (a power of two)


def subnet_size(hosts: int) -> int:
    """The smallest aligned subnet holding `hosts` addresses plus network and broadcast."""
    return _pow2_at_least(hosts + 2)


def _pow2_at_least(n: int) -> int:
    p = 4
    while p < n:
        p *= 2
    return p


def nodes(t: Topology, servers: int | None = None) -> list[tuple[str, str]]:
    """(name, role) of every node, counted nodes expanded, in file order."""
    return [(m, n.role) for n in t.nodes for m in n.instances(servers)]


def lay_out(t: Topology, servers: int | None = None) -> tuple[list[LinkLayout], int]:
    """Every link's names and subnet, and the path's block size (addresses per path).

    A veth pair a-b: devices `ab` (in a) and `ba` (in b). A bridge held by h whose
    first other end is x: bridge `hx` in h carrying h's address, and per member m a
    veth pair `pm` (in h, enslaved) - `mh` (in m, carrying m's address). Links are
    placed in file order, each aligned to its own size; the block is the file's
    `addressing.block` or else the smallest power of two that holds them all.
    """
    out, end = [], 0
    for ln in t.links:
        members = tuple(m for e in ln.ends for m in t.node(e).instances(servers))
        size = subnet_size(len(members))
        start = -(-end // size) * size
        end = start + size
        devs: tuple[str, ...]
        ports: tuple[str, ...]
        if ln.kind == "veth":
            a, b = members
            devs, ports = (a + b, b + a), ()
        else:
            h = members[0]
            devs = (h + ln.ends[1],) + tuple(m + h for m in members[1:])
            ports = tuple("p" + m for m in members[1:])
        out.append(LinkLayout(ln.kind, ln.emulated, members, devs, ports, start, size))
    names = [x for lo in out for x in lo.devs + lo.ports]
    for x in names:
        if len(x) > SUFFIX_MAX:
            raise ValueError(f"interface name part {x!r} is longer than {SUFFIX_MAX}")
        if names.count(x) > 1:
            raise ValueError(f"two interfaces would be named {x!r}: rename a node")
    need = _pow2_at_least(end)
    if need > 256:
        raise ValueError(f"the links need {need} addresses per path; a run has 256")
    if t.block is not None and t.block < end:
        raise ValueError(f"addressing.block {t.block} is too small: the links need {need}")
    return out, t.block or need
