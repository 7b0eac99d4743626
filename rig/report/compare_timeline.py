"""What TCP did in a regressed point, baseline against candidate: for each regressed
(or failed) matched measurement, one chart overlaying both runs' timelines (throughput,
congestion window, smoothed RTT; rig.report.timeline.transfer_series) of one transfer
each: the first successful repeat's first instance, the candidate's first repeat when
none succeeded. Both runs need tcp_samples; a point without them is named in a note.

Must not import rig.realization, rig.services, rig.process or rig.orchestration.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report import style
from rig.report.figure import DPI, save
from rig.report.model import Key, Run, client_label
from rig.report.timeline import transfer_series
from rig.results.store import TcpSample

from rig.report.compare_model import TIMELINE_PREFIX, CompareResult

MAX_CHARTS = 12


def _key(s: TcpSample) -> Key:
    rtt = s.rtt_ms_configured
    return Key(s.path, None if rtt is None else float(rtt), client_label(s),
               int(s.streams), int(s.concurrency))


def one_transfer(run: Run, key: Key) -> tuple[list[TcpSample], TcpSample | None]:
    """Samples of the transfer drawn for `key` in `run` (and its first sample)."""
    by: dict[int, list[TcpSample]] = defaultdict(list)
    for s in run.tcp:
        if s.instance == 0 and _key(s) == key:
            by[s.transfer_id].append(s)
    if not by:
        return [], None
    ok = [ss for ss in by.values() if ss[0].ok]
    pick = min(ok or list(by.values()), key=lambda ss: (ss[0].repeat, ss[0].t_s))
    return pick, pick[0]


def draw(result: CompareResult, base: Run, cand: Run) -> list[Path]:
    files: list[Path] = []
    regs = result.regressions
    missing = []
    for i, p in enumerate(regs[:MAX_CHARTS]):
        b, b0 = one_transfer(base, p.key)
        c, c0 = one_transfer(cand, p.key)
        if not b or not c:
            missing.append(p.key.label())
            continue
        fig = Figure(figsize=(14.0, 3.8), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = list(fig.subplots(1, 3, sharex=True))
        color = style.style_for(p.key.client).color
        for ss, first, ls, who in ((b, b0, style.BASELINE_LINESTYLE, "baseline"),
                                   (c, c0, "-", "candidate")):
            t, bps, cwnd, srtt = transfer_series(ss)
            rep = f"repeat {first.repeat + 1}" if first else ""
            ok = "" if first and first.ok else ", failed"
            axes[0].plot(t, [x / 1e9 for x in bps], color=color, linestyle=ls,
                         label=f"{who} ({rep}{ok})")
            axes[1].plot(t, [x / 2**20 for x in cwnd], color=color, linestyle=ls)
            axes[2].plot(t, srtt, color=color, linestyle=ls)
        for ax, y in zip(axes, ("throughput (Gbit/s)", "cwnd (MiB, all connections)",
                                "srtt (ms)")):
            ax.set_xlabel("seconds since the client started")
            ax.set_ylabel(y)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{p.status}: {p.key.label()} ({p.change:+.1%}); verdict "
                     f"{p.base_verdict} -> {p.cand_verdict}", fontsize=10)
        files += save(fig, result.out_dir, f"{TIMELINE_PREFIX}{i + 1}")
    if len(regs) > MAX_CHARTS:
        result.notes.append(f"timelines drawn for the first {MAX_CHARTS} of {len(regs)} "
                            "regressed points")
    if missing:
        result.notes.append("no timeline overlay (tcp_samples missing in a run) for: "
                            + "; ".join(missing))
    return files
