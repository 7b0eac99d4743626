"""Validation of a stored results.sqlite before anything reads it (`rig report`,
`rig compare`): every defect becomes one InputError naming the file, the table, the row
(rowid) and the column, so a damaged or foreign folder is exit 2 with a line per defect,
never a traceback and never a silently wrong report.

Checks: the file is SQLite; meta.format_version is an integer this rig reads; every table
and column of the format exists and none unknown; NOT NULL columns hold a value; numeric
columns hold finite numbers (no text, no infinity), within range (bytes, durations,
throughputs, CPU >= 0; a successful transfer's throughputs and duration > 0; fractions
in 0..1; flags 0 or 1; streams and concurrency >= 1); JSON columns parse.

Must not import realization, services or reports.
"""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Iterator

from rig.errors import InputError
from rig.results.store import (_TABLES, ADDED_AFTER_V1, FORMAT_VERSION, READABLE_VERSIONS,
                               check_files, read_only_uri)

BASE_TABLES: dict[str, dict[str, str]] = {
    "meta": {"key": "TEXT NOT NULL", "value": "TEXT"},
    "environment": {"key": "TEXT NOT NULL", "value_json": "TEXT NOT NULL"},
}
NON_NEGATIVE = {"step", "instance", "repeat", "file_bytes", "bytes", "duration_s",
                "throughput_bps", "aggregate_bps", "cpu_user_s", "cpu_sys_s",
                "rtt_ms_configured", "rtt_ms_measured", "jitter_ms_configured",
                "rate_bps_configured", "tcp_rmem_max", "tcp_wmem_max", "window_bytes",
                "rtt_ms_min", "rtt_ms_max", "rtt_ms_stddev", "ping_count", "iperf_bps",
                "iperf_retransmits", "iperf_srtt_ms", "started_at", "taken_at",
                "requests", "round_trips", "bytes_useful", "bytes_wire",
                "server_cpu_user_s", "server_cpu_sys_s"}
NON_NEGATIVE |= {"transfer_id", "conn", "t_s", "cwnd_segs", "ssthresh_segs", "mss_bytes",
                 "srtt_us", "rttvar_us", "delivery_rate_bps", "in_flight_pkts",
                 "snd_wnd_bytes", "bytes_acked", "bytes_sent", "bytes_retrans",
                 "total_retrans", "busy_us", "rwnd_limited_us", "sndbuf_limited_us"}
NON_NEGATIVE |= {"pid", "tid", "cpu_s", "wait_s", "user_s", "sys_s"}
AT_LEAST_ONE = {"streams", "concurrency", "iperf_streams"}
FRACTION = {"loss_configured", "ping_loss", "branch_fraction"}
FLAG = {"ok", "flagged", "page_checksum", "app_limited"}
POSITIVE_WHEN_OK = {"duration_s", "throughput_bps", "aggregate_bps"}
JSON_COLUMNS = {("transfers", "argv"): list, ("transfers", "env"): dict,
                ("transfers", "extra"): dict, ("validations", "raw"): dict,
                ("engine_stats", "stats"): dict, ("capture_flows", "tseq"): dict,
                ("thread_cpu", "series"): dict}


def _err(path: Path, key: str, message: str, value: Any = None,
         has_value: bool = False) -> InputError:
    return InputError(message, file=str(path), key=key, value=value, has_value=has_value)


def _short(v: Any) -> Any:
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if isinstance(v, str) and len(v) > 60:
        return v[:57] + "..."
    return v


def check_connection(conn: sqlite3.Connection, path: Path) -> list[InputError]:
    """Every defect of the database behind conn; [] when it is a valid results file."""
    try:
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as e:
        return [_err(path, "", f"not a SQLite results database ({e})")]
    try:
        errors = _check_version(conn, path, tables)
        if errors:
            return errors
        errors = _check_columns(conn, path, tables)
        if errors:
            return errors
        return list(_check_environment(conn, path)) + [
            e for t, cols in _present(conn, tables).items()
            for e in _check_rows(conn, path, t, cols)]
    except sqlite3.DatabaseError as e:    # damaged pages show up while reading rows
        return [_err(path, "", f"damaged SQLite database ({e})")]


def _check_version(conn: sqlite3.Connection, path: Path, tables: set[str]) -> list[InputError]:
    if "meta" not in tables:
        return [_err(path, "meta", "missing table: not a rig results database")]
    rows = conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchall()
    if not rows:
        return [_err(path, "meta.format_version", "missing")]
    raw = rows[0][0]
    try:
        version = int(raw) if not isinstance(raw, (float, bytes)) else None
    except (TypeError, ValueError):
        version = None
    if version is None:
        return [_err(path, "meta.format_version", "not an integer", _short(raw), True)]
    if version not in READABLE_VERSIONS:
        return [_err(path, "meta.format_version", f"results format {version} is not "
                     f"supported (this rig reads "
                     f"{', '.join(map(str, READABLE_VERSIONS))})", _short(raw), True)]
    return []


def _present(conn: sqlite3.Connection, tables: set[str]) -> dict[str, dict[str, str]]:
    """The format's tables and columns this file has: one added after format 1
    (ADDED_AFTER_V1) may be missing in an older folder, and then reads as NULL/empty."""
    out = {}
    for table, cols in _TABLES.items():
        if table in tables:
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            out[table] = {c: d for c, d in cols.items() if c in have}
    return out


def _check_columns(conn: sqlite3.Connection, path: Path, tables: set[str]) -> list[InputError]:
    errors = []
    for table, cols in {**BASE_TABLES, **_TABLES}.items():
        if table not in tables:
            if table not in ADDED_AFTER_V1:
                errors.append(_err(path, table, "missing table"))
            continue
        have = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        errors += [_err(path, f"{table}.{c}", "missing column") for c in cols
                   if c not in have and c not in ADDED_AFTER_V1]
        errors += [_err(path, f"{table}.{c}", "unknown column (not in format "
                        f"{FORMAT_VERSION})") for c in have if c not in cols]
    return errors


def _check_environment(conn: sqlite3.Connection, path: Path) -> Iterator[InputError]:
    for key, value in conn.execute("SELECT key, value_json FROM environment ORDER BY rowid"):
        try:
            json.loads(value)
        except (TypeError, ValueError):
            yield _err(path, f"environment.{key}", "value is not JSON", _short(value), True)


def _check_rows(conn: sqlite3.Connection, path: Path, table: str,
                cols: dict[str, str]) -> Iterator[InputError]:
    have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    names = [c for c in cols if c in have or c not in ADDED_AFTER_V1]   # older: NULL
    cols = {c: cols[c] for c in names}
    query = f"SELECT rowid, {', '.join(names)} FROM {table} ORDER BY rowid"
    for row in conn.execute(query):
        rowid, values = row[0], dict(zip(names, row[1:]))
        values.update({c: None for c in cols if c not in have})
        ok = values.get("ok") == 1
        for name in names:
            message = _cell_defect(table, name, cols[name], values[name], ok)
            if message:
                yield _err(path, f"{table}[{rowid}].{name}", message, _short(values[name]),
                           True)


def _cell_defect(table: str, name: str, decl: str, v: Any, ok: bool) -> str | None:
    if v is None:
        return "missing value" if "NOT NULL" in decl else None
    kind = decl.split()[0]
    if kind == "TEXT":
        if not isinstance(v, str):
            return "not text"
        want = JSON_COLUMNS.get((table, name))
        if want is not None:
            try:
                parsed = json.loads(v)
            except ValueError:
                return "not JSON"
            if parsed is None and "NOT NULL" not in decl:
                return None                 # JSON null in a nullable column: absent
            if not isinstance(parsed, want):
                return f"JSON is not a{'n object' if want is dict else ' list'}"
        return None
    if isinstance(v, (str, bytes)) or (kind == "INTEGER" and not isinstance(v, int)):
        return "not an integer" if kind == "INTEGER" else "not a number"
    if not math.isfinite(v):
        return "not a finite number"
    return _range_defect(name, v, ok)


def _range_defect(name: str, v: float, ok: bool) -> str | None:
    if name in FLAG and v not in (0, 1):
        return "must be 0 or 1"
    if name in FRACTION and not 0 <= v <= 1:
        return "must be a fraction between 0 and 1"
    if name in AT_LEAST_ONE and v < 1:
        return "must be >= 1"
    if name in NON_NEGATIVE and v < 0:
        return "must be >= 0"
    if ok and name in POSITIVE_WHEN_OK and v <= 0:
        return "must be > 0 in a successful transfer"
    return None


def check(path: Path) -> None:
    """Raise InputErrors (one line per defect) unless path is a valid results.sqlite."""
    from rig.errors import InputErrors
    check_files(Path(path))
    conn = sqlite3.connect(read_only_uri(Path(path)), uri=True)
    try:
        errors = check_connection(conn, Path(path))
    finally:
        conn.close()
    if errors:
        raise InputErrors(errors)
