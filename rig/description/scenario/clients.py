"""What moves over a scenario's paths: its `files:`, `servers:`, `clients:` and
`background:` entries, each declared once as a frozen dataclass (schema.spec) with the
checks that span its own fields.

What each client tool can do (servers, protocols, streams, its own option section) and
which server kinds exist is declared by their own modules, which fill
rig.description.kinds (this module never imports them).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from rig.description import endpoint, kinds, limits as L, schema as S
from rig.description.scenario.paths import CAPTURE_MODES, _mapping
from rig.description.tuningspec import CC_NAMES
from rig.errors import InputError


@S.describe(type="mapping", text="variable name: text or number", example={"XRD_NETWORKSTACK": "IPv4"})
@S.with_ctx
def _env(ctx: S.Ctx, v: Any) -> dict:
    v = _mapping(ctx, v, "variable names to values", L.MAX_ENV)
    return {S.call(ctx.child(str(k)), S.env_key, k): S.call(ctx.child(str(k)), S.env_value, x)
            for k, x in v.items()}


@S.describe(type="mapping", text="protocol (root, http, https): TCP port 1-65535",
            example={"root": 11094, "http": 18000})
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


MAX_ARGS = 64       # words of a client's `args:`


@S.describe(type="text", example="--nopbar")
def _arg(v: Any) -> str:
    """One word of a client's `args:`: text on one line (it is an argv item, no shell)."""
    v = S.text(v)
    if not v.isprintable():
        raise ValueError("expected text on one line without control characters")
    return v


@S.describe(type="choice", choices=lambda: kinds.CLIENTS.names())
def _tool(v: Any) -> str:
    return S.choice(*kinds.CLIENTS.names())(v)        # the registry as it is at load time


@S.describe(type="choice", choices=lambda: kinds.SERVERS.names())
def _server_kind(v: Any) -> str:
    return S.choice(*kinds.SERVERS.names())(v)


@S.describe(type="choice", choices=kinds.TLS_MODES)
def _tls_mode(v: Any) -> str:
    """off | control | all; YAML reads a bare off/on as a boolean: off, or all (on)."""
    if isinstance(v, bool):
        return "all" if v else "off"
    return S.choice(*kinds.TLS_MODES)(v)


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
    # many small files (issue 40 item 7): `count` random files of `size` each, made once
    # per run in a folder NAME/ (NAME/00000 ..), each one's adler32 taken as it is made;
    # a client naming NAME fetches all of them (unset: one file NAME)
    count: int | None = S.spec(S.optional(S.integer(1, L.MAX_FILE_COUNT)), None)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        root_keys = ("branches", "cluster", "seed", "path")
        if d["count"] is not None and d["kind"] != "random":
            raise ctx.child("count").error("only for kind: random (a set of small files)",
                                           d["count"])
        if d["count"] is not None and d["size"] is not None \
                and d["count"] * d["size"] > L.MAX_SIZE:
            raise ctx.child("count").error(f"{d['count']} files of {S.fmt_size(d['size'])}: "
                                           f"more than {S.fmt_size(L.MAX_SIZE)} in all",
                                           d["count"])
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

    @property
    def members(self) -> list[str]:
        """The paths (below the data folder) of a `count:` set's files; [] for one file."""
        if self.count is None:
            return []
        return [f"{self.name}/{i:05d}" for i in range(self.count)]

    @property
    def total(self) -> int:
        """Bytes of the file, or of every file of a `count:` set."""
        return self.size * (self.count or 1)

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


@S.describe(type="cpus", text="CPU list, a list of one per instance, or per-instance", example="0-1")
@S.with_ctx
def _cpu_sets(ctx: S.Ctx, v: Any) -> list[str]:
    """One CPU set for every instance ("0-1"), a list of one per instance, or
    `per-instance` (a CPU of its own each)."""
    if v == PER_INSTANCE:
        return [PER_INSTANCE]            # expanded once the instance count is known
    return S.call(ctx, S.list_of(S.cpu_set, max_len=L.MAX_ORIGINS), v)


@S.describe(type="cpus", text="CPU list, a list of one per instance, or per-instance", example="0-1")
def _client_cpus(ctx: S.Ctx, v: Any) -> str | tuple[str, ...]:
    """A client's CPU set (every instance in it: "0-1"), or one per concurrent instance:
    a list, or `per-instance` (instance i on the host's i-th CPU)."""
    if v == PER_INSTANCE:
        return tuple(_per_instance())
    if isinstance(v, list):
        return tuple(S.call(ctx, S.list_of(S.cpu_set, scalar_ok=False,
                                           max_len=L.MAX_CONCURRENCY), v))
    return S.call(ctx, S.cpu_set, v)


@S.describe(type="text", text="root://, roots://, http(s)://, dav(s):// URL with its path",
            example="root://dtn.example.org:1094//store/rig",
            limits=f"IPv4 address or host name; at most {endpoint.MAX_URL} characters")
def _endpoint_url(v: Any) -> str:
    endpoint.parse(v)
    return v


EXTERNAL = "external"      # the server kind of an endpoint the rig does not start


@S.describe(type="choice", choices=kinds.AUTH_MODES)
def _auth(v: Any) -> str:
    return S.choice(*kinds.AUTH_MODES)(v)


@S.describe(type="credential", text=f"{', '.join(kinds.MADE_CREDENTIALS)}, or "
            "{proxy: PATH} (a file of yours, for an external endpoint)",
            example="expired")
@S.with_ctx
def _credential(ctx: S.Ctx, v: Any) -> str | dict[str, str]:
    """A rig-made credential (kinds.MADE_CREDENTIALS), or a file the user has, named
    under its kind (kinds.CREDENTIAL_FILES): an existing readable regular file."""
    files = " or ".join(f"{{{k}: PATH}}" for k in kinds.CREDENTIAL_FILES)
    if isinstance(v, str) and v in kinds.MADE_CREDENTIALS:
        return v
    if not isinstance(v, dict) or len(v) != 1 or next(iter(v)) not in kinds.CREDENTIAL_FILES:
        raise ctx.error(f"expected one of {', '.join(kinds.MADE_CREDENTIALS)}, or {files}", v)
    key, path = next(iter(v.items()))
    c = ctx.child(str(key))
    path = S.call(c, S.path_text, path)
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise c.error("no such readable file", path)
    return {str(key): path}


def _check_external(ctx: S.Ctx, d: dict[str, Any]) -> None:
    """An external server has its URL and none of the keys of a server the rig runs."""
    if d["kind"] != EXTERNAL:
        if d["url"] is not None:
            raise ctx.child("url").error(f"only for kind: {EXTERNAL} (a server the rig "
                                         "does not start)", d["url"])
        return
    if d["url"] is None:
        raise ctx.child("url").error("required key is missing (kind external: the "
                                     "endpoint's URL, e.g. root://dtn.example.org//store/rig)")
    if d["auth"] != "none":
        raise ctx.child("auth").error("not for an external endpoint (it authenticates as "
                                      "its site set it up: give its clients credential: "
                                      "{proxy: PATH})", d["auth"])
    for key, unset in (("binary", None), ("count", 1), ("cpus", None), ("node", None),
                       ("tpc", False), ("origin", None), ("ports", None)):
        if d[key] != unset:
            raise ctx.child(key).error("not for an external endpoint (the rig does not "
                                       "start it; its port is in its url)", d[key])


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
    # the ports it listens on, per protocol of its kind (root, http, https); instance k of
    # `count` adds 10 k. Unset: the kind's defaults (docs/scenarios.md "Ports"), moved past
    # ports taken on the host; a port given here and already in use is refused before
    # anything starts
    ports: dict | None = S.spec(S.optional(_port_map), None)
    # kind external: the endpoint's URL (root://, roots://, http(s)://, dav(s):// with its
    # path), a server the rig does not start (rig.description.endpoint)
    url: str | None = S.spec(S.optional(_endpoint_url), None)
    # how it authenticates its clients (kinds.AUTH_MODES): x509 takes X.509 proxies with
    # VOMS attributes and refuses a client without one (its clients' `credential:`)
    auth: str = S.spec(_auth, "none")

    @property
    def endpoint(self) -> endpoint.Endpoint | None:
        return endpoint.parse(self.url) if self.url else None

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
        _check_external(ctx, d)
        if d["auth"] != "none" and d["auth"] not in kinds.server(d["kind"]).auths:
            can = ", ".join(k.kind for k in kinds.SERVERS.all() if d["auth"] in k.auths)
            raise ctx.child("auth").error(f"a {d['kind']} server cannot do auth: "
                                          f"{d['auth']} (can: {can})", d["auth"])
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


@S.describe(type="fraction", lo=0.0, hi=1.0, above_lo=True, example="25%")
def branch_fraction(v: Any) -> float:
    """A fraction of branches read (sweep.branches, a replay client's `branches:`)."""
    f = S.fraction(v)
    if f <= 0:
        raise ValueError("must be more than 0%")
    return f


@S.describe(type="name", text="a file's name; a path against an external endpoint",
            example="f1G", limits=f"a name: letters, digits, _ . + -, at most "
            f"{L.MAX_NAME_CHARS}; a path: also / ~ @ % = , (no '..'), at most "
            f"{endpoint.MAX_URL}")
def _file_ref(v: Any) -> str:
    return endpoint.file_ref(v)


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
    # a file of `files:` by name; against an external endpoint, a path on it (below its
    # URL's path, or absolute)
    file: str | None = S.spec(S.optional(_file_ref), None)
    # streams of one transfer; unset: sweep.streams for a multi-stream tool, else 1.
    # Beside a sweep.streams that would replace it: refused (to keep it while the others
    # sweep, give the client its own sweep: {streams: [N]})
    streams: int | None = S.spec(S.optional(S.integer(1, L.MAX_STREAMS)), None)
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
    # what it authenticates with: a credential the rig makes for a server with `auth:`
    # (valid, its default there; expired, foreign, missing: ones it must refuse), or a
    # file of the user's for an external endpoint ({proxy: PATH})
    credential: str | dict | None = S.spec(S.optional(_credential), None)
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
        if d["streams"] is not None and d["streams"] > caps.max_streams:
            raise ctx.child("streams").error(
                f"{tool} supports at most {caps.max_streams} stream(s)", d["streams"])
        own = d["sweep"].streams if d["sweep"] is not None else None
        if own and d["streams"] is not None:
            raise ctx.child("streams").error(
                f"client {d['name']}'s streams and its own sweep.streams {S.fmt_list(own)} "
                "conflict (the sweep would replace it): keep one", d["streams"])
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
