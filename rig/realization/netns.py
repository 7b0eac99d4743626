"""Realization of paths: network namespaces, veth pairs, bridges, addresses, forwarding.

A path is built from a topology (rig.description.topology: nodes with roles, links, the address
rule); the default, topologies/client-router-server.yaml, is three namespaces client —
router — server joined by two veth pairs; the router forwards and is where link
emulation is applied. Every name carries the run's prefix ('rig' + 4 hex digits):
namespaces `<prefix>-<i><node>` (e.g. rig3f2a-0c, rig3f2a-0s2), interfaces
`<prefix><i><suffix>` (e.g. rig3f2a0cr; <= 15 characters). Addresses come from
198.18.0.0/15 (RFC 2544, reserved for benchmarking), one /24 per run, leased through
O_EXCL files under /run/rig/leases so concurrent runs on one host never collide. A path
with `ip: 6` takes the same lease and layout in the unique-local prefix fd72:6967::/96
("rig"), the IPv4 layout's address in its low 32 bits (198.18.0.1 is fd72:6967::c612:1,
a /30 is a /126): prefix ownership and cleanup are the IPv4 ones.

A Mininet topology (rig.description.mininet) is laid out here too (`_lay_out_mininet`):
a namespace per host, per link router (`l1`, ...) and per switch segment, static routes,
and one LinkSite per link with options in `site.hops` (rig.realization.emul.chain).

`RealizedPath` is the one type for a path's names and addresses; `lay_out` and
`build_argv` are pure; `path_net()` is the context manager that builds and always tears
down. Must not import services, orchestration or reports.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rig.process import owner, proc
from rig.realization import mininet as _mininet_reader  # noqa: F401  (fills the Mininet reader)
from rig.description import mininet as MN, topology as T
from rig.realization.emul.base import LinkSite
from rig.errors import RigError
from rig.description.limits import MAX_PATHS  # noqa: F401  (of the default topology: 8 addresses each in a /24)
from rig.description.topology import Topology

STATE_DIR = Path(os.environ.get("RIG_STATE_DIR", "/run/rig"))
PREFIX_RE = re.compile(r"^rig[0-9a-f]{4}$")
NS_RE = re.compile(r"^(rig[0-9a-f]{4})-[0-9]+[a-z]{1,2}[0-9]{0,2}$")   # <prefix>-<index><node>
ULA6 = ipaddress.ip_network("fd72:6967::/96")
_SUBNETS = [ipaddress.ip_network(f"198.{18 + (n >> 8)}.{n & 255}.0/24") for n in range(512)]
DEFAULT_TOPOLOGY = "client-router-server"
CMD_TIMEOUT = 20.0


def new_prefix() -> str:
    return "rig" + secrets.token_hex(2)


@dataclass(frozen=True)
class Node:
    """One node of a path: its role, namespace (None: the host) and address."""
    name: str                  # node name in the topology, e.g. "c", "r", "s2"
    role: str                  # client | router | server
    ns: str | None
    addr: str | None           # its address (a router has one per link: see Link)


@dataclass(frozen=True)
class Link:
    """One link of a path: a veth pair, or a bridge with one veth port per member."""
    kind: str                  # veth | bridge
    net: str                   # CIDR, e.g. "198.18.0.0/30"
    members: tuple[str, ...]   # node names in address order (a bridge's holder first)
    devs: tuple[str, ...]      # per member, the device holding its address
    addrs: tuple[str, ...]     # per member
    ports: tuple[str, ...]     # bridge: per other member, the holder-side (enslaved) veth
    emulated: bool

    def addr_of(self, node: str) -> str:
        return self.addrs[self.members.index(node)]

    def dev_of(self, node: str) -> str:
        return self.devs[self.members.index(node)]

    @property
    def plen(self) -> int:
        return ipaddress.ip_network(self.net).prefixlen


@dataclass(frozen=True)
class RealizedPath:
    """Everything about one path: names, addresses, and where its emulation lives.

    Built paths come from `lay_out` (a topology, the run's prefix, the path's index and
    the run's leased /24); real paths from `real_path` (existing namespaces or the host,
    nothing built, no site). Pure data: building and removal are `build`/`destroy`.
    """
    name: str
    index: int
    topology: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...] = ()
    prefix: str | None = None
    subnet: str | None = None
    site: LinkSite | None = None
    # a Mininet topology's: (node, destination CIDR, via address) static routes, and the
    # (client, server) nodes (the path's ends; other topologies find them by the router)
    routes: tuple[tuple[str, str, str], ...] = ()
    ends: tuple[str, str] | None = None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def by_role(self, role: str) -> list[Node]:
        return [n for n in self.nodes if n.role == role]

    def _side(self, client: bool) -> Link:
        c = self.client.name
        return next(ln for ln in self.links if ln.emulated and (c in ln.members) == client)

    @property
    def client(self) -> Node:
        return self.by_role("client")[0]

    @property
    def router(self) -> Node | None:
        return next(iter(self.by_role("router")), None)

    @property
    def server(self) -> Node:
        """The primary server: the first one on the server side of the router."""
        if self.ends is not None:
            return self.node(self.ends[1])
        if not self.links:
            return self.by_role("server")[0]
        side = self._side(client=False)
        return next(n for n in self.by_role("server") if n.name in side.members)

    @property
    def namespaces(self) -> list[str]:
        """The namespaces this path builds (none for a real path)."""
        return [n.ns for n in self.nodes if n.ns] if self.links else []

    client_ns = property(lambda self: self.client.ns)
    server_ns = property(lambda self: self.server.ns)
    router_ns = property(lambda self: self.router.ns if self.router else None)
    client_addr = property(lambda self: self.client.addr)
    server_addr = property(lambda self: self.server.addr)
    client_net = property(lambda self: self._side(client=True).net)
    server_net = property(lambda self: self._side(client=False).net)
    router_client_addr = property(
        lambda self: self._side(client=True).addr_of(self.router.name))
    router_server_addr = property(
        lambda self: self._side(client=False).addr_of(self.router.name))

    def describe(self) -> dict:
        return {"name": self.name, "client_ns": self.client_ns,
                "router_ns": self.router_ns, "server_ns": self.server_ns,
                "client_addr": self.client_addr, "server_addr": self.server_addr}


def real_path(index: int, name: str, *, client_ns: str | None, server_ns: str | None,
              server_addr: str) -> RealizedPath:
    """A real path used as-is: nothing is built, nothing is emulated."""
    return RealizedPath(name, index, "host", (Node("c", "client", client_ns, None),
                                              Node("s", "server", server_ns, server_addr)))


def v6_of(net4: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv6Network:
    """The IPv6 twin of one of the rig's IPv4 subnets: the same low bits in ULA6."""
    return ipaddress.IPv6Network((int(ULA6.network_address) + int(net4.network_address),
                                  ULA6.prefixlen + net4.prefixlen))


def lay_out(topology: Topology, prefix: str, index: int, name: str, subnet: str, *,
            workdir: Path | None = None, servers: int | None = None,
            ip: int = 4) -> RealizedPath:
    """Names and addresses of path `index` of a run built from `topology` (pure).

    Namespaces `<prefix>-<index><node>`, interfaces `<prefix><index><suffix>` (suffixes
    and address offsets: rig.description.topology.lay_out), path i in block i of the leased /24.
    """
    if not PREFIX_RE.match(prefix):
        raise ValueError(f"bad prefix {prefix!r}")
    if topology.layout == "mininet":
        if ip != 4:
            raise ValueError("a Mininet topology is built with IPv4")
        return _lay_out_mininet(topology, prefix, index, name, subnet, workdir=workdir)
    if topology.layout != "netns":
        raise ValueError(f"topology {topology.name} builds nothing")
    links, block = T.lay_out(topology, servers)
    if not 0 <= index < 256 // block:
        raise ValueError(f"at most {256 // block} paths of topology {topology.name} per run")
    net = ipaddress.ip_network(subnet)
    base = net.network_address + block * index
    tag = f"{prefix}{index}"
    rl = []
    for lo in links:
        host_bits = lo.size.bit_length() - 1          # size is a power of two
        sub = ipaddress.ip_network(f"{base + lo.offset}/{32 - host_bits}")
        if ip == 6:
            sub = v6_of(sub)
        rl.append(Link(lo.kind, str(sub), lo.members, tuple(tag + d for d in lo.devs),
                       tuple(str(sub.network_address + 1 + k) for k in range(len(lo.members))),
                       tuple(tag + p for p in lo.ports), lo.emulated))
    own = {m: ln.addr_of(m) for ln in rl for m in ln.members}
    nodes = tuple(Node(n, role, f"{prefix}-{index}{n}", None if role == "router" else own[n])
                  for n, role in T.nodes(topology, servers))
    path = RealizedPath(name, index, topology.name, nodes, tuple(rl), prefix, subnet)
    cside, sside = path._side(client=True), path._side(client=False)
    assert path.router is not None, "a built topology has a router"
    r = path.router.name
    ns_of = {n.name: n.ns for n in nodes if n.ns is not None}    # every node's, here
    ends = [tuple((ns_of[m], side.dev_of(m)) for m in side.members if m != r)
            for side in (cside, sside)]
    site = LinkSite(path=name, prefix=prefix, router_ns=path.router_ns,
                    to_client_if=cside.dev_of(r), to_server_if=sside.dev_of(r),
                    client_net=cside.net, server_net=sside.net, queue_base=2 * index,
                    workdir=workdir or STATE_DIR / prefix / name,
                    client_ends=ends[0], server_ends=ends[1])
    return dataclasses.replace(path, site=site)


def _lay_out_mininet(topology: Topology, prefix: str, index: int, name: str, subnet: str, *,
                     workdir: Path | None) -> RealizedPath:
    """Names and addresses of a Mininet topology's path (rig.description.mininet.lay_out):
    a namespace per host, per link router and per segment with switches (named after
    its first switch, holding its bridge `b<k>`); interfaces `e<n>` (an address holder's
    end) and `p<n>` (its bridge port); one LinkSite per link router in `site.hops`."""
    mt = topology.mininet
    lay = MN.lay_out(mt)
    if not 0 <= index < 256 // lay.block:
        raise ValueError(f"at most {256 // lay.block} paths of topology {topology.name} per run")
    base = ipaddress.ip_network(subnet).network_address + lay.block * index
    tag = f"{prefix}{index}"
    nets: list[str] = []
    links: list[Link] = []
    n = 0
    for k, sg in enumerate(lay.segments):
        sub = ipaddress.ip_network(f"{base + sg.offset}/{32 - (sg.size.bit_length() - 1)}")
        nets.append(str(sub))
        addrs = tuple(str(sub.network_address + 1 + j) for j in range(len(sg.members)))
        devs = tuple(f"{tag}e{n + j}" for j in range(len(sg.members)))
        if sg.switches:            # the bridge holds no address
            links.append(Link("bridge", str(sub), (sg.switches[0],) + sg.members,
                              (f"{tag}b{k}",) + devs, ("",) + addrs,
                              tuple(f"{tag}p{n + j}" for j in range(len(sg.members))), False))
        else:
            links.append(Link("veth", str(sub), sg.members, devs, addrs, (), False))
        n += len(sg.members)
    def seg(*members: str) -> Link:      # the (first) segment holding all of them
        return links[next(i for i, s in enumerate(lay.segments)
                          if set(members) <= set(s.members))]
    nodes = tuple(Node(x, role, f"{prefix}-{index}{x}",
                       None if role in ("router", "switch") else seg(x).addr_of(x))
                  for x, role in lay.roles.items())
    routes = tuple((m, nets[dst], seg(m, r).addr_of(r)) for m, dst, r in lay.routes)
    ns_of: dict[str, str] = {x.name: x.ns for x in nodes if x.ns}
    wd = workdir or STATE_DIR / prefix / name
    ends = [((ns_of[h], seg(h).dev_of(h)),) for h in (mt.client, mt.server)]  # the senders
    hops = tuple((LinkSite(path=f"{name}.{h.router}", prefix=prefix, router_ns=ns_of[h.router],
                           to_client_if=links[h.client_seg].dev_of(h.router),
                           to_server_if=links[h.server_seg].dev_of(h.router),
                           client_net=nets[h.client_seg], server_net=nets[h.server_seg],
                           queue_base=2 * index, workdir=wd / h.router,
                           client_ends=ends[0], server_ends=ends[1]), h.link.profile())
                 for h in lay.hops)
    first = hops[lay.route[0]][0] if lay.route else hops[0][0]
    site = dataclasses.replace(first, path=name, workdir=wd, hops=hops)
    return RealizedPath(name, index, topology.name, nodes, tuple(links), prefix, subnet,
                        site, routes, (mt.client, mt.server))


def build_argv(path: RealizedPath, *, mtu: int = 1500) -> list[list[str]]:
    """Every command that builds `path`, in order: namespaces, links (veth pairs,
    bridges and their ports), addresses with MTU, loopbacks, default routes of every
    non-router node via the router, forwarding in the router."""
    ns = {n.name: n.ns for n in path.nodes if n.ns}
    r = path.router
    assert r is not None and r.ns and len(ns) == len(path.nodes), "every node has a namespace"
    routers = [n for n in path.nodes if n.role == "router"]
    v6 = any(":" in ln.net for ln in path.links)
    cmds: list[list[str]] = [["ip", "netns", "add", ns[n.name]] for n in path.nodes]
    for ln in path.links:
        if ln.kind == "veth":
            (a, b), (da, db) = ln.members, ln.devs
            cmds.append(["ip", "link", "add", da, "netns", ns[a], "type", "veth",
                         "peer", "name", db, "netns", ns[b]])
            continue
        h = ns[ln.members[0]]
        cmds.append(["ip", "-n", h, "link", "add", ln.devs[0], "type", "bridge"])
        for m, port in zip(ln.members[1:], ln.ports):
            cmds += [["ip", "link", "add", ln.dev_of(m), "netns", ns[m], "type", "veth",
                      "peer", "name", port, "netns", h],
                     ["ip", "-n", h, "link", "set", port, "master", ln.devs[0]],
                     ["ip", "-n", h, "link", "set", port, "mtu", str(mtu), "up"]]
    for ln in path.links:
        for m, dev, addr in zip(ln.members, ln.devs, ln.addrs):
            # nodad: an IPv6 address is usable at once, not after a second of duplicate
            # address detection on a link only the rig's namespaces share
            if addr:        # a Mininet segment's bridge holds none
                cmds.append(["ip", "-n", ns[m], "addr", "add", f"{addr}/{ln.plen}", "dev", dev,
                             *(["nodad"] if v6 else [])])
            cmds.append(["ip", "-n", ns[m], "link", "set", dev, "mtu", str(mtu), "up"])
    cmds += [["ip", "-n", ns[n.name], "link", "set", "lo", "up"] for n in path.nodes]
    if path.routes:         # a Mininet topology: along its tree of segments
        cmds += [["ip", "-n", ns[m], "route", "add", dst, "via", via]
                 for m, dst, via in path.routes]
    for n in path.nodes:
        if n.role not in ("router", "switch") and not path.routes:
            ln = next(x for x in path.links if n.name in x.members)
            cmds.append(["ip", *(["-6"] if v6 else []), "-n", ns[n.name], "route", "add",
                         "default", "via", ln.addr_of(r.name)])
    cmds += [["ip", "netns", "exec", x.ns, "sysctl", "-q", "-w",
              "net.ipv6.conf.all.forwarding=1" if v6 else "net.ipv4.ip_forward=1"]
             for x in routers if x.ns]
    if v6:   # the first neighbour solicitation on a new veth goes unanswered, and the
        # retry comes a second later (RetransTimer): resolve every gateway now, before
        # any emulation, so the path check's first pings do not wait (measured: 1.03 s)
        for n in path.nodes:
            if n.role != "router":
                ln = next(x for x in path.links if n.name in x.members)
                cmds.append(["ip", "netns", "exec", ns[n.name], "ping", "-n", "-q", "-c", "1",
                             "-W", "5", ln.addr_of(r.name)])
    return cmds


# --- leases and state ---------------------------------------------------------------

def lease_subnet(prefix: str) -> str:
    """Claim a /24 no other live run uses; stale leases (their namespaces gone) are reused."""
    d = STATE_DIR / "leases"
    d.mkdir(parents=True, exist_ok=True)
    live = set(list_namespaces())
    for net in _SUBNETS:
        f = d / str(net.network_address)
        try:
            fd = os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = f.read_text().strip() if f.exists() else ""
            if holder and not any(ns.startswith(holder + "-") for ns in live) \
                    and not (STATE_DIR / f"{holder}.json").exists():
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(prefix)
        return str(net)
    raise RigError("no free address range in 198.18.0.0/15 (run `rig clean`?)")


def release_subnet(prefix: str) -> None:
    d = STATE_DIR / "leases"
    if not d.is_dir():
        return
    for f in d.iterdir():
        with contextlib.suppress(OSError):
            if f.read_text().strip() == prefix:
                f.unlink()


def list_namespaces() -> list[str]:
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if NS_RE.match(n))


def pids_argv(ns: str) -> list[str]:
    return ["ip", "netns", "pids", ns]


def del_argv(ns: str) -> list[str]:
    return ["ip", "netns", "del", ns]


def ns_pids(ns: str) -> list[int]:
    res = proc.run(pids_argv(ns), timeout=CMD_TIMEOUT)
    return [int(x) for x in res.stdout.split() if x.isdigit()]


def write_state(prefix: str, data: dict) -> Path:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    p = STATE_DIR / f"{prefix}.json"
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(p)
    return p


def read_states() -> dict[str, dict]:
    out = {}
    if STATE_DIR.is_dir():
        for p in STATE_DIR.glob("rig*.json"):
            if PREFIX_RE.match(p.stem):
                with contextlib.suppress(ValueError, OSError):
                    out[p.stem] = json.loads(p.read_text())
    return out


def drop_state(prefix: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (STATE_DIR / f"{prefix}.json").unlink()


@contextlib.contextmanager
def registry_lock(timeout: float = 10.0) -> Iterator[None]:
    """Serialize check-then-write on the state files (e.g. `rig net up`'s unique names).
    Held for milliseconds; the deadline only guards against a wedged holder."""
    import fcntl
    import time
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_DIR / "registry.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RigError(f"{STATE_DIR}/registry.lock held for over {timeout:g} s") \
                        from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)     # releases the lock


def prefix_in_use(prefix: str) -> bool:
    return (STATE_DIR / f"{prefix}.json").exists() or \
        any(ns.startswith(prefix + "-") for ns in list_namespaces())


# --- realization ---------------------------------------------------------------------

ETC_NETNS = Path("/etc/netns")


def isolate_resolver(ns: str) -> None:
    """Give the namespace an empty resolv.conf (`ip netns exec` bind-mounts
    /etc/netns/NS/* over /etc/*). The host's resolver is unreachable from the rig's
    namespaces; without this every lookup waits 5 s for it (seen: xrdcp 5.5 opening
    its -S streams, and two xrdcp at once, each stalled 5 s)."""
    d = ETC_NETNS / ns
    d.mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text("# rig: no resolver inside the rig's namespaces\n")


def forget_resolver(ns: str) -> None:
    if not NS_RE.match(ns):
        raise ValueError(f"refusing to touch {ns!r}: not the rig's")
    shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)


def kill_ns_processes(ns: str) -> None:
    """SIGKILL whatever still runs inside one of the rig's own namespaces, and wait (at
    most EXIT_WAIT_S) until each has exited."""
    if not NS_RE.match(ns):
        raise ValueError(f"refusing to touch namespace {ns!r}: not the rig's")
    import signal
    pids = ns_pids(ns)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    await_exit(pids)


EXIT_WAIT_S = 10.0


def await_exit(pids: list[int], timeout: float = EXIT_WAIT_S) -> list[int]:
    """Wait until each killed pid is gone or a zombie; the ones still exiting at the
    deadline. A process killed while in the kernel (the engine's eBPF links detaching:
    state D) is still there for a moment after SIGKILL."""
    import time
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        left = [p for p in left if _exiting(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return left


def _exiting(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def destroy(path: RealizedPath) -> None:
    for ns in path.namespaces:
        if ns in list_namespaces():
            kill_ns_processes(ns)
            proc.run(del_argv(ns), timeout=CMD_TIMEOUT)
        forget_resolver(ns)


def build(path: RealizedPath, *, mtu: int = 1500) -> RealizedPath:
    """Build one path; on failure remove whatever part of it was made, then raise."""
    try:
        for argv in build_argv(path, mtu=mtu):
            proc.run(argv, timeout=CMD_TIMEOUT, check=True)
        for ns in path.namespaces:
            isolate_resolver(ns)
    except BaseException:
        destroy(path)
        raise
    assert path.site is not None
    path.site.workdir.mkdir(parents=True, exist_ok=True)
    return path


@functools.cache
def default_topology() -> Topology:
    """topologies/client-router-server.yaml: what `rig net up` and tests build."""
    from rig.description.scenario.topologies import TOPOLOGY_DIR, parse_topology
    return parse_topology(TOPOLOGY_DIR / f"{DEFAULT_TOPOLOGY}.yaml")


@contextlib.contextmanager
def path_net(prefix: str, name: str, index: int, *, workdir: Path, mtu: int = 1500,
             subnet: str | None = None, topology: Topology | None = None,
             servers: int | None = None, ip: int = 4) -> Iterator[RealizedPath]:
    """Build one path of `topology` (default client-router-server) and always tear it
    down (incl. its lease)."""
    topology = topology or default_topology()
    own_state = not (STATE_DIR / f"{prefix}.json").exists()
    if own_state:   # a live owner: a concurrent `rig clean` leaves this path alone
        write_state(prefix, {"kind": "run", "prefix": prefix, "pid": os.getpid(),
                             "pid_start": owner.start_time(os.getpid())})
    own_lease = subnet is None
    try:
        subnet = subnet or lease_subnet(prefix)
        path = lay_out(topology, prefix, index, name, subnet, workdir=workdir, servers=servers,
                       ip=ip)
        try:
            yield build(path, mtu=mtu)
        finally:
            destroy(path)
    finally:
        if own_lease:
            release_subnet(prefix)
        if own_state:
            drop_state(prefix)
