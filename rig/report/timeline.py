"""Timelines of what TCP did during a transfer, from tcp_samples: throughput (acked bytes
per interval), congestion window (bytes, summed over the transfer's connections) and
smoothed RTT, one PNG per step (a path at one RTT) with a line per client
configuration (first repeat, first instance): slow start, then the steady state.

Must not import rig.realization, rig.services, rig.process or rig.orchestration.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rig.report import style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report.figure import DPI, save
from rig.description.steps import shown_step
from rig.report.model import Run, client_label
from rig.results.store import TcpSample


def transfer_series(samples: list[TcpSample]) -> tuple[list[float], list[float], list[float],
                                                  list[float]]:
    """(t_s, throughput bits/s, cwnd bytes, srtt ms) of one transfer: its connections'
    samples of one tick added (cwnd, acked bytes) or averaged (srtt)."""
    ticks: dict[float, list[TcpSample]] = defaultdict(list)
    for s in samples:
        ticks[round(s.t_s, 2)].append(s)
    ts = sorted(ticks)
    out_t, bps, cwnd, srtt = [], [], [], []
    prev_t, prev_acked = None, None
    for t in ts:
        ss = ticks[t]
        acked = sum(s.bytes_acked or 0 for s in ss)
        if prev_t is not None and prev_acked is not None and t > prev_t:
            out_t.append(t)
            bps.append(max(0.0, 8.0 * (acked - prev_acked) / (t - prev_t)))
            cwnd.append(float(sum((s.cwnd_segs or 0) * (s.mss_bytes or 0)
                                  for s in ss)))
            rtts = [s.srtt_us / 1e3 for s in ss if s.srtt_us]
            srtt.append(sum(rtts) / len(rtts) if rtts else 0.0)
        prev_t, prev_acked = t, acked
    return out_t, bps, cwnd, srtt


def draw(run: Run, out_dir: Path) -> list[Path]:
    """timeline_stepN.png (and .svg) per step that has samples."""
    by_step: dict[int, dict[tuple, list[TcpSample]]] = defaultdict(lambda: defaultdict(list))
    for s in run.tcp:
        if s.repeat == 0 and s.instance == 0:
            key = (client_label(s), s.streams, s.concurrency, s.path,
                   s.rtt_ms_configured)
            by_step[s.step][key].append(s)
    files: list[Path] = []
    for step, series in sorted(by_step.items()):
        fig = Figure(figsize=(14.0, 3.8), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = list(fig.subplots(1, 3, sharex=True))
        label = ""
        for (client, streams, conc, path, rtt), ss in sorted(series.items(),
                                                              key=lambda kv: kv[0][:3]):
            t, bps, cwnd, srtt = transfer_series(ss)
            if not t:
                continue
            st = style.style_for(client)
            name = f"{client} ({streams} str, x{conc})"
            ls = "-" if conc == 1 else "--"
            axes[0].plot(t, [b / 1e9 for b in bps], color=st.color, linestyle=ls, label=name)
            axes[1].plot(t, [c / 2**20 for c in cwnd], color=st.color, linestyle=ls)
            axes[2].plot(t, srtt, color=st.color, linestyle=ls)
            label = f"{path} {'real' if rtt is None else f'{rtt:g} ms'}"
        for ax, y in zip(axes, ("throughput (Gbit/s)", "cwnd (MiB, all connections)",
                                "srtt (ms)")):
            ax.set_xlabel("seconds since the client started")
            ax.set_ylabel(y)
            ax.grid(alpha=0.3)
        fig.suptitle(f"TCP timeline, step {shown_step(step)}: {label} - sending side's tcp_info, "
                     "first repeat", fontsize=10)
        fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        files += save(fig, out_dir, f"timeline_step{shown_step(step)}")
    return files
