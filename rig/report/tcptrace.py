"""Header captures in the report: the time-sequence graph (tcptrace's view) of each
step's slowest data flow, and a table of what the captures found per flow
(capture_flows: retransmissions against the engine's drops, out-of-order arrivals,
zero windows, RTT from TCP timestamps).

Must not import rig.realization, rig.services, rig.process or rig.orchestration.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report.figure import DPI, save
from rig.description.steps import shown_step
from rig.report.model import Run
from rig.results.store import CaptureFlowRow

MIN_BYTES = 1 << 20          # flows below this carried requests, not the data

CAPTION = ("Time-sequence graph (tcptrace's view) of the step's slowest data flow, as "
           "the router saw it arrive from the sender (before the emulation's loss): "
           "highest sequence sent (blue), ACKs coming back (grey), retransmissions (red).")

COLUMNS = ["step", "rtt_ms", "client", "repeat", "side", "flow", "MiB", "Mbit/s",
           "retrans segs", "engine drops", "out of order", "zero window", "rtt ms (min/med/p90)",
           "analysed"]


def slowest(run: Run) -> dict[int, CaptureFlowRow]:
    """Per step: the sender-side flow with a time-sequence graph and the lowest goodput."""
    out: dict[int, CaptureFlowRow] = {}
    for f in run.captures:
        if f.side != "sender" or not f.tseq or not f.goodput_bps:
            continue
        cur = out.get(f.step)
        if cur is None or f.goodput_bps < (cur.goodput_bps or 0):
            out[f.step] = f
    return out


def draw(run: Run, out_dir: Path) -> list[Path]:
    files: list[Path] = []
    for step, f in sorted(slowest(run).items()):
        g = json.loads(f.tseq or "{}")
        fig = Figure(figsize=(9.0, 4.2), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        if g.get("ack"):
            ax.plot([p[0] for p in g["ack"]], [p[1] / 2**20 for p in g["ack"]],
                    color="0.6", linewidth=1, label="ACKed")
        ax.plot([p[0] for p in g["seq"]], [p[1] / 2**20 for p in g["seq"]], ".",
                color="tab:blue", markersize=2, label="highest sequence sent")
        if g.get("retrans"):
            ax.plot([p[0] for p in g["retrans"]], [p[1] / 2**20 for p in g["retrans"]], "x",
                    color="tab:red", markersize=4,
                    label=f"retransmission ({g.get('retrans_total', len(g['retrans']))})")
        rtt = f.rtt_ms_configured
        ax.set_title(f"step {shown_step(step)}: {f.client} (rep {f.repeat + 1}) at "
                     f"{'real' if rtt is None else f'{rtt:g} ms'}, loss "
                     f"{(f.loss_configured or 0):.2%}; {f.src}:{f.sport} -> "
                     f"{f.dst}:{f.dport}, {(f.goodput_bps or 0) / 1e6:.1f} Mbit/s",
                     fontsize=9)
        ax.set_xlabel("seconds since the flow's first packet")
        ax.set_ylabel("sequence (MiB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        files += save(fig, out_dir, f"tseq_step{shown_step(step)}")
    return files


def rows(run: Run) -> list[list[str]]:
    """The table: each data flow of each capture (sender side first)."""
    out = []
    flows = [f for f in run.captures if (f.data_bytes or 0) >= MIN_BYTES]
    by: dict[tuple, list[CaptureFlowRow]] = defaultdict(list)
    for f in flows:
        by[(f.step, f.client, f.streams, f.concurrency, f.repeat)].append(f)
    for key in sorted(by):
        for f in sorted(by[key], key=lambda f: (f.side != "sender", f.sport, f.dport)):
            rtt = [f.rtt_ms_min, f.rtt_ms_median, f.rtt_ms_p90]
            out.append([
                str(shown_step(f.step)), "" if f.rtt_ms_configured is None
                else f"{f.rtt_ms_configured:g}", f.client, str(f.repeat + 1),
                f"{f.side} ({f.iface})", f"{f.src}:{f.sport} > {f.dst}:{f.dport}",
                f"{(f.data_bytes or 0) / 2**20:.1f}",
                f"{(f.goodput_bps or 0) / 1e6:.1f}", str(f.retrans_segs),
                "" if f.engine_dropped is None else str(f.engine_dropped),
                str(f.ooo_packets), str(f.zero_window),
                "/".join("-" if v is None else f"{v:.1f}" for v in rtt) if f.rtt_samples
                else "-",
                f"{f.packets_analysed} pkts" + (f", {f.truncated}" if f.truncated
                                                     else "")])
    return out
