"""Typed, versioned results in SQLite, written as each measurement lands.

Format (FORMAT_VERSION 1), documented in docs/results-format.md:
  meta(key, value)                       format_version, run_id, created, rig_version
  environment(key, value_json)           kernel, tools, sysctls_before/after, scenario, ...
  validations(...)                       one row per path check (before/after a step)
  transfers(...)                         one row per client process (concurrency N -> N rows)
  engine_stats(...)                      emulator counters per step
Each insert is committed at once (WAL journal) so a crash loses nothing already measured.

Must not import realization, services or reports.
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable

from rig.errors import InputError

FORMAT_VERSION = 1


def column(sql: str) -> Any:
    """A row field stored in a column declared `sql`; NULL (None) until set."""
    return dataclasses.field(default=None, metadata={"sql": sql})


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



# Columns added after format 1 shipped: a results.sqlite written before them lacks them,
# and loaders (rig.results.check, rig.report.model) read them as NULL.
ADDED_AFTER_V1: set[str] = set()
ADDED_AFTER_V1 |= {"emulation_late", "emulation_late_reason", "capacity_bps", "capacity_note"}

ROW_TYPES: dict[str, type] = {"transfers": TransferRow, "validations": ValidationRow,
                              "engine_stats": EngineStatsRow}


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


def read_only_uri(path: Path) -> str:
    """URI that reads a results.sqlite without writing next to it. A WAL-mode database
    opened read-only still gets -wal/-shm files created beside it, unless it is opened
    as immutable -- which is only right when no -wal file holds unmerged rows (a
    finished run, or a copy); a killed or live run keeps its -wal and is read through it."""
    wal = Path(f"{path}-wal")
    return f"file:{path}?mode=ro" + ("" if wal.exists() else "&immutable=1")


class Store:
    """One run's results database."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path
        self.conn.row_factory = sqlite3.Row

    @classmethod
    def create(cls, path: Path, run_id: str) -> "Store":
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
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
        conn = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)
        st = cls(conn, path)
        try:
            version = int(st.meta().get("format_version", "0"))
        except sqlite3.DatabaseError as e:
            raise InputError(f"not a rig results database ({e})", file=str(path)) from e
        except (TypeError, ValueError) as e:
            raise InputError("meta.format_version is not an integer", file=str(path)) from e
        if version != FORMAT_VERSION:
            raise InputError(f"results format {version} is not supported (want {FORMAT_VERSION})",
                             file=str(path))
        return st

    def close(self) -> None:
        self.conn.close()

    def finish(self) -> None:
        """End of a run: fold the WAL into the database and leave WAL mode, so readers
        (`rig report`, read-only) leave no -wal/-shm files in the run folder."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.OperationalError:
            pass   # a reader holds it open: it stays in WAL mode, nothing is lost
        self.conn.close()

    # --- writing ---------------------------------------------------------------
    def _insert(self, table: str, row: Any) -> None:
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
        self.conn.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            [_encode(row[n]) for n in names])

    def add_transfer(self, row: "TransferRow | dict[str, Any]") -> None:
        self._insert("transfers", row)

    def add_validation(self, row: "ValidationRow | dict[str, Any]") -> None:
        self._insert("validations", row)

    def add_engine_stats(self, row: "EngineStatsRow | dict[str, Any]") -> None:
        self._insert("engine_stats", row)

    def set_env(self, key: str, value: Any) -> None:
        self.conn.execute("INSERT OR REPLACE INTO environment VALUES (?, ?)",
                          (key, json.dumps(value)))

    # --- reading ---------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.conn.execute("SELECT key, value FROM meta")}

    def environment(self) -> dict[str, Any]:
        return {r[0]: json.loads(r[1]) for r in
                self.conn.execute("SELECT key, value_json FROM environment")}

    def rows(self, table: str, where: str = "", params: Iterable = ()) -> list[dict]:
        if table not in _TABLES:
            raise ValueError(table)
        q = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        return [dict(r) for r in self.conn.execute(q, tuple(params))]

    def transfers(self) -> list[dict]:
        return self.rows("transfers")

    def validations(self) -> list[dict]:
        return self.rows("validations")
