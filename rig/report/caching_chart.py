"""The caching-modes chart (caching_modes.png/.svg): effective MB/s of each replayed
mode, library and server against RTT, one panel per share of the branches read. The
tables are rig.report.caching's; this module imports matplotlib.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report.caching import MODE_ORDER, _cells, _fractions, _mbps, replay_points
from rig.report.model import Run


def draw(run: Run, out_dir: Path) -> list[Path]:
    """caching_modes.png/.svg (called from rig.report.charts)."""
    points = replay_points(run)
    if not points:
        return []
    fracs = _fractions(points)
    fig = Figure(figsize=(5.5 * len(fracs), 4.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(fracs), squeeze=False, sharey=True)
    for ax, frac in zip(axes[0], fracs):
        cells = _cells(points, frac, _mbps)
        for row in sorted(cells, key=lambda r: (MODE_ORDER.get(r[0], 9), r[1], r[2])):
            xs = sorted(cells[row])
            ys = [cells[row][x] for x in xs]
            style = {"application": "-", "storage": ":", "lazy-download": "--"}.get(row[0], "-")
            ax.plot(xs, ys, style, marker="o", label=f"{row[0]} {row[1]}/{row[2]}")
        ax.set_yscale("log")
        ax.set_xlabel("RTT (ms)")
        ax.set_title(f"{frac * 100:g}% of the branches")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("effective MB/s (useful bytes / wall)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Caching modes: mode library/server")
    fig.tight_layout()
    out = []
    for ext in ("png", "svg"):
        path = out_dir / f"caching_modes.{ext}"
        fig.savefig(path, dpi=110)
        out.append(path)
    return out
