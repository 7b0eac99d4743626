"""Reports of a stored run: charts, tables, bottleneck verdicts and report.html, drawn
from DIR/results.sqlite alone (no root, no network).

    render(run_dir, out_dir=None) -> list of written files

Charts need matplotlib (the `report` extra); without it the tables, verdicts and
report.html are still written and the report says why the charts are missing.
matplotlib is imported only inside render(), so importing rig.report (or its pure
modules model, verdict, tables, style, html, which rig.report.compare uses) never needs it.

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul: measurement code never
depends on reports, and reports never touch the host.
"""
from __future__ import annotations

from pathlib import Path

from rig.description import userpath
from rig.report.model import Run, load_run
from rig.report.verdict import Verdict, verdicts

__all__ = ["render", "load_run", "Run", "Verdict", "verdicts"]


def draw_charts(run: Run, out_dir: Path, vmap: dict) -> tuple[list[Path], list[str]]:
    """Charts if matplotlib is importable, else no files and a note saying so."""
    try:
        from rig.report import charts
    except ImportError as e:
        return [], [f"charts not drawn: matplotlib is not available ({e})"]
    return charts.draw_all(run, out_dir, vmap)


def render(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Write charts (PNG+SVG), summary.csv, rtt_table_{mean,max}.{csv,md},
    validations.csv and report.html for the run in run_dir (default: into run_dir).

    Raises rig.errors.InputError when run_dir holds no readable results.sqlite.
    """
    from rig.report.html import report_html
    from rig.report.tables import write_tables
    run = load_run(Path(run_dir))
    out = Path(out_dir) if out_dir is not None else run.dir
    out.mkdir(parents=True, exist_ok=True)
    userpath.check_out_dir(out)
    vmap = verdicts(run)
    images, notes = draw_charts(run, out, vmap)
    files = images + write_tables(run, vmap, out)
    page = out / "report.html"
    page.write_text(report_html(run, vmap, images, notes), encoding="utf-8")
    return files + [page]
