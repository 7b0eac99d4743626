"""Competing flows (`background:`, issue 30): per step, each flow's throughput beside the
transfers that ran with it, and the queueing delay the emulator saw meanwhile.

  background.csv / background.md   one row per (step, flow): path, RTT, flow, congestion
                                   control asked and used, streams, its Gbit/s, the mean
                                   Gbit/s of the step's transfers, the flow's share of the
                                   two, and the queueing delay: the engine's mean applied
                                   delay in the data direction during the step's transfers
                                   minus the configured one-way delay (userspace engine;
                                   netem's counters have no delay)
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable

from rig.description.linkstats import EmulStats
from rig.report.model import Run

COLUMNS = ["step", "path", "rtt_ms", "flow", "congestion", "congestion_used", "streams",
           "flow_gbit_s", "transfers_gbit_s", "flow_share", "queueing_ms"]


def _background(run: Run) -> list[dict]:
    from rig.results.store import Store
    db = run.dir / "results.sqlite"
    return Store.open(run.dir).background() if db.exists() else []


def queueing_ms(run: Run, step: int, one_way_ms: float | None) -> float | None:
    """The engine's mean applied delay on the data direction (reverse) in the step's
    transfers, less the configured one-way delay: time in its queue."""
    from rig.report.verdict import engine_phase_rows
    got = []
    for _, st in engine_phase_rows(run, step):
        d = st.direction("reverse") if isinstance(st, EmulStats) else None
        if d is not None and d.applied_delay_mean_s is not None and one_way_ms is not None:
            got.append(d.applied_delay_mean_s * 1e3 - one_way_ms)
    return statistics.fmean(got) if got else None


def table(run: Run) -> tuple[list[str], list[list[Any]]]:
    flows = _background(run)
    body = []
    for b in flows:
        ts = [float(t["throughput_bps"]) for t in run.transfers
              if t["step"] == b["step"] and t["ok"] and t.get("throughput_bps")]
        rtt = next((t.get("rtt_ms_configured") for t in run.transfers
                    if t["step"] == b["step"]), None)
        mean_t = statistics.fmean(ts) if ts else None
        bps = b.get("throughput_bps")
        share = bps / (bps + mean_t) if bps and mean_t else None
        q = queueing_ms(run, b["step"], None if rtt is None else rtt / 2)
        body.append([b["step"] + 1, b["path"], _f(rtt), b["flow"], b.get("congestion") or "",
                     b.get("congestion_used") or "", b["streams"],
                     _f(bps and bps / 1e9, 3), _f(mean_t and mean_t / 1e9, 3),
                     _f(share, 2), _f(q, 2)])
    return COLUMNS, body


def _f(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    header, body = table(run)
    if not body:
        return []
    md = out_dir / "background.md"
    md.write_text("### Competing flows (`background:`) per step\n\n" + markdown(header, body)
                  + "\nflow_share: the flow's Gbit/s over its own plus the mean of the step's "
                  "transfers; queueing_ms: the engine's mean applied delay on the data "
                  "direction during the transfers, less the configured one-way delay.\n")
    return [write_csv(out_dir / "background.csv", header, body), md]
