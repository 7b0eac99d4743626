"""Server kinds: one module per kind, found here and registered by name.

A kind module declares a subclass of `ServerKind` with `@register`: its protocols and
base ports, the config files it needs (pure text), its argv, the user it runs as and
the log files worth quoting when it fails to start. `ServerPlan` is one instance as it
will run. Starting and probing live in `start.py` (it runs processes); this module and
the kind modules are pure, so the scenario loader can validate server kinds from here.

Must not import rig.process.proc, orchestration or reports.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from rig.description.scenario import ServerSpec

IPERF3_PORT = 5201        # the path's validation server (not a scenario server kind)
PORT_STEP = 10            # the k-th server of a path adds k * PORT_STEP to its ports


@dataclass(frozen=True)
class ServerPlan:
    """A server instance as it will run: where, on which ports, serving which directory."""
    spec: "ServerSpec"
    ns: str | None
    addr: str
    ports: dict[str, int]
    workdir: Path          # run-private: config, logs, admin/pid paths
    datadir: Path
    name: str = ""         # the instance's name (several origins: name-1 .. name-K)
    cpus: str | None = None   # CPU set it is pinned to (taskset -c), None: any
    tls_dir: Path | None = None   # cert.pem, key.pem, ca/ (the run's throw-away identity)

    @property
    def origin(self) -> str:
        return self.name or self.spec.name

    @property
    def instance(self) -> str:
        return self.workdir.name

    @property
    def kind(self) -> "ServerKind":
        return get(self.spec.kind)

    def url(self, protocol: str, relpath: str) -> str:
        return self.kind.url(self, protocol, relpath)


class ServerKind:
    kind: ClassVar[str]
    ports: ClassVar[dict[str, int]]              # protocol -> base port
    version_argv: ClassVar[list[str] | None] = None
    run_as: ClassVar[str | None] = None          # the workdir is chowned to this user
    logs: ClassVar[tuple[str, ...]] = ()         # quoted (last line) when start fails
    tpc: ClassVar[bool] = False                  # can serve HTTP third-party copy (pull)

    def files(self, p: ServerPlan) -> dict[str, str]:
        """Config files (name -> text) the server needs in its workdir (pure)."""
        return {}

    def argv(self, p: ServerPlan) -> list[str]:
        raise NotImplementedError

    def url(self, p: ServerPlan, protocol: str, relpath: str) -> str:
        port = p.ports[protocol]
        if protocol == "root":
            return f"root://{p.addr}:{port}//{relpath}"
        return f"{protocol}://{p.addr}:{port}/{relpath}"


_REGISTRY: dict[str, ServerKind] = {}


def register(cls: type[ServerKind]) -> type[ServerKind]:
    if cls.kind in _REGISTRY:
        raise ValueError(f"server kind {cls.kind!r} registered twice")
    _REGISTRY[cls.kind] = cls()
    return cls


def get(kind: str) -> ServerKind:
    return _REGISTRY[kind]


def kinds() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def all_kinds() -> list[ServerKind]:
    return list(_REGISTRY.values())


def default_ports(kind: str, k: int) -> dict[str, int]:
    """Ports of the k-th server of a path (each instance its own)."""
    base = {"iperf3": IPERF3_PORT} if kind == "iperf3" else get(kind).ports
    return {proto: port + PORT_STEP * k for proto, port in base.items()}


def server_files(p: ServerPlan) -> dict[str, str]:
    return p.kind.files(p)


def server_argv(p: ServerPlan) -> list[str]:
    return p.kind.argv(p)


def iperf3_server_argv(ns_addr: str, port: int) -> list[str]:
    # -J: the server's per-test JSON (with the sender's srtt) goes back to a client
    # that asks with --get-server-output
    return ["iperf3", "-s", "-J", "-B", ns_addr, "-p", str(port)]


def _load() -> None:
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not m.name.startswith("_") and m.name != "start":
            importlib.import_module(f"{__name__}.{m.name}")


_load()
