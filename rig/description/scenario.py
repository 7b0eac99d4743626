"""Scenario and topology descriptions: pure, validated data loaded from YAML.

A scenario names a topology, paths (emulated or real), servers, data files, client
configurations, a sweep, tuning and validation settings. Everything is checked strictly
(unknown keys, bad units, impossible values) and reported as one line
`FILE: key.path: message (got VALUE)`. Must not import anything that runs.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.description import limits as L, safeyaml, schema as S
from rig.description import topology as T
from rig.description import mininet as MN
from rig.description import reference
from rig.description.reference import Reference
from rig.description.profile import Direction, GilbertElliott, LinkProfile
from rig.description import tuningspec
from rig.description.tuningspec import CC_NAMES, Tuning  # noqa: F401  (Tuning: scenario.Tuning)
from rig.description import caches, userpath
from rig.description.storage import Storage
from rig.errors import InputError
from rig import netaddr
from rig.description import kinds

ROOT = Path(__file__).resolve().parent.parent.parent
TOPOLOGY_DIR = ROOT / "topologies"
# What each client tool can do (servers, protocols, streams, its own option section) and
# which server kinds and emulation backends exist is declared by their own modules, which
# fill rig.description.kinds (this module never imports them).


Topology = T.Topology         # nodes and links: rig/description/topology.py

# Each section of a scenario is declared once: a frozen dataclass whose fields carry
# their YAML key, parser (with its limits) and default (schema.spec); schema.load checks
# a mapping against it, and a `checked` classmethod holds what spans several fields.


def _mapping(ctx: S.Ctx, v: Any, what: str, limit: int) -> dict:
    """A YAML mapping of at most `limit` entries (None: empty)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ctx.error(f"expected a mapping of {what}", v)
    if len(v) > limit:
        raise ctx.error(f"at most {limit} entries (has {len(v)})")
    return v


@S.with_ctx
def _env(ctx: S.Ctx, v: Any) -> dict:
    v = _mapping(ctx, v, "variable names to values", L.MAX_ENV)
    return {S.call(ctx.child(str(k)), S.env_key, k): S.call(ctx.child(str(k)), S.env_value, x)
            for k, x in v.items()}


MAX_ARGS = 64       # words of a client's `args:`


def _arg(v: Any) -> str:
    """One word of a client's `args:`: text on one line (it is an argv item, no shell)."""
    v = S.text(v)
    if not v.isprintable():
        raise ValueError("expected text on one line without control characters")
    return v


def _tool(v: Any) -> str:
    return S.choice(*kinds.CLIENTS.names())(v)        # the registry as it is at load time


def _backend(v: Any) -> str:
    return S.choice(*kinds.backend_names())(v)     # auto, netem, userspace, none, ...


def _server_kind(v: Any) -> str:
    return S.choice(*kinds.SERVERS.names())(v)


def _tls_mode(v: Any) -> str:
    """off | control | all; YAML reads a bare off/on as a boolean: off, or all (on)."""
    if isinstance(v, bool):
        return "all" if v else "off"
    return S.choice(*kinds.TLS_MODES)(v)


_REAL_ONLY = ("client_ns", "server_ns", "server_addr")
CAPTURE_MODES = ("headers",)     # header capture in the router (rig.orchestration.capture)
LOCAL = "local"          # the host running rig: implied, never declared


def _ip_version(v: Any) -> int:
    if isinstance(v, bool) or v not in (4, 6):
        raise ValueError("expected 4 or 6")
    return int(v)


def _ssh_target(v: Any) -> str:
    """`[user@]host` as ssh takes it; never starting with '-' (ssh would read an option)."""
    import re
    if not isinstance(v, str) or not re.fullmatch(
            r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9_\[][A-Za-z0-9_.:\]-]{0,252}", v):
        raise ValueError("expected user@host or host (letters, digits, '.', '-', '_', ':')")
    return v


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


@S.with_ctx
def _port_map(ctx: S.Ctx, v: Any) -> dict[str, int]:
    """{protocol: port}: each a TCP port 1-65535, no two protocols on one port."""
    v = _mapping(ctx, v, "protocols to ports, e.g. {root: 11094, http: 18000}", 8)
    out: dict[str, int] = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        port = S.call(c, S.integer(1, 65535), x)
        if port in out.values():
            raise c.error("two protocols on one port", x)
        out[str(k)] = port
    return out


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


@dataclass(frozen=True)
class PathSpec:
    name: str = S.spec(S.name)
    kind: str = S.spec(S.choice("emulated", "real"), "emulated")    # emulated | real
    rtts_s: list[float] = S.spec(S.list_of(S.duration_in(0.0, L.MAX_RTT_S),
                                           max_len=L.MAX_RTTS), None, key="rtt")
    jitter_s: float = S.spec(S.duration_in(0.0, L.MAX_RTT_S), 0.0, key="jitter")
    jitter_dist: str = S.spec(S.choice("uniform", "normal"), "uniform",
                              key="jitter_distribution")
    loss: float = S.spec(S.fraction, 0.0)
    gemodel: GilbertElliott | None = S.spec(S.with_ctx(_gemodel), None)
    rate_bps: float | None = S.spec(S.optional(S.rate), None, key="rate")
    queue_pkts: int | None = S.spec(S.optional(S.integer(1, L.MAX_QUEUE_PKTS)), None,
                                    key="queue")
    backend: str = S.spec(_backend, kinds.AUTO)
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


@dataclass(frozen=True)
class FileSpec:
    name: str = S.spec(S.name)
    size: int = S.spec(S.optional(S.size), None)   # required, except for a root `path`
    kind: str = S.spec(S.choice("random", "root"), "random")
    # kind root: generated (branches, cluster, seed; docs/caching-modes.md) or a user's file
    branches: int | None = S.spec(S.optional(S.integer(1, L.MAX_ROOT_BRANCHES)), None)
    cluster: int | None = S.spec(S.optional(S.size_in(L.MIN_CLUSTER, L.MAX_CLUSTER)), None)
    seed: int | None = S.spec(S.optional(S.integer(0, L.MAX_SEED)), None)
    path: str | None = S.spec(S.optional(S.path_text), None)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        root_keys = ("branches", "cluster", "seed", "path")
        if d["kind"] == "random":
            for k in root_keys:
                if d[k] is not None:
                    raise ctx.child(k).error("only for kind: root", d[k])
        elif d["path"] is not None:
            for k in ("size", "branches", "cluster", "seed"):
                if d[k] is not None:
                    raise ctx.child(k).error("a user's ROOT file is used as it is", d[k])
            d = dict(d, size=_root_file_size(ctx.child("path"), d["path"]))
        if d["size"] is None:
            raise ctx.child("size").error("required key is missing")
        if d["kind"] == "root" and d["path"] is None:
            _check_generated_root(ctx, d)
        return d

    def root_spec(self) -> Any:
        """The generator's parameters of a generated ROOT file (kind root, no path)."""
        from rig.description.rootfile import generate
        kw: dict[str, Any] = {"cluster_bytes": self.cluster} if self.cluster else {}
        return generate.FileSpec(size_bytes=self.size, n_branches=self.branches or 300,
                                 seed=self.seed or 0, **kw)


def _check_generated_root(ctx: S.Ctx, d: dict[str, Any]) -> None:
    """The ROOT generator's own limits (a 128-byte file, fewer bytes per event than
    branches), named at the scenario's key rather than the generator's."""
    from rig.description.rootfile import generate
    kw: dict[str, Any] = {"cluster_bytes": d["cluster"]} if d["cluster"] else {}
    try:
        generate.FileSpec(size_bytes=d["size"], n_branches=d["branches"] or 300,
                          seed=d["seed"] or 0, **kw)
    except InputError as e:
        key = (e.key or "").removeprefix("rootfile.")
        raise ctx.child(key if key in d else "size").error(e.message, e.value) from None


def _root_file_size(ctx: S.Ctx, path: str) -> int:
    """A user's ROOT file: a regular readable file whose header, record chain and size
    agree (rootfile.check, no uproot); its size is the file's (never written)."""
    from rig.description.rootfile import check
    try:
        return check.check_header(path).size
    except InputError as e:
        raise ctx.error(e.message, path) from None


PER_INSTANCE = "per-instance"


def _per_instance() -> list[str]:
    """`cpus: per-instance`: one CPU of this host each, in order (seed 000's fig 4: one
    iperf3 process per core)."""
    return [str(c) for c in sorted(S.host_cpus())]


@S.with_ctx
def _cpu_sets(ctx: S.Ctx, v: Any) -> list[str]:
    """One CPU set for every instance ("0-1"), a list of one per instance, or
    `per-instance` (a CPU of its own each)."""
    if v == PER_INSTANCE:
        return [PER_INSTANCE]            # expanded once the instance count is known
    return S.call(ctx, S.list_of(S.cpu_set, max_len=L.MAX_ORIGINS), v)


def _client_cpus(ctx: S.Ctx, v: Any) -> str | tuple[str, ...]:
    """A client's CPU set (every instance in it: "0-1"), or one per concurrent instance:
    a list, or `per-instance` (instance i on the host's i-th CPU)."""
    if v == PER_INSTANCE:
        return tuple(_per_instance())
    if isinstance(v, list):
        return tuple(S.call(ctx, S.list_of(S.cpu_set, scalar_ok=False,
                                           max_len=L.MAX_CONCURRENCY), v))
    return S.call(ctx, S.cpu_set, v)



@dataclass(frozen=True)
class ServerSpec:
    """A server instance on every path (kind: a module in rig/services/servers/)."""
    name: str = S.spec(S.name)
    kind: str = S.spec(_server_kind)
    binary: str | None = S.spec(S.optional(S.path_text), None)
    # several origins (issue #10): `count` instances, each in its own server node where
    # the topology has one per instance (multi-origin), each optionally pinned (taskset)
    count: int = S.spec(S.integer(1, L.MAX_ORIGINS), 1)
    cpus: list[str] | None = S.spec(S.optional(_cpu_sets), None)   # one for all, or one each
    node: str | None = S.spec(S.optional(S.text), None)   # a server node of the topology
    # HTTP third-party copy: accepts COPY requests and pulls from the Source (XrdHttpTPC)
    tpc: bool = S.spec(S.boolean, False)
    # a cache (kind xcache): the server it fetches from (rig.description.caches)
    origin: str | None = S.spec(S.optional(S.name), None)
    # the kind's own on/off settings the scenario gave (key -> value; a kind declares
    # them with their defaults, `ServerKind.settings`): how an HTTP server writes its
    # answers, e.g. sendfile(2) for file data (Apache EnableSendfile, nginx sendfile),
    # TCP_CORK while writing an answer (nginx tcp_nopush)
    settings: dict = dataclasses.field(default_factory=dict)
    # the ports it listens on, per protocol of its kind (root, http, https): e.g.
    # {root: 11094, http: 18000}; instance k of `count` adds 10 k. Unset: the kind's
    # defaults (docs/scenarios.md, "Ports"), moved past ports taken on the host; a port given here
    # and already in use is refused before anything starts
    ports: dict | None = S.spec(S.optional(_port_map), None)

    @classmethod
    def extra_fields(cls) -> dict[str, tuple[str, S.Field]]:
        """Every registered kind's settings: read for any server, refused below for a
        kind without them."""
        return {k: (k, S.Field(S.optional(S.boolean), None)) for kind in kinds.SERVERS.all()
                for k in kind.settings}

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        keys = list(cls.extra_fields())
        for key in keys:
            if d[key] is not None and key not in kinds.server(d["kind"]).settings:
                can = ", ".join(k.kind for k in kinds.SERVERS.all() if key in k.settings)
                raise ctx.child(key).error(f"a {d['kind']} server has no {key} setting "
                                           f"(has it: {can})", d[key])
        if d["ports"]:
            kind = kinds.server(d["kind"])
            protos = {**kind.ports, **kind.tls_ports}
            for proto in d["ports"]:
                if proto not in protos:
                    raise ctx.child("ports").child(proto).error(
                        f"a {d['kind']} server has no {proto} port (has: "
                        f"{', '.join(protos) or 'none'})", d["ports"][proto])
        settings = {k: v for k in keys if (v := d.pop(k)) is not None}
        d = dict(d, settings=settings)
        if d["tpc"] and not kinds.server(d["kind"]).tpc:
            can = ", ".join(k.kind for k in kinds.SERVERS.all() if k.tpc)
            raise ctx.child("tpc").error(f"a {d['kind']} server cannot do third-party copy "
                                         f"(can: {can})", True)
        if d["cpus"] == [PER_INSTANCE]:
            have = _per_instance()
            if d["count"] > len(have):
                raise ctx.child("cpus").error(f"{d['count']} instances, {len(have)} CPUs on "
                                              "this host: per-instance needs a CPU each",
                                              PER_INSTANCE)
            d = dict(d, cpus=have[:d["count"]])
        if d["cpus"] is not None and len(d["cpus"]) not in (1, d["count"]):
            raise ctx.child("cpus").error(f"give one CPU set for all {d['count']} instances "
                                          "or one per instance", d["cpus"])
        return d

    @property
    def instances(self) -> list[str]:
        """Instance names: the server's name, or name-1 .. name-K for several origins."""
        return [self.name] if self.count == 1 else [f"{self.name}-{k}"
                                                    for k in range(1, self.count + 1)]

    def cpus_of(self, k: int) -> str | None:
        if not self.cpus:
            return None
        return self.cpus[0] if len(self.cpus) == 1 else self.cpus[k]


DIRECTIONS = ("download", "upload")


def branch_fraction(v: Any) -> float:
    """A fraction of branches read (sweep.branches, a replay client's `branches:`)."""
    f = S.fraction(v)
    if f <= 0:
        raise ValueError("must be more than 0%")
    return f


@dataclass(frozen=True)
class ClientSweep:
    """A client's own sweep axes: each one named replaces the scenario's `sweep:` axis for
    this client only (e.g. iperf3 over 1-16 processes beside xrdcp over streams 1-15)."""
    concurrency: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_CONCURRENCY), max_len=L.MAX_SWEEP_VALUES)), None)
    streams: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_STREAMS), max_len=L.MAX_SWEEP_VALUES)), None)
    repeats: int | None = S.spec(S.optional(S.integer(1, L.MAX_REPEATS)), None)


@dataclass(frozen=True)
class ClientSpec:
    """A client configuration (tool: a module in rig/services/tools/); the sweep runs it
    at each of its stream counts, concurrencies and repeats."""
    name: str = S.spec(S.name)
    tool: str = S.spec(_tool)
    server: str | None = S.spec(S.optional(S.name), None)
    source: str | None = S.spec(S.optional(S.name), None)   # third-party copy: pull from it
    file: str | None = S.spec(S.optional(S.name), None)
    streams: int = S.spec(S.integer(1, L.MAX_STREAMS), 1)
    # which endpoint of the server (root, http, ...): the tool's first protocol by default
    protocol: str = S.spec(S.optional(S.text), None)
    binary: str | None = S.spec(S.optional(S.path_text), None)   # compare two versions
    # iperf3 -t takes whole seconds
    duration_s: float = S.spec(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 10.0,
                               key="duration")
    env: dict = S.spec(_env, {})
    # off | control | all; None: sweep.tls decides (off without one)
    tls: str | None = S.spec(S.optional(_tls_mode), None)
    # taskset -c, as seed 000 pinned: one set for every instance, or one per instance
    cpus: str | tuple[str, ...] | None = S.spec(S.optional(S.with_ctx(_client_cpus)), None)
    # tcpdump of the router's interfaces (headers only) while this client runs
    capture: str | None = S.spec(S.optional(S.choice(*CAPTURE_MODES)), None)
    # the paths (by name) this client runs on; None: every path
    paths: list[str] | None = S.spec(S.optional(S.list_of(S.name, max_len=L.MAX_PATHS)), None)
    sweep: ClientSweep | None = S.spec(S.optional(S.section(ClientSweep)), None)
    # reading through a cache (xcache): emptied of the file before each group (cold) or
    # holding all of it (warm); None: as the reads before left it (rig.description.caches)
    cache: str | None = S.spec(S.optional(S.choice("cold", "warm")), None)
    # free-form words added to the tool's argv, for what the schema does not cover
    args: list = S.spec(S.list_of(_arg, min_len=0, scalar_ok=False, max_len=MAX_ARGS), [])
    # download (from the server) | upload (to it: the file written to the server's
    # upload/ folder, checked by its checksum there, then removed); None: sweep.direction
    direction: str | None = S.spec(S.optional(S.choice(*DIRECTIONS)), None)
    # the tool's own keys (page_checksum, block, mode, ...): an instance of the option
    # section its module declares (rig.description.kinds; none: kinds.NoOptions)
    options: Any = kinds.NoOptions()

    @classmethod
    def extra_fields(cls) -> dict[str, tuple[str, S.Field]]:
        """Every registered tool's own keys: read for any client, refused below for a
        tool that does not take them."""
        return kinds.option_fields()

    def __post_init__(self) -> None:
        # built in code (tests, bench) without options: its tool's defaults
        if type(self.options) is kinds.NoOptions and self.tool in kinds.CLIENTS.items:
            object.__setattr__(self, "options", kinds.client(self.tool).options())

    @classmethod
    def of(cls, **kw: Any) -> "ClientSpec":
        """A client built in code, its tool's own keys given beside the common ones
        (`ClientSpec.of(name="c", tool="xrdcp", sources=4)`); not checked."""
        section = kinds.client(kw["tool"]).options
        own = {a for a, _ in kinds.section_fields(section).values()}
        opts = section(**{k: kw.pop(k) for k in list(kw) if k in own})
        return cls(**kw, options=opts)

    def option(self, key: str) -> Any:
        """The value of one of the tool's own keys (None: its tool has no such key)."""
        return getattr(self.options, key, None)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        tool = d["tool"]
        caps = kinds.client(tool).caps
        if d["direction"] == "upload" and not caps.upload:
            users = sorted(t.name for t in kinds.CLIENTS.all() if t.caps.upload)
            raise ctx.child("direction").error(f"{tool} cannot upload (only "
                                               f"{', '.join(users)})", "upload")
        if d["tls"] not in (None, "off") and d["tls"] not in caps.tls:
            users = sorted(t.name for t in kinds.CLIENTS.all() if d["tls"] in t.caps.tls)
            raise ctx.child("tls").error(f"{tool} cannot use TLS mode {d['tls']} "
                                         f"(only {', '.join(users)})", d["tls"])
        if d["streams"] > caps.max_streams:
            raise ctx.child("streams").error(
                f"{tool} supports at most {caps.max_streams} stream(s)", d["streams"])
        own = d["sweep"].streams if d["sweep"] is not None else None
        for i, n in enumerate(own or []):
            if n > caps.max_streams:
                raise ctx.child("sweep").child("streams").child(i).error(
                    f"{tool} supports at most {caps.max_streams} stream(s)", n)
        takes = kinds.option_keys(tool)
        for key, (attr, _) in kinds.option_fields().items():
            if d[attr] is not None and key not in takes:
                raise ctx.child(key).error(f"only for {', '.join(kinds.option_users(key))}",
                                           d[attr])
        d = kinds.client(tool).checked(ctx, d)
        proto = d["protocol"] or (caps.protocols[0] if caps.protocols else "")
        if d["protocol"] is not None and proto not in caps.protocols:
            speaks = " or ".join(f"{p}://" if p == "root" else p
                                 for p in caps.protocols) or "nothing"
            raise ctx.child("protocol").error(f"{tool} here speaks {speaks}", proto)
        if caps.needs_file and not d["file"]:
            raise ctx.child("file").error(f"{tool} needs a file to fetch")
        section = kinds.section_fields(kinds.client(tool).options)
        opts = kinds.client(tool).options(**{a: d[a] for a, _ in section.values()})
        for attr, _ in kinds.option_fields().values():
            d.pop(attr)
        return dict(d, protocol=proto, options=opts)


@dataclass(frozen=True)
class BackgroundSpec:
    """A competing flow on a path while its transfers run: iperf3 -R (the path's server
    side sends, as the transfers' downloads do), through the same emulated bottleneck,
    started after each step's path check and stopped before the next (issue 30)."""
    name: str = S.spec(S.name)
    path: str | None = S.spec(S.optional(S.name), None)    # None: every path
    tool: str = S.spec(S.choice("iperf3"), "iperf3")
    streams: int = S.spec(S.integer(1, L.MAX_STREAMS), 1)
    congestion: str | None = S.spec(S.optional(S.choice(*CC_NAMES)), None)
    rate_bps: float | None = S.spec(S.optional(S.rate), None, key="rate")    # all streams


@dataclass(frozen=True)
class Sweep:
    repeats: int = S.spec(S.integer(1, L.MAX_REPEATS), 1)
    concurrency: list[int] = S.spec(S.list_of(S.integer(1, L.MAX_CONCURRENCY),
                                              max_len=L.MAX_SWEEP_VALUES), [1])
    # overrides multi-stream clients' streams
    streams: list[int] | None = S.spec(S.optional(S.list_of(S.integer(1, L.MAX_STREAMS),
                                                            max_len=L.MAX_SWEEP_VALUES)), None)
    # fraction of branches read, for clients that read branches (tool replay)
    branches: list[float] | None = S.spec(S.optional(S.list_of(branch_fraction,
                                                               max_len=L.MAX_SWEEP_VALUES)), None)
    # TLS modes swept for clients whose tool can use them (others run each mode they can)
    tls: list[str] | None = S.spec(S.optional(S.list_of(_tls_mode,
                                                        max_len=len(kinds.TLS_MODES))), None)
    # download and upload, for clients whose tool can upload (each its own configuration,
    # NAME and NAME@upload); others download
    direction: list[str] | None = S.spec(S.optional(S.list_of(S.choice(*DIRECTIONS),
                                                              max_len=2)), None)
    # address families: each emulated path that does not state its own `ip:` is built
    # once per family, as paths NAME-v4 and NAME-v6 (one family: NAME, in that family)
    ip: list[int] | None = S.spec(S.optional(S.list_of(_ip_version, max_len=2)), None)
    # origins and cores (issue 27, seed 002's "1 x 128 vs 2 x 64"): each path once per
    # server configuration, NAME-oO, NAME-cC or NAME-oOcC: every origin server (not a cache)
    # runs O instances, each on C CPUs of its own where the host has them
    origins: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_ORIGINS), max_len=L.MAX_SWEEP_VALUES)), None)
    server_cpus: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_CPUS), max_len=L.MAX_SWEEP_VALUES)), None)


def _ms(parse: S.Parser) -> S.Parser:
    """A duration parser whose value is kept in milliseconds."""
    return lambda v: parse(v) * 1e3


@dataclass(frozen=True)
class Validation:
    ping_count: int = S.spec(S.integer(L.MIN_PING_COUNT, L.MAX_PING_COUNT), 20)
    ping_interval_s: float = S.spec(S.duration_in(L.MIN_PING_INTERVAL_S,
                                                  L.MAX_PING_INTERVAL_S), 0.05,
                                    key="ping_interval")
    iperf_seconds: float = S.spec(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 3.0,
                                  key="iperf_duration")
    iperf_streams: int = S.spec(S.integer(1, L.MAX_STREAMS), 8)
    rtt_tolerance_ms: float = S.spec(_ms(S.duration_in(0.0, L.MAX_RTT_TOLERANCE_S)), 0.3,
                                     key="rtt_tolerance")
    rtt_tolerance_rel: float = S.spec(S.fraction, 0.01, key="rtt_tolerance_relative")
    # a ping whose RTT is off is taken again, up to this many times, 1 s apart: a step is
    # flagged on its RTT when its last ping is off too. Every attempt is kept in the row
    # (raw: ping_attempts) and said in the progress line (rig.orchestration.pathcheck)
    rtt_rechecks: int = S.spec(S.integer(0, L.MAX_RTT_RECHECKS), 2)
    # each-step: iperf3 before every step (as before). once: on a path whose capacity
    # does not depend on the RTT (no loss, duplication, jitter or configured queue: a
    # delay line sized to the BDP, and a rate), the first step's capacity serves its
    # later steps, which ping only (rig.orchestration.pathcheck.capacity_source)
    capacity: str = S.spec(S.choice("each-step", "once"), "each-step")
    # full: the check after a step is the check before it again. ping: RTT only, and the
    # capacity run too when the ping or the engine's counters flag the step
    after: str = S.spec(S.choice("full", "ping"), "full")


_tcp_info_interval = S.duration_in(0.01, 10.0)


def _interval_or_off(v: Any) -> float | None:
    """A sampling interval (10ms..10s), or `off` (YAML reads a bare off as false)."""
    if v is False or v == "off":
        return None
    return _tcp_info_interval(v)


_thread_hz = S.duration_in(0.01, 0.1)


def _thread_interval(v: Any) -> float | None:
    """Per-thread CPU sampling interval (10-100 ms: 10-100 Hz), or `off`."""
    if v is False or v == "off":
        return None
    return _thread_hz(v)


@dataclass(frozen=True)
class Sampling:
    # the sending side's tcp_info of every connection of a transfer (issue #15)
    tcp_info_s: float | None = S.spec(_interval_or_off, 0.1, key="tcp_info")
    # per-thread CPU of client and server processes, 10-100 Hz (issue #27)
    threads_s: float | None = S.spec(_thread_interval, 0.1, key="threads")


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


def _items(cls: type, limit: int, min_len: int = 1) -> S.Parser:
    return S.list_of(S.section(cls), scalar_ok=False, min_len=min_len, max_len=limit)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str = S.spec(S.name)
    description: str = S.spec(S.text, "")
    # a file in topologies/, or {mininet: FILE, class: NAME, client:, server:}: a Mininet
    # Topo (rig.description.mininet)
    topology: Topology = S.spec(S.with_ctx(lambda c, v: _topology_ref(c, v)),
                                "client-router-server")
    hosts: dict[str, HostSpec] = S.spec(_hosts, {})                 # remote hosts over SSH
    paths: list[PathSpec] = S.spec(_items(PathSpec, L.MAX_PATHS))
    files: list[FileSpec] = S.spec(_items(FileSpec, L.MAX_FILES, 0), [])
    servers: list[ServerSpec] = S.spec(_items(ServerSpec, L.MAX_SERVERS, 0), [])
    clients: list[ClientSpec] = S.spec(_items(ClientSpec, L.MAX_CLIENTS))
    background: list[BackgroundSpec] = S.spec(_items(BackgroundSpec, L.MAX_BACKGROUND, 0), [])
    # several paths in one step (issue 30; seed 004's 10G + 40G frontends): these emulated
    # paths run each transfer group at the same time, their RTT lists swept side by side
    # (step k: each path at its k-th RTT); the report sums them (together.{csv,md})
    together: list[str] = S.spec(S.list_of(S.name, max_len=L.MAX_PATHS), [])
    sweep: Sweep = S.spec(S.section(Sweep), S.EMPTY)
    tuning: Tuning = S.spec(S.section(Tuning), S.EMPTY)
    validation: Validation = S.spec(S.section(Validation), S.EMPTY)
    sampling: Sampling = S.spec(S.section(Sampling), S.EMPTY)
    storage: Storage = S.spec(S.section(Storage), S.EMPTY)     # rig.description.storage
    transfer_timeout_s: float = S.spec(S.duration_in(1.0), 600.0, key="transfer_timeout")
    # a study's reference file (reproductions/), relative to this file: rig.description.reference
    reproduces: str | None = S.spec(S.optional(S.path_text), None)
    reference: Reference | None = None   # loaded from `reproduces`, stored with every run
    source: str = ""           # the file it came from
    text: str = ""             # its text, stored with every run

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if isinstance(d["topology"], dict):
            return _mininet_scenario(ctx, d)
        tp = TOPOLOGY_DIR / f"{d['topology']}.yaml"
        if not tp.is_file():
            raise ctx.child("topology").error(
                f"no such topology (have: {', '.join(list_topologies())})", d["topology"])
        # a real path between remote hosts is tuned on those hosts (rig.realization.
        # remote_tuning); one with an end here would need this host's own network tuned
        here = [p.name for p in d["paths"] if p.kind == "real"
                and LOCAL in (p.client_host, p.server_host)]
        t = d["tuning"]
        for attr, v in (("congestion_control", t.congestion_control),
                        ("tcp_rmem_max", t.tcp_rmem_max), ("tcp_wmem_max", t.tcp_wmem_max),
                        ("tcp_rmem_default", t.tcp_rmem_default),
                        ("mtu", None if t.mtu == 1500 else t.mtu)):
            if here and v is not None:   # the rig tunes only namespaces it made
                raise ctx.child("tuning").child(attr).error(
                    f"not applied on real path {here[0]!r} (an end on this host, whose "
                    f"network is not the rig's): tune it yourself and remove this key", v)
        if d["sweep"].ip:
            d = dict(d, **_sweep_ip(ctx, d["paths"], d["clients"], d["sweep"].ip))
        if d["sweep"].origins or d["sweep"].server_cpus:
            d = dict(d, **_sweep_servers(ctx, d["paths"], d["clients"], d["servers"],
                                         d["sweep"]))
        return dict(d, topology=parse_topology(tp))

    def server(self, name: str) -> ServerSpec:
        return next(s for s in self.servers if s.name == name)

    def file(self, name: str) -> FileSpec:
        return next(f for f in self.files if f.name == name)

    def tunes_local(self) -> bool:
        """Does the tuning concern this host (an emulated path, or a real path's end here)?
        A scenario whose paths all run between remote hosts leaves it untouched."""
        return any(LOCAL in (p.client_host, p.server_host) for p in self.paths)

    def remote_hosts(self) -> dict[str, HostSpec]:
        """The declared hosts some path uses, in path order."""
        used = [h for p in self.paths for h in (p.server_host, p.client_host, p.router_host)
                if h is not None and h != LOCAL]
        return {h: self.hosts[h] for h in dict.fromkeys(used)}


_PY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def _py_name(v: Any) -> str:
    if not isinstance(v, str) or not _PY_NAME.fullmatch(v):
        raise ValueError("expected a Python class name")
    return v


def _topology_ref(ctx: S.Ctx, v: Any) -> str | dict:
    """A topology's name (a file in topologies/) or a Mininet Topo reference."""
    if not isinstance(v, dict):
        return S.call(ctx, S.name, v)
    return S.check_mapping(ctx, v, {"mininet": S.Field(S.path_text),
                                    "class": S.Field(_py_name),
                                    "client": S.Field(S.optional(S.text), None),
                                    "server": S.Field(S.optional(S.text), None)})


# path keys a Mininet topology's links set (PathSpec attribute, YAML key)
_MININET_SETS = (("gemodel", "gemodel"), ("rate_bps", "rate"), ("queue_pkts", "queue"),
                 ("router_host", "router_host"), ("router_ifaces", "router_ifaces"),
                 ("router_iface", "router_iface"))


def _mininet_scenario(ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
    """The scenario's topology read from a Mininet Topo, and each path's RTT, rate,
    jitter and loss from the links between the client and the server (pure: the file is
    read through rig.description.mininet's reader)."""
    tc = ctx.child("topology")
    ref = d["topology"]
    shown = ref["mininet"]
    file = Path(shown) if os.path.isabs(shown) else Path(ctx.file).parent / shown
    doc = MN.read(file, ref["class"], tc, shown)
    mt = MN.from_export(doc, tc, file=shown, cls=ref["class"], client=ref["client"],
                        server=ref["server"])
    nodes = tuple(T.NodeSpec(h, "client" if h == mt.client else "server")
                  for h in sorted(mt.hosts, key=lambda h: (h != mt.client, h != mt.server)))
    topo = T.Topology(f"mininet-{ref['class']}", "mininet",
                      f"Mininet {ref['class']} from {shown}", nodes, mininet=mt)
    for key in ("ip", "origins", "server_cpus"):
        if getattr(d["sweep"], key):
            raise ctx.child("sweep").child(key).error(
                f"copies paths of a topology built from the scenario; {shown} is one network",
                getattr(d["sweep"], key))
    vals = MN.path_values(mt)
    paths = []
    for i, p in enumerate(d["paths"]):
        pc = ctx.child("paths").child(i)
        if p.kind == "real":
            raise pc.child("kind").error("a Mininet topology builds emulated paths", p.kind)
        if p.rtt_stated:
            raise pc.child("rtt").error(f"set by the links of {shown}", p.rtts_s)
        for attr, key in _MININET_SETS:
            if getattr(p, attr) is not None:
                raise pc.child(key).error(f"set by the links of {shown}", getattr(p, attr))
        if p.loss or p.jitter_s:
            raise pc.child("loss" if p.loss else "jitter").error(
                f"set by the links of {shown}", p.loss or p.jitter_s)
        if p.ip != 4:
            raise pc.child("ip").error("a Mininet topology is built with IPv4", p.ip)
        if p.client_host != LOCAL or p.server_host != LOCAL:
            raise pc.child("client_host" if p.client_host != LOCAL else "server_host").error(
                "a Mininet topology's hosts are namespaces on this host",
                p.client_host if p.client_host != LOCAL else p.server_host)
        paths.append(dataclasses.replace(p, rtts_s=[vals["rtt_s"]], rate_bps=vals["rate_bps"],
                                         jitter_s=vals["jitter_s"], loss=vals["loss"]))
    return dict(d, topology=topo, paths=paths)


def _sweep_ip(ctx: S.Ctx, paths: list[PathSpec], clients: list[ClientSpec],
              fams: list[int]) -> dict[str, Any]:
    """`sweep.ip`: each emulated path without a family of its own, once per family (named
    NAME-vF when there are two), and each client's `paths:` naming it, all of its copies."""
    cc = ctx.child("sweep").child("ip")
    if len(set(fams)) != len(fams):
        raise cc.error("a family named twice", fams)
    free = [p for p in paths if p.kind == "emulated" and not p.ip_stated]
    if not free:
        raise cc.error("no path to sweep: every path is real or states its own ip:", fams)
    return _path_copies(cc, fams, paths, clients, free,
                        [(f"-v{f}" if len(fams) > 1 else "", {"ip": f}) for f in fams])


def _path_copies(cc: S.Ctx, value: Any, paths: list[PathSpec], clients: list[ClientSpec],
                 free: list[PathSpec], variants: list[tuple[str, dict[str, Any]]]
                 ) -> dict[str, Any]:
    """Each path of `free` once per variant (its name + the variant's suffix, its fields
    replaced), and each client's `paths:` naming it, all of its copies (a sweep that
    builds paths: sweep.ip, sweep.origins / server_cpus)."""
    out: list[PathSpec] = []
    copies: dict[str, list[str]] = {}
    for p in paths:
        if all(p is not q for q in free):
            out.append(p)
            continue
        for suffix, changes in variants:
            name = p.name + suffix
            if name != p.name and any(q.name == name for q in paths):
                raise cc.error(f"would name a copy of path {p.name} {name!r}, a path of "
                               "its own: rename one", value)
            if len(name) > L.MAX_NAME_CHARS:
                raise cc.error(f"would name a copy of path {p.name} {name!r}, longer than "
                               f"{L.MAX_NAME_CHARS} characters: shorten the path's name", value)
            out.append(dataclasses.replace(p, name=name, **changes,
                                           copy_of=p.name if suffix else None))
            copies.setdefault(p.name, []).append(name)
    if len(out) > L.MAX_PATHS:
        raise cc.error(f"{len(out)} paths once swept: at most {L.MAX_PATHS}", value)
    named = [dataclasses.replace(c, paths=[n for pn in c.paths for n in copies.get(pn, [pn])])
             if c.paths is not None else c for c in clients]
    return {"paths": out, "clients": named}


def _sweep_servers(ctx: S.Ctx, paths: list[PathSpec], clients: list[ClientSpec],
                   srv: list[ServerSpec], sw: Sweep) -> dict[str, Any]:
    """`sweep.origins` x `sweep.server_cpus`: each path whose servers run here, once per
    configuration (NAME-oO, NAME-cC, NAME-oOcC); path_servers gives each copy's servers."""
    key = "origins" if sw.origins else "server_cpus"
    cc = ctx.child("sweep").child(key)
    value = sw.origins or sw.server_cpus
    for k, vals in (("origins", sw.origins), ("server_cpus", sw.server_cpus)):
        if vals and len(set(vals)) != len(vals):
            raise ctx.child("sweep").child(k).error("a value named twice", vals)
    have = len(S.host_cpus())
    if sw.server_cpus and max(sw.server_cpus) > have:
        raise ctx.child("sweep").child("server_cpus").error(
            f"{max(sw.server_cpus)} CPUs per origin: this host has {have}", sw.server_cpus)
    origin_servers = [(i, s) for i, s in enumerate(srv) if not kinds.server(s.kind).caches]
    if not origin_servers:
        raise cc.error("no origin server to sweep (caches follow their origin)", value)
    for i, s in origin_servers:
        if s.count != 1 or s.cpus is not None:
            raise ctx.child("servers").child(i).child("count" if s.count != 1 else "cpus") \
                .error(f"server {s.name}'s own instances or CPUs, and sweep.{key}: the sweep "
                       "sets them; remove one", s.count if s.count != 1 else s.cpus)
    free = [p for p in paths if p.server_host == LOCAL]
    if not free:
        raise cc.error("no path to sweep: every path's servers run on another host", value)
    variants = [("-" + (f"o{o}" if o else "") + (f"c{c}" if c else ""),
                 {"origins": o, "server_cpus": c})
                for o in _or_none(sw.origins) for c in _or_none(sw.server_cpus)]
    return _path_copies(cc, value, paths, clients, free, variants)


def _or_none(vals: list[int] | None) -> list[int | None]:
    return list(vals) if vals else [None]


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


def parse_path(ctx: S.Ctx, v: Any) -> PathSpec:
    """One entry of a scenario's `paths:`; `rig net up` validates its options with it, so
    both accept exactly the same values."""
    return S.load(ctx, v, PathSpec)


def list_topologies() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def parse_topology(p: Path) -> Topology:
    """The topology in file `p`, parsed once per version of the file (its path, size
    and mtime): every scenario naming it reads the same frozen Topology."""
    try:
        st = p.stat()
    except OSError:
        return T.parse(_load_yaml(p), source=str(p))    # the read names what is wrong
    return _parse_topology(str(p), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _parse_topology(p: str, size: int, mtime_ns: int) -> Topology:
    return T.parse(_load_yaml(Path(p)), source=p)


def _load_yaml(p: Path) -> Any:
    return _read(p)[0]


def _read(p: Path) -> tuple[Any, str]:
    """The document and its text, read once (size-capped, strict UTF-8, no aliases,
    no duplicate keys: rig.description.safeyaml)."""
    text = safeyaml.read_text(p)
    return safeyaml.load(text, str(p)), text


def load(path: str | Path) -> Scenario:
    p = Path(path)
    data, text = _read(p)
    return parse(data, source=str(p), text=text)


def parse(data: Any, *, source: str, text: str = "") -> Scenario:
    ctx = S.Ctx(source)
    sc = dataclasses.replace(S.load(ctx, data, Scenario), source=source, text=text)
    if sc.reproduces is not None:
        sc = dataclasses.replace(sc, reference=reference.load(
            reference.resolve(source, sc.reproduces)))
    return _cross_check(ctx, sc)


def _cross_check(ctx: S.Ctx, sc: Scenario) -> Scenario:
    """What spans sections; returns the scenario with each client's server filled in."""
    for key, items in (("paths", sc.paths), ("files", sc.files), ("servers", sc.servers),
                       ("clients", sc.clients), ("background", sc.background)):
        S.unique_names(ctx.child(key), items, key[:-1] if key != "background" else "flow")
    names = [p.name for p in sc.paths]
    for i, b in enumerate(sc.background):
        at = ctx.child("background").child(i)
        if b.path is not None and b.path not in names:
            raise at.child("path").error(f"no such path (have: {', '.join(names)})", b.path)
        for p in sc.paths:
            if (b.path in (None, p.name)) and (p.client_host != LOCAL or p.server_host != LOCAL
                                               or p.kind == "real"):
                raise at.child("path").error(f"path {p.name}: background flows run on an "
                                             "emulated path this host builds", b.path or p.name)
    _check_together(ctx.child("together"), sc)
    servers = {s.name: s for s in sc.servers}
    files = {f.name for f in sc.files}
    file_kinds = {f.name: f.kind for f in sc.files}
    clients = []
    for i, c in enumerate(sc.clients):
        cc = ctx.child("clients").child(i)
        caps = kinds.client(c.tool).caps
        if caps.uses_iperf_servers:
            clients.append(c)
            continue
        if c.server is None:
            want = [s for s in sc.servers if s.kind in caps.servers]
            if len(want) != 1:
                raise cc.child("server").error(f"name the server {c.tool} talks to")
            c = dataclasses.replace(c, server=want[0].name)
        clients.append(c)
        if c.server not in servers:
            raise cc.child("server").error("no server of that name", c.server)
        if servers[c.server].kind not in caps.servers:
            raise cc.child("server").error(
                f"{c.tool} cannot talk to a {servers[c.server].kind} server", c.server)
        if c.protocol and c.protocol not in kinds.server(servers[c.server].kind).ports:
            raise cc.child("server").error(
                f"a {servers[c.server].kind} server does not serve {c.protocol}", c.server)
        if c.file not in files:
            raise cc.child("file").error("no file of that name", c.file)
        if caps.reads_root and file_kinds[c.file] != "root":
            raise cc.child("file").error("a caching-mode replay reads a ROOT file: give the file "
                                         "kind: root (generated) or a path", c.file)
        if c.tls not in (None, "off") and not kinds.server(servers[c.server].kind).tls_ports:
            have = [k for k in kinds.SERVERS.names() if kinds.server(k).tls_ports]
            raise cc.child("tls").error(f"a {servers[c.server].kind} server does not serve TLS "
                                        f"({', '.join(have)} do)", c.tls)
        _check_tpc(cc, c, caps, servers)
    sc = dataclasses.replace(sc, clients=clients)
    names = [p.name for p in sc.paths]
    for i, c in enumerate(sc.clients):
        for j, pn in enumerate(c.paths or []):
            if pn not in names:
                raise ctx.child("clients").child(i).child("paths").child(j).error(
                    f"no such path (have: {', '.join(names)})", pn)
    for c in sc.clients:
        limit = kinds.client(c.tool).caps.max_streams
        if c.sweep is not None and c.sweep.streams:
            continue               # its own streams, checked with the client
        for s in sc.sweep.streams or []:
            if limit > 1 and s > limit:
                raise ctx.child("sweep").child("streams").error(
                    f"client {c.name} ({c.tool}) supports at most {limit} streams", s)
    _check_tls_sweep(ctx, sc)
    _check_storage(ctx, sc)
    _check_uploads(ctx, sc)
    for i, c in enumerate(sc.clients):
        need = max(client_concurrency(sc, c))
        if isinstance(c.cpus, tuple) and len(c.cpus) < need:
            raise ctx.child("clients").child(i).child("cpus").error(
                f"{need} concurrent instances, {len(c.cpus)} CPU set(s): one per instance "
                "(per-instance: the host's CPUs, one each)", list(c.cpus))
    for i, p in enumerate(sc.paths):
        bad = (tuningspec.default_above_max(dataclasses.asdict(path_tuning(sc, p)))
               if p.tuning is not None else None)
        if bad is not None:
            end, dflt, mx = bad
            raise ctx.child("paths").child(i).child("tuning").error(
                f"tcp_{end}_default {S.fmt_size(dflt)} above tcp_{end}_max "
                f"{S.fmt_size(mx) if mx else '(unset)'} once over the scenario's tuning")
    n = measurements(sc)
    if n > L.MAX_MEASUREMENTS:
        raise ctx.child("sweep").error(f"{n} transfer groups (RTTs x clients x streams x "
                                       f"concurrency x repeats): at most {L.MAX_MEASUREMENTS}")
    for i, p in enumerate(sc.paths):
        for key in ("client_host", "server_host", "router_host"):
            h = getattr(p, key)
            if h is not None and h != LOCAL and h not in sc.hosts:
                known = ", ".join([LOCAL, *sc.hosts])
                raise ctx.child("paths").child(i).child(key).error(
                    f"no such host (declared: {known})", h)
    real = [p for p in sc.paths if p.kind == "real" or p.router_host]
    if sc.topology.layout == "host" and len(real) != len(sc.paths):
        raise ctx.child("topology").error("layout 'host' carries real paths (or paths "
                                          "through a router host) only", sc.topology.name)
    _check_placement(ctx, sc)
    caches.check(ctx, sc)
    return sc


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


def _check_uploads(ctx: S.Ctx, sc: Scenario) -> None:
    """An upload goes to a server kind that accepts writes, on this host, from tmpfs."""
    cd = ctx.child("sweep").child("direction")
    fams = sc.sweep.direction or []
    if len(set(fams)) != len(fams):
        raise cd.error("a direction named twice", fams)
    if "upload" in fams and not any(kinds.client(c.tool).caps.upload for c in sc.clients):
        raise cd.error("no client can upload (" + ", ".join(sorted(
            t.name for t in kinds.CLIENTS.all() if t.caps.upload)) + " can)", fams)
    servers = {s.name: s for s in sc.servers}
    for i, c in enumerate(sc.clients):
        if "upload" not in client_directions(sc, c) or c.server not in servers:
            continue
        at = ctx.child("clients").child(i)
        at = at.child("direction") if c.direction else cd
        kind = servers[c.server].kind
        if kind not in kinds.client(c.tool).caps.upload or not kinds.server(kind).writes:
            raise at.error(f"client {c.name}: a {kind} server does not accept {c.tool}'s "
                           "writes", "upload")
        if sc.storage.on_disk:
            raise at.error(f"client {c.name}: uploads go to the run's tmpfs (storage: disk "
                           "serves downloads only)", "upload")
        remote = [p.name for p in sc.paths if runs_on(c, p)
                  and (p.client_host != LOCAL or p.server_host != LOCAL)]
        if remote:
            raise at.error(f"client {c.name}: uploads run with both ends on this host (path "
                           f"{remote[0]} has a remote end)", "upload")


def _check_storage(ctx: S.Ctx, sc: Scenario) -> None:
    """A tmpfs holds L.MAX_FILE_SIZE in all (memory); a disk what its room allows (checked
    when the run starts: rig.description.storage.room_error); a disk is this host's."""
    total = sum(f.size for f in sc.files)
    if sc.storage.on_disk:
        if total > L.MAX_DISK_BYTES:
            raise ctx.child("files").error(f"files above {S.fmt_size(L.MAX_DISK_BYTES)} in all",
                                           S.fmt_size(total))
        remote = [p.name for p in sc.paths if p.server_host not in (None, LOCAL)]
        if remote:
            raise ctx.child("storage").child("kind").error(
                f"a disk of this host only (path {remote[0]} serves from a remote host)", "disk")
        return
    for i, f in enumerate(sc.files):
        if f.size > L.MAX_FILE_SIZE:
            raise ctx.child("files").child(i).child("size").error(
                f"files above {S.fmt_size(L.MAX_FILE_SIZE)} do not fit a tmpfs here (storage: "
                "disk holds more)", S.fmt_size(f.size))
    if total > L.MAX_FILE_SIZE:
        raise ctx.child("files").error(f"files above {S.fmt_size(L.MAX_FILE_SIZE)} in all do not "
                                       "fit a tmpfs here (storage: disk holds more)",
                                       S.fmt_size(total))


def _check_tls_sweep(ctx: S.Ctx, sc: Scenario) -> None:
    modes = sc.sweep.tls or []
    cc = ctx.child("sweep").child("tls")
    if len(set(modes)) != len(modes):
        raise cc.error("a TLS mode is listed twice", modes)
    for m in modes:
        if m != "off" and not any(_can_tls(sc, c, m) for c in sc.clients):
            users = sorted(t.name for t in kinds.CLIENTS.all() if m in t.caps.tls)
            raise cc.error(f"no client can use TLS mode {m} (only {', '.join(users)}, "
                           "against an xrootd or nginx server)", m)


def tls_modes(sc: Scenario, c: ClientSpec) -> list[str]:
    """The TLS modes client `c` runs: its own `tls:`, else the swept modes its tool can
    use (`off` always), else off."""
    if c.tls is not None:
        return [c.tls]
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
    """Whether the run needs a CA and TLS endpoints on its servers."""
    return any(m != "off" for c in sc.clients for m in tls_modes(sc, c))


def _check_tpc(cc: S.Ctx, c: ClientSpec, caps: Any, servers: dict[str, ServerSpec]) -> None:
    """A third-party-copy client names a source; its server (the destination) pulls."""
    if not caps.third_party:
        if c.source is not None:
            raise cc.child("source").error(f"{c.tool} copies from its server itself; "
                                           "only third-party-copy tools take a source", c.source)
        return
    if c.source is None:
        raise cc.child("source").error(f"{c.tool} needs the server the copy pulls from")
    if c.source not in servers:
        raise cc.child("source").error("no server of that name", c.source)
    if c.source == c.server:
        raise cc.child("source").error("source and destination are one server", c.source)
    if servers[c.source].kind not in caps.servers:
        raise cc.child("source").error(f"{c.tool} cannot pull from a "
                                       f"{servers[c.source].kind} server", c.source)
    if c.option("tpc_mode") == "push":          # the source's XrdHttpTPC sends to the destination
        if not servers[c.source].tpc:
            raise cc.child("source").error("the source pushes: it needs third-party copy "
                                           "(give it tpc: true)", c.source)
        if c.server is None or not kinds.server(servers[c.server].kind).writes:
            raise cc.child("server").error("the destination takes the pushed file: a kind "
                                           "that accepts writes", c.server)
        return
    if c.server is None or not servers[c.server].tpc:
        raise cc.child("server").error("the destination cannot do third-party copy "
                                       "(give it tpc: true)", c.server)


def server_count(sc: Scenario, p: PathSpec | None = None) -> int:
    """Server instances of the scenario on path `p` (what a `count: servers` node expands
    to; None: the scenario's own)."""
    return sum(s.count for s in path_servers(sc, p))


def _check_placement(ctx: S.Ctx, sc: Scenario) -> None:
    t = sc.topology
    if t.layout == "mininet":
        hosts = {n.name for n in t.by_role("server")}
        for i, s in enumerate(sc.servers):
            if s.node is not None and s.node not in hosts:
                raise ctx.child("servers").child(i).child("node").error(
                    f"not a host of {t.name} but the client ({', '.join(sorted(hosts))})",
                    s.node)
        return
    if t.layout != "netns":
        return
    n = max(server_count(sc, p) for p in sc.paths)
    if t.counted and not 1 <= n <= T.MAX_COUNT:
        raise ctx.child("servers").error(f"topology {t.name} holds 1..{T.MAX_COUNT} server "
                                         "instances", n)
    names = {n.name for n in t.by_role("server")}
    for i, s in enumerate(sc.servers):
        if s.node is None:
            continue
        if t.counted:
            raise ctx.child("servers").child(i).child("node").error(
                f"topology {t.name} gives each instance its own node", s.node)
        if s.node not in names:
            raise ctx.child("servers").child(i).child("node").error(
                f"topology {t.name} has server nodes {', '.join(sorted(names))}", s.node)


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


def _check_together(cc: S.Ctx, sc: Scenario) -> None:
    if not sc.together:
        return
    by = {p.name: p for p in sc.paths}
    if len(sc.together) < 2:
        raise cc.error("name two or more paths to run together", sc.together)
    if len(set(sc.together)) != len(sc.together):
        raise cc.error("a path named twice", sc.together)
    for i, n in enumerate(sc.together):
        if n not in by:
            raise cc.child(i).error(f"no such path (have: {', '.join(by)})", n)
        p = by[n]
        if p.kind != "emulated" or LOCAL not in (p.client_host, p.server_host) \
                or p.router_host is not None:
            raise cc.child(i).error("paths run together are emulated paths this host builds",
                                    n)
        if background_on(sc, p):
            raise cc.child(i).error("a path run together carries no background flows (yet)",
                                    n)
    lens = {n: len(by[n].rtts_s) for n in sc.together}
    if len(set(lens.values())) > 1:
        raise cc.error("paths run together sweep their RTTs side by side: give each the same "
                       "number of RTTs (" + ", ".join(f"{n}: {k}" for n, k in lens.items())
                       + ")", sc.together)
    for i, n in enumerate(sc.together):
        if not any(runs_on(c, by[n]) for c in sc.clients):
            raise cc.child(i).error("no client runs on this path (clients[].paths)", n)


def runs_on(c: ClientSpec, p: PathSpec) -> bool:
    """Does client `c` run on path `p` (its own `paths:`, else every path)?"""
    return c.paths is None or p.name in c.paths


def client_streams(sc: Scenario, c: ClientSpec) -> list[int]:
    """Stream counts client `c` runs: its own `sweep.streams`, else the scenario's for a
    multi-stream tool, else its `streams`."""
    if c.sweep is not None and c.sweep.streams:
        return list(c.sweep.streams)
    if sc.sweep.streams and kinds.client(c.tool).caps.max_streams > 1:
        return list(sc.sweep.streams)   # limits checked when the scenario was loaded
    return [c.streams]


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
