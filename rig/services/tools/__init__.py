"""Client tools: one module per tool, found here and registered by name.

A tool module declares a subclass of `ClientTool` with the `@register` decorator: its
capabilities (which server kinds and protocols it speaks, how many streams, how its
data phase is timed), its own client keys as an option section (a frozen dataclass
whose fields carry their parser, limits and default: `options`, read by the scenario
schema through rig.description.kinds), how it builds the argv and environment of one
`Job`, how it parses its own output, and the extra columns of a transfers row it fills
(`columns`, typed, with their units). Adding a tool is adding one module to this
folder; the scenario schema, the run, `rig plan`, `rig doctor` and the reports read
this registry.

Pure: argv builders and parsers only; must not import rig.process.proc, orchestration or
reports. Each tool registered here is also entered in rig.description.kinds, which the
scenario schema reads (rig.catalog imports this package before scenarios are loaded).
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rig.description import limits as L, schema as S
from rig.netaddr import hostport
from rig.services.servers import UPLOAD_DIR
from rig.services.registry import Registry
from rig.description import kinds

if TYPE_CHECKING:
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
    local: str = ""              # the file as the servers serve it (a replay reads its layout)
    tls: str = "off"             # off | control | all (TLS_MODES)
    ca_file: str = ""            # the run's CA (PEM) the client trusts, when tls != off
    ca_dir: str = ""             # the same CA as an OpenSSL hashed directory
    origin: str = ""             # the server instance it talks to
    source_url: str = ""         # third-party copy: where the destination pulls from
    files: tuple[tuple[str, str], ...] = ()   # (path, text) written before it starts
    origin_cpus: str | None = None
    cpus: str | None = None      # this instance's own CPU set (taskset -c), None: the client's
    keys: str = ""               # scp: the sshd instance's run directory (keys, known_hosts)
    direction: str = "download"  # download | upload
    src: str = ""                # upload: the file the client sends (the served one)
    stored: str = ""             # upload: where it lands, as this host sees it (verified);
                                 # http-tpc: the destination's copy (verified, `verify`)
    adler32: str = ""            # download: the file's adler32 as the rig made it, the value
                                 # its bytes are checked against ("": not checked)
    credential: str = ""         # what it authenticates with: valid, expired, foreign,
                                 # missing (rig-made), proxy (the user's file); "": nothing
    proxy: str = ""              # the X.509 proxy file it presents (a path, never its text)
    gsi_name: str = ""           # the server certificate's CN a GSI client accepts
    # a `count:` set of small files (issue 40 item 7): (url, path below the data folder,
    # adler32) of each, fetched into the folder `dest`, listed in `list_file` (written
    # before the start, one line per file, in the form the tool reads)
    members: tuple[tuple[str, str, str], ...] = ()
    list_file: str = ""

    @property
    def target(self) -> str:
        return self.url or hostport(self.addr, self.port)


@dataclass
class Parsed:
    bytes: int | None
    seconds: float | None = None    # the tool's own measure of the data phase, if any
    error: str | None = None
    extra: dict = field(default_factory=dict)
    columns: dict = field(default_factory=dict)   # transfers columns the output fills


# HTTP servers that take a PUT there (XrdHttp, nginx's dav module, Apache's mod_dav)
HTTP_WRITERS = frozenset({"xrootd", "nginx", "apache"})

# credentials the server must refuse: a transfer with one that succeeds is a failure
MUST_FAIL = ("expired", "foreign", "missing")
CREDENTIAL_LABELS = {"valid": "valid proxy", "expired": "expired proxy",
                     "foreign": "proxy of a CA the server does not trust",
                     "missing": "no proxy presented", "proxy": "proxy"}
# what a refusal of the credential looks like in a tool's error: XrdCl's GSI ("Auth
# failed", "No protocols left to try" once it has no usable proxy), an HTTP 401/403
# (curl --fail, davix), a TLS alert of the server's (expired, unknown CA)
_REFUSED = re.compile(r"auth failed|no protocols left|\b40[13]\b|permission refused|"
                      r"permission denied|certificate (expired|unknown|required|verify)|"
                      r"unknown ca|bad certificate|alert|handshake", re.I)
# ... or, over TLS 1.3, only a connection the server ended: it checks the client's
# certificate after the client's handshake is done, and its alert races the reset
# (curl "getpeername() failed ... not connected", davix "Connection reset by peer"):
# named a refusal only when a certificate was presented over https
_ENDED = re.compile(r"reset by peer|not connected|connection reset", re.I)


def presents(job: Job) -> str:
    """The proxy a client presents (a path), "" for none (`missing`: none at all)."""
    return job.proxy if job.credential not in ("", "missing") else ""


def credential_error(job: Job, error: str | None) -> str | None:
    """A transfer's error as its row says it: a refusal of the client's credential
    named so; a credential the server had to refuse but let read is a failure too (never
    a throughput point)."""
    if not job.credential:
        return error
    what = CREDENTIAL_LABELS.get(job.credential, job.credential)
    if job.credential == "proxy":
        what = f"proxy {job.proxy}"
    if error is None:
        if job.credential in MUST_FAIL:
            return f"credential not refused: the server let a client read with {what}"
        return None
    if _REFUSED.search(error):
        return f"credential refused ({what}): {error}"[:400]
    if presents(job) and job.url.startswith("https://") and _ENDED.search(error):
        return (f"credential refused ({what}; the server ended the TLS connection after "
                f"the client certificate): {error}")[:400]
    return error


# Capabilities and TLS_MODES are the description's (rig.description.kinds): the scenario
# schema checks clients against them; tools declare them here.
Capabilities = kinds.Capabilities
TLS_MODES = kinds.TLS_MODES

# Parsers of client keys several tools take: one declaration each, shared, so the key
# reads alike whichever tool a client names (rig.description.kinds.ClientRegistry).
BUFFER = S.optional(S.size_in(L.MIN_SOCKET_BUFFER, L.MAX_BUFFER))   # socket buffer
DEST_DIR = S.optional(S.path_text)
CHECKSUM = S.optional(S.boolean)


@dataclass(frozen=True)
class Checksum:
    """The option section of a tool whose downloads can be checked (`verify`): `checksum:
    true` checks each download against the adler32 the rig took when it made the file
    (the tool's own end-to-end check, or a kept file checked after its group); unset or
    false leaves the bytes unchecked as before (the row says `checksum: off`)."""
    checksum: bool | None = S.spec(CHECKSUM, None)


@dataclass(frozen=True)
class DestDir(Checksum):
    """The option section of a download tool that can keep what it fetched: written into
    a file in `dest_dir` instead of /dev/null (checked and removed after its group), to
    compare it with a lazy-download's shadow file there."""
    dest_dir: str | None = S.spec(DEST_DIR, None)


REUSE = S.optional(S.boolean)


@dataclass(frozen=True)
class FetchSet(DestDir):
    """The option section of a tool that fetches a `count:` set of small files in one
    invocation (xrdcp, curl): `reuse: false` runs it once per file instead, each its own
    connection (the cost per file without reuse); unset or true: one invocation."""
    # a set of small files (count:): false runs the tool once per file, each its own
    # connection; unset or true: one invocation naming every file (connection reused)
    reuse: bool | None = S.spec(REUSE, None)


def one_invocation(job: Job) -> bool:
    """This set is fetched by one invocation of the tool naming every file (its
    connection reused where the tool does), not by one process per file (EACH_FILE)."""
    t = get(job.client.tool)
    return t.caps.many_files == "one" and job.client.option("reuse") is not False


# One process per file, in turn: the rig's own small runner (rig/process/eachfile.py),
# the tool's argv given once with `{url}` and `{dest}` where each file's go
URL_SLOT, DEST_SLOT = "{url}", "{dest}"


def each_file_argv(job: Job, tool_argv: list[str]) -> list[str]:
    import sys
    return [sys.executable, "-m", "rig.process.eachfile", "--list", job.list_file,
            "--timeout", str(int(job.timeout_s)), "--", *tool_argv]


def each_file_list(members: tuple[tuple[str, str, str], ...], dest: str) -> str:
    """eachfile's list: `URL<TAB>DEST` per file."""
    return "".join(f"{u}\t{os.path.join(dest, os.path.basename(r))}\n"
                   for u, r, _ in members)


# How a tool's downloads are checked against the adler32 the rig took when it made the
# file (rig.checksum; README "Checksums"). At 100-400 Gbit/s a checksum must not be the
# bottleneck being measured, so nothing is computed by the rig on the clock:
#   tool         the tool's own end-to-end option, given the rig's value (xrdcp and xrdcl
#                `--cksum adler32:<value>`, rig-fdt `--checksum`): the client computes it
#                as the bytes arrive (on its clock, as FTS runs them), fails on a mismatch
#   kept         no such option (curl, davix-get, wget, scp): the tool writes a kept file
#                (its `dest_dir`, else the run's downloads tmpfs) and the rig checksums it
#                after the group, once every clock stopped, then removes it
#   destination  a third-party copy: the destination's copy, checksummed after the group
#   ranges       a replay reads parts of the file: its own check (received ranges against
#                the served file's bytes there), not the whole-file adler32
#   none         not a file transfer (iperf3)
VERIFY = ("tool", "kept", "destination", "ranges", "none")


@dataclass(frozen=True)
class Column:
    """An extra column of the transfers table a tool fills (rig.results.store.TransferRow
    holds it): its name, Python type and unit ("" for a flag or a label)."""
    name: str
    type: type
    unit: str = ""


class ClientTool:
    """The contract of a client tool; subclasses override what differs."""
    name: ClassVar[str]
    caps: ClassVar[Capabilities]
    # its own client keys (a frozen dataclass of schema.spec fields); a client's values
    # are ClientSpec.options, an instance of it
    options: ClassVar[type] = kinds.NoOptions
    # the transfers columns `row_fields` fills, declared with their types and units
    columns: ClassVar[tuple[Column, ...]] = ()
    # for `rig doctor` and run metadata; None: the tool is part of the rig
    version_argv: ClassVar[list[str] | None] = None
    # how its downloads' bytes are checked (VERIFY)
    verify: ClassVar[str] = "none"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "version_argv" not in cls.__dict__ and "name" in cls.__dict__:
            cls.version_argv = [cls.name, "--version"]   # what most tools answer to

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        """The Job of instance `instance` of a group (pure). Default: fetch a URL, over
        TLS when `tls` is not "off" (trusting only the run's CA)."""
        assert server is not None and file is not None
        if tls == "off":
            return Job(c, streams, url=server.url(c.protocol, file.name), relpath=file.name,
                       file_bytes=file.size, timeout_s=timeout_s)
        assert server.tls is not None, "TLS asked of a server started without certificates"
        return Job(c, streams, url=server.url(c.protocol, file.name, tls=True),
                   relpath=file.name, file_bytes=file.size, timeout_s=timeout_s, tls=tls,
                   ca_file=server.tls.ca_file, ca_dir=server.tls.ca_dir)

    def as_upload(self, job: Job, server: "ServerPlan", file: "FileSpec", name: str) -> Job:
        """`job` turned around (pure): send the served file to the server's upload
        folder as `name`. Default: the same URL scheme, to UPLOAD_DIR/name."""
        rel = f"{UPLOAD_DIR}/{name}"
        return dataclasses.replace(
            job, direction="upload", relpath=rel, src=str(server.datadir / file.name),
            stored=str(server.datadir / rel),
            url=server.url(job.client.protocol, rel, tls=job.tls != "off") if job.url else "")

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]:
        """What spans this tool's own client keys (scenario loading; ctx: schema.Ctx);
        returns the client's values, completed. Default: a `dest_dir` (DestDir) is an
        existing absolute directory, and not for an upload."""
        dest = d.get("dest_dir")
        if dest is not None and d["direction"] == "upload":
            raise ctx.child("dest_dir").error("an upload reads the served file and writes "
                                              "to the server: no dest_dir", dest)
        if dest is not None and not (os.path.isabs(dest) and os.path.isdir(dest)):
            raise ctx.child("dest_dir").error("not an existing absolute directory", dest)
        return d

    def with_origins(self, job: Job, origins: "list[ServerPlan]", instance: int) -> Job:
        """The job once every instance of its server is known (pure); a tool that reads
        from several origins at once (xrdcp extreme copy) uses them here."""
        return job

    def argv(self, job: Job) -> list[str]:
        raise NotImplementedError

    def command(self, job: Job) -> list[str]:
        """The argv the rig runs and `rig plan` prints: `argv()` with the client's
        free-form `args:` added where the tool reads options (`with_args`)."""
        return self.with_args(self.argv(job), list(job.client.args))

    def with_args(self, argv: list[str], args: list[str]) -> list[str]:
        """`args:` appended at the end (GNU-style tools read options after operands);
        a tool whose parser stops at its first operand puts them before (scp)."""
        return argv + args

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode == 0:
            return Parsed(bytes=None)
        return Parsed(bytes=None, error=last_line(stderr)[:300] or f"exit {returncode}")

    def set_list(self, job: Job) -> str:
        """The list file of a `count:` set's job (`Job.list_file`), in the form its argv
        reads. Default: eachfile's (one process per file)."""
        return each_file_list(job.members, job.dest)

    def parse_set(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        """A `count:` set's outcome: `extra["files"]`, one record per file fetched (its
        `first_s`: time to first byte from its request or process start, `connects`,
        `connect_s`, `tls_s` where the tool tells them), and `extra["span_s"]`, the time
        from the first file's start to the last's end where the runner tells it.
        Default: eachfile's lines (one process per file)."""
        return parse_each_file(stdout, stderr, returncode, job, self.file_record)

    def file_record(self, out: str) -> dict[str, Any]:
        """What one file's process printed (its last stdout line) says of that file."""
        return {}

    def row_fields(self, job: Job, env: dict[str, str]) -> dict[str, Any]:
        """Columns of the transfers row this tool fills (others stay NULL): those it
        declares in `columns`, each of its declared type."""
        return {}

    def known_deadlock(self, job: Job) -> str | None:
        """A known bug of the tool that deadlocks it in this job's configuration, added
        to the error of a transfer the rig found deadlocked (rig.process.deadlock)."""
        return None


def undeclared(tool: ClientTool, cols: dict[str, Any]) -> list[str]:
    """Columns a tool filled that it does not declare, or with a value not of the
    declared type (None always fits), each as `name` or `name (type)`."""
    decl = {c.name: c.type for c in tool.columns}
    out = []
    for k, v in sorted(cols.items()):
        t = decl.get(k)
        if t is None:
            out.append(k)
        elif v is not None and not (isinstance(v, t) or (t is float and isinstance(v, int))):
            out.append(f"{k} ({type(v).__name__}, declared {t.__name__})")
    return out


def checks(job: Job) -> bool:
    """This download's bytes are checked against the file's adler32 (`verify` and the
    client's `checksum: true`, a download with a known value). Opt-in for now: on this
    VM xrdcp --cksum moved 2.86 Gbit/s against 4.13 without, and curl into a kept tmpfs
    file 3.25 against 11.5 into /dev/null (5 alternated repeats each), so a default check
    would change every figure the rig reports."""
    t = get(job.client.tool)
    # a tool without the key (http-tpc: its destination's copy exists anyway, checked
    # after the group, off every clock) is always checked
    wanted = (job.client.option("checksum") is True
              or "checksum" not in kinds.option_keys(job.client.tool))
    return t.verify != "none" and job.direction == "download" and bool(job.adler32) and wanted


def parse_each_file(stdout: str, stderr: str, returncode: int, job: Job,
                    record: Any) -> Parsed:
    """eachfile's JSON lines (rig/process/eachfile.py): a record per file, the span from
    the first file's start to the last's end (the runner's own start left out), and the
    first failure's reason naming the file."""
    import json
    recs, span, err = [], None, None
    first_start = None
    for ln in stdout.splitlines():
        try:
            d = json.loads(ln)
        except ValueError:
            continue
        if not isinstance(d, dict) or "i" not in d:
            continue
        r = {"first_s": d.get("first_s"), "wall_s": d.get("wall_s")}
        r.update(record(d.get("out") or ""))
        recs.append(r)
        if first_start is None:
            first_start = d["start_s"]
        span = d["start_s"] + d["wall_s"] - first_start
        if d.get("rc") != 0 and err is None:
            name = job.members[d["i"]][1] if d["i"] < len(job.members) else d["i"]
            why = "deadline passed" if d.get("rc") == 124 else (d.get("err") or
                                                                  f"exit {d.get('rc')}")
            err = f"file {name}: {why}"[:300]
    if err is None and returncode != 0:
        err = last_line(stderr)[:300] or f"exit {returncode}"
    if err is None and len(recs) != len(job.members):
        err = f"{len(recs)} of {len(job.members)} files fetched"
    return Parsed(bytes=None, seconds=span, error=err, extra={"files": recs})


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


_TOOLS: Registry[ClientTool] = Registry("client tool", lambda cls: cls.name, kinds.CLIENTS)
_REGISTRY = _TOOLS.items
register = _TOOLS.register
unregister = _TOOLS.unregister
get = _TOOLS.get
names = _TOOLS.names
all_tools = _TOOLS.all

# Capabilities shared by the plain HTTP fetchers (one stream, data phase from /proc io).
HTTP_FETCHER = Capabilities(servers=frozenset({"xrootd", "nginx", "apache", "xcache"}),
                            protocols=("http",),
                            timed_by_written_bytes=True, tls=frozenset({"all"}))

_TOOLS.load(__name__, __path__)
