"""Charts of the section "against the study": per numeric table of a reference, the
study's series (dashed, open markers) over the rig's (solid), each normalised to its own
value at the first x of the table that both have, so shapes compare across scales.

Must not import rig.realization, rig.process or rig.services; only reports import it.
"""
from __future__ import annotations

from pathlib import Path

from rig.report import style
from rig.report.against import Against, TableResult
from rig.report.figure import new_figure, save


def _norm(xs: list[float], ys: list[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if not pairs or not pairs[0][1]:
        return [], []
    base = pairs[0][1]
    return [x for x, _ in pairs], [y / base for _, y in pairs]


def table_chart(t: TableResult, out_dir: Path) -> list[Path]:
    if len(t.table.at) < 2 or not any(c.rig is not None for r in t.rows for c in r.cells):
        return []
    fig, (ax,) = new_figure(width=9.0, height=5.4)
    for i, r in enumerate(t.rows):
        st = style.Style(style.SERIES_CYCLE[i % len(style.SERIES_CYCLE)],
                         style.MARKERS[i % len(style.MARKERS)])
        # the rig's series normalised at the study's first x it measured
        first = next((c.x for c in r.cells if c.rig is not None and c.study), None)
        if first is None:
            continue
        cut = [c for c in r.cells if c.x >= first]
        sx, sy = _norm([c.x for c in cut], [c.study for c in cut])
        rx, ry = _norm([c.x for c in cut], [c.rig for c in cut])
        ax.plot(sx, sy, linestyle=style.STUDY_LINESTYLE, marker=st.marker, color=st.color,
                markerfacecolor="white", alpha=style.STUDY_ALPHA, label=f"study: {r.label}")
        ax.plot(rx, ry, linestyle="-", marker=st.marker, color=st.color, linewidth=1.8,
                label=f"rig: {r.label}")
    ax.set_yscale("log")
    ax.set_xlabel({"rtt_ms": "RTT (ms)", "concurrency": "concurrent transfers",
                   "streams": "streams", "branches_percent": "% of branches read"}[t.table.x])
    ax.set_ylabel("relative to the series' first value (log)")
    ax.set_title(f"{t.table.experiment}: {t.table.title}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save(fig, out_dir, f"against_{t.table.id}")


def draw(a: Against, out_dir: Path) -> dict[str, Path]:
    """table id -> PNG of its chart (SVG beside it)."""
    out = {}
    for t in a.tables:
        files = table_chart(t, out_dir)
        if files:
            out[t.table.id] = files[0]
    return out
