"""The chart of `rig history` (matplotlib, Agg canvas): one panel per point, the runs on
the x axis, each run's geometric mean throughput with its 95 % interval, change points as
vertical lines (red: a drop, green: a rise), each segment's level as a grey line.

Must not import rig.realization, rig.process, rig.services or rig.orchestration.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report import style
from rig.report.figure import save
from rig.report.history_model import HistoryResult, Series, panel_order

COLS = 4


def _segments(s: Series, runs: int) -> list[tuple[int, int, float]]:
    cuts = [0] + sorted(c.at for c in s.changes) + [runs]
    out = []
    for a, b in zip(cuts, cuts[1:]):
        logs = [math.log(v) for r in s.samples[a:b] for v in r if v > 0]
        if logs:
            out.append((a, b, math.exp(statistics.fmean(logs))))
    return out


def draw(result: HistoryResult, out: Path) -> list[Path]:
    series = panel_order(result)
    runs = len(result.runs)
    cols = min(COLS, len(series))
    rows = math.ceil(len(series) / cols)
    fig = Figure(figsize=(3.4 * cols + 0.5, 2.5 * rows + 0.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    xs = list(range(1, runs + 1))
    for ax, s in zip(axes.flat, series):
        for i, lv in enumerate(s.levels):
            if lv.mean is None:
                ax.plot([i + 1], [0], marker="x", color=style.REGRESSION_COLOR)
                continue
            y = lv.mean / 1e9
            if lv.low is not None and lv.high is not None:
                ax.errorbar([i + 1], [y], yerr=[[y - lv.low / 1e9], [lv.high / 1e9 - y]],
                            fmt="o", color="#1f5fa8", capsize=3, markersize=4)
            else:
                ax.plot([i + 1], [y], marker="o", color="#1f5fa8", markersize=4)
        for a, b, lvl in _segments(s, runs):
            ax.hlines(lvl / 1e9, a + 0.7, b + 0.3, color=style.NEUTRAL_COLOR, linewidth=1)
        for c in s.changes:
            color = style.REGRESSION_COLOR if c.change < 0 else style.IMPROVED_COLOR
            ax.axvline(c.at + 0.5, color=color, linestyle="--", linewidth=1.2)
            ax.annotate(f"{c.change:+.0%}", (c.at + 0.55, 0.04), xycoords=("data",
                        "axes fraction"), fontsize=7, color=color)
        ax.set_xticks(xs)
        ax.set_xlim(0.5, runs + 0.5)
        ax.set_ylim(bottom=0)
        ax.set_title(s.key.label(), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    fig.supxlabel("run (in the order given)", fontsize=9)
    fig.supylabel("throughput (Gbit/s)", fontsize=9)
    more = len(result.series) - len(series)
    title = "Throughput per point across runs, change points marked"
    if more > 0:
        title += f" ({more} unchanged point(s) not drawn)"
    fig.suptitle(title, fontsize=10, fontweight="bold", x=0.01, ha="left")
    return save(fig, out, "history")
