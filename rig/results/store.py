"""Typed, versioned results in SQLite, written as each measurement lands.

Format (FORMAT_VERSION 2; 1 still read), documented in docs/results-format.md:
  meta(key, value)                       format_version, run_id, created, rig_version
  environment(key, value_json)           kernel, tools, sysctls_before/after, scenario, ...
  validations(...)                       one row per path check (before/after a step)
  transfers(...)                         one row per client process (concurrency N -> N rows)
  engine_stats(...)                      emulator counters per step
  tcp_samples(...)                       sending side's tcp_info per connection over time
  thread_cpu(...)                        per-thread CPU of client and server over time
  capture_flows(...)                     flows of header captures (`capture: headers`)
  actions(...)                           every action of the run plan: start, end, outcome
  background(...)                        competing flows (`background:`) per step
Each insert is committed at once (WAL journal) so a crash loses nothing already measured.
Reading hands back the same row dataclasses (Store.rows(TransferRow), transfers(), ...),
the joined reads a row with its transfer's key columns (TcpSample, ThreadCpu); a column
an older file lacks reads as None. JSON columns (extra, raw, stats, series) stay strings.

Must not import realization, services or reports.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, TypeVar

from rig.description import userpath
from rig.errors import InputError, OutputFull

RESERVE = ".rig-reserve"     # room kept aside in the output folder (Store.create)
RESERVE_BYTES = 1 << 20      # enough for the fault rows, the not-run rows and the WAL fold

FORMAT_VERSION = 2
# Format 2 added the columns and tables in ADDED_AFTER_V1 (caching-mode replay columns,
# tcp_samples); a format-1 folder still loads, the missing ones reading as NULL/empty.
READABLE_VERSIONS = (1, 2)


def column(sql: str) -> Any:
    """A row field stored in a column declared `sql`; NULL (None) until set."""
    return dataclasses.field(default=None, metadata={"sql": sql})


def joined() -> Any:
    """A field read from another table by a join (no column of this row's own table)."""
    return dataclasses.field(default=None)


@dataclass
class TransferRow:
    """One client process of a transfer group (concurrency N gives N rows)."""
    run_id: str = column("TEXT NOT NULL")
    step: int = column("INTEGER NOT NULL")  # sweep step index (one path x RTT point)
    path: str = column("TEXT NOT NULL")
    backend: str = column("TEXT NOT NULL")  # netem | userspace | none
    rtt_ms_configured: float | None = column("REAL")  # NULL for real paths
    rtt_ms_measured: float | None = column("REAL")  # ping mean from the step's validation
    jitter_ms_configured: float | None = column("REAL")
    loss_configured: float | None = column("REAL")  # fraction
    rate_bps_configured: float | None = column("REAL")  # NULL: unlimited
    client: str = column("TEXT NOT NULL")  # client configuration name from the scenario
    tool: str = column("TEXT NOT NULL")  # xrdcp | davix-get | curl | iperf3 | fdt
    server: str | None = column("TEXT")  # server name from the scenario
    url: str | None = column("TEXT")
    streams: int = column("INTEGER NOT NULL")
    concurrency: int = column("INTEGER NOT NULL")
    instance: int = column("INTEGER NOT NULL")  # 0..concurrency-1
    repeat: int = column("INTEGER NOT NULL")
    file_bytes: int | None = column("INTEGER")  # size of the file on the server
    bytes: int | None = column("INTEGER")  # bytes that arrived (checked against file_bytes)
    duration_s: float | None = column("REAL")
    throughput_bps: float | None = column("REAL")  # bits/s of this process
    aggregate_bps: float | None = column("REAL")  # bits/s of all `concurrency` processes together
    cpu_user_s: float | None = column("REAL")
    cpu_sys_s: float | None = column("REAL")
    exit_code: int | None = column("INTEGER")
    ok: bool = column("INTEGER NOT NULL")
    error: str | None = column("TEXT")
    argv: str = column("TEXT NOT NULL")  # JSON list
    env: str | None = column("TEXT")  # JSON of environment variables set for the client
    stderr_tail: str | None = column("TEXT")
    page_checksum: int | None = column("INTEGER")  # xrdcp XRD_CPUSEPGWRTRD, NULL for other tools
    congestion_control: str | None = column("TEXT")
    tcp_rmem_max: int | None = column("INTEGER")  # bytes, client namespace
    tcp_wmem_max: int | None = column("INTEGER")  # bytes, server namespace
    window_bytes: int | None = column("INTEGER")  # effective per-stream window bound used by reports
    started_at: float | None = column("REAL")  # unix time
    extra: str | None = column("TEXT")  # JSON: tool-specific parsed output
    # caching-mode replay (tool replay; NULL for other tools): docs/results-format.md
    cache_mode: str | None = column("TEXT")  # application | storage | lazy-download
    read_library: str | None = column("TEXT")  # xrootd | davix | curl (the plugin replayed)
    branch_fraction: float | None = column("REAL")  # share of the branches' bytes read
    requests: int | None = column("INTEGER")  # read / vector-read requests sent
    round_trips: int | None = column("INTEGER")  # synchronous waits of the plan
    bytes_useful: int | None = column("INTEGER")  # what ROOT asked for
    bytes_wire: int | None = column("INTEGER")  # what was requested from the server
    tls: str | None = column("TEXT")  # off | control | all (NULL: older runs, i.e. off)
    server_cpu_user_s: float | None = column("REAL")  # server tree's CPU over the group / N
    server_cpu_sys_s: float | None = column("REAL")
    client_host: str | None = column("TEXT")  # scenario host that ran the client ('local')
    server_host: str | None = column("TEXT")  # scenario host that ran the server
    origin: str | None = column("TEXT")  # server instance that served it (several origins)
    origin_cpus: str | None = column("TEXT")  # that instance's CPU set (taskset -c), NULL: any
    client_cpus: str | None = column("TEXT")  # the client's CPU set (taskset -c), NULL: any
    direction: str | None = column("TEXT")  # download | upload (NULL: older runs, downloads)
    # the Cpus_allowed_list of its process's threads as the kernel reported them while it
    # ran (thread sampling; distinct lists joined by ';'), NULL: not sampled
    client_cpus_seen: str | None = column("TEXT")
    # the group's host CPU (the same on each of its rows, not divided): the busy share of
    # the client's host's CPUs between the group's start and end marks (/proc/stat; steal
    # counts as busy), their number, the server's host's share when it is another host,
    # the wall time between the marks, and the emulation engine's CPU seconds over it
    # (NULL: netem or no engine here)
    host_cpu_share: float | None = column("REAL")
    host_irq_share: float | None = column("REAL")    # of it: irq + softirq (network stack)
    host_steal_share: float | None = column("REAL")  # of it: steal (the hypervisor's)
    host_cpus: int | None = column("INTEGER")
    server_host_cpu_share: float | None = column("REAL")
    host_cpu_wall_s: float | None = column("REAL")
    engine_cpu_s: float | None = column("REAL")
    # a `count:` set of small files (issue 40 item 7; NULL for one file): docs/results-format.md
    files: int | None = column("INTEGER")                 # files in the set, all fetched
    files_per_s: float | None = column("REAL")            # files / duration_s (NULL: failed)
    ttfb_s: float | None = column("REAL")                 # the first file's time to first byte
    connections: int | None = column("INTEGER")           # TCP connections opened
    connect_s_per_file: float | None = column("REAL")     # TCP handshakes' time / files
    tls_s_per_file: float | None = column("REAL")         # TLS handshakes' time / files



@dataclass
class ValidationRow:
    """One check of a path (before/after a step, or a step aborted)."""
    run_id: str = column("TEXT NOT NULL")
    step: int = column("INTEGER NOT NULL")
    phase: str = column("TEXT NOT NULL")  # before | after
    path: str = column("TEXT NOT NULL")
    backend: str = column("TEXT NOT NULL")
    rtt_ms_configured: float | None = column("REAL")
    loss_configured: float | None = column("REAL")
    rate_bps_configured: float | None = column("REAL")
    rtt_ms_measured: float | None = column("REAL")  # ping mean
    rtt_ms_min: float | None = column("REAL")
    rtt_ms_max: float | None = column("REAL")
    rtt_ms_stddev: float | None = column("REAL")
    ping_count: int | None = column("INTEGER")
    ping_loss: float | None = column("REAL")  # fraction of echo requests lost
    iperf_bps: float | None = column("REAL")  # received goodput of the short iperf3 run
    iperf_streams: int | None = column("INTEGER")
    iperf_retransmits: int | None = column("INTEGER")
    iperf_srtt_ms: float | None = column("REAL")  # mean sender srtt over streams
    flagged: bool = column("INTEGER NOT NULL")
    flag_reason: str | None = column("TEXT")
    started_at: float | None = column("REAL")
    raw: str | None = column("TEXT")  # JSON: ping and iperf3 output
    capacity_bps: float | None = column("REAL")  # iperf_bps past slow start, unless window-limited
    capacity_note: str | None = column("TEXT")  # why capacity_bps is NULL ("not measured: ...")
    # phase `storage` (storage: disk): dd's cold sequential read of a served file
    storage_bps: float | None = column("REAL")
    storage_file: str | None = column("TEXT")   # the scenario's file name
    storage_note: str | None = column("TEXT")   # why storage_bps is NULL ("not measured: ...")


@dataclass
class EngineStatsRow:
    """Emulation counters of one step, as the backend reported them."""
    run_id: str = column("TEXT NOT NULL")
    step: int = column("INTEGER NOT NULL")
    path: str = column("TEXT NOT NULL")
    backend: str = column("TEXT NOT NULL")
    taken_at: float | None = column("REAL")
    stats: str = column("TEXT NOT NULL")  # EmulStats.to_json() (rig/description/linkstats.py)
    emulation_late: bool | None = column("INTEGER")  # engine's own timing beyond tolerance in this step
    emulation_late_reason: str | None = column("TEXT")  # why, with the numbers
    # check-before | transfers | check-after: the stats since the previous row (NULL: the
    # whole step, the one row per step stored before session 7)
    phase: str | None = column("TEXT")


@dataclass
class BackgroundRow:
    """One competing flow (`background:`) over one step's transfers: iperf3 -R from the
    path's server side, started after the step's check and stopped before the next."""
    run_id: str = column("TEXT NOT NULL")
    step: int = column("INTEGER NOT NULL")
    path: str = column("TEXT NOT NULL")
    flow: str = column("TEXT NOT NULL")          # its name in the scenario
    tool: str = column("TEXT NOT NULL")          # iperf3
    congestion: str | None = column("TEXT")      # asked (-C), NULL: the namespace's
    congestion_used: str | None = column("TEXT")  # what iperf3 says the sender used
    streams: int = column("INTEGER NOT NULL")
    rate_bps_configured: float | None = column("REAL")   # its -b in all, NULL: unlimited
    started_at: float | None = column("REAL")
    bytes: int | None = column("INTEGER")        # received by the client
    seconds: float | None = column("REAL")
    throughput_bps: float | None = column("REAL")
    error: str | None = column("TEXT")
    argv: str = column("TEXT NOT NULL")          # JSON list


@dataclass
class TcpSampleRow:
    """One TCP connection of one transfer at one instant, from the sending side's
    tcp_info (rig.process.sockdiag). Counters are cumulative since the connection began."""
    transfer_id: int = column("INTEGER NOT NULL")  # rowid of the transfers row
    conn: int = column("INTEGER NOT NULL")  # connection of the transfer, 0.. in order seen
    t_s: float = column("REAL NOT NULL")  # seconds since the client process started
    cwnd_segs: int | None = column("INTEGER")
    ssthresh_segs: int | None = column("INTEGER")  # NULL while still in slow start (infinite)
    mss_bytes: int | None = column("INTEGER")
    srtt_us: int | None = column("INTEGER")
    rttvar_us: int | None = column("INTEGER")
    delivery_rate_bps: float | None = column("REAL")  # bits/s, the kernel's latest sample
    app_limited: int | None = column("INTEGER")  # that sample was application-limited
    in_flight_pkts: int | None = column("INTEGER")
    snd_wnd_bytes: int | None = column("INTEGER")  # the receiver's advertised window
    bytes_acked: int | None = column("INTEGER")
    bytes_sent: int | None = column("INTEGER")
    bytes_retrans: int | None = column("INTEGER")
    total_retrans: int | None = column("INTEGER")  # segments retransmitted
    busy_us: int | None = column("INTEGER")  # chrono: time with data to send
    rwnd_limited_us: int | None = column("INTEGER")  # ... limited by the receive window
    sndbuf_limited_us: int | None = column("INTEGER")  # ... limited by the send buffer


@dataclass
class ThreadCpuRow:
    """One thread of a transfer's client process (or of the server, for the transfer's
    group) sampled from /proc (rig.process.threadcpu); table version THREAD_CPU_VERSION."""
    transfer_id: int = column("INTEGER NOT NULL")  # client: its transfer; server: the group's instance 0
    side: str = column("TEXT NOT NULL")  # client | server
    pid: int = column("INTEGER NOT NULL")
    tid: int = column("INTEGER NOT NULL")
    process: str | None = column("TEXT")  # comm of the process
    comm: str = column("TEXT NOT NULL")  # comm of the thread
    cpus_allowed: str | None = column("TEXT")  # the thread's Cpus_allowed_list
    t_first_s: float | None = column("REAL")  # first / last sample, seconds since the
    t_last_s: float | None = column("REAL")   # transfer's (server: the group's) start
    cpu_s: float | None = column("REAL")  # on a CPU between them (schedstat)
    wait_s: float | None = column("REAL")  # runnable, waiting in a run queue (schedstat)
    user_s: float | None = column("REAL")  # user / system split (stat, 10 ms ticks)
    sys_s: float | None = column("REAL")
    series: str | None = column("TEXT")  # JSON {"t": [s], "cpu_ms": [...], "wait_ms": [...]}, cumulative


THREAD_CPU_VERSION = 1


@dataclass
class CaptureFlowRow:
    """One flow (a direction of a TCP connection that carried data) of one group's
    header capture at one router interface (rig.results.capture has the definitions)."""
    run_id: str = column("TEXT NOT NULL")
    step: int = column("INTEGER NOT NULL")
    path: str = column("TEXT NOT NULL")
    rtt_ms_configured: float | None = column("REAL")
    loss_configured: float | None = column("REAL")
    client: str = column("TEXT NOT NULL")
    streams: int = column("INTEGER NOT NULL")
    concurrency: int = column("INTEGER NOT NULL")
    repeat: int = column("INTEGER NOT NULL")
    file: str = column("TEXT NOT NULL")  # the pcap, relative to the run folder
    iface: str = column("TEXT NOT NULL")  # router interface captured
    side: str = column("TEXT NOT NULL")  # sender | receiver: where the data entered / left
    src: str = column("TEXT NOT NULL")
    sport: int = column("INTEGER NOT NULL")
    dst: str = column("TEXT NOT NULL")
    dport: int = column("INTEGER NOT NULL")
    t_first: float | None = column("REAL")  # unix time of its first / last packet
    t_last: float | None = column("REAL")
    packets: int | None = column("INTEGER")
    data_packets: int | None = column("INTEGER")
    data_bytes: int | None = column("INTEGER")  # sequence space covered
    mss_bytes: int | None = column("INTEGER")
    goodput_bps: float | None = column("REAL")  # data_bytes over first to last new data
    retrans_packets: int | None = column("INTEGER")
    retrans_segs: int | None = column("INTEGER")  # in MSS-sized segments
    retrans_bytes: int | None = column("INTEGER")
    ooo_packets: int | None = column("INTEGER")
    zero_window: int | None = column("INTEGER")  # zero-window episodes the peer advertised
    rtt_samples: int | None = column("INTEGER")  # from TCP timestamps (TSval -> TSecr)
    rtt_ms_min: float | None = column("REAL")
    rtt_ms_median: float | None = column("REAL")
    rtt_ms_p90: float | None = column("REAL")
    packets_analysed: int | None = column("INTEGER")  # of the whole file
    truncated: str | None = column("TEXT")  # why capture or analysis is incomplete, NULL: not
    engine_seen: int | None = column("INTEGER")  # the engine, data direction, capture window
    engine_dropped: int | None = column("INTEGER")  # its loss drops there (dropped_loss)
    tseq: str | None = column("TEXT")  # JSON time-sequence graph (slowest data flow only)


@dataclass
class ActionRow:
    """One action of the run plan as `rig run` executed it (rig.orchestration.actions):
    the same id `rig plan` shows, when it started and ended, and how it ended."""
    run_id: str = column("TEXT NOT NULL")
    seq: int = column("INTEGER NOT NULL")  # the order executed, 0..
    action: str = column("TEXT NOT NULL")  # its id in the plan (`rig plan` / golden plans)
    kind: str = column("TEXT NOT NULL")  # prepare | tune | hosts | data | path | servers | ...
    phase: str = column("TEXT NOT NULL")  # setup | emulation | checks | transfers | teardown
    host: str = column("TEXT NOT NULL")  # local, or the scenario's host name
    path: str | None = column("TEXT")
    step: int | None = column("INTEGER")  # sweep step index, as in transfers.step
    group_index: int | None = column("INTEGER")  # the group's position in its step
    started_at: float = column("REAL NOT NULL")  # unix time
    ended_at: float = column("REAL NOT NULL")
    duration_s: float = column("REAL NOT NULL")  # monotonic clock
    outcome: str = column("TEXT NOT NULL")  # ok | failed | skipped (its step aborted)
    error: str | None = column("TEXT")  # why it failed, one line


@dataclass
class OfTransfer:
    """The columns of a sample's transfer that key its point and size it, read with the
    sample by a join (tcp_samples, thread_cpu): a mixin of TcpSample and ThreadCpu."""
    path: str = joined()
    rtt_ms_configured: float | None = joined()
    client: str = joined()
    tls: str | None = joined()
    streams: int = joined()
    concurrency: int = joined()
    step: int = joined()
    repeat: int = joined()
    instance: int = joined()
    ok: bool = joined()
    bytes: int | None = joined()
    duration_s: float | None = joined()
    throughput_bps: float | None = joined()
    aggregate_bps: float | None = joined()
    origin_cpus: str | None = joined()
    client_cpus: str | None = joined()
    cache_mode: str | None = joined()       # a replay's: its duration_s leaves its planning out


@dataclass
class TcpSample(TcpSampleRow, OfTransfer):
    """A tcp_samples row with its transfer's columns (Store.tcp_samples)."""


@dataclass
class ThreadCpu(ThreadCpuRow, OfTransfer):
    """A thread_cpu row with its transfer's columns (Store.thread_cpu)."""


# Tables and columns that came after format 1: a results.sqlite without them still
# loads (a missing column reads as NULL, a missing table as empty).
ADDED_AFTER_V1: set[str] = set()
ADDED_AFTER_V1 |= {"tcp_samples"}

ADDED_AFTER_V1 |= {"cache_mode", "read_library", "branch_fraction", "requests", "round_trips", "bytes_useful", "bytes_wire"}

ADDED_AFTER_V1 |= {"tls", "server_cpu_user_s", "server_cpu_sys_s"}

ADDED_AFTER_V1 |= {"origin", "origin_cpus", "client_cpus"}

ADDED_AFTER_V1 |= {"direction", "client_cpus_seen"}
ADDED_AFTER_V1 |= {"background"}       # competing flows (issue 30)

ADDED_AFTER_V1 |= {"emulation_late", "emulation_late_reason", "capacity_bps", "capacity_note"}

ROW_TYPES: dict[str, type] = {"transfers": TransferRow, "validations": ValidationRow,
                              "engine_stats": EngineStatsRow, "tcp_samples": TcpSampleRow,
                              "capture_flows": CaptureFlowRow, "actions": ActionRow}

ADDED_AFTER_V1 |= {"client_host", "server_host"}
ADDED_AFTER_V1 |= {"thread_cpu"}        # table version THREAD_CPU_VERSION (issue 27)
ROW_TYPES["thread_cpu"] = ThreadCpuRow
ROW_TYPES["background"] = BackgroundRow

ADDED_AFTER_V1 |= {"capture_flows"}
ADDED_AFTER_V1 |= {"phase"}
ADDED_AFTER_V1 |= {"files", "files_per_s", "ttfb_s", "connections", "connect_s_per_file",
                   "tls_s_per_file"}     # small files (issue 40 item 7)
ADDED_AFTER_V1 |= {"actions"}      # table version 1 (issue 25)
ADDED_AFTER_V1 |= {"storage_bps", "storage_file", "storage_note"}
ADDED_AFTER_V1 |= {"host_cpu_share", "host_irq_share", "host_steal_share", "host_cpus", "server_host_cpu_share", "host_cpu_wall_s",
                   "engine_cpu_s"}        # host-CPU verdict (issue 24)


def columns(row_type: type) -> dict[str, str]:
    """Column name -> SQL declaration, in table order, from a row dataclass."""
    return {f.name: f.metadata["sql"] for f in dataclasses.fields(row_type)}


TRANSFER_COLUMNS = columns(TransferRow)
VALIDATION_COLUMNS = columns(ValidationRow)
ENGINE_COLUMNS = columns(EngineStatsRow)
_TABLES = {name: columns(t) for name, t in ROW_TYPES.items()}


def _ddl() -> list[str]:
    out = ["CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
           "CREATE TABLE IF NOT EXISTS environment (key TEXT PRIMARY KEY, value_json TEXT)"]
    for name, cols in _TABLES.items():
        body = ", ".join(f"{c} {t}" for c, t in cols.items())
        out.append(f"CREATE TABLE IF NOT EXISTS {name} ({body})")
    return out


def _encode(v: Any) -> Any:
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v)
    if isinstance(v, bool):
        return int(v)
    return v


def check_files(path: Path) -> None:
    """The database and its -wal/-shm (when present) must be regular files: sqlite opens
    them blocking, and a FIFO or device planted there would hang `rig report`."""
    userpath.check_regular(path)
    for extra in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        if os.path.lexists(extra):
            userpath.check_regular(extra)


def read_only_uri(path: Path) -> str:
    """URI that reads a results.sqlite without writing next to it. A WAL-mode database
    opened read-only still gets -wal/-shm files created beside it, unless it is opened
    as immutable -- which is only right when no -wal file holds unmerged rows (a
    finished run, or a copy); a killed or live run keeps its -wal and is read through it."""
    wal = Path(f"{path}-wal")
    return f"file:{path}?mode=ro" + ("" if wal.exists() else "&immutable=1")


class Store:
    """One run's results database. Writes may come from several threads (the paths of a
    joint step, `together:`): one lock keeps each write, and each transaction, whole."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path
        self.conn.row_factory = sqlite3.Row
        self.lock = threading.RLock()

    @classmethod
    def create(cls, path: Path, run_id: str, *, reserve: bool = False) -> "Store":
        """A new results database; `reserve`: keep RESERVE_BYTES aside beside it (a run's),
        given back when the filesystem fills up, so that why the run stopped is stored."""
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        # a full output filesystem must still leave room to say so: this file is given
        # back (release_reserve) when a write fails for want of space
        if reserve:
            with open(path.parent / RESERVE, "wb") as f:
                f.write(bytes(RESERVE_BYTES))
        conn.execute("PRAGMA journal_mode=WAL")
        for stmt in _ddl():
            conn.execute(stmt)
        st = cls(conn, path)
        from rig import __version__
        for k, v in (("format_version", str(FORMAT_VERSION)), ("run_id", run_id),
                     ("created", f"{time.time():.3f}"), ("rig_version", __version__)):
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, v))
        return st

    @classmethod
    def open(cls, path: Path) -> "Store":
        """Open read-only an existing results.sqlite (or the directory holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "results.sqlite"
        if not path.is_file():
            raise InputError("no results.sqlite here", file=str(path))
        check_files(path)
        conn = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
        st = cls(conn, path)
        try:
            version = int(st.meta().get("format_version", "0"))
        except sqlite3.DatabaseError as e:
            raise InputError(f"not a rig results database ({e})", file=str(path)) from e
        except (TypeError, ValueError) as e:
            raise InputError("meta.format_version is not an integer", file=str(path)) from e
        if version not in READABLE_VERSIONS:
            raise InputError(f"results format {version} is not supported (this rig reads "
                             f"{', '.join(map(str, READABLE_VERSIONS))})", file=str(path))
        return st

    def close(self) -> None:
        self.conn.close()

    def release_reserve(self) -> bool:
        """Give back the room kept aside at create(); False when it was given already."""
        try:
            (self.path.parent / RESERVE).unlink()
        except FileNotFoundError:
            return False
        return True

    def _full(self, e: Exception) -> OutputFull:
        """A write that failed because the output filesystem is full: the reserve is
        released, so the caller can still store why the run stopped."""
        self.release_reserve()
        return OutputFull(f"output folder {self.path.parent} is full ({e})")

    def finish(self) -> None:
        """End of a run: fold the WAL into the database and leave WAL mode, so readers
        (`rig report`, read-only) leave no -wal/-shm files in the run folder."""
        self.release_reserve()
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.OperationalError:
            pass   # a reader holds it open: it stays in WAL mode, nothing is lost
        self.conn.close()

    # --- writing ---------------------------------------------------------------
    def _insert(self, table: str, row: Any) -> int:
        if not isinstance(row, ROW_TYPES[table]):
            unknown = set(row) - set(_TABLES[table])
            if unknown:
                raise ValueError(f"{table}: unknown columns {sorted(unknown)}")
            row = ROW_TYPES[table](**row)
        missing = [f.name for f in dataclasses.fields(row) if getattr(row, f.name) is None
                   and "NOT NULL" in f.metadata["sql"]]
        if missing:
            raise ValueError(f"{table}: required columns missing {missing}")
        row = dataclasses.asdict(row)
        names = [n for n, v in row.items() if v is not None]
        with self.lock:       # lastrowid: this insert's, not another thread's
            cur = self._write(f"INSERT INTO {table} ({', '.join(names)}) "
                              f"VALUES ({', '.join('?' * len(names))})",
                              [_encode(row[n]) for n in names])
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

    def add_transfer(self, row: "TransferRow | dict[str, Any]") -> int:
        """Store one transfer; returns its rowid (tcp_samples.transfer_id)."""
        return self._insert("transfers", row)

    def add_tcp_samples(self, rows: list[TcpSampleRow]) -> None:
        """Many samples in one transaction (a group can hold tens of thousands)."""
        if not rows:
            return
        names = list(columns(TcpSampleRow))
        try:
            self._samples(names, rows)
        except sqlite3.OperationalError as e:
            if "full" in str(e) or "disk I/O" in str(e):
                raise self._full(e) from e
            raise

    def _samples(self, names: list[str], rows: list[TcpSampleRow]) -> None:
        with self.lock, self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(
                f"INSERT INTO tcp_samples ({', '.join(names)}) "
                f"VALUES ({', '.join('?' * len(names))})",
                [[_encode(getattr(r, n)) for n in names] for r in rows])

    def add_thread_cpu(self, rows: list[ThreadCpuRow]) -> None:
        """A group's thread rows in one transaction."""
        if not rows:
            return
        with self.lock, self.conn:
            self.conn.execute("BEGIN")
            for r in rows:
                self._insert("thread_cpu", r)

    def thread_cpu(self) -> list[ThreadCpu]:
        """Every thread_cpu row with the columns of its transfer that key a point and
        size it; [] in a folder written before the table existed."""
        if not self.has_table("thread_cpu"):
            return []
        return self._joined(ThreadCpu, "thread_cpu", "h.rowid")

    def add_capture_flow(self, row: CaptureFlowRow) -> None:
        self._insert("capture_flows", row)

    def capture_flows(self) -> list[CaptureFlowRow]:
        """Flows of the run's header captures; [] when it took none (or predates them)."""
        return self.rows(CaptureFlowRow) if self.has_table("capture_flows") else []

    def add_action(self, row: ActionRow) -> None:
        self._insert("actions", row)

    def actions(self) -> list[ActionRow]:
        """The run's executed actions in order; [] in a folder written before the table."""
        return self.rows(ActionRow) if self.has_table("actions") else []

    def add_validation(self, row: "ValidationRow | dict[str, Any]") -> None:
        self._insert("validations", row)

    def add_engine_stats(self, row: "EngineStatsRow | dict[str, Any]") -> None:
        self._insert("engine_stats", row)

    def add_background(self, row: "BackgroundRow") -> None:
        self._insert("background", row)

    def background(self) -> list[BackgroundRow]:
        """Competing flows' rows ([] in a folder written before the table existed)."""
        return self.rows(BackgroundRow) if self.has_table("background") else []

    def set_env(self, key: str, value: Any) -> None:
        self._write("INSERT OR REPLACE INTO environment VALUES (?, ?)", (key, json.dumps(value)))

    def _write(self, sql: str, params: Any) -> sqlite3.Cursor:
        try:
            with self.lock:
                return self.conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            if "full" in str(e) or "disk I/O" in str(e):
                raise self._full(e) from e
            raise

    # --- reading ---------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.conn.execute("SELECT key, value FROM meta")}

    def environment(self) -> dict[str, Any]:
        return {r[0]: json.loads(r[1]) for r in
                self.conn.execute("SELECT key, value_json FROM environment")}

    def rows(self, row_type: type[R], where: str = "", params: Iterable = ()) -> list[R]:
        """The rows of row_type's table (ROW_TYPES), in the order stored, as row_type;
        `where`: an SQL condition on its columns."""
        table = TABLE_OF.get(row_type)
        if table is None:
            raise ValueError(f"{row_type.__name__} is not a table's row type")
        q = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        return _typed(row_type, self.conn.execute(q, tuple(params)))

    def transfers(self) -> list[TransferRow]:
        return self.rows(TransferRow)

    def validations(self) -> list[ValidationRow]:
        return self.rows(ValidationRow)

    def engine_stats(self) -> list[EngineStatsRow]:
        return self.rows(EngineStatsRow)

    def has_table(self, table: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                 "name = ?", (table,)).fetchone() is not None

    def tcp_samples(self) -> list[TcpSample]:
        """Every tcp_info sample, by transfer, connection and time, with the columns
        of its transfer that key a measurement point; [] in a folder written before
        the table existed."""
        if not self.has_table("tcp_samples"):
            return []
        return self._joined(TcpSample, "tcp_samples", "h.transfer_id, h.conn, h.t_s")

    def _joined(self, row_type: type[J], table: str, order: str) -> list[J]:
        """`table` (alias h) joined with its transfers row (OfTransfer's columns; those
        an older file lacks read as NULL)."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(transfers)")}
        cols = ", ".join(f"t.{c}" if c in have else f"NULL AS {c}" for c in _OF_TRANSFER)
        return _typed(row_type, self.conn.execute(
            f"SELECT h.*, {cols} FROM {table} h JOIN transfers t ON t.rowid = h.transfer_id "
            f"ORDER BY {order}"))


R = TypeVar("R")
J = TypeVar("J", bound=OfTransfer)
TABLE_OF: dict[type, str] = {t: name for name, t in ROW_TYPES.items()}
_OF_TRANSFER = [f.name for f in dataclasses.fields(OfTransfer)]


def _typed(row_type: type[R], cur: sqlite3.Cursor) -> list[R]:
    """A query's rows as row_type: a column the file lacks (ADDED_AFTER_V1, a format-1
    folder) reads as None, one the type lacks is left out, and a bool field reads as a
    bool (SQLite stores 0/1), so a row reads back as it was written."""
    names = [d[0] for d in cur.description]
    fields = dataclasses.fields(row_type)   # type: ignore[arg-type]
    known = {f.name for f in fields}
    flags = [i for i, n in enumerate(names) if n in known and _is_bool(row_type, n)]
    keep = [(i, n) for i, n in enumerate(names) if n in known]
    out = []
    for r in cur:
        vals = list(r)
        for i in flags:
            if vals[i] is not None:
                vals[i] = bool(vals[i])
        out.append(row_type(**{n: vals[i] for i, n in keep}))
    return out


def _is_bool(row_type: type, name: str) -> bool:
    hint = next(f.type for f in dataclasses.fields(row_type) if f.name == name)
    return str(hint) in ("bool", "bool | None")
