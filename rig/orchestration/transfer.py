"""Running one transfer group: `concurrency` identical client processes started
together in the client namespace, each with a deadline, CPU accounting and a check of
the bytes that arrived. Returns transfers rows (dicts) ready for the results store.

Every download's bytes are checked against the adler32 the rig took when it made the
file (rig.checksum), each tool in its own way (rig.services.tools.VERIFY): by the tool's
own end-to-end option, or, after the group once every clock stopped, by the rig on the
kept copy (`verify_downloads`). A mismatch fails the row, with the reason in its error.

Must not import reports.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rig import checksum
from rig.process import proc
from rig.results.store import TransferRow
from rig.description.scenario import Scenario, instance_cpus
from rig.description.scenario import auth
from rig.description.scenario.clients import EXTERNAL, ClientSpec, FileSpec
from rig.realization import x509
from rig.services import tools
from rig.services.servers import ServerPlan
from rig.services.tools import Job
from rig.description.steps import Group
from rig.errors import RigError

ROW_COLUMNS = frozenset(f.name for f in dataclasses.fields(TransferRow))


@dataclass
class Outcome:
    job: Job
    argv: list[str]
    env: dict
    res: proc.Result | None
    started_at: float
    t_start: float
    error: str | None = None
    first_s: float | None = None    # a set's: its first byte in the folder, from the start
    remote: bool = False        # it ran on another host (its files are there)


def build_jobs(sc: Scenario, g: Group, server_plans: dict[str, list[ServerPlan]],
               server_addr: str, iperf_port: int, prefix: str = "rig", *,
               checksums: dict[str, str] | None = None,
               keep_dir: str | None = None,
               sizes: dict[str, int] | None = None) -> list[Job]:
    """The `g.concurrency` client processes of one group (pure); each tool says what
    its instance i talks to. A server with several instances (origins) serves the
    group round-robin: process i talks to instance i mod K. A client with `dest_dir`
    writes to `<dest_dir>/<prefix>-<client>-<i>` (checked and removed after the group).

    `checksums`: each file's adler32 as the rig made it, which a download is checked
    against (None: not known yet, `rig plan`: a `<adler32 of NAME>` placeholder).
    `keep_dir`: where a download whose tool has no end-to-end check (`verify: kept`) and
    no `dest_dir` writes its kept copy, checksummed after the group (None: a client on
    another host, /dev/null and unchecked). `sizes`: the size of each path an external
    endpoint's clients read, as its stat answered before the first step (None: `rig
    plan`, not known)."""
    c = g.client
    tool = tools.get(c.tool)
    origins = server_plans.get(c.server, []) if c.server else []
    sources = server_plans.get(c.source, []) if c.source else []
    file = _file(sc, c, sizes)
    jobs = []
    for i in range(g.concurrency):
        server = origins[i % len(origins)] if origins else None
        job = tool.job(c, g.streams, i, server=server, file=file,
                       iperf=(server_addr, iperf_port), timeout_s=sc.transfer_timeout_s,
                       tls=g.tls)
        if server is not None:
            job = dataclasses.replace(job, origin=server.origin, origin_cpus=server.cpus)
            job = tool.with_origins(job, origins, i)
        if c.server:
            job = with_credential(job, auth.credential(c, sc.server(c.server)), server)
        if sources and file is not None:       # third-party copy: the destination pulls
            src = sources[i % len(sources)]
            job = dataclasses.replace(job, source_url=src.url(c.protocol, file.name,
                                                              tls=g.tls != "off"))
        if isinstance(c.cpus, tuple):        # per-instance pinning: a set of its own
            job = dataclasses.replace(job, cpus=instance_cpus(c, i))
        if file is not None and c.direction != "upload" and tool.verify != "none":
            want = (checksums.get(file.name, "") if checksums is not None
                    else f"<adler32 of {file.name}>")
            job = dataclasses.replace(job, adler32=want)
        if file is not None and file.count is not None and server is not None:
            job = set_job(tool, job, server, file, c.protocol, g.tls, checksums,
                          keep_dir, prefix, i)
        elif c.option("dest_dir"):
            job = dataclasses.replace(job, dest=dest_path(c.option("dest_dir"), prefix,
                                                          c.name, i))
        elif tool.verify == "kept" and keep_dir and tools.checks(job):
            job = dataclasses.replace(job, dest=dest_path(keep_dir, prefix, c.name, i))
        if c.direction == "upload" and server is not None and file is not None:
            job = tool.as_upload(job, server, file, upload_name(prefix, c.name, i))
        jobs.append(job)
    return jobs


def with_credential(job: Job, cred: str | dict | None, server: ServerPlan | None) -> Job:
    """The job presenting its client's credential (pure): a proxy the rig made beside the
    run's CA (rig.realization.x509; its CA trusted, its server's CN accepted), or the
    user's file against an external endpoint."""
    if cred is None:
        return job
    if isinstance(cred, dict):
        kind, path = next(iter(cred.items()))
        return dataclasses.replace(job, credential=kind, proxy=path)
    assert server is not None and server.tls is not None, "auth: the run's CA signed it"
    ca = Path(server.tls.ca_file).parent
    return dataclasses.replace(job, credential=cred, proxy=str(x509.proxy_path(ca, cred)),
                               gsi_name=server.tls.name, ca_file=server.tls.ca_file,
                               ca_dir=server.tls.ca_dir)


def set_job(tool: tools.ClientTool, job: Job, server: ServerPlan, file: FileSpec,
            protocol: str, tls: str, checksums: dict[str, str] | None,
            keep_dir: str | None, prefix: str, i: int) -> Job:
    """Instance i's job for a `count:` set of small files (pure): each file's URL and
    adler32, the folder in the run's downloads tmpfs it fetches them into (each checked
    after the group, then removed) and the list of them its tool reads (written there
    before the start)."""
    members = tuple((server.url(protocol, rel, tls=tls != "off"), rel,
                     checksums.get(rel, "") if checksums is not None
                     else f"<adler32 of {rel}>") for rel in file.members)
    where = keep_dir or "<downloads>"
    dest = dest_path(where, prefix, job.client.name, i)
    job = dataclasses.replace(job, members=members, dest=dest, list_file=dest + ".list",
                              url=members[0][0] if members else job.url,
                              file_bytes=file.total, adler32="")
    listed = tool.set_list(job)      # "": its names are on its command line (rig-fdt)
    return dataclasses.replace(job, files=((job.list_file, listed),) if listed else ())


def _file(sc: Scenario, c: ClientSpec, sizes: dict[str, int] | None) -> FileSpec | None:
    """The file a client reads: one of the scenario's, or a path on an external
    endpoint (its size as the endpoint's stat gave it)."""
    if not c.file:
        return None
    if c.server and sc.server(c.server).kind == EXTERNAL:
        return FileSpec(name=c.file, size=(sizes or {}).get(c.file, 0))
    return sc.file(c.file)


def pinned_cpus(job: Job) -> str | None:
    """The CPU set the job's process runs on: its instance's own, else the client's."""
    c = job.client.cpus
    return job.cpus if job.cpus is not None else (c if isinstance(c, str) else None)


def upload_name(prefix: str, client: str, instance: int) -> str:
    """The name an upload takes in the server's upload folder (one per process)."""
    return f"{prefix}-{client.replace('@', '-')}-{instance}"


adler32_of = checksum.of_file


def kept(job: Job) -> bool:
    """The job writes a file the rig checks and removes after the group (its dest_dir, or
    the run's downloads folder), not /dev/null."""
    return (job.direction == "download" and job.dest != os.devnull and bool(job.dest)
            and not job.members)


def verdict(job: Job, ok: bool, error: str | None, extra: dict,
            read: Callable[[str], str] = checksum.of_file,
            remote: bool = False) -> tuple[dict, str | None]:
    """How this download's bytes were checked (the row's extra `checksum`) and the
    failure it adds (None: none). Pure but for `read`, which checksums a kept copy:
    called only for a transfer that succeeded otherwise (a failed one is failed
    already, its file may be partial)."""
    tool = tools.get(job.client.tool)
    if tool.verify == "none" or job.direction != "download":
        return {}, None
    how = tool.verify
    if tool.verify == "ranges":
        # a replay reads parts of the file: its own crc32 of the ranges received against
        # the served file's bytes there, in its own extra.checksum / expected_checksum
        # (parse fails it on a difference); nothing to add, nothing to overwrite
        return {}, None
    if not job.adler32:
        return {"how": "unknown", "why": "no adler32 was taken for this file"}, None
    if not tools.checks(job):
        return {"how": "off", "why": "checksum: false", "want": job.adler32}, None
    out: dict[str, Any] = {"how": how, "algo": checksum.ALGO, "want": job.adler32}
    if how == "tool":
        # the tool compared (xrdcp/xrdcl --cksum) or reported (rig-fdt) it: parse said so
        got = extra.get("checksum_adler32")      # rig-fdt prints the value
        out["got"] = got if got else (job.adler32 if ok else None)
        return out, None
    path = (job.stored if how == "destination" else
            job.dest if kept(job) and not remote else "")
    if not path:
        out.update(how="unchecked", why="the bytes were not kept here "
                   "(a client or a destination on another host)")
        return out, None
    if not ok:
        return out, None
    try:
        got = read(path)
    except OSError as e:
        return out, f"{checksum.ALGO} not checked: {e.strerror}: {path}"
    out["got"] = got
    return out, checksum.mismatch(got, job.adler32)


def verify_downloads(outcomes: list["Outcome"], rows: list[TransferRow]) -> None:
    """After the group (every clock stopped): each download's checksum verdict in its
    row's extra; a mismatch fails the row with the reason, and the group's aggregate,
    which counts only groups that all succeeded, is dropped. Kept copies are removed."""
    failed = False
    for o, row in zip(outcomes, rows):
        job = o.job
        extra = json.loads(row.extra or "{}")
        try:
            if job.members:
                info, why = verify_set(job, bool(row.ok))
            else:
                info, why = verdict(job, bool(row.ok), row.error, extra, remote=o.remote)
        finally:
            if kept(job) and not o.remote:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.dest)
            if job.members and not o.remote:
                _remove_set(job)
        if not info:
            continue
        extra["checksum"] = info
        row.extra = json.dumps(extra)
        if why and row.ok:
            row.ok, row.error, failed = False, why, True
            if job.members:
                row.files_per_s = None
    if failed:
        for row in rows:
            row.aggregate_bps = None


def _remove_set(job: Job) -> None:
    """A set's folder and list in the downloads tmpfs, after its check."""
    import shutil
    shutil.rmtree(job.dest, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(job.list_file)


def verify_uploads(outcomes: list["Outcome"], rows: list[TransferRow],
                   known: dict[str, str]) -> None:
    """Each upload's file where the server stored it: its size and adler32 against the
    file sent (`known`: path -> adler32, filled once per file), written into its row
    (a mismatch or a missing file fails it); then removed."""
    for o, row in zip(outcomes, rows):
        job = o.job
        if job.direction != "upload" or not job.stored:
            continue
        if job.src not in known:
            known[job.src] = adler32_of(job.src)
        want = known[job.src]
        try:
            size, got = os.stat(job.stored).st_size, adler32_of(job.stored)
            why = (f"upload stored {size} of {job.file_bytes} bytes" if size != job.file_bytes
                   else f"upload checksum mismatch: adler32 {got} on the server, {want} sent"
                   if got != want else "")
        except OSError as e:
            size, got = None, None
            why = f"upload not on the server ({e.strerror}: {job.stored})"
        extra = json.loads(row.extra or "{}")
        extra.update(upload_adler32=got, source_adler32=want, upload_size=size)
        row.extra = json.dumps(extra)
        if why and row.ok:
            row.ok, row.error = False, why
        with contextlib.suppress(FileNotFoundError):
            os.unlink(job.stored)


def dest_path(directory: str, prefix: str, client: str, instance: int) -> str:
    """Where a plain download with `dest_dir` writes (`rig clean` removes a dead run's
    `<prefix>-*` there)."""
    return os.path.join(directory, f"{prefix}-{client}-{instance}")


def _run_one(job: Job, netns: str | None, barrier: threading.Barrier, out: list, i: int,
             pids: list[int], on_start: Callable[[int, int], None] | None = None,
             where: dict | None = None, cgroup: Path | None = None) -> None:
    a = tools.get(job.client.tool)
    # pinned by its cgroup when it has one, else by taskset
    argv = proc.pinned_argv(None if cgroup else pinned_cpus(job), a.command(job))
    env = a.env(job)
    io_target = job.file_bytes if a.caps.timed_by_written_bytes and not job.members else None
    if job.members:                        # a set's folder, in the downloads tmpfs
        Path(job.dest).mkdir(parents=True, exist_ok=True)
    for path, text in job.files:           # e.g. an extreme copy's metalink, in the run dir
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    try:
        barrier.wait(timeout=30)
    except threading.BrokenBarrierError:
        pass
    started_at, t0 = time.time(), time.monotonic()
    first: dict[str, float] = {}
    done = threading.Event()
    if job.members and tools.one_invocation(job):   # a set's time to first byte (eachfile
        # times each of its files itself): its folder polled every 2 ms
        threading.Thread(target=_first_byte, args=(job.dest, t0, done, first),
                         daemon=True).start()
    try:
        def started(pid: int) -> None:
            pids.append(pid)
            if on_start is not None:
                on_start(i, pid)
        res = proc.run(argv, netns=netns, env=env, timeout=job.timeout_s, io_target=io_target,
                       on_start=started, cgroup=cgroup, **(where or {}))
        out[i] = Outcome(job, argv, env, res, started_at, t0, remote=bool(where),
                         first_s=first.get("s"))
    except Exception as e:  # noqa: BLE001 - recorded as a failed transfer, not fatal
        out[i] = Outcome(job, argv, env, None, started_at, t0, error=str(e)[:300],
                         remote=bool(where))
    finally:
        done.set()
    # a kept file (dest_dir, the downloads folder) stays until the group ended: checked
    # then, off every clock, and removed (verify_downloads)


FIRST_POLL_S = 0.002


def _first_byte(folder: str, t0: float, done: threading.Event, out: dict) -> None:
    """When a file of `folder` first held a byte (seconds from t0), polled until then or
    until the process ended: a set's time to first byte, the same for every tool (a
    tool's writes to its own pipes, which /proc/PID/io counts, do not count here)."""
    while not done.is_set():
        try:
            with os.scandir(folder) as it:
                if any(e.stat().st_size > 0 for e in it):
                    out["s"] = time.monotonic() - t0
                    return
        except OSError:
            pass
        done.wait(FIRST_POLL_S)


WATCH_INTERVAL_S = 0.5


def run_group(jobs: list[Job], netns: str | None,
              watchdog: Callable[[], None] | None = None,
              on_start: Callable[[int, int], None] | None = None, *, host=None,
              rundir: str | None = None,
              cgroup: Path | None = None) -> tuple[list[Outcome], Exception | None]:
    """Start every job at once (threads released by a barrier), wait for all.

    `host`: the remote host the clients run on (rundir: the run's directory there).
    `watchdog` is called every WATCH_INTERVAL_S while they run; when it raises (the
    emulation died), every process of the group is killed at once and the exception is
    returned with the outcomes, so nothing is measured on a path that is not emulated.
    `on_start(instance, pid)` is told each process as it starts (the tcp_info sampler).
    `cgroup`: the client's CPU set as a cgroup (rig.realization.cgroups), local only.
    """
    out: list = [None] * len(jobs)
    pids: list[int] = []
    barrier = threading.Barrier(len(jobs))
    where = {"host": host, "rundir": rundir} if host is not None else {}
    threads = [threading.Thread(target=_run_one,
                                args=(j, netns, barrier, out, i, pids, on_start, where,
                                      cgroup),
                                daemon=True) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    failure: Exception | None = None
    while alive := [t for t in threads if t.is_alive()]:
        alive[0].join(WATCH_INTERVAL_S)
        if watchdog is None or failure is not None:
            continue
        try:
            watchdog()
        except Exception as e:  # noqa: BLE001 - handed to the caller
            failure = e
            for pid in list(pids):
                proc.kill_group(pid)
    return out, failure


def measure(o: Outcome) -> dict:
    """Bytes, data-phase duration, throughput, ok/error of one finished process."""
    job, res = o.job, o.res
    if res is None:
        return {"bytes": None, "duration_s": None, "throughput_bps": None, "ok": False,
                "error": o.error, "exit_code": None, "extra": {}}
    tool = tools.get(job.client.tool)
    if job.members:
        return measure_set(o, tool)
    p = tool.parse(res.stdout, res.stderr, res.returncode, job)
    extra = dict(p.extra, process_wall_s=res.wall_s)
    if job.client.args:
        extra["args"] = list(job.client.args)     # the row's argv has them too
    error = p.error
    nbytes: int | None
    if job.direction == "upload":
        # the tool's own count and time where it gives them (curl, rig-fdt), else the file
        # when it exited 0 (the stored copy's size and checksum are checked after the
        # group: verify_uploads) and the process's wall time (xrdcp, davix-put, scp wait
        # for the server's answer before they exit)
        nbytes = p.bytes if p.bytes is not None else (job.file_bytes if res.returncode == 0
                                                      else None)
        duration = p.seconds if p.seconds else res.wall_s
    elif tool.caps.timed_by_written_bytes:
        wrote = res.io_wchar or 0
        nbytes = p.bytes if p.bytes is not None else min(wrote, job.file_bytes)
        extra["io_wchar"] = wrote
        duration = res.io_done_s if res.io_done_s is not None else res.wall_s
        if res.io_done_s is not None:
            extra["exit_lag_s"] = round(res.wall_s - res.io_done_s, 6)
        if error is None and nbytes != job.file_bytes:
            error = f"moved {nbytes} of {job.file_bytes} bytes"
    else:
        nbytes = p.bytes
        duration = p.seconds if p.seconds else res.wall_s
    if res.timed_out:
        error = f"deadline of {job.timeout_s:g}s passed"
        if res.state_at_deadline == "T":     # SIGSTOP (or a debugger): it never wrote again
            error += "; the client was stopped (state T), not writing"
    elif res.deadlock:                 # found and ended before its deadline
        known = tool.known_deadlock(job)
        error = (f"deadlocked, ended after {res.wall_s:.1f}s: {res.deadlock}"
                 + (f" ({known})" if known else ""))
        extra["deadlock_stacks"] = res.deadlock_stacks
    elif error is None and res.returncode != 0:
        error = f"exit {res.returncode}"
    error = tools.credential_error(job, error)
    if job.credential:
        extra["credential"] = job.credential
    if job.credential and error is not None and tool.caps.timed_by_written_bytes:
        # a credential's refusal moved no file: what a tool timed by the bytes it wrote
        # counted is its error message (io_wchar), no bytes, no throughput
        nbytes = None
    ok = error is None and bool(nbytes) and bool(duration)
    return {"bytes": nbytes, "duration_s": duration,
            "throughput_bps": (8.0 * nbytes / duration) if nbytes and duration else None,
            "ok": ok, "error": error, "exit_code": res.returncode, "extra": extra,
            "columns": p.columns}


def measure_set(o: Outcome, tool: tools.ClientTool) -> dict:
    """A `count:` set's process (or eachfile's, one process per file): every file
    arrived (its bytes and adler32 checked after the group), the time they took, files
    per second, time to first byte and the cost per file of connecting and TLS where
    the tool times them (set_columns)."""
    job, res = o.job, o.res
    assert res is not None
    p = tool.parse_set(res.stdout, res.stderr, res.returncode, job)
    extra = dict(p.extra, process_wall_s=res.wall_s)
    if job.client.args:
        extra["args"] = list(job.client.args)
    error = p.error
    # one invocation: the process's wall (the tool's own start included, a user's cost
    # too); one process per file: from the first file's start to the last's end (each
    # file's process start included, the runner's own left out)
    duration = p.seconds if p.seconds else res.wall_s
    if res.timed_out:
        error = f"deadline of {job.timeout_s:g}s passed"
    elif error is None and res.returncode != 0:
        error = f"exit {res.returncode}"
    cols = set_columns(job, extra["files"], duration, o.first_s)
    ok = error is None
    nbytes = job.file_bytes if ok else None
    if not ok:
        cols["files_per_s"] = None
    return {"bytes": nbytes, "duration_s": duration,
            "throughput_bps": (8.0 * nbytes / duration) if nbytes and duration else None,
            "ok": ok, "error": error, "exit_code": res.returncode, "extra": extra,
            "columns": {}, "set_columns": cols}


def set_columns(job: Job, recs: list[dict], duration: float | None,
                first_s: float | None) -> dict:
    """The small-files columns of a set's row (pure). `ttfb_s`: the first file's time to
    first byte: from its process's start until a byte of it was in the destination
    folder (polled every 2 ms: eachfile's own reading for the first file's process, or
    the rig's of the one invocation's folder), process start included. `connections`, `connect_s_per_file`,
    `tls_s_per_file`: where the tool times each file (curl's `-w`: num_connects,
    time_connect, time_appconnect minus time_connect, summed over the files and divided
    by their number), else NULL; one process per file (eachfile) is one connection per
    file by construction when the tool does not say."""
    n = len(job.members)
    out: dict[str, Any] = {"files": n,
                           "files_per_s": n / duration if duration else None,
                           "ttfb_s": None, "connections": None,
                           "connect_s_per_file": None, "tls_s_per_file": None}
    each = not tools.one_invocation(job)
    if each and recs and recs[0].get("first_s") is not None:
        out["ttfb_s"] = recs[0]["first_s"]
    elif not each:
        out["ttfb_s"] = first_s
    if recs and len(recs) == n and all("connects" in r for r in recs):
        out["connections"] = sum(int(r["connects"]) for r in recs)
        out["connect_s_per_file"] = sum(r["connect_s"] for r in recs) / n
        out["tls_s_per_file"] = (sum(r["tls_s"] for r in recs) / n
                                 if job.tls != "off" else None)
    elif each and recs and len(recs) == n:
        out["connections"] = n
    return out


def verify_set(job: Job, ok: bool, read: Callable[[str], str] = checksum.of_file
               ) -> tuple[dict, str | None]:
    """Every file of a set's folder against the adler32 the rig took when it made it
    (after the group, off every clock): the row's extra `checksum` and the first
    failure (a missing, short or changed file), None when all agree. Only for a process
    that succeeded otherwise (a failed one's files may be partial)."""
    out: dict[str, Any] = {"how": "kept", "algo": checksum.ALGO, "files": len(job.members)}
    if not ok:
        return out, None
    bad = 0
    first: str | None = None
    for _, rel, want in job.members:
        path = os.path.join(job.dest, os.path.basename(rel))
        why: str | None
        try:
            got = read(path)
        except OSError as e:
            why = f"{rel}: not fetched ({e.strerror})"
        else:
            m = checksum.mismatch(got, want)
            why = f"{rel}: {m}" if m else None
        if why:
            bad += 1
            first = first or why
    out["mismatched"] = bad
    return out, (f"{bad} of {len(job.members)} files failed their check; first: {first}"
                 if first else None)


def rows(outcomes: list[Outcome], common: dict,
         server_cpu: tuple[float, float] | None = None) -> list[TransferRow]:
    """Transfers rows for one group, with the group's aggregate throughput.

    `server_cpu`: the server tree's (user, sys) seconds over the whole group; each of the
    group's N rows gets 1/N of it, so sums over rows are the server's CPU."""
    ms = [measure(o) for o in outcomes]
    starts = [o.t_start for o in outcomes]
    ends = [o.t_start + m["duration_s"] for o, m in zip(outcomes, ms) if m["duration_s"]]
    total = sum(m["bytes"] or 0 for m in ms if m["ok"])
    span = (max(ends) - min(starts)) if ends else None
    aggregate = 8.0 * total / span if span and all(m["ok"] for m in ms) else None
    out = []
    for i, (o, m) in enumerate(zip(outcomes, ms)):
        res = o.res
        env = o.env
        row = TransferRow(
            **common, instance=i, client=o.job.client.name, tool=o.job.client.tool,
            url=o.job.target, streams=o.job.streams,
            file_bytes=o.job.file_bytes or None, bytes=m["bytes"], duration_s=m["duration_s"],
            throughput_bps=m["throughput_bps"], aggregate_bps=aggregate,
            cpu_user_s=res.cpu_user_s if res else None, cpu_sys_s=res.cpu_sys_s if res else None,
            exit_code=m["exit_code"], ok=m["ok"], error=m["error"],
            argv=json.dumps(res.argv if res else o.argv), env=json.dumps(env),
            stderr_tail=(res.tail(1000) if res else None),
            page_checksum=None, started_at=o.started_at, extra=json.dumps(m["extra"]),
            tls=o.job.tls, origin=o.job.origin or None, origin_cpus=o.job.origin_cpus,
            client_cpus=pinned_cpus(o.job), direction=o.job.direction)
        if server_cpu is not None:
            row.server_cpu_user_s = server_cpu[0] / len(outcomes)
            row.server_cpu_sys_s = server_cpu[1] / len(outcomes)
        tool = tools.get(o.job.client.tool)
        cols = {**tool.row_fields(o.job, env), **m.get("columns", {})}
        unknown = sorted(set(cols) - ROW_COLUMNS)
        if unknown:     # a tool's misspelt column would otherwise be dropped unseen
            raise RigError(f"tool {o.job.client.tool} fills transfers columns that do not "
                           f"exist: {', '.join(unknown)} (rig.results.store.TransferRow)")
        bad = tools.undeclared(tool, cols)
        if bad:         # a column is the tool's declaration (ClientTool.columns), typed
            raise RigError(f"tool {o.job.client.tool} fills transfers columns it does not "
                           f"declare as such: {', '.join(bad)} (ClientTool.columns)")
        out.append(dataclasses.replace(row, **cols, **m.get("set_columns", {})))
    return out
