"""Scenario and topology descriptions: pure, validated data loaded from YAML.

A scenario names a topology, paths (emulated or real), servers, data files, client
configurations, a sweep, tuning and validation settings. Everything is checked strictly
(unknown keys, bad units, impossible values) and reported as one line
`FILE: key.path: message (got VALUE)`. Must not import anything that runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import limits as L, safeyaml, schema as S
from . import topology as T
from .emul.profile import BACKENDS, Direction, GilbertElliott, LinkProfile
from .services import servers as server_kinds, tools

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY_DIR = ROOT / "topologies"
# What each client tool can do (servers, protocols, streams, options) and which server
# kinds exist is declared by the tool and server modules themselves (pure registries).


Topology = T.Topology         # nodes and links: rig/topology.py


@dataclass(frozen=True)
class PathSpec:
    name: str
    kind: str                  # emulated | real
    rtts_s: list[float] = field(default_factory=lambda: [0.0])
    jitter_s: float = 0.0
    jitter_dist: str = "uniform"
    loss: float = 0.0
    gemodel: GilbertElliott | None = None
    rate_bps: float | None = None
    queue_pkts: int | None = None
    backend: str = "auto"
    # real paths: where the client runs, where the server listens (existing, used as-is)
    client_ns: str | None = None
    server_ns: str | None = None
    server_addr: str | None = None

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
    name: str
    size: int


@dataclass(frozen=True)
class ServerSpec:
    name: str
    kind: str
    binary: str | None = None


@dataclass(frozen=True)
class ClientSpec:
    name: str
    tool: str
    server: str | None
    file: str | None
    streams: int = 1
    protocol: str = "root"     # root | http (which endpoint of the server)
    binary: str | None = None  # path to the client binary (compare two versions)
    page_checksum: bool | None = None   # xrdcp XRD_CPUSEPGWRTRD; None: tool default (on)
    block: int | None = None   # fdt block size
    buffer: int | None = None  # fdt / iperf3 socket buffer
    duration_s: float = 10.0   # iperf3
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Sweep:
    repeats: int = 1
    concurrency: list[int] = field(default_factory=lambda: [1])
    streams: list[int] | None = None   # overrides multi-stream clients' streams


@dataclass(frozen=True)
class Tuning:
    congestion_control: str | None = None
    tcp_rmem_max: int | None = None
    tcp_wmem_max: int | None = None
    core_rmem_max: int | None = None    # host-global: recorded and restored
    core_wmem_max: int | None = None
    mtu: int = 1500


@dataclass(frozen=True)
class Validation:
    ping_count: int = 20
    ping_interval_s: float = 0.05
    iperf_seconds: float = 3.0
    iperf_streams: int = 8
    rtt_tolerance_ms: float = 0.3
    rtt_tolerance_rel: float = 0.01


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    text: str
    description: str
    topology: Topology
    paths: list[PathSpec]
    files: list[FileSpec]
    servers: list[ServerSpec]
    clients: list[ClientSpec]
    sweep: Sweep
    tuning: Tuning
    validation: Validation
    transfer_timeout_s: float

    def server(self, name: str) -> ServerSpec:
        return next(s for s in self.servers if s.name == name)

    def file(self, name: str) -> FileSpec:
        return next(f for f in self.files if f.name == name)


# --- parsing ------------------------------------------------------------------------

def _gemodel(ctx: S.Ctx, v: Any) -> GilbertElliott:
    d = S.check_mapping(ctx, v, {"p": S.Field(S.fraction), "r": S.Field(S.fraction),
                                 "loss_bad": S.Field(S.fraction, 1.0),
                                 "loss_good": S.Field(S.fraction, 0.0)})
    return S.call(ctx, lambda x: GilbertElliott(**x), d)


_PATH_FIELDS = {
    "name": S.Field(S.name), "kind": S.Field(S.choice("emulated", "real"), "emulated"),
    "rtt": S.Field(S.list_of(S.duration_in(0.0, L.MAX_RTT_S), max_len=L.MAX_RTTS), None),
    "jitter": S.Field(S.duration_in(0.0, L.MAX_RTT_S), 0.0),
    "jitter_distribution": S.Field(S.choice("uniform", "normal"), "uniform"),
    "loss": S.Field(S.fraction, 0.0), "gemodel": S.Field(S.with_ctx(_gemodel), None),
    "rate": S.Field(S.optional(S.rate), None),
    "queue": S.Field(S.optional(S.integer(1, L.MAX_QUEUE_PKTS)), None),
    "backend": S.Field(S.choice(*BACKENDS), "auto"),
    "client_ns": S.Field(S.optional(S.ns_name), None),
    "server_ns": S.Field(S.optional(S.ns_name), None),
    "server_addr": S.Field(S.optional(S.ip_address), None),
}


def _path(ctx: S.Ctx, v: Any) -> PathSpec:
    d = S.check_mapping(ctx, v, _PATH_FIELDS)
    if d["kind"] == "real":
        for k in ("rtt", "gemodel", "rate", "queue"):
            if d[k] is not None:
                raise ctx.child(k).error("a real path is used as-is: nothing is emulated", d[k])
        if d["loss"] or d["jitter"]:
            raise ctx.error("a real path is used as-is: no loss or jitter")
        if not d["server_addr"]:
            raise ctx.child("server_addr").error("a real path needs the server's address")
        if d["backend"] not in ("auto", "none"):
            raise ctx.child("backend").error("a real path has backend none", d["backend"])
        return PathSpec(name=d["name"], kind="real", rtts_s=[], backend="none",
                        client_ns=d["client_ns"], server_ns=d["server_ns"],
                        server_addr=d["server_addr"])
    for k in ("client_ns", "server_ns", "server_addr"):
        if d[k] is not None:
            raise ctx.child(k).error("only real paths name existing namespaces/addresses", d[k])
    rtts = d["rtt"] if d["rtt"] is not None else [0.0]
    for r in rtts:        # each RTT within 0..limits.MAX_RTT_S (checked by its parser)
        if d["jitter"] > r:
            raise ctx.child("jitter").error(f"jitter exceeds the RTT {r * 1e3:g}ms", d["jitter"])
    if d["loss"] and d["gemodel"]:
        raise ctx.child("gemodel").error("give either loss or gemodel, not both")
    if d["loss"] >= 1.0:
        raise ctx.child("loss").error("100% loss moves nothing", d["loss"])
    return PathSpec(name=d["name"], kind="emulated", rtts_s=rtts, jitter_s=d["jitter"],
                    jitter_dist=d["jitter_distribution"], loss=d["loss"], gemodel=d["gemodel"],
                    rate_bps=d["rate"], queue_pkts=d["queue"], backend=d["backend"])


def parse_path(ctx: S.Ctx, v: Any) -> PathSpec:
    """One entry of a scenario's `paths:`; `rig net up` validates its options with it, so
    both accept exactly the same values."""
    return _path(ctx, v)


def _file(ctx: S.Ctx, v: Any) -> FileSpec:
    d = S.check_mapping(ctx, v, {"name": S.Field(S.name), "size": S.Field(S.size)})
    if d["size"] > L.MAX_FILE_SIZE:
        raise ctx.child("size").error(f"files above {S.fmt_size(L.MAX_FILE_SIZE)} do not fit "
                                      "a tmpfs here", v["size"])
    return FileSpec(**d)


def _server(ctx: S.Ctx, v: Any) -> ServerSpec:
    d = S.check_mapping(ctx, v, {"name": S.Field(S.name),
                                 "kind": S.Field(lambda v: S.choice(*server_kinds.kinds())(v)),
                                 "binary": S.Field(S.optional(S.path_text), None)})
    return ServerSpec(**d)


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


_CLIENT_FIELDS = {
    "name": S.Field(S.name), "tool": S.Field(lambda v: S.choice(*tools.names())(v)),
    "server": S.Field(S.optional(S.name), None), "file": S.Field(S.optional(S.name), None),
    "streams": S.Field(S.integer(1, L.MAX_STREAMS), 1),
    "protocol": S.Field(S.optional(S.text), None),
    "binary": S.Field(S.optional(S.path_text), None),
    "page_checksum": S.Field(S.optional(S.boolean), None),
    "block": S.Field(S.optional(S.size_in(L.MIN_BLOCK, L.MAX_BLOCK)), None),
    "buffer": S.Field(S.optional(S.size_in(L.MIN_SOCKET_BUFFER, L.MAX_BUFFER)), None),
    # iperf3 -t takes whole seconds
    "duration": S.Field(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 10.0),
    "env": S.Field(_env, {}),
}


_OPTIONS = ("page_checksum", "block", "buffer")


def _client(ctx: S.Ctx, v: Any) -> ClientSpec:
    d = S.check_mapping(ctx, v, _CLIENT_FIELDS)
    tool = d["tool"]
    caps = tools.get(tool).caps
    if d["streams"] > caps.max_streams:
        raise ctx.child("streams").error(f"{tool} supports at most {caps.max_streams} stream(s)",
                                         d["streams"])
    for key in _OPTIONS:
        if d[key] is not None and key not in caps.options:
            users = sorted(t.name for t in tools.all_tools() if key in t.caps.options)
            raise ctx.child(key).error(f"only for {', '.join(users)}", d[key])
    proto = d["protocol"] or (caps.protocols[0] if caps.protocols else "")
    if d["protocol"] is not None and proto not in caps.protocols:
        speaks = " or ".join(f"{p}://" if p == "root" else p for p in caps.protocols) or "nothing"
        raise ctx.child("protocol").error(f"{tool} here speaks {speaks}", proto)
    if caps.needs_file and not d["file"]:
        raise ctx.child("file").error(f"{tool} needs a file to fetch")
    return ClientSpec(name=d["name"], tool=tool, server=d["server"], file=d["file"],
                      streams=d["streams"], protocol=proto, binary=d["binary"],
                      page_checksum=d["page_checksum"], block=d["block"], buffer=d["buffer"],
                      duration_s=d["duration"], env=d["env"])


def _sweep(ctx: S.Ctx, v: Any) -> Sweep:
    d = S.check_mapping(ctx, v, {
        "repeats": S.Field(S.integer(1, L.MAX_REPEATS), 1),
        "concurrency": S.Field(S.list_of(S.integer(1, L.MAX_CONCURRENCY),
                                         max_len=L.MAX_SWEEP_VALUES), [1]),
        "streams": S.Field(S.optional(S.list_of(S.integer(1, L.MAX_STREAMS),
                                                max_len=L.MAX_SWEEP_VALUES)), None)})
    return Sweep(**d)


def _tuning(ctx: S.Ctx, v: Any) -> Tuning:
    d = S.check_mapping(ctx, v, {
        "congestion_control": S.Field(S.optional(S.choice("bbr", "cubic", "reno", "htcp")), None),
        "tcp_rmem_max": S.Field(S.optional(_buffer), None),
        "tcp_wmem_max": S.Field(S.optional(_buffer), None),
        "core_rmem_max": S.Field(S.optional(_buffer), None),
        "core_wmem_max": S.Field(S.optional(_buffer), None),
        "mtu": S.Field(S.integer(L.MIN_MTU, L.MAX_MTU), 1500)})
    return Tuning(**d)


_buffer = S.size_in(L.MIN_BUFFER, L.MAX_BUFFER)


def _validation(ctx: S.Ctx, v: Any) -> Validation:
    d = S.check_mapping(ctx, v, {
        "ping_count": S.Field(S.integer(L.MIN_PING_COUNT, L.MAX_PING_COUNT), 20),
        "ping_interval": S.Field(S.duration_in(L.MIN_PING_INTERVAL_S, L.MAX_PING_INTERVAL_S),
                                 0.05),
        "iperf_duration": S.Field(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 3.0),
        "iperf_streams": S.Field(S.integer(1, L.MAX_STREAMS), 8),
        "rtt_tolerance": S.Field(S.duration_in(0.0, L.MAX_RTT_TOLERANCE_S), 0.0003),
        "rtt_tolerance_relative": S.Field(S.fraction, 0.01)})
    return Validation(d["ping_count"], d["ping_interval"], d["iperf_duration"],
                      d["iperf_streams"], d["rtt_tolerance"] * 1e3, d["rtt_tolerance_relative"])


def list_topologies() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def parse_topology(p: Path) -> Topology:
    return T.parse(_load_yaml(p), source=str(p))


def _load_yaml(p: Path) -> Any:
    return _read(p)[0]


def _read(p: Path) -> tuple[Any, str]:
    """The document and its text, read once (size-capped, strict UTF-8, no aliases,
    no duplicate keys: rig.safeyaml)."""
    text = safeyaml.read_text(p)
    return safeyaml.load(text, str(p)), text


_SCENARIO_FIELDS = {
    "name": S.Field(S.name), "description": S.Field(S.text, ""),
    "topology": S.Field(S.name, "client-router-server"),
    "paths": S.Field(S.list_of(S.with_ctx(_path), scalar_ok=False, max_len=L.MAX_PATHS)),
    "files": S.Field(S.list_of(S.with_ctx(_file), scalar_ok=False, min_len=0,
                               max_len=L.MAX_FILES), []),
    "servers": S.Field(S.list_of(S.with_ctx(_server), scalar_ok=False, min_len=0,
                                 max_len=L.MAX_SERVERS), []),
    "clients": S.Field(S.list_of(S.with_ctx(_client), scalar_ok=False, max_len=L.MAX_CLIENTS)),
    "sweep": S.Field(S.with_ctx(_sweep), None), "tuning": S.Field(S.with_ctx(_tuning), None),
    "validation": S.Field(S.with_ctx(_validation), None),
    "transfer_timeout": S.Field(S.duration_in(1.0), 600.0),
}


def load(path: str | Path) -> Scenario:
    p = Path(path)
    data, text = _read(p)
    return parse(data, source=str(p), text=text)


def parse(data: Any, *, source: str, text: str = "") -> Scenario:
    ctx = S.Ctx(source)
    d = S.check_mapping(ctx, data, _SCENARIO_FIELDS)
    topo_ctx = ctx.child("topology")
    tp = TOPOLOGY_DIR / f"{d['topology']}.yaml"
    if not tp.is_file():
        raise topo_ctx.error(f"no such topology (have: {', '.join(list_topologies())})",
                             d["topology"])
    sc = Scenario(
        name=d["name"], source=source, text=text, description=d["description"],
        topology=parse_topology(tp), paths=d["paths"], files=d["files"], servers=d["servers"],
        clients=d["clients"], sweep=d["sweep"] or _sweep(ctx, {}),
        tuning=d["tuning"] or _tuning(ctx, {}), validation=d["validation"] or _validation(ctx, {}),
        transfer_timeout_s=d["transfer_timeout"])
    _cross_check(ctx, sc)
    return sc


def _cross_check(ctx: S.Ctx, sc: Scenario) -> None:
    for key, items in (("paths", sc.paths), ("files", sc.files), ("servers", sc.servers),
                       ("clients", sc.clients)):
        S.unique_names(ctx.child(key), items, key[:-1])
    servers = {s.name: s for s in sc.servers}
    files = {f.name for f in sc.files}
    for i, c in enumerate(sc.clients):
        cc = ctx.child("clients").child(i)
        caps = tools.get(c.tool).caps
        if caps.uses_iperf_servers:
            continue
        if c.server is None:
            want = [s for s in sc.servers if s.kind in caps.servers]
            if len(want) != 1:
                raise cc.child("server").error(f"name the server {c.tool} talks to")
            object.__setattr__(c, "server", want[0].name)
        if c.server not in servers:
            raise cc.child("server").error("no server of that name", c.server)
        if servers[c.server].kind not in caps.servers:
            raise cc.child("server").error(
                f"{c.tool} cannot talk to a {servers[c.server].kind} server", c.server)
        if c.file not in files:
            raise cc.child("file").error("no file of that name", c.file)
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


def measurements(sc: Scenario) -> int:
    """Transfer groups of the whole sweep (what rig.steps expands), counted without
    expanding them."""
    steps = sum(1 if p.kind == "real" else len(p.rtts_s) for p in sc.paths)
    configs = sum(len(sc.sweep.streams) if sc.sweep.streams and tools.get(c.tool).caps.max_streams > 1
                  else 1 for c in sc.clients)
    return steps * configs * len(sc.sweep.concurrency) * sc.sweep.repeats
