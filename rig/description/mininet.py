"""A Mininet `Topo` as the rig's topology: validation and layout of its exported form (pure).

A scenario may say

    topology: {mininet: ../topologies/two-bottlenecks.py, class: TwoBottlenecks,
               client: h1, server: h2}

The file (relative to the scenario's folder) is a user's Python file defining a subclass
of Mininet's `mininet.topo.Topo`. It is imported by Debian's /usr/bin/python3 in a child
process (rig.realization.mininet, which fills this module's reader slot: the description
runs nothing), and the rig reads only the Topo API's data: hosts, switches and links with
their TCLink-style options. Mininet's runtime (`Mininet()`, mnexec, Open vSwitch, `mn -c`)
is never used: its nodes carry no run prefix, so a killed run could not be cleaned
without risking other people's resources; `mn -c` kills by name.

What the rig builds from it (`lay_out`), every name carrying the run's prefix:
- each host: a namespace named after it (`<prefix>-<i>h1`);
- switches joined by links without options: one L2 segment, a Linux bridge in the
  namespace of its first switch (no STP: a loop is refused);
- each link with options (delay, jitter, loss, bw, max_queue_size): a router namespace
  `l1`, `l2`, ... in the middle of the link, forwarding between the two segments it
  joins, where the rig's own emulation (netem, or the userspace engine) applies the
  link's options to each direction, as TCLink does on each end's egress: a link's delay
  counts once each way, so the round trip over it is twice its delay;
- addresses: one subnet per segment in the path's block; static routes along the tree
  of segments (so the segments and the links with options must form a tree).

Options (Mininet's units): delay and jitter as text with a unit ('10ms'), loss in
percent (a number), bw in Mbit/s (a number; no 1000 Mbit/s cap), max_queue_size in
packets; `cls` (e.g. TCLink) is accepted and ignored: every link with options is
emulated. Any other option, host or switch option is refused, one line.

Must not import anything that runs.
"""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rig.description import limits as L, units
from rig.description.profile import Direction, LinkProfile
from rig.description.schema import Ctx
from rig.description.topology import _pow2_at_least, subnet_size

NODE_NAME = re.compile(r"[a-z]{1,2}[0-9]{0,2}")     # what the rig's namespace names hold
ROUTER = "l"                  # link routers: l1, l2, ... (refused as Mininet names)
MAX_LINKS = 64
LINK_OPTIONS = ("delay", "jitter", "loss", "bw", "max_queue_size")
IGNORED_LINK_OPTIONS = ("cls", "node1", "node2", "port1", "port2", "key")
SWITCH_OPTIONS = ("isSwitch", "cls", "dpid")

# rig.realization.mininet fills this: (file, class) -> the exporter's JSON object, or an
# InputError naming the file. The description only declares the slot (it runs nothing).
Reader = Callable[[Path, str], dict]
_reader: list[Reader] = []


class ExportError(ValueError):
    """The user's file could not be read: which scenario key it concerns (`mininet`:
    the file, `class`: the class) and why, in one line."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def use_reader(fn: Reader) -> None:
    _reader[:] = [fn]


def read(file: Path, cls: str, ctx: Ctx, shown: str) -> dict:
    """The exported Topo of `cls` in `file` (`shown`: as the scenario names it)."""
    if not _reader:
        raise ctx.error("Mininet topologies are read through rig.realization.mininet, "
                        "which was not imported")
    try:
        return _reader[0](file, cls)
    except ExportError as e:
        raise ctx.child(e.key).error(f"{shown}: {e}", shown if e.key == "mininet"
                                     else cls) from None


@dataclass(frozen=True)
class MnLink:
    ends: tuple[str, str]
    delay_s: float = 0.0          # one way, each direction (TCLink: on both egresses)
    jitter_s: float = 0.0
    loss: float = 0.0             # each direction, 0..1
    rate_bps: float | None = None
    queue_pkts: int | None = None
    emulated: bool = False        # any option given

    def direction(self) -> Direction:
        return Direction(delay_s=self.delay_s, jitter_s=self.jitter_s, loss=self.loss,
                         rate_bps=self.rate_bps, queue_pkts=self.queue_pkts)

    def profile(self) -> LinkProfile:
        """Both directions the same, as TCLink configures both ends alike."""
        return LinkProfile(forward=self.direction(), reverse=self.direction())


@dataclass(frozen=True)
class MininetTopo:
    file: str                     # as the scenario names it
    cls: str
    client: str
    server: str
    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    links: tuple[MnLink, ...]


# --- the exporter's JSON -> MininetTopo (validated) ----------------------------------

def _duration(ctx: Ctx, v: Any) -> float:
    try:
        s = units.parse_duration(v if isinstance(v, str) else str(v))
    except ValueError as e:
        raise ctx.error(str(e), v) from None
    if not 0.0 <= s <= L.MAX_RTT_S / 2:
        raise ctx.error(f"must be within 0..{L.MAX_RTT_S / 2:g}s", v)
    return s


def _number(ctx: Ctx, v: Any, lo: float, hi: float, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ctx.error(f"expected a number ({what})", v)
    if not lo <= v <= hi:
        raise ctx.error(f"must be within {lo:g}..{hi:g} ({what})", v)
    return float(v)


def _link(ctx: Ctx, a: str, b: str, info: dict) -> MnLink:
    for k in info:
        if k not in LINK_OPTIONS + IGNORED_LINK_OPTIONS:
            raise ctx.child(k).error(f"link option the rig does not apply (known: "
                                     f"{', '.join(LINK_OPTIONS)}; cls is ignored)", info[k])
    d: dict[str, Any] = {}
    if "delay" in info:
        d["delay_s"] = _duration(ctx.child("delay"), info["delay"])
    if "jitter" in info:
        d["jitter_s"] = _duration(ctx.child("jitter"), info["jitter"])
        if d["jitter_s"] > d.get("delay_s", 0.0):
            raise ctx.child("jitter").error("jitter exceeds the link's delay", info["jitter"])
    if "loss" in info:
        d["loss"] = _number(ctx.child("loss"), info["loss"], 0, 99.999, "percent") / 100
    if "bw" in info:
        d["rate_bps"] = _number(ctx.child("bw"), info["bw"], 0.001, L.MAX_RATE_BPS / 1e6,
                                "Mbit/s") * 1e6
    if "max_queue_size" in info:
        q = info["max_queue_size"]
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= L.MAX_QUEUE_PKTS:
            raise ctx.child("max_queue_size").error(
                f"expected packets, 1..{L.MAX_QUEUE_PKTS}", q)
        d["queue_pkts"] = q
    return MnLink((a, b), emulated=any(k in info for k in LINK_OPTIONS), **d)


def _node_name(ctx: Ctx, name: Any, what: str) -> str:
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise ctx.error(f"{what} name: the rig names namespaces after it: 1-2 lowercase "
                        "letters and up to 2 digits (as h1, s12)", name)
    if re.fullmatch(ROUTER + r"[0-9]{1,2}", name):
        raise ctx.error(f"{what} name: {ROUTER}1, {ROUTER}2, ... name the rig's link "
                        "routers: rename it", name)
    return name


def from_export(doc: Any, ctx: Ctx, *, file: str, cls: str, client: str | None,
                server: str | None) -> MininetTopo:
    """The exporter's JSON -> a validated MininetTopo; every error one line naming the
    scenario, `topology.<key>` and the value."""
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), list)
                                            for k in ("hosts", "switches", "links")):
        raise ctx.child("class").error("the exporter gave no hosts, switches and links", cls)
    hosts, switches = [], []
    for name, opts in doc["hosts"]:
        _node_name(ctx.child("class"), name, "host")
        if opts:
            raise ctx.child("class").error(f"host {name}: options the rig does not apply "
                                           "(it assigns addresses and runs its own hosts)",
                                           opts)
        hosts.append(name)
    for name, opts in doc["switches"]:
        _node_name(ctx.child("class"), name, "switch")
        bad = sorted(set(opts or {}) - set(SWITCH_OPTIONS))
        if bad:
            raise ctx.child("class").error(f"switch {name}: options the rig does not apply",
                                           {k: opts[k] for k in bad})
        switches.append(name)
    if not hosts:
        raise ctx.child("class").error(f"{cls} names no hosts", cls)
    if len(hosts) < 2:
        raise ctx.child("class").error(f"{cls} names one host ({hosts[0]}): a client and a "
                                       "server need two", cls)
    if len(doc["links"]) > MAX_LINKS:
        raise ctx.child("class").error(f"{len(doc['links'])} links: at most {MAX_LINKS}", cls)
    known = set(hosts) | set(switches)
    links = []
    for a, b, _key, info in doc["links"]:
        lc = ctx.child("class").child(f"link {a}-{b}")
        if a not in known or b not in known:
            raise lc.error("a link to a node the topology does not name", [a, b])
        if a == b:
            raise lc.error("a link from a node to itself", [a, b])
        links.append(_link(lc, a, b, info if isinstance(info, dict) else {}))
    for h in hosts:
        n = sum(h in ln.ends for ln in links)
        if n != 1:
            raise ctx.child("class").error(f"host {h} is on {n} links: the rig's hosts sit on "
                                           "exactly one", h)
    for key, v in (("client", client), ("server", server)):
        if v is not None and v not in hosts:
            raise ctx.child(key).error(f"not a host of {cls} (hosts: {', '.join(hosts)})", v)
    c, s = client or hosts[0], server or hosts[-1]
    if c == s:
        raise ctx.child("server").error("the client and the server are one host", s)
    if not any(ln.emulated for ln in links):
        raise ctx.child("class").error(f"no link of {cls} has delay, jitter, loss, bw or "
                                       "max_queue_size: nothing to emulate", cls)
    t = MininetTopo(file, cls, c, s, tuple(hosts), tuple(switches), tuple(links))
    try:
        lay_out(t)
    except ValueError as e:
        raise ctx.child("class").error(str(e), cls) from None
    return t


# --- layout: segments, link routers, addresses, routes (pure) ------------------------

@dataclass(frozen=True)
class Segment:
    """One L2 segment: its switches (one bridge, in the first's namespace, or none: a
    veth pair between its two members) and the address holders on it, in address order."""
    switches: tuple[str, ...]
    members: tuple[str, ...]      # hosts and link routers
    offset: int                   # subnet offset in the path's block
    size: int


@dataclass(frozen=True)
class Hop:
    """A link with options: its router, the segment on the client's side and the other."""
    router: str
    link: MnLink
    client_seg: int
    server_seg: int


@dataclass(frozen=True)
class Layout:
    segments: tuple[Segment, ...]
    hops: tuple[Hop, ...]                     # every emulated link, in the file's order
    route: tuple[int, ...]                    # indices of hops from the client to the server
    routes: tuple[tuple[str, int, str], ...]  # (node, destination segment, via router)
    block: int
    roles: dict[str, str] = field(default_factory=dict)   # node -> client|server|router|switch


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def lay_out(t: MininetTopo) -> Layout:
    """Segments (components of the links without options), a router per link with
    options, the tree between them, addresses and static routes. ValueError: a loop, a
    part the client cannot reach, more addresses than a path has."""
    nodes = list(t.hosts) + list(t.switches)
    parent = {n: n for n in nodes}
    plain = [ln for ln in t.links if not ln.emulated]
    for ln in plain:
        ra, rb = _find(parent, ln.ends[0]), _find(parent, ln.ends[1])
        if ra == rb:
            raise ValueError(f"a loop of links without options through {ln.ends[0]}-"
                             f"{ln.ends[1]} (the rig's Linux bridges run without STP)")
        parent[ra] = rb
    roots = list(dict.fromkeys(_find(parent, n) for n in nodes))
    seg_of = {n: roots.index(_find(parent, n)) for n in nodes}
    emulated = [ln for ln in t.links if ln.emulated]
    routers = [f"{ROUTER}{k}" for k in range(1, len(emulated) + 1)]
    # the tree of segments: one edge per link router
    adj: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(roots))}
    for k, ln in enumerate(emulated):
        a, b = seg_of[ln.ends[0]], seg_of[ln.ends[1]]
        if a == b:
            raise ValueError(f"link {ln.ends[0]}-{ln.ends[1]} closes a loop (the rig routes "
                             "statically along a tree)")
        adj[a].append((b, k))
        adj[b].append((a, k))
    start = seg_of[t.client]
    via: dict[int, tuple[int, int] | None] = {start: None}   # segment -> (parent, hop)
    todo = deque([start])
    while todo:
        s = todo.popleft()
        for o, k in adj[s]:
            if o in via:
                if via[s] != (o, k):
                    raise ValueError(f"link {'-'.join(emulated[k].ends)} closes a loop "
                                     "(the rig routes statically along a tree)")
                continue
            via[o] = (s, k)
            todo.append(o)
    lost = [n for n in t.hosts if seg_of[n] not in via] + [
        "-".join(ln.ends) for ln in emulated if seg_of[ln.ends[0]] not in via]
    if lost:
        raise ValueError(f"{lost[0]} cannot reach the client {t.client}")
    hops = []
    for k, ln in enumerate(emulated):
        a, b = seg_of[ln.ends[0]], seg_of[ln.ends[1]]
        near = a if via.get(b) == (a, k) else b
        hops.append(Hop(routers[k], ln, near, b if near == a else a))
    route, s = [], seg_of[t.server]
    while (step := via[s]) is not None:
        route.append(step[1])
        s = step[0]
    route.reverse()
    segs, end = [], 0
    for i in range(len(roots)):
        sw = tuple(n for n in t.switches if seg_of[n] == i)
        members = tuple([h for h in t.hosts if seg_of[h] == i]
                        + [hp.router for hp in hops if i in (hp.client_seg, hp.server_seg)])
        if not members:
            continue          # a lone switch: nothing on it, nothing built
        if not sw and len(members) != 2:
            raise ValueError(f"segment of {', '.join(members)} has no switch")
        size = subnet_size(len(members))
        off = -(-end // size) * size
        end = off + size
        segs.append((i, Segment(sw, members, off, size)))
    index = {i: j for j, (i, _) in enumerate(segs)}
    hops = [Hop(h.router, h.link, index[h.client_seg], index[h.server_seg]) for h in hops]
    block = _pow2_at_least(end)
    if block > 256:
        raise ValueError(f"the segments need {block} addresses; a run has 256")
    routes = _routes([s for _, s in segs], hops)
    roles = {h: "host" for h in t.hosts} | {t.client: "client", t.server: "server"}
    roles |= {hp.router: "router" for hp in hops}
    roles |= {s.switches[0]: "switch" for _, s in segs if s.switches}
    return Layout(tuple(s for _, s in segs), tuple(hops), tuple(route), routes, block, roles)


def _routes(segs: list[Segment], hops: list[Hop]) -> tuple[tuple[str, int, str], ...]:
    """(node, segment, next-hop router) for every address holder and every segment not
    its own: the first router on the way there, reached on the holder's own segment."""
    adj: dict[int, list[tuple[int, str]]] = {i: [] for i in range(len(segs))}
    for h in hops:
        adj[h.client_seg].append((h.server_seg, h.router))
        adj[h.server_seg].append((h.client_seg, h.router))
    out = []
    for si, seg in enumerate(segs):
        first: dict[int, str] = {}          # segment -> first router from si
        todo = deque([(o, r) for o, r in adj[si]])
        seen = {si}
        while todo:
            o, r = todo.popleft()
            if o in seen:
                continue
            seen.add(o)
            first[o] = r
            todo.extend((x, r) for x, _ in adj[o])
        for m in seg.members:
            for dst, r in sorted(first.items()):
                if r != m:            # a router's own two segments are its own
                    out.append((m, dst, r))
    return tuple(out)


def path_values(t: MininetTopo) -> dict[str, Any]:
    """What the path between the client and the server adds up to, for the path's
    checks: RTT = twice the sum of the one-way delays, rate = the smallest bw, jitter
    (of the RTT) twice the sum, loss (data direction) compounded."""
    lay = lay_out(t)
    on = [lay.hops[k].link for k in lay.route]
    rates = [ln.rate_bps for ln in on if ln.rate_bps]
    keep = 1.0
    for ln in on:
        keep *= 1.0 - ln.loss
    return {"rtt_s": 2 * sum(ln.delay_s for ln in on), "rate_bps": min(rates) if rates else None,
            "jitter_s": 2 * sum(ln.jitter_s for ln in on), "loss": 1.0 - keep}
