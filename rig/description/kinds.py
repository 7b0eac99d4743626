"""The registries a scenario is checked against: client tools, server kinds and link
emulation backends, as the description sees them (names, capabilities, option sections).

The description owns these registries and the layers below it fill them: each tool
module of rig/services/tools/, each kind module of rig/services/servers/ and each
backend module of rig/realization/emul/ registers itself when imported, so the
dependency points down. Whoever loads scenarios (the CLI, the run, the tests) imports
those packages first (rig.catalog does it in one line); a registry left empty names no
tool, kind or backend, and every scenario is refused in one line.

Pure: imports the schema helpers only (and importlib, to load a package of adapters);
must not import anything that runs, nor services or realization.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, Iterable, Protocol, TypeVar

from rig.description import schema as S

T = TypeVar("T")

# TLS modes a scenario can ask for: `control` encrypts xrootd's control stream only
# (xrdcp --tlsnodata), `all` every stream (roots://, https://).
TLS_MODES = ("off", "control", "all")

# How a server the rig starts authenticates its clients (a server's `auth:`): `x509`
# takes X.509 proxies with VOMS attributes (xrootd: GSI on root://, a client
# certificate over HTTPS) and refuses a client without one.
AUTH_MODES = ("none", "x509")
# A client's `credential:` the rig makes for a server with `auth:` (rig.realization.x509):
# `valid` (the default there), or one the server must refuse
MADE_CREDENTIALS = ("valid", "expired", "foreign", "missing")
# ... or a file the user has, for an external endpoint: {proxy: PATH} (an X.509 proxy)
CREDENTIAL_FILES = ("proxy",)


@dataclass(frozen=True)
class Capabilities:
    """What a client tool can do, as the scenario schema checks it."""
    servers: frozenset[str] = frozenset()   # server kinds it can talk to
    protocols: tuple[str, ...] = ()         # endpoints of those servers; first = default
    max_streams: int = 1                    # parallel TCP streams for one file
    needs_file: bool = True
    reads_root: bool = False                # reads a ROOT file's baskets (kind: root only)
    # The data phase is dated by the kernel's count of bytes the process wrote
    # (/proc/PID/io), for tools that print nothing useful when stdout is not a tty.
    timed_by_written_bytes: bool = False
    # Talks to the path's iperf3 servers (one per concurrent instance) instead of a
    # scenario server.
    uses_iperf_servers: bool = False
    # Which end sends the data, where tcp_info is sampled: server (downloads, iperf3 -R)
    # or client (uploads).
    sender: str = "server"
    tls: frozenset[str] = frozenset()       # TLS modes besides "off" it can use
    # Third-party copy: the client asks its server (the destination) to pull the file
    # from the client's `source:` server; nothing passes through the client.
    third_party: bool = False
    # server kinds it can upload to (`direction: upload`); empty: downloads only
    upload: frozenset[str] = frozenset()
    # credentials it can present (AUTH_MODES besides none: x509, a proxy)
    auth: frozenset[str] = frozenset()
    # how it fetches a `count:` set of small files (issue 40 item 7): "one" (one
    # invocation names every file: it reuses its connection where it does), "each" (one
    # process per file, in turn: it cannot take several), "" (it does not fetch sets)
    many_files: str = ""
    max_files: int = 0          # the most files of a set it takes at once (0: no limit)


@dataclass(frozen=True)
class NoOptions:
    """The option section of a tool without client keys of its own."""


class ClientKind(Protocol):
    """A client tool as the scenario schema reads it (rig.services.tools.ClientTool)."""
    name: ClassVar[str]
    caps: ClassVar[Capabilities]
    # its own client keys: a frozen dataclass whose fields are declared with schema.spec
    # (YAML key, parser with its limits, default); an instance is ClientSpec.options
    options: ClassVar[type]

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]: ...


class ServerKind(Protocol):
    """A server kind as the scenario schema reads it (rig.services.servers.ServerKind)."""
    kind: ClassVar[str]
    ports: ClassVar[dict[str, int]]
    tls_ports: ClassVar[dict[str, int]]
    tpc: ClassVar[bool]
    caches: ClassVar[bool]
    writes: ClassVar[bool]
    auths: ClassVar[frozenset[str]]      # AUTH_MODES besides none it can be set to
    settings: ClassVar[dict[str, bool]]


class Backend(Protocol):
    """An emulation backend as the scenario schema reads it (rig.realization.emul)."""
    name: ClassVar[str]
    auto_rank: ClassVar[int | None]     # the order `auto` tries it in; None: never


class Registry(Generic[T]):
    """Named entries, in the order they registered."""

    def __init__(self, what: str, key: Callable[[Any], str]) -> None:
        self.what, self.key = what, key
        self.items: dict[str, T] = {}

    def add(self, item: T) -> T:
        name = self.key(item)
        if name in self.items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self.items[name] = item
        return item

    def remove(self, name: str) -> None:
        del self.items[name]

    def get(self, name: str) -> T:
        return self.items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self.items)

    def all(self) -> list[T]:
        return list(self.items.values())


class ClientRegistry(Registry[ClientKind]):
    """Client tools; each tool's option section is checked against the others' as it
    registers: a key two tools share (buffer, dest_dir) must be one declaration (the
    same parser and default), since a client's keys are read before its tool is known
    to be the one that takes them."""

    def add(self, item: ClientKind) -> ClientKind:
        mine = section_fields(item.options)
        for key, (_, field) in mine.items():
            if field.required:    # every client reads every section's keys: none is required
                raise ValueError(f"client option {key!r} of {item.name} needs a default "
                                 "(a key the tool requires is checked in its checked())")
        for other in self.all():
            for key, theirs in section_fields(other.options).items():
                if key in mine and mine[key] != theirs:
                    raise ValueError(f"client option {key!r} of {item.name} differs from "
                                     f"{other.name}'s: declare it once and share it")
        return super().add(item)


CLIENTS = ClientRegistry("client tool", lambda t: t.name)
SERVERS: Registry[ServerKind] = Registry("server kind", lambda k: k.kind)
# backend classes (a run makes an instance per path, with its options)
BACKENDS: Registry[Any] = Registry("emulation backend", lambda b: b.name)
AUTO = "auto"          # the backend name that picks one (rig.realization.emul.registry)


def client(name: str) -> ClientKind:
    return CLIENTS.get(name)


def server(kind: str) -> ServerKind:
    return SERVERS.get(kind)


def backend_order(b: Backend) -> tuple[int, int]:
    """Backends in the order `auto` tries them, those it never picks last."""
    return (1, 0) if b.auto_rank is None else (0, b.auto_rank)


def backend_names() -> tuple[str, ...]:
    """What a path's `backend:` accepts: auto, then every registered backend."""
    return (AUTO, *(b.name for b in sorted(BACKENDS.all(), key=backend_order)))


@functools.cache
def section_fields(cls: type) -> dict[str, tuple[str, S.Field]]:
    """YAML key -> (attribute, schema.Field) of every key an option section declares
    (computed once per class: callers only read it)."""
    return {f.metadata.get("key") or f.name: (f.name, S.Field(f.metadata["parse"],
                                                              f.metadata["default"]))
            for f in dataclasses.fields(cls) if "parse" in f.metadata}


def option_keys(tool: str) -> frozenset[str]:
    """The client keys tool `tool` takes besides the common ones."""
    return frozenset(section_fields(client(tool).options))


_OPTION_FIELDS: list = [None, {}]     # (the tools and their sections, their keys)


def option_fields() -> dict[str, tuple[str, S.Field]]:
    """Every client key some registered tool declares in its option section (the same
    mapping, read only, until the registered tools change)."""
    key = tuple((n, t.options) for n, t in CLIENTS.items.items())
    if _OPTION_FIELDS[0] != key:
        out: dict[str, tuple[str, S.Field]] = {}
        for t in CLIENTS.all():
            out.update(section_fields(t.options))
        _OPTION_FIELDS[:] = [key, out]
    return _OPTION_FIELDS[1]


def option_users(key: str) -> list[str]:
    """The tools that take client key `key`, by name."""
    return sorted(t.name for t in CLIENTS.all() if key in section_fields(t.options))


def load_package(package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
    """Import every module of a package of adapters (each registers itself), in name
    order; names starting with '_' and those in `skip` are not adapters."""
    for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not m.name.startswith("_") and m.name not in skip:
            importlib.import_module(f"{package}.{m.name}")
