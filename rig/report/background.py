"""Competing flows (`background:`, issue 30): per step, each flow's throughput beside the
transfers that ran with it, and the queueing delay the emulator saw meanwhile.

  background.csv / background.md   one row per (step, flow): path, RTT, flow, congestion
                                   control asked and used, streams, its Gbit/s, the mean
                                   Gbit/s of the step's transfers, the flow's share of the
                                   two, and the RTT the transfers' senders saw (mean tcp_info
                                   srtt over their samples) less the path's configured RTT:
                                   the queueing delay the flows together cause (the queue is
                                   the rate limiter's, which the engine's own delay
                                   counters do not see)
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable

from rig.report.model import Run
from rig.description.units import column, current_unit, in_unit

COLUMNS = ["step", "path", "rtt_ms", "flow", "congestion", "congestion_used", "streams",
           "flow_gbit_s", "transfers_gbit_s", "flow_share", "transfers_srtt_ms",
           "rtt_inflation_ms"]


def srtt_ms(run: Run, step: int) -> float | None:
    """Mean tcp_info srtt of the step's transfers' senders over all their samples."""
    got = [s.srtt_us / 1e3 for s in run.tcp if s.step == step and s.srtt_us]
    return statistics.fmean(got) if got else None


def table(run: Run) -> tuple[list[str], list[list[Any]]]:
    flows = run.background
    body = []
    for b in flows:
        ts = [float(t.throughput_bps) for t in run.transfers
              if t.step == b.step and t.ok and t.throughput_bps]
        rtt = next((t.rtt_ms_configured for t in run.transfers
                    if t.step == b.step), None)
        mean_t = statistics.fmean(ts) if ts else None
        bps = b.throughput_bps
        share = bps / (bps + mean_t) if bps and mean_t else None
        srtt = srtt_ms(run, b.step)
        body.append([b.step + 1, b.path, _f(rtt), b.flow, b.congestion or "",
                     b.congestion_used or "", b.streams,
                     _f(bps and in_unit(bps), 3), _f(mean_t and in_unit(mean_t), 3),
                     _f(share, 2), _f(srtt, 2),
                     _f(srtt - rtt if srtt is not None and rtt is not None else None, 2)])
    return [column(c) for c in COLUMNS], body


def _f(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    header, body = table(run)
    if not body:
        return []
    md = out_dir / "background.md"
    md.write_text("### Competing flows (`background:`) per step\n\n" + markdown(header, body)
                  + f"\nflow_share: the flow's {current_unit()} over its own plus the mean of the step's "
                  "transfers; rtt_inflation_ms: the transfers' senders' mean tcp_info srtt "
                  "less the path's configured RTT (the queue the flows together kept).\n")
    return [write_csv(out_dir / "background.csv", header, body), md]
