"""Client tools: one module per tool, found here and registered by name.

A tool module declares a subclass of `ClientTool` with the `@register` decorator: its
capabilities (which server kinds and protocols it speaks, how many streams, which
per-client options it accepts, how its data phase is timed), how it builds the argv
and environment of one `Job`, how it parses its own output, and which extra columns it
adds to a transfers row. Adding a tool is adding one module to this folder; the
scenario schema, the run, `rig plan`, `rig doctor` and the reports read this registry.

Pure: argv builders and parsers only; must not import rig.process.proc, orchestration or
reports (the scenario loader imports it to validate client configurations).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the scenario imports this registry; types only, no cycle
    from rig.description.scenario import ClientSpec, FileSpec
    from rig.services.servers import ServerPlan


@dataclass(frozen=True)
class Job:
    """One client process to run."""
    client: "ClientSpec"
    streams: int
    url: str = ""                # for file fetchers
    addr: str = ""               # for iperf3 / fdt
    port: int = 0
    relpath: str = ""
    file_bytes: int = 0
    timeout_s: float = 600.0
    dest: str = "/dev/null"
    origin: str = ""             # the server instance it talks to
    source_url: str = ""         # third-party copy: where the destination pulls from
    files: tuple[tuple[str, str], ...] = ()   # (path, text) written before it starts
    origin_cpus: str | None = None

    @property
    def target(self) -> str:
        return self.url or f"{self.addr}:{self.port}"


@dataclass
class Parsed:
    bytes: int | None
    seconds: float | None = None    # the tool's own measure of the data phase, if any
    error: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    servers: frozenset[str] = frozenset()   # server kinds it can talk to
    protocols: tuple[str, ...] = ()         # endpoints of those servers; first = default
    max_streams: int = 1                    # parallel TCP streams for one file
    options: frozenset[str] = frozenset()   # optional client keys it accepts (block, ...)
    needs_file: bool = True
    # The data phase is dated by the kernel's count of bytes the process wrote
    # (/proc/PID/io), for tools that print nothing useful when stdout is not a tty.
    timed_by_written_bytes: bool = False
    # Talks to the path's iperf3 servers (one per concurrent instance) instead of a
    # scenario server.
    uses_iperf_servers: bool = False
    # Third-party copy: the client asks its server (the destination) to pull the file
    # from the client's `source:` server; nothing passes through the client.
    third_party: bool = False


class ClientTool:
    """The contract of a client tool; subclasses override what differs."""
    name: ClassVar[str]
    caps: ClassVar[Capabilities]
    version_argv: ClassVar[list[str] | None] = None   # for `rig doctor` and run metadata

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float) -> Job:
        """The Job of instance `instance` of a group (pure). Default: fetch a URL."""
        assert server is not None and file is not None
        return Job(c, streams, url=server.url(c.protocol, file.name), relpath=file.name,
                   file_bytes=file.size, timeout_s=timeout_s)

    def with_origins(self, job: Job, origins: "list[ServerPlan]", instance: int) -> Job:
        """The job once every instance of its server is known (pure); a tool that reads
        from several origins at once (xrdcp extreme copy) uses them here."""
        return job

    def argv(self, job: Job) -> list[str]:
        raise NotImplementedError

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode == 0:
            return Parsed(bytes=None)
        return Parsed(bytes=None, error=last_line(stderr)[:300] or f"exit {returncode}")

    def row_fields(self, job: Job, env: dict[str, str]) -> dict[str, Any]:
        """Columns of the transfers row this tool fills (others stay NULL)."""
        return {}


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


_REGISTRY: dict[str, ClientTool] = {}


def register(cls: type[ClientTool]) -> type[ClientTool]:
    if cls.name in _REGISTRY:
        raise ValueError(f"client tool {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def _load() -> None:
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not m.name.startswith("_"):
            importlib.import_module(f"{__name__}.{m.name}")


def get(name: str) -> ClientTool:
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def all_tools() -> list[ClientTool]:
    return list(_REGISTRY.values())


_load()
