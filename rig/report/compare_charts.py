"""Charts of a comparison (matplotlib, Agg canvas), PNG and SVG:

  compare_change           every matched measurement's change with its 95 % interval,
                           regressions in red, the magnitude floor and the
                           equivalence margin drawn
  compare_throughput       baseline (dashed, hollow) over candidate (solid) vs RTT, one
                           panel per client configuration, with the window bound and
                           path rate of each run; regressed points ringed in red

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report import compare_timeline, style
from rig.report.charts import errorbar
from rig.report.figure import gbit, save
from rig.report.model import Point, Run, series_id, series_labels

from rig.report.compare_model import CompareResult, Pair

MAX_ROWS = 80
MAX_PANELS = 12
STATUS_COLOR = {"regressed": style.REGRESSION_COLOR, "failed": style.REGRESSION_COLOR,
                "improved": style.IMPROVED_COLOR, "undecided": style.UNDECIDED_COLOR}


def _pair_label(p: Pair, labels: dict) -> str:
    rtt = "real" if p.key.rtt_ms is None else f"{p.key.rtt_ms:g} ms"
    return f"{labels.get(series_id(p.key), p.key.client)} @ {rtt}"


def change_chart(result: CompareResult, base: Run, out: Path) -> list[Path]:
    labels = series_labels(base.points)
    pairs = [p for p in result.pairs if not math.isnan(p.change)]
    if len(pairs) > MAX_ROWS:       # keep every regression, then the largest drops
        pairs = sorted(pairs, key=lambda p: (not p.regressed, p.change))[:MAX_ROWS]
    pairs.reverse()
    fig = Figure(figsize=(9, 1.5 + 0.24 * len(pairs)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, p in enumerate(pairs):
        color = STATUS_COLOR.get(p.status, style.NEUTRAL_COLOR)
        if p.low is not None and p.high is not None:
            ax.plot([p.low * 100, p.high * 100], [i, i], color=color, linewidth=2.5,
                    alpha=0.5, solid_capstyle="butt")
        ax.plot([p.change * 100], [i], marker="o", color=color, markersize=6)
    ax.axvline(0, color="black", linewidth=1)
    ax.axvline(-result.threshold * 100, color=style.REGRESSION_COLOR, linestyle="--",
               linewidth=1, label=f"-{result.threshold:.0%} magnitude floor")
    ax.axvspan(-result.margin * 100, result.margin * 100, color=style.NEUTRAL_COLOR,
               alpha=0.12, label=f"+-{result.margin:.0%} equivalence margin")
    ax.set_yticks(range(len(pairs)), [_pair_label(p, labels) for p in pairs], fontsize=7)
    ax.set_ylim(-0.7, len(pairs) - 0.3)
    ax.set_xlabel("change of mean throughput, candidate vs baseline (%)")
    ax.grid(True, axis="x", alpha=0.3)
    for status, color in (("regressed / failed", style.REGRESSION_COLOR),
                          ("improved", style.IMPROVED_COLOR),
                          ("undecided", style.UNDECIDED_COLOR),
                          ("same", style.NEUTRAL_COLOR)):
        ax.plot([], [], marker="o", linestyle="", color=color, label=status)
    ax.plot([], [], color=style.NEUTRAL_COLOR, linewidth=2.5, alpha=0.5,
            label="95 % interval (moderated t, log)")
    n, r = len(result.pairs), len(result.regressions)
    fig.legend(loc="outside right upper", fontsize=8, frameon=False,
               title=f"{r} regression(s) in {n} pairs", title_fontsize=9)
    fig.suptitle("Change per measurement, candidate vs baseline", fontsize=11,
                 fontweight="bold", x=0.01, ha="left")
    return save(fig, out, "compare_change")


def _panels(result: CompareResult, base: Run) -> list[str]:
    labels = series_labels(base.points)
    regressed = {labels[series_id(p.key)] for p in result.regressions
                 if series_id(p.key) in labels}
    names = sorted({labels[series_id(p.key)] for p in result.pairs
                    if series_id(p.key) in labels},
                   key=lambda n: (n not in regressed, style.sort_key(n)))
    return names[:MAX_PANELS]


def _series(run: Run) -> dict[str, list[Point]]:
    labels = series_labels(run.points)
    out: dict[str, list[Point]] = defaultdict(list)
    for p in run.points:
        out[labels[series_id(p.key)]].append(p)
    for v in out.values():
        v.sort(key=lambda p: p.x_rtt_ms)
    return out


def _window_curve(ax: Axes, pts: list[Point], linestyle: str) -> None:
    """Dense concurrency x streams x window / RTT curve(s) over the panel's RTT range."""
    rtts = [p.x_rtt_ms for p in pts if p.x_rtt_ms > 0]
    if not rtts:
        return
    lo, hi = max(min(rtts) / 3, 0.5), max(rtts)
    grid = [lo + (hi - lo) * i / 150 for i in range(151)]
    for mult, window in {(p.key.concurrency * p.key.streams, p.window_bytes) for p in pts
                         if p.window_bytes}:
        ax.plot(grid, [mult * window * 8 / (r / 1e3) / 1e9 for r in grid],
                color=style.CAPACITY.color, linestyle=linestyle, linewidth=0.9, alpha=0.8)


def _top(pts: list[Point]) -> float:
    vals = [gbit(p.max_bps) for p in pts if p.n] + [gbit(p.rate_bps) for p in pts]
    return max(vals, default=1.0) * 1.15 or 1.0


def overlay_chart(result: CompareResult, base: Run, cand: Run, out: Path) -> list[Path]:
    names = _panels(result, base)
    if not names:
        return []
    bser, cser = _series(base), _series(cand)
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(3.6 * ncols + 2.2, 3.0 * nrows + 0.8), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    bad = {(p.key.client, p.key.streams, p.key.concurrency, p.key.rtt_ms)
           for p in result.regressions}
    for ax, name in zip(axes.flat, names):
        bp, cp = bser.get(name, []), cser.get(name, [])
        st = style.style_for(name, (bp or cp)[0].tool)
        errorbar(ax, bp, [p.x_rtt_ms for p in bp], "baseline", st,
                 linestyle=style.BASELINE_LINESTYLE, hollow=True)
        errorbar(ax, cp, [p.x_rtt_ms for p in cp], "candidate", st)
        _window_curve(ax, bp, ":")
        _window_curve(ax, cp, "-.")
        for p in cp:
            k = p.key
            if (k.client, k.streams, k.concurrency, k.rtt_ms) in bad:
                ax.scatter([p.x_rtt_ms], [gbit(p.mean_bps)], s=150, facecolors="none",
                           edgecolors=style.REGRESSION_COLOR, linewidths=1.5, zorder=5)
        rates = {p.rate_bps for p in bp + cp if p.rate_bps}
        for r in rates:
            ax.axhline(gbit(r), color="black", linewidth=1)
        ax.set_title(name, fontsize=9, color=st.color)
        ax.set_ylim(0, _top(bp + cp))
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("RTT (ms)")
    for ax in axes[:, 0]:
        ax.set_ylabel("Gbit/s")
    _overlay_legend(fig)
    fig.suptitle("Baseline vs candidate throughput", fontsize=11, fontweight="bold",
                 x=0.01, ha="left")
    return save(fig, out, "compare_throughput")


def _overlay_legend(fig: Figure) -> None:
    ax = fig.axes[0]
    proxies = [
        ax.plot([], [], color="#555555", linestyle=style.BASELINE_LINESTYLE, marker="o",
                markerfacecolor="white", label="baseline (mean, min-max)")[0],
        ax.plot([], [], color="#555555", marker="o", label="candidate (mean, min-max)")[0],
        ax.plot([], [], color=style.CAPACITY.color, linestyle=":",
                label="window bound, baseline")[0],
        ax.plot([], [], color=style.CAPACITY.color, linestyle="-.",
                label="window bound, candidate")[0],
        ax.plot([], [], color="black", label="path rate")[0],
        ax.scatter([], [], s=150, facecolors="none", edgecolors=style.REGRESSION_COLOR,
                   label="regression"),
    ]
    fig.legend(handles=proxies, loc="outside right upper", fontsize=8, frameon=False)


def draw_all(result: CompareResult, base: Run, cand: Run) -> list[Path]:
    files = change_chart(result, base, result.out_dir)
    files += overlay_chart(result, base, cand, result.out_dir)
    files += compare_timeline.draw(result, base, cand)
    return files
