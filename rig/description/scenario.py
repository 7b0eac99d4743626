"""Scenario and topology descriptions: pure, validated data loaded from YAML.

A scenario names a topology, paths (emulated or real), servers, data files, client
configurations, a sweep, tuning and validation settings. Everything is checked strictly
(unknown keys, bad units, impossible values) and reported as one line
`FILE: key.path: message (got VALUE)`. Must not import anything that runs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.description import limits as L, safeyaml, schema as S
from rig.description import topology as T
from rig.description.profile import BACKENDS, Direction, GilbertElliott, LinkProfile
from rig.services import servers as server_kinds, tools

ROOT = Path(__file__).resolve().parent.parent.parent
TOPOLOGY_DIR = ROOT / "topologies"
# What each client tool can do (servers, protocols, streams, options) and which server
# kinds exist is declared by the tool and server modules themselves (pure registries).


Topology = T.Topology         # nodes and links: rig/description/topology.py

# Each section of a scenario is declared once: a frozen dataclass whose fields carry
# their YAML key, parser (with its limits) and default (schema.spec); schema.load checks
# a mapping against it, and a `checked` classmethod holds what spans several fields.


@S.with_ctx
def _env(ctx: S.Ctx, v: Any) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ctx.error("expected a mapping of variable names to values", v)
    if len(v) > L.MAX_ENV:
        raise ctx.error(f"at most {L.MAX_ENV} variables (has {len(v)})")
    return {S.call(ctx.child(str(k)), S.env_key, k): S.call(ctx.child(str(k)), S.env_value, x)
            for k, x in v.items()}


def _tool(v: Any) -> str:
    return S.choice(*tools.names())(v)        # the registry as it is at load time


def _server_kind(v: Any) -> str:
    return S.choice(*server_kinds.kinds())(v)


_buffer = S.size_in(L.MIN_BUFFER, L.MAX_BUFFER)
_REAL_ONLY = ("client_ns", "server_ns", "server_addr")


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
    backend: str = S.spec(S.choice(*BACKENDS), "auto")
    # real paths: where the client runs, where the server listens (existing, used as-is)
    client_ns: str | None = S.spec(S.optional(S.ns_name), None)
    server_ns: str | None = S.spec(S.optional(S.ns_name), None)
    server_addr: str | None = S.spec(S.optional(S.ip_address), None)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if d["kind"] == "real":
            for attr, key in (("rtts_s", "rtt"), ("gemodel", "gemodel"), ("rate_bps", "rate"),
                              ("queue_pkts", "queue")):
                if d[attr] is not None:
                    raise ctx.child(key).error("a real path is used as-is: nothing is emulated",
                                               d[attr])
            if d["loss"] or d["jitter_s"]:
                raise ctx.error("a real path is used as-is: no loss or jitter")
            if not d["server_addr"]:
                raise ctx.child("server_addr").error("a real path needs the server's address")
            if d["backend"] not in ("auto", "none"):
                raise ctx.child("backend").error("a real path has backend none", d["backend"])
            return dict(d, rtts_s=[], backend="none")
        for k in _REAL_ONLY:
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
        return dict(d, rtts_s=rtts)

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
    size: int = S.spec(S.size)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if d["size"] > L.MAX_FILE_SIZE:
            raise ctx.child("size").error(f"files above {S.fmt_size(L.MAX_FILE_SIZE)} do not "
                                          "fit a tmpfs here", S.fmt_size(d["size"]))
        return d


@dataclass(frozen=True)
class ServerSpec:
    name: str = S.spec(S.name)
    kind: str = S.spec(_server_kind)
    binary: str | None = S.spec(S.optional(S.path_text), None)


_OPTIONS = ("page_checksum", "block", "buffer")


@dataclass(frozen=True)
class ClientSpec:
    name: str = S.spec(S.name)
    tool: str = S.spec(_tool)
    server: str | None = S.spec(S.optional(S.name), None)
    file: str | None = S.spec(S.optional(S.name), None)
    streams: int = S.spec(S.integer(1, L.MAX_STREAMS), 1)
    # which endpoint of the server (root, http, ...): the tool's first protocol by default
    protocol: str = S.spec(S.optional(S.text), None)
    binary: str | None = S.spec(S.optional(S.path_text), None)   # compare two versions
    page_checksum: bool | None = S.spec(S.optional(S.boolean), None)  # xrdcp XRD_CPUSEPGWRTRD
    block: int | None = S.spec(S.optional(S.size_in(L.MIN_BLOCK, L.MAX_BLOCK)), None)
    buffer: int | None = S.spec(S.optional(S.size_in(L.MIN_SOCKET_BUFFER, L.MAX_BUFFER)),
                                None)
    # iperf3 -t takes whole seconds
    duration_s: float = S.spec(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 10.0,
                               key="duration")
    env: dict = S.spec(_env, {})

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        tool = d["tool"]
        caps = tools.get(tool).caps
        if d["streams"] > caps.max_streams:
            raise ctx.child("streams").error(
                f"{tool} supports at most {caps.max_streams} stream(s)", d["streams"])
        for key in _OPTIONS:
            if d[key] is not None and key not in caps.options:
                users = sorted(t.name for t in tools.all_tools() if key in t.caps.options)
                raise ctx.child(key).error(f"only for {', '.join(users)}", d[key])
        proto = d["protocol"] or (caps.protocols[0] if caps.protocols else "")
        if d["protocol"] is not None and proto not in caps.protocols:
            speaks = " or ".join(f"{p}://" if p == "root" else p
                                 for p in caps.protocols) or "nothing"
            raise ctx.child("protocol").error(f"{tool} here speaks {speaks}", proto)
        if caps.needs_file and not d["file"]:
            raise ctx.child("file").error(f"{tool} needs a file to fetch")
        return dict(d, protocol=proto)


@dataclass(frozen=True)
class Sweep:
    repeats: int = S.spec(S.integer(1, L.MAX_REPEATS), 1)
    concurrency: list[int] = S.spec(S.list_of(S.integer(1, L.MAX_CONCURRENCY),
                                              max_len=L.MAX_SWEEP_VALUES), [1])
    # overrides multi-stream clients' streams
    streams: list[int] | None = S.spec(S.optional(S.list_of(S.integer(1, L.MAX_STREAMS),
                                                            max_len=L.MAX_SWEEP_VALUES)), None)


@dataclass(frozen=True)
class Tuning:
    congestion_control: str | None = S.spec(
        S.optional(S.choice("bbr", "cubic", "reno", "htcp")), None)
    tcp_rmem_max: int | None = S.spec(S.optional(_buffer), None)
    tcp_wmem_max: int | None = S.spec(S.optional(_buffer), None)
    core_rmem_max: int | None = S.spec(S.optional(_buffer), None)   # host-global: restored
    core_wmem_max: int | None = S.spec(S.optional(_buffer), None)
    mtu: int = S.spec(S.integer(L.MIN_MTU, L.MAX_MTU), 1500)


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


def _items(cls: type, limit: int, min_len: int = 1) -> S.Parser:
    return S.list_of(S.section(cls), scalar_ok=False, min_len=min_len, max_len=limit)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str = S.spec(S.name)
    description: str = S.spec(S.text, "")
    topology: Topology = S.spec(S.name, "client-router-server")   # a file in topologies/
    paths: list[PathSpec] = S.spec(_items(PathSpec, L.MAX_PATHS))
    files: list[FileSpec] = S.spec(_items(FileSpec, L.MAX_FILES, 0), [])
    servers: list[ServerSpec] = S.spec(_items(ServerSpec, L.MAX_SERVERS, 0), [])
    clients: list[ClientSpec] = S.spec(_items(ClientSpec, L.MAX_CLIENTS))
    sweep: Sweep = S.spec(S.section(Sweep), S.EMPTY)
    tuning: Tuning = S.spec(S.section(Tuning), S.EMPTY)
    validation: Validation = S.spec(S.section(Validation), S.EMPTY)
    transfer_timeout_s: float = S.spec(S.duration_in(1.0), 600.0, key="transfer_timeout")
    source: str = ""           # the file it came from
    text: str = ""             # its text, stored with every run

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        tp = TOPOLOGY_DIR / f"{d['topology']}.yaml"
        if not tp.is_file():
            raise ctx.child("topology").error(
                f"no such topology (have: {', '.join(list_topologies())})", d["topology"])
        real = [p.name for p in d["paths"] if p.kind == "real"]
        t = d["tuning"]
        for attr, v in (("congestion_control", t.congestion_control),
                        ("tcp_rmem_max", t.tcp_rmem_max), ("tcp_wmem_max", t.tcp_wmem_max),
                        ("mtu", None if t.mtu == 1500 else t.mtu)):
            if real and v is not None:   # the rig tunes only namespaces it made
                raise ctx.child("tuning").child(attr).error(
                    f"not applied on real path {real[0]!r} (its namespaces are not the "
                    f"rig's): tune them yourself and remove this key", v)
        return dict(d, topology=parse_topology(tp))

    def server(self, name: str) -> ServerSpec:
        return next(s for s in self.servers if s.name == name)

    def file(self, name: str) -> FileSpec:
        return next(f for f in self.files if f.name == name)


def parse_path(ctx: S.Ctx, v: Any) -> PathSpec:
    """One entry of a scenario's `paths:`; `rig net up` validates its options with it, so
    both accept exactly the same values."""
    return S.load(ctx, v, PathSpec)


def list_topologies() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def parse_topology(p: Path) -> Topology:
    return T.parse(_load_yaml(p), source=str(p))


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
    return _cross_check(ctx, sc)


def _cross_check(ctx: S.Ctx, sc: Scenario) -> Scenario:
    """What spans sections; returns the scenario with each client's server filled in."""
    for key, items in (("paths", sc.paths), ("files", sc.files), ("servers", sc.servers),
                       ("clients", sc.clients)):
        S.unique_names(ctx.child(key), items, key[:-1])
    servers = {s.name: s for s in sc.servers}
    files = {f.name for f in sc.files}
    clients = []
    for i, c in enumerate(sc.clients):
        cc = ctx.child("clients").child(i)
        caps = tools.get(c.tool).caps
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
        if c.file not in files:
            raise cc.child("file").error("no file of that name", c.file)
    sc = dataclasses.replace(sc, clients=clients)
    for c in sc.clients:
        limit = tools.get(c.tool).caps.max_streams
        for s in sc.sweep.streams or []:
            if limit > 1 and s > limit:
                raise ctx.child("sweep").child("streams").error(
                    f"client {c.name} ({c.tool}) supports at most {limit} streams", s)
    total = sum(f.size for f in sc.files)
    if total > L.MAX_FILE_SIZE:
        raise ctx.child("files").error(f"files above {S.fmt_size(L.MAX_FILE_SIZE)} in all do not "
                                       "fit a tmpfs here", S.fmt_size(total))
    n = measurements(sc)
    if n > L.MAX_MEASUREMENTS:
        raise ctx.child("sweep").error(f"{n} transfer groups (RTTs x clients x streams x "
                                       f"concurrency x repeats): at most {L.MAX_MEASUREMENTS}")
    real = [p for p in sc.paths if p.kind == "real"]
    if sc.topology.layout == "host" and len(real) != len(sc.paths):
        raise ctx.child("topology").error("layout 'host' carries real paths only", sc.topology.name)
    if sc.topology.layout == "netns" and (sc.topology.counted or sc.topology.server_slots() != 1):
        raise ctx.child("topology").error(
            "rig run drives one server node per path for now (several: issue #10)",
            sc.topology.name)
    return sc


def measurements(sc: Scenario) -> int:
    """Transfer groups of the whole sweep (what rig.description.steps expands), counted without
    expanding them."""
    steps = sum(1 if p.kind == "real" else len(p.rtts_s) for p in sc.paths)
    configs = sum(len(sc.sweep.streams) if sc.sweep.streams and tools.get(c.tool).caps.max_streams > 1
                  else 1 for c in sc.clients)
    return steps * configs * len(sc.sweep.concurrency) * sc.sweep.repeats
