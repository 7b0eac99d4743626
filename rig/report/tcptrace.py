"""Header captures in the report: the time-sequence graph (tcptrace's view) of each
step's slowest data flow (rig.report.captures picks it and has the table).

Must not import rig.realization, rig.services, rig.process or rig.orchestration.
"""
from __future__ import annotations

import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.description.steps import shown_step
from rig.report.captures import slowest
from rig.report.figure import DPI, save
from rig.report.model import Run


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
