"""Caching-mode tables and chart (seed 003's shape), from the replay rows of a run.

- caching_table_mean.{csv,md}: effective MB/s (10^6 bytes/s: useful bytes over the
  replay's wall) per mode / library / server (rows) and RTT (columns), one block per
  branch fraction; the mean over repeats.
- caching_read_time.{csv,md}: the seed's "average read time" (seconds), same shape.
- caching_modes.png/.svg: MB/s vs RTT per mode x library x server, log y, one panel per
  branch fraction (drawn by `draw`, which imports matplotlib; the tables do not).

Pure Python at import: must not import matplotlib, realization, services, process or
orchestration.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from rig.report.model import Point, Run

MODE_ORDER = {"lazy-download": 0, "application": 1, "storage": 2}
Row = tuple[str, str, str]           # mode, library, server


def replay_points(run: Run) -> list[Point]:
    return [p for p in run.points if p.cache_mode is not None]


def _fractions(points: list[Point]) -> list[float]:
    return sorted({p.branch_fraction or 1.0 for p in points})


def _rtts(points: list[Point]) -> list[float]:
    return sorted({p.x_rtt_ms for p in points})


def _row(p: Point) -> Row:
    return (p.cache_mode or "", p.read_library or "", p.server or "")


def _client(p: Point) -> str:
    return (p.base_client or p.key.client).split("@")[0]


def _cells(points: list[Point], frac: float, value) -> dict[Row, dict[float, float]]:
    """Cells per row; where several clients share a mode, library and server (e.g. seed
    003's trigger factors), each keeps its own row, the client named beside the server."""
    names: dict[Row, set[str]] = defaultdict(set)
    for p in points:
        names[_row(p)].add(_client(p))
    out: dict[Row, dict[float, float]] = defaultdict(dict)
    for p in points:
        if (p.branch_fraction or 1.0) == frac and p.n:
            r = _row(p)
            if len(names[r]) > 1:
                r = (r[0], r[1], f"{r[2]} ({_client(p)})")
            out[r][p.x_rtt_ms] = value(p)
    return out


def _mbps(p: Point) -> float:
    return p.mean_bps / 8 / 1e6


def _read_time(p: Point) -> float:
    return statistics.fmean(p.durations_s) if p.durations_s else math.nan


def _fmt(v: float | None, digits: int) -> str:
    return "" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def table(points: list[Point], value, digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """Header and rows: branches, mode, library, server, then one column per RTT."""
    rtts = _rtts(points)
    header = ["branches", "mode", "library", "server"] + [f"{r:g}" for r in rtts]
    body = []
    for frac in _fractions(points):
        cells = _cells(points, frac, value)
        for row in sorted(cells, key=lambda r: (MODE_ORDER.get(r[0], 9), r[1], r[2])):
            body.append([f"{frac * 100:g}%", *row]
                        + [_fmt(cells[row].get(r), digits) for r in rtts])
    return header, body


def write(run: Run, out_dir: Path, markdown, write_csv) -> list[Path]:
    points = replay_points(run)
    if not points:
        return []
    written = []
    for name, value, digits, title in (
            ("caching_table_mean", _mbps, 2,
             "Caching modes: effective MB/s (useful bytes / replay wall), mean over repeats; "
             "columns: RTT in ms"),
            ("caching_read_time", _read_time, 3,
             "Caching modes: average read time (s); columns: RTT in ms")):
        header, body = table(points, value, digits)
        written.append(write_csv(out_dir / f"{name}.csv", header, body))
        md = out_dir / f"{name}.md"
        md.write_text(f"### {title}\n\n" + markdown(header, body, left=4))
        written.append(md)
    return written
