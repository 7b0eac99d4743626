"""The storage check beside the network check, per step (`storage: disk` runs only).

One row per step and served file: the path's validated capacity (iperf3, mean of the
checks before and after the step, as the verdict uses it), the file's cold sequential
read (dd, rig.orchestration.storagecheck), the same read from the page cache (cached) and
the transfers of that step (median throughput of the successful groups). Written as storage_check.csv/.md and drawn in the
HTML report after the path validation. Pure: reads the loaded Run only.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

from rig.description.steps import shown_step
from rig.report.model import Run
from rig.description.units import column, in_unit

COLUMNS = ("step", "path", "rtt_ms", "network_gbps", "storage_file", "storage_mbps",
           "storage_gbps", "cached_mbps", "transfers_gbps", "storage_note")


def has_storage(run: Run) -> bool:
    return any(v.phase == "storage" for v in run.validations)


def _g(bps: float | None) -> str:
    """In the report's unit (rig.description.units.current_unit)."""
    return "" if not bps else f"{in_unit(bps):.4g}"


def header() -> list[str]:
    """COLUMNS with the `_gbps` ones named for the report's unit (dd's MB/s kept)."""
    return [column(c) for c in COLUMNS]


def _mb(bps: float | None) -> str:
    """MB/s as dd prints it: whole numbers from 1000 up, never an exponent."""
    if not bps:
        return ""
    mb = bps / 8e6
    return f"{mb:.0f}" if mb >= 1000 else f"{mb:.4g}"


def rows(run: Run) -> list[dict[str, str]]:
    out = []
    for v in sorted((v for v in run.validations if v.phase == "storage"),
                    key=lambda v: (v.step, v.storage_file or "")):
        step = v.step
        checks = [c for c in run.validations if c.step == step and c.path == v.path
                  and c.phase in ("before", "after")]
        caps = [c.capacity_bps or (None if c.capacity_note else c.iperf_bps)
                for c in checks]
        caps_bps = [float(c) for c in caps if c]
        groups: dict[tuple, float] = {}
        for t in run.transfers:
            if t.step == step and t.path == v.path and t.ok:
                k = (t.client, t.streams, t.concurrency, t.repeat, t.tls)
                groups[k] = float(t.aggregate_bps or t.throughput_bps or 0.0)
        tput = statistics.median(groups.values()) if groups else None
        bps = v.storage_bps
        try:
            cached = json.loads(v.raw or "{}").get("cached_bps")
        except (ValueError, AttributeError):
            cached = None
        out.append({
            "step": str(shown_step(step)), "path": v.path,
            "rtt_ms": "" if v.rtt_ms_configured is None else f"{v.rtt_ms_configured:g}",
            "network_gbps": _g(statistics.fmean(caps_bps) if caps_bps else None),
            "storage_file": v.storage_file or "",
            "storage_mbps": _mb(bps),
            "storage_gbps": _g(bps), "transfers_gbps": _g(tput),
            "cached_mbps": _mb(cached) if isinstance(cached, (int, float)) else "",
            "storage_note": v.storage_note or ""})
    return out


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    if not has_storage(run):
        return []
    rs = rows(run)
    body = [[r[c] for c in COLUMNS] for r in rs]
    md = out_dir / "storage_check.md"
    md.write_text("### Storage check beside the network check (per step)\n\n"
                  "network: iperf3 capacity of the path; storage: dd's cold sequential read "
                  "of the served file; transfers: median of the step's groups.\n\n"
                  + markdown(header(), body, left=2))
    return [write_csv(out_dir / "storage_check.csv", header(), body), md]
