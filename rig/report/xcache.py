"""The XCache table (seed 001's direct / cold / warm), from a run's rows alone.

    xcache.csv / xcache.md   one row per (path, RTT, client): how it read (direct from the
                             origin, or through a cache cold / warm / as-is), the median
                             over repeats of the group's wall seconds and throughput, and
                             of the bytes the cache fetched from its origin (XrdPfc's
                             block bitmap) and the origin's interface sent (wire, headers
                             included); a direct read's origin bytes are its own bytes.

Below the table, per client, the throughput at the highest RTT over that at the lowest:
a warm cache's reads cross only the client's LAN, so theirs stays near 1.
A row is a cache read when its extra has `cache` (rig.orchestration.xcache); a direct
read is one from a server some cache reads from (`cache_origin`).
Pure: must not import realization, services, process or orchestration.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from rig.report.model import Run
from rig.results.store import TransferRow

HEADER = ["path", "rtt_ms", "client", "read", "repeats_ok", "seconds", "MB_s",
          "origin_MB", "origin_wire_MB"]


def _extra(r: TransferRow) -> dict:
    try:
        v = json.loads(r.extra or "{}")
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def has_cache(run: Run) -> bool:
    return any("cache" in _extra(r) for r in run.transfers)


def _med(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def _f(v: float | None, fmt: str = ".3g") -> str:
    return "" if v is None else format(v, fmt)


def cells(run: Run) -> dict[tuple, dict[str, Any]]:
    """(path, rtt, client) -> read kind and per-repeat group values."""
    origins = {_extra(r).get("cache_origin") for r in run.transfers if "cache" in _extra(r)}
    groups: dict[tuple, list[TransferRow]] = defaultdict(list)
    for r in run.transfers:
        x = _extra(r)
        if "cache" not in x and r.server not in origins:
            continue
        groups[(r.path, r.rtt_ms_configured, r.client, r.concurrency,
                r.repeat, r.step)].append(r)
    out: dict[tuple, dict[str, Any]] = {}
    for (path, rtt, client, _c, _rep, _s), rows in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None
                                            else -1.0, kv[0][2], kv[0][4])):
        x = _extra(rows[0])
        cell = out.setdefault((path, rtt, client), {
            "read": f"cache {x['cache']}" if "cache" in x else "direct",
            "seconds": [], "bps": [], "origin": [], "wire": []})
        if not all(r.ok for r in rows):
            continue
        ends = [r.started_at + r.duration_s for r in rows
                if r.started_at is not None and r.duration_s is not None]
        starts = [r.started_at for r in rows if r.started_at is not None]
        if ends and starts:
            cell["seconds"].append(max(ends) - min(starts))
        agg = rows[0].aggregate_bps or sum(r.throughput_bps or 0 for r in rows)
        cell["bps"].append(float(agg))
        if "cache" in x:
            for key, name in (("origin", "origin_bytes"), ("wire", "origin_wire_bytes")):
                vals = [_extra(r).get(name) for r in rows]
                if all(isinstance(v, (int, float)) for v in vals):
                    cell[key].append(float(sum(v for v in vals if v is not None)))
        else:
            cell["origin"].append(float(sum(r.bytes or 0 for r in rows)))
    return out


def table(run: Run) -> tuple[list[str], list[list[str]]]:
    body = []
    for (path, rtt, client), c in cells(run).items():
        mb = _med(c["origin"])
        wire = _med(c["wire"])
        bps = _med(c["bps"])
        body.append([path, "real" if rtt is None else _f(rtt, "g"), client, c["read"],
                     str(len(c["bps"])), _f(_med(c["seconds"])),
                     _f(None if bps is None else bps / 8e6),
                     _f(None if mb is None else mb / 1e6, ".4g"),
                     _f(None if wire is None else wire / 1e6, ".4g")])
    return HEADER, body


def rtt_ratios(run: Run) -> list[str]:
    """Per (path, client): median throughput at the highest RTT / at the lowest."""
    by: dict[tuple, dict[float, float]] = defaultdict(dict)
    kind: dict[tuple, str] = {}
    for (path, rtt, client), c in cells(run).items():
        m = _med(c["bps"])
        if rtt is not None and m:
            by[(path, client)][float(rtt)] = m
            kind[(path, client)] = c["read"]
    lines = []
    for (path, client), vals in by.items():
        if len(vals) >= 2:
            lo, hi = min(vals), max(vals)
            lines.append(f"- {path} {client} ({kind[(path, client)]}): {hi:g} ms / {lo:g} ms "
                         f"throughput = {vals[hi] / vals[lo]:.2f}")
    return lines


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    if not has_cache(run):
        return []
    header, body = table(run)
    md = out_dir / "xcache.md"
    ratios = rtt_ratios(run)
    md.write_text("### Direct vs cold vs warm cache (medians over repeats)\n\n"
                  + markdown(header, body, left=4)
                  + ("\nThroughput at the highest RTT over the lowest:\n\n" + "\n".join(ratios)
                     + "\n" if ratios else ""))
    return [write_csv(out_dir / "xcache.csv", header, body), md]
