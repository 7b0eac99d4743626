"""Figure helpers shared by every chart module: a matplotlib Figure on the Agg canvas (no
pyplot global state) and saving it as PNG and SVG. Imports matplotlib: only chart
modules import it; no rig imports, so no chart module needs another to draw.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110


def new_figure(ncols: int = 1, width: float = 9.0, height: float = 5.6) -> tuple[Figure,
                                                                               list[Axes]]:
    fig = Figure(figsize=(width if ncols == 1 else 4.4 * ncols, height), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, sharey=True, squeeze=False)[0]
    return fig, list(axes)


def save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    fig.savefig(png, format="png")
    fig.savefig(svg, format="svg", metadata={"Date": None})
    return [png, svg]


def gbit(bps: float | None) -> float:
    return (bps or 0.0) / 1e9


def mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 1024:g} KiB"
