"""replay: a CMSSW job's reads in one caching mode (application, storage, lazy-download),
replayed from the ROOT file's own basket layout (docs/caching-modes.md).

The client process is `python -m rig.services.replay`: it reads the file's layout from the
servers' tmpfs (the namespaces share the mount namespace), makes the plan, executes it
against the server and prints one JSON line. Which library really makes the requests:
`xrootd` = the XRootD Python bindings (XrdCl File::Read / VectorRead, as CMSSW's
XrdAdaptor); `davix` and `curl` = the native helper tools/rig-replay-http, whose requests
libdavix (pread / preadVec multi-range, as CMSSW's DavixAdaptor) and libcurl (Range GETs)
make; the row's `extra.transport` says so. Pure: argv builder and parser only.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from rig.description import limits as L, scenario, schema as S
from rig.description.libraries import READ_LIBRARIES
from rig.description.rootfile.plan import MODES as READ_MODES
from rig.services.tools import (Capabilities, ClientTool, Column, Job, Parsed, last_line,
                                register)

if TYPE_CHECKING:
    from rig.description.scenario import ClientSpec, FileSpec, Scenario
    from rig.services.servers import ServerPlan

# library -> (protocol, modes it can replay). curl is lazy-download only, as in seed 003
# (CMSSW's curl plugin fetched whole ranges, it had no vector reads).
LIBRARIES = {"xrootd": ("root", ("application", "storage", "lazy-download")),
             "davix": ("http", ("application", "storage", "lazy-download")),
             "curl": ("http", ("lazy-download",))}
assert tuple(LIBRARIES) == READ_LIBRARIES, "one entry per library of rig.description.libraries"
TRANSPORT = {"xrootd": "XRootD Python bindings (XrdCl)",
             "davix": "libdavix DavPosix pread/preadVec (rig-replay-http)",
             "curl": "libcurl Range GET (rig-replay-http)"}


@dataclasses.dataclass(frozen=True)
class ReplayOptions:
    """The caching-mode replayer's own client keys (docs/caching-modes.md)."""
    mode: str | None = S.spec(S.optional(S.choice(*READ_MODES)), None)      # required
    library: str | None = S.spec(S.optional(S.choice(*READ_LIBRARIES)), None)
    cache_size: int | None = S.spec(S.optional(S.size_in(L.MIN_CACHE, L.MAX_CACHE)), None)
    segment: int | None = S.spec(S.optional(S.size_in(L.MIN_SEGMENT, L.MAX_SEGMENT)), None)
    # the fraction of branches read (None: sweep.branches, else all)
    branches: float | None = S.spec(S.optional(scenario.branch_fraction), None)
    # CMSSW IOExerciser's triggerFactor, every N-th event reads every branch
    trigger_factor: int | None = S.spec(S.optional(S.integer(0, L.MAX_TRIGGER_FACTOR)), None)
    # lazy-download's shadow file: a directory, or `memory`
    shadow_dir: str | None = S.spec(S.optional(S.path_text), None)


@register
class Replay(ClientTool):
    name = "replay"
    version_argv = None          # a module of this package: doctor lists rig-replay-http
    caps = Capabilities(servers=frozenset({"xrootd", "nginx", "apache"}),
                        protocols=("root", "http"), tls=frozenset({"all"}), reads_root=True)
    options = ReplayOptions
    # reads parts of the file: its own check only (the crc32 of every range received
    # against the served file's bytes there: transport damage, not a served file that is
    # no longer the one the rig made); the whole-file adler32 is not checked
    verify = "ranges"
    columns = (Column("cache_mode", str), Column("read_library", str),
               Column("branch_fraction", float, "fraction"),
               # from its output (parse): the read plan as it ran
               Column("requests", int, "count"), Column("round_trips", int, "count"),
               Column("bytes_useful", int, "bytes"), Column("bytes_wire", int, "bytes"),
               Column("cpu_user_s", float, "s"), Column("cpu_sys_s", float, "s"))

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]:
        if d["mode"] is None:
            raise ctx.child("mode").error("replay needs a mode: application, storage or "
                                          "lazy-download")
        lib = d["library"] or "xrootd"
        proto, modes = LIBRARIES[lib]
        if d["mode"] not in modes:
            raise ctx.child("library").error(f"{lib} cannot replay {d['mode']} (only "
                                             f"{', '.join(modes)})", lib)
        if d["protocol"] is not None and d["protocol"] != proto:
            raise ctx.child("protocol").error(f"library {lib} speaks {proto}", d["protocol"])
        if d["cache_size"] is not None and d["mode"] != "application":
            raise ctx.child("cache_size").error("only for mode application", d["cache_size"])
        if d["segment"] is not None and d["mode"] != "lazy-download":
            raise ctx.child("segment").error("only for mode lazy-download", d["segment"])
        sd = d["shadow_dir"]
        if sd is not None and d["mode"] != "lazy-download":
            raise ctx.child("shadow_dir").error("only for mode lazy-download", sd)
        if sd not in (None, SHADOW_MEMORY) and not (os.path.isabs(sd) and os.path.isdir(sd)):
            raise ctx.child("shadow_dir").error(
                f"not an existing absolute directory (or {SHADOW_MEMORY})", sd)
        return dict(d, library=lib, protocol=proto)

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        assert server is not None and file is not None
        # over TLS: roots:// (XrdCl) or https:// (libdavix, libcurl), the run's CA only
        base = super().job(c, streams, instance, server=server, file=file, iperf=iperf,
                           timeout_s=timeout_s, tls=tls)
        return dataclasses.replace(base, local=str(server.datadir / file.name))

    def argv(self, job: Job) -> list[str]:
        c = job.client
        o: ReplayOptions = c.options
        out = [c.binary or sys.executable, "-m", "rig.services.replay", "--url", job.url,
               "--file", job.local, "--mode", o.mode or "", "--library", o.library or "xrootd",
               "--branches", f"{branch_fraction(c):g}",
               "--timeout", f"{max(1.0, job.timeout_s - 5):g}"]
        if o.cache_size:
            out += ["--cache-size", str(o.cache_size)]
        if o.segment:
            out += ["--segment", str(o.segment)]
        if o.trigger_factor:
            out += ["--trigger-factor", str(o.trigger_factor)]
        if shadow_dir(c):
            out += ["--shadow-dir", shadow_dir(c) or ""]
        if job.tls != "off":
            out += ["--ca-dir", job.ca_dir, "--ca-file", job.ca_file]
        return out

    def env(self, job: Job) -> dict[str, str]:
        from rig.services.tools.xrdcp import XRD_FAIL_FAST
        tls = {"X509_CERT_DIR": job.ca_dir} if job.tls != "off" else {}
        return {**XRD_FAIL_FAST, **tls, **job.client.env}

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        try:
            d = json.loads(last_line(stdout))
            if not isinstance(d, dict):
                raise ValueError("not an object")
            cols: dict[str, float] = {k: int(d[k]) for k in ("requests", "round_trips",
                                                              "bytes_useful", "bytes_wire")}
            useful, wall = int(d["bytes_useful"]), float(d["wall_s"])
            cols |= {"cpu_user_s": float(d["cpu_user_s"]), "cpu_sys_s": float(d["cpu_sys_s"])}
        except (ValueError, KeyError, TypeError):
            return Parsed(bytes=None, error=last_line(stderr)[:300] or f"exit {returncode}"
                          if returncode else "no replay json output")
        err = None
        if returncode != 0:
            err = last_line(stderr)[:300] or f"exit {returncode}"
        elif d.get("checksum") != d.get("expected_checksum"):
            err = f"replayed bytes differ from the file (crc {d.get('checksum')} != " \
                  f"{d.get('expected_checksum')})"
        extra = {k: v for k, v in d.items() if k not in cols}
        return Parsed(bytes=useful, seconds=wall, error=err, extra=extra, columns=cols)

    def row_fields(self, job: Job, env: dict[str, str]) -> dict:
        o: ReplayOptions = job.client.options
        return {"cache_mode": o.mode, "read_library": o.library,
                "branch_fraction": branch_fraction(job.client)}


def require_helper(sc: "Scenario") -> None:
    """A run whose replay clients read HTTP needs the native helper built (before
    anything is made): one line naming the first such client, exit 2."""
    from rig.errors import InputError
    from rig.services.replay import http_helper
    for i, c in enumerate(sc.clients):
        lib = c.option("library") if c.tool == "replay" else None
        if lib in http_helper.LIBRARIES and http_helper.path() is None:
            raise InputError(f"library {lib} {http_helper.MISSING}", file=sc.source,
                             key=f"clients[{i}].library", value=lib)


# CMSSW's LocalCacheFile puts its shadow file in the first of ".:$TMPDIR" (the job's
# working directory) with 4 GB free: a worker node's local disk. /var/tmp is local disk on
# Debian, where /tmp may be a tmpfs (Debian 13). `memory`: no file, the segments stay in
# the client's memory (what the replay did before).
SHADOW_DEFAULT = "/var/tmp"
SHADOW_MEMORY = "memory"


def shadow_dir(c: "ClientSpec") -> str | None:
    """Where a lazy-download replay writes its shadow file (None: not a lazy client, or
    `memory`)."""
    o: ReplayOptions = c.options
    if o.mode != "lazy-download" or o.shadow_dir == SHADOW_MEMORY:
        return None
    return o.shadow_dir or SHADOW_DEFAULT


def branch_fraction(c: "ClientSpec") -> float:
    f = c.option("branches")
    return f if f is not None else 1.0


def plan_options(mode: str, library: str, cache_size: int | None, segment: int | None) -> Any:
    from rig.description.rootfile import plan
    kw: dict = {}
    if cache_size:
        kw["cache_size"] = cache_size
    if segment:
        kw["segment_size"] = segment
    if library != "xrootd":
        # DavixFile::read / curl: one read per segment, no 8 MiB split (caching-modes.md
        # note 5); multi-range GETs kept well under nginx's 8 KB Range header limit
        seg = segment or plan.Options().segment_size
        kw |= {"read_chunk": seg, "read_window": 1, "readv_max_pieces": 256}
    return plan.Options(**kw)


def plan_for(c: "ClientSpec", file_path: str, seed: int = 0) -> Any:
    """The read plan client `c` replays on the ROOT file at `file_path` (pure; what the
    client process computes, for `rig plan`)."""
    from rig.description.rootfile import layout, plan, select
    lay = layout.load(file_path)
    o: ReplayOptions = c.options
    assert o.mode is not None, "the schema gives every replay client a mode"
    return plan.make(lay, select.by_percent(lay, branch_fraction(c) * 100.0, seed=seed),
                     o.mode, plan_options(o.mode, o.library or "xrootd", o.cache_size,
                                          o.segment), trigger_factor=o.trigger_factor or 0)
