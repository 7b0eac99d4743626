"""Server kinds: one module per kind, found here and registered by name.

A kind module declares a subclass of `ServerKind` with `@register`: its protocols and
base ports, the config files it needs (pure text), its argv, the user it runs as and
the log files worth quoting when it fails to start. `ServerPlan` is one instance as it
will run. Starting and probing live in `start.py` (it runs processes); this module and
the kind modules are pure. Each kind registered here is also entered in
rig.description.kinds, against which the scenario schema checks servers.

Must not import rig.process.proc, orchestration or reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rig.netaddr import hostport
from rig.description import kinds as described
from rig.services.registry import Registry

if TYPE_CHECKING:
    from rig.description.scenario.clients import ServerSpec
    from rig.process.remote import Host

IPERF3_PORT = 5201        # the path's validation server (not a scenario server kind)
# a path's competing flow k (`background:`) has its own iperf3 server here, above the
# ports of the iperf3 clients' servers (one per concurrent instance, up to 256)
BACKGROUND_PORT = IPERF3_PORT + 300
PORT_STEP = 10            # the k-th server of a path adds k * PORT_STEP to its ports
# on another host (`hosts:`), where production services listen on the kinds' well-known
# ports (xrootd 1094, XrdHttp/nginx 8000/8443, perfSONAR's iperf3 5201), every default
# port is this much higher: 21094, 28000, 28443, 25201 (rig-fdt's 54321 this much lower:
# 34321); a `ports:` setting is taken as is
REMOTE_PORT_OFFSET = 20000


@dataclass(frozen=True)
class TlsFiles:
    """A server's TLS material for one run (rig.realization.tls makes it): its certificate
    and key as PEM text (written into the server's workdir as `tls-cert.pem` and
    `tls-key.pem`), and where the run's CA lies for clients."""
    cert_pem: str
    key_pem: str
    ca_file: str           # the CA certificate (PEM)
    ca_dir: str            # a directory holding it under its OpenSSL subject hash
    name: str = ""         # its certificate's CN (a GSI client is told it: XrdSecGSISRVNAMES)


TLS_CERT, TLS_KEY = "tls-cert.pem", "tls-key.pem"
# the folder of a server's data directory that uploads go to (writable for them, each
# file checked and removed after its group)
UPLOAD_DIR = "upload"


@dataclass(frozen=True)
class ServerPlan:
    """A server instance as it will run: where, on which ports, serving which directory."""
    spec: "ServerSpec"
    ns: str | None
    addr: str
    ports: dict[str, int]
    workdir: Path          # run-private: config, logs, admin/pid paths
    datadir: Path
    tls: TlsFiles | None = None     # None: plain only; else its TLS endpoints run too
    host: "Host | None" = None   # a remote host (rig.process.remote): workdir, datadir there
    rundir: str | None = None    # the run's directory on that host (its pid files)
    name: str = ""         # the instance's name (several origins: name-1 .. name-K)
    cpus: str | None = None   # CPU set it is pinned to (taskset -c), None: any
    tls_dir: Path | None = None   # cert.pem, key.pem, ca/ (the run's throw-away identity)
    upstream: str | None = None   # a cache's origin, "addr:port" (root://)
    uploads: bool = False         # some client uploads to it (tools.UPLOAD_DIR writable)

    @property
    def origin(self) -> str:
        return self.name or self.spec.name

    @property
    def instance(self) -> str:
        return self.workdir.name

    @property
    def kind(self) -> "ServerKind":
        return get(self.spec.kind)

    def url(self, protocol: str, relpath: str, tls: bool = False) -> str:
        return self.kind.url(self, protocol, relpath, tls)


class ServerKind:
    kind: ClassVar[str]
    ports: ClassVar[dict[str, int]]              # protocol -> base port
    tls_ports: ClassVar[dict[str, int]] = {}     # extra ports when it serves TLS (https)
    version_argv: ClassVar[list[str] | None] = None
    run_as: ClassVar[str | None] = None          # the workdir is chowned to this user
    logs: ClassVar[tuple[str, ...]] = ()         # quoted (last line) when start fails
    tpc: ClassVar[bool] = False                  # can serve HTTP third-party copy (pull)
    caches: ClassVar[bool] = False               # a cache in front of an `origin:` (xcache)
    # accepts uploads into the data directory's upload/ folder (configured so when the
    # plan's `uploads` is set)
    writes: ClassVar[bool] = False
    # how it can authenticate clients (`auth:`, kinds.AUTH_MODES besides none)
    auths: ClassVar[frozenset[str]] = frozenset()
    # how it writes answers to the socket (scenario keys of the same names), each with the
    # default a Debian site runs; a kind without a setting refuses the key
    settings: ClassVar[dict[str, bool]] = {}

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if "logs" not in cls.__dict__ and "kind" in cls.__dict__:
            cls.logs = (f"{cls.kind}-error.log",)      # what nginx and apache write

    def setting(self, p: ServerPlan, name: str) -> bool:
        """A send setting of this instance: the scenario's value, else the kind's default."""
        v = p.spec.settings.get(name)
        return self.settings[name] if v is None else bool(v)

    def plan_ports(self, spec: "ServerSpec", ports: dict[str, int]) -> dict[str, int]:
        """The ports an instance of `spec` really listens on, given the defaults (pure)."""
        return ports

    # files of its workdir readable by its user only (sshd and ssh refuse readable keys)
    private: ClassVar[frozenset[str]] = frozenset({TLS_KEY})

    def prepare_argv(self, p: ServerPlan) -> list[list[str]]:
        """Commands run (with a deadline, before `files`) in its fresh workdir: the
        per-run keys of sshd. Local instances only."""
        return []

    def files(self, p: ServerPlan) -> dict[str, str]:
        """Config files (name -> text) the server needs in its workdir (pure)."""
        return {}

    @staticmethod
    def tls_files(p: ServerPlan) -> dict[str, str]:
        """The certificate and key files of a TLS-serving plan (none otherwise)."""
        return {TLS_CERT: p.tls.cert_pem, TLS_KEY: p.tls.key_pem} if p.tls else {}

    def argv(self, p: ServerPlan) -> list[str]:
        raise NotImplementedError

    def url(self, p: ServerPlan, protocol: str, relpath: str, tls: bool = False) -> str:
        port = p.ports[protocol]
        if protocol == "root":       # roots://: TLS on the same port
            return f"root{'s' if tls else ''}://{hostport(p.addr, port)}//{relpath}"
        if protocol == "http" and tls:    # its own port, or the http one when it speaks both
            return f"https://{hostport(p.addr, p.ports.get('https', port))}/{relpath}"
        return f"{protocol}://{hostport(p.addr, port)}/{relpath}"


_KINDS: Registry[ServerKind] = Registry("server kind", lambda cls: cls.kind, described.SERVERS)
register = _KINDS.register
unregister = _KINDS.unregister
get = _KINDS.get
kinds = _KINDS.names
all_kinds = _KINDS.all


def default_ports(kind: str, k: int, tls: bool = False,
                  avoid: frozenset[int] | set[int] = frozenset(),
                  remote: bool = False) -> dict[str, int]:
    """Ports of the k-th server of a path (each instance its own), none of them in `avoid`
    (the ports earlier servers on the same address took: kinds' bases are 10 apart, so
    nginx's second server and Apache's third would otherwise share 8090). `remote`: on
    another host, REMOTE_PORT_OFFSET higher."""
    base = {"iperf3": IPERF3_PORT} if kind == "iperf3" else get(kind).ports
    if tls and kind != "iperf3":
        base = {**base, **get(kind).tls_ports}
    out: dict[str, int] = {}
    for proto, port in base.items():
        if remote:      # rig-fdt's 54321 would pass 65535: 34321 there
            port += REMOTE_PORT_OFFSET if port + REMOTE_PORT_OFFSET < 65000 else -REMOTE_PORT_OFFSET
        port += PORT_STEP * k
        while port in avoid or port in out.values():
            port += 1
        out[proto] = port
    return out


def server_files(p: ServerPlan) -> dict[str, str]:
    return p.kind.files(p)


def server_argv(p: ServerPlan) -> list[str]:
    return p.kind.argv(p)


def iperf3_server_argv(ns_addr: str, port: int) -> list[str]:
    # -J: the server's per-test JSON (with the sender's srtt) goes back to a client
    # that asks with --get-server-output
    return ["iperf3", "-s", "-J", "-B", ns_addr, "-p", str(port)]


_KINDS.load(__name__, __path__, skip=("start",))


def given_ports(spec: Any, k: int, got: dict[str, int]) -> dict[str, int]:
    """The ports a server's `ports:` setting gives its instance k (k * PORT_STEP added),
    for the protocols it serves in this run (`got`: the defaults it would take)."""
    return {p: v + PORT_STEP * k for p, v in (getattr(spec, "ports", None) or {}).items()
            if p in got}
