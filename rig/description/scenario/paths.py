"""A scenario's `paths:` and `hosts:`: each entry declared once as a frozen dataclass whose
fields carry their YAML key, parser (with its limits) and default (schema.spec); schema.load
checks a mapping against it, and a `checked` classmethod holds what spans its own fields.

Also the names every section shares: LOCAL (the host running rig), CAPTURE_MODES, the
mapping and address-family parsers.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from rig import netaddr
from rig.description import kinds, limits as L, schema as S, tuningspec, userpath
from rig.description.profile import Direction, GilbertElliott, LinkProfile
from rig.description.tuningspec import Tuning


def _mapping(ctx: S.Ctx, v: Any, what: str, limit: int) -> dict:
    """A YAML mapping of at most `limit` entries (None: empty)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ctx.error(f"expected a mapping of {what}", v)
    if len(v) > limit:
        raise ctx.error(f"at most {limit} entries (has {len(v)})")
    return v


_REAL_ONLY = ("client_ns", "server_ns", "server_addr")

CAPTURE_MODES = ("headers",)     # header capture in the router (rig.orchestration.capture)

LOCAL = "local"          # the host running rig: implied, never declared


@S.describe(type="choice", choices=(4, 6))
def _ip_version(v: Any) -> int:
    if isinstance(v, bool) or v not in (4, 6):
        raise ValueError("expected 4 or 6")
    return int(v)


@S.describe(type="choice", choices=lambda: kinds.backend_names())
def _backend(v: Any) -> str:
    return S.choice(*kinds.backend_names())(v)     # auto, netem, userspace, none, ...


@S.describe(type="text", text="user@host or host", example="rig@dtn1.example.org")
def _ssh_target(v: Any) -> str:
    """`[user@]host` as ssh takes it; never starting with '-' (ssh would read an option)."""
    import re
    if not isinstance(v, str) or not re.fullmatch(
            r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9_\[][A-Za-z0-9_.:\]-]{0,252}", v):
        raise ValueError("expected user@host or host (letters, digits, '.', '-', '_', ':')")
    return v


@S.describe(type="path", text="a file of this host", example="~/.ssh/id_ed25519")
def _local_file(v: Any) -> str:
    """A local file handed to ssh: if it exists it must be a regular file (ssh would
    block on a FIFO); stat never blocks."""
    v = S.path_text(v)
    try:
        mode = os.stat(v).st_mode
    except OSError:
        return v
    why = userpath.refusal(v, mode)
    if why:
        raise ValueError(why)
    return v


@S.describe(type="path", text="an absolute directory", example="/dev/shm")
def _abs_dir(v: Any) -> str:
    v = S.path_text(v)
    if not v.startswith("/") or "/../" in v + "/" or "//" in v:
        raise ValueError("expected an absolute directory like /dev/shm")
    return v.rstrip("/") or "/"


@dataclass(frozen=True)
class HostSpec:
    """A remote host reached over SSH (rig.process.remote)."""
    ssh: str = S.spec(_ssh_target)
    port: int = S.spec(S.integer(1, 65535), 22)
    identity: str | None = S.spec(S.optional(_local_file), None)
    known_hosts: str | None = S.spec(S.optional(_local_file), None)
    # the run's directory on that host (<rundir>/<prefix>): configs, logs, data files
    rundir: str = S.spec(_abs_dir, "/dev/shm")


@S.describe(type="mapping", text="host name: host")
@S.with_ctx
def _hosts(ctx: S.Ctx, v: Any) -> dict:
    v = _mapping(ctx, v, "host names to {ssh, port, identity}", L.MAX_PATHS)
    out = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        name = S.call(c, S.name, k)
        if name == LOCAL:
            raise c.error("'local' is the host running rig: it is implied", k)
        out[name] = S.load(c, x, HostSpec)
    return out


S.described(_hosts, cls=HostSpec, example={"dtn1": {"ssh": "rig@dtn1.example.org"}})


@S.describe(type="interface", text="an interface name (at most 15)", example="eth1")
def _ifname(v: Any) -> str:
    """A network interface's name as the kernel takes it (IFNAMSIZ: at most 15 bytes)."""
    import re
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,14}", v):
        raise ValueError("expected an interface name (letters, digits, '_', '.', '-', "
                         "at most 15)")
    return v


@dataclass(frozen=True)
class RouterIfaces:
    """The router host's two interfaces of an emulated path between hosts (third box):
    `client` faces the client host, `server` the server host."""
    client: str = S.spec(_ifname)
    server: str = S.spec(_ifname)


@dataclass(frozen=True)
class GeModel:
    """Gilbert-Elliott burst loss as a scenario writes it."""
    p: float = S.spec(S.fraction)
    r: float = S.spec(S.fraction)
    loss_bad: float = S.spec(S.fraction, 1.0)
    loss_good: float = S.spec(S.fraction, 0.0)


def _gemodel(ctx: S.Ctx, v: Any) -> GilbertElliott:
    g = S.load(ctx, v, GeModel)
    return S.call(ctx, lambda x: GilbertElliott(**x), dataclasses.asdict(g))


S.described(_gemodel, type="section", cls=GeModel)


@dataclass(frozen=True)
class PathSpec:
    name: str = S.spec(S.name)
    kind: str = S.spec(S.choice("emulated", "real"), "emulated")    # emulated | real
    # the round-trip time the path emulates; a list is swept, one step each (half each way)
    rtts_s: list[float] = S.spec(S.list_of(S.duration_in(0.0, L.MAX_RTT_S),
                                           max_len=L.MAX_RTTS), None, key="rtt")
    jitter_s: float = S.spec(S.duration_in(0.0, L.MAX_RTT_S), 0.0, key="jitter")
    jitter_dist: str = S.spec(S.choice("uniform", "normal"), "uniform",
                              key="jitter_distribution")
    loss: float = S.spec(S.fraction, 0.0)     # on the data direction (server -> client)
    gemodel: GilbertElliott | None = S.spec(S.with_ctx(_gemodel), None)
    rate_bps: float | None = S.spec(S.optional(S.rate), None, key="rate")   # the bottleneck
    # the bottleneck's queue in packets (default: one bandwidth-delay product)
    queue_pkts: int | None = S.spec(S.optional(S.integer(1, L.MAX_QUEUE_PKTS)), None,
                                    key="queue")
    backend: str = S.spec(_backend, kinds.AUTO)    # the emulation; auto: the best this host has
    # real paths: where the client runs, where the server listens (existing, used as-is)
    client_ns: str | None = S.spec(S.optional(S.ns_name), None)
    server_ns: str | None = S.spec(S.optional(S.ns_name), None)
    server_addr: str | None = S.spec(S.optional(S.ip_address), None)
    # real paths: which host (of `hosts:`) runs the clients and the servers
    client_host: str = S.spec(S.name, LOCAL)
    server_host: str = S.spec(S.name, LOCAL)
    # tcpdump of the router's interfaces (headers only) during every group; costly, off
    capture: str | None = S.spec(S.optional(S.choice(*CAPTURE_MODES)), None)
    # emulated paths between remote hosts: the host that forwards between them and
    # carries the emulation (rig.realization.remote_router), and its two interfaces
    router_host: str | None = S.spec(S.optional(S.name), None)
    router_ifaces: RouterIfaces | None = S.spec(S.optional(S.section(RouterIfaces)), None)
    # the router role on an end host (router_host = client_host or server_host): that
    # end's one interface on the path, which carries both directions
    router_iface: str | None = S.spec(S.optional(_ifname), None)
    # this path's MTU (seed 000's jumbo frames beside 1500 in one run); None: tuning.mtu
    mtu: int | None = S.spec(S.optional(S.integer(L.MIN_MTU, L.MAX_MTU)), None)
    # address family: 4, or 6 (an emulated path in fd72:6967::/96, rig.realization.netns);
    # a path naming server_addr takes its family; always set once parsed
    ip: int | None = S.spec(S.optional(_ip_version), None)
    # the path's own namespaced tuning over the scenario's (tcp buffers, congestion
    # control, mtu probing, optmem, fast open): two paths of one run tuned differently
    tuning: Tuning | None = S.spec(S.optional(S.section(Tuning)), None)
    # the family was the path's own (`ip:` or server_addr), which `sweep.ip` leaves alone
    ip_stated: bool = False
    rtt_stated: bool = False     # `rtt:` was given (a Mininet topology's links set it)
    # set by sweep.origins / sweep.server_cpus on a path's copies (path_servers)
    origins: int | None = None
    server_cpus: int | None = None
    copy_of: str | None = None   # a sweep's copy (sweep.ip, origins, server_cpus) of this path

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        fam = netaddr.family(d["server_addr"]) if d["server_addr"] else 0
        if d["ip"] is not None and fam and fam != d["ip"]:
            raise ctx.child("server_addr").error(f"an IPv{fam} address on an IPv{d['ip']} "
                                                 "path (ip:)", d["server_addr"])
        d = dict(d, ip=d["ip"] or fam or 4, ip_stated=bool(d["ip"] or fam))
        if d["tuning"] is not None:
            if d["kind"] == "real" or d["router_host"] is not None \
                    or LOCAL not in (d["client_host"], d["server_host"]):
                raise ctx.child("tuning").error("a path's own tuning is applied in the "
                                                "namespaces this host builds (elsewhere: the "
                                                "scenario's tuning:)")
            d["tuning"] = tuningspec.for_path(ctx.child("tuning"), d["tuning"])
        if d["mtu"] is not None and (d["kind"] == "real" or d["router_host"] is not None
                                     or LOCAL not in (d["client_host"], d["server_host"])):
            raise ctx.child("mtu").error("a path's own MTU is set on the namespaces this "
                                         "host builds (elsewhere: tuning.mtu)", d["mtu"])
        if d["kind"] == "real":
            for k in ("router_host", "router_ifaces", "router_iface"):
                if d[k] is not None:
                    raise ctx.child(k).error("a real path has no router: use kind: "
                                             "emulated", d[k])
            if d["capture"] is not None:
                raise ctx.child("capture").error("captures are taken in the router of an "
                                                 "emulated path", d["capture"])
            for attr, key in (("rtts_s", "rtt"), ("gemodel", "gemodel"), ("rate_bps", "rate"),
                              ("queue_pkts", "queue")):
                if d[attr] is not None:
                    raise ctx.child(key).error("a real path is used as-is: nothing is emulated",
                                               d[attr])
            if d["loss"] or d["jitter_s"]:
                raise ctx.error("a real path is used as-is: no loss or jitter")
            if not d["server_addr"]:
                raise ctx.child("server_addr").error("a real path needs the server's address")
            for ns, h in (("client_ns", "client_host"), ("server_ns", "server_host")):
                if d[ns] is not None and d[h] != LOCAL:
                    raise ctx.child(ns).error("namespaces on a remote host: not yet (the "
                                              "host's own network is used)", d[ns])
            if d["backend"] not in ("auto", "none"):
                raise ctx.child("backend").error("a real path has backend none", d["backend"])
            return dict(d, rtts_s=[], backend="none")
        if LOCAL not in (d["client_host"], d["server_host"]) or d["router_host"]:
            _check_remote_router(ctx, d)
        else:
            for k in ("client_host", "server_host"):
                if d[k] != LOCAL:
                    raise ctx.child(k).error("an emulated path with one end on this host "
                                             "is not built (both ends remote, or both here)",
                                             d[k])
        for k in _REAL_ONLY:
            if k == "server_addr" and d["router_host"]:
                continue
            if d[k] is not None:
                raise ctx.child(k).error("only real paths name existing namespaces/addresses",
                                         d[k])
        rtts = d["rtts_s"] if d["rtts_s"] is not None else [0.0]
        for r in rtts:        # each RTT within 0..limits.MAX_RTT_S (checked by its parser)
            if d["jitter_s"] > r:
                raise ctx.child("jitter").error(f"jitter exceeds the RTT {r * 1e3:g}ms",
                                                d["jitter_s"])
        if d["loss"] and d["gemodel"]:
            raise ctx.child("gemodel").error("give either loss or gemodel, not both")
        if d["loss"] >= 1.0:
            raise ctx.child("loss").error("100% loss moves nothing", d["loss"])
        return dict(d, rtts_s=rtts, rtt_stated=d["rtts_s"] is not None)

    def profile(self, rtt_s: float) -> LinkProfile:
        half_j = self.jitter_s / 2.0

        def d(loss: float, ge: GilbertElliott | None) -> Direction:
            return Direction(delay_s=rtt_s / 2.0, jitter_s=min(half_j, rtt_s / 2.0),
                             jitter_dist=self.jitter_dist, loss=loss, gemodel=ge,
                             rate_bps=self.rate_bps, queue_pkts=self.queue_pkts)
        # loss on the data direction (server -> client) only: configured loss = data loss
        return LinkProfile(forward=d(0.0, None), reverse=d(self.loss, self.gemodel))


def _check_remote_router(ctx: S.Ctx, d: dict[str, Any]) -> None:
    """An emulated path between two remote hosts through a third one that forwards."""
    for k in ("client_host", "server_host"):
        if d[k] == LOCAL:
            raise ctx.child(k).error("an emulated path through a router host runs between "
                                     "two remote hosts", d[k])
    if d["router_host"] is None:
        raise ctx.child("router_host").error("an emulated path between hosts names the host "
                                             "that forwards between them and emulates")
    if d["router_host"] in (d["client_host"], d["server_host"]):
        # the router role on an end host (rig.realization.end_router): one interface
        if d["router_ifaces"] is not None:
            raise ctx.child("router_ifaces").error(
                "the router role on an end host takes that end's interface on the path: "
                "router_iface: IF")
        if d["router_iface"] is None:
            raise ctx.child("router_iface").error(
                f"name host {d['router_host']}'s interface on the path (it carries both "
                "directions there)")
    else:
        if d["router_iface"] is not None:
            raise ctx.child("router_iface").error(
                "router_iface is for the router role on an end host; a third host names "
                "router_ifaces: {client: IF, server: IF}", d["router_iface"])
        if d["router_ifaces"] is None:
            raise ctx.child("router_ifaces").error("name the router host's interfaces: "
                                                   "{client: IF, server: IF}")
        if d["router_ifaces"].client == d["router_ifaces"].server:
            raise ctx.child("router_ifaces").child("server").error(
                "the two router interfaces must differ", d["router_ifaces"].server)
    if not d["server_addr"]:
        raise ctx.child("server_addr").error("an emulated path between hosts needs the "
                                             "server host's address, as the client reaches it")
    if d["capture"] is not None:
        raise ctx.child("capture").error("captures on a remote router: not built", d["capture"])
    for k in ("client_ns", "server_ns"):
        if d[k] is not None:
            raise ctx.child(k).error("namespaces on a remote host: not yet", d[k])
    if d["backend"] == "none":
        raise ctx.child("backend").error("a router host emulates: auto, netem or userspace",
                                         d["backend"])


def parse_path(ctx: S.Ctx, v: Any) -> PathSpec:
    """One entry of a scenario's `paths:`; `rig net up` validates its options with it, so
    both accept exactly the same values."""
    return S.load(ctx, v, PathSpec)
