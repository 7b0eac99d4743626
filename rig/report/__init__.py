"""Reports of a stored run: charts, tables, bottleneck verdicts and report.html, drawn
from DIR/results.sqlite alone (no root, no network).

    render(run_dir, out_dir=None) -> list of written files

Charts need matplotlib (the `report` extra); without it the tables, verdicts and
report.html are still written and the report says why the charts are missing.
matplotlib is imported only inside render() (the chart modules, where an ImportError
becomes a note), so importing rig.report (or its pure modules model, verdict, tables,
style, html, page, which rig.report.compare uses) never needs it.

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul: measurement code never
depends on reports, and reports never touch the host.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from rig.description import reference, units, userpath
from rig.description.reference import Reference
from rig.errors import InputError
from rig.report import against, against_view, artefacts, threadview
from rig.report.html import report_html
from rig.report.model import Run, _key, load_run
from rig.report.tables import write_tables
from rig.report.verdict import Verdict, tcp_evidence, verdicts

__all__ = ["render", "load_run", "Run", "Verdict", "verdicts"]


def draw_charts(run: Run, out_dir: Path, vmap: dict) -> tuple[list[Path], list[str]]:
    """Charts if matplotlib is importable, else no files and a note saying so (the
    chart modules are imported here, not at the top: matplotlib is optional)."""
    try:
        from rig.report import charts
    except ImportError as e:
        return [], [f"charts not drawn: matplotlib is not available ({e})"]
    return charts.draw_all(run, out_dir, vmap)


def render(run_dir: Path, out_dir: Path | None = None,
           reference_file: str | Path | None = None, unit: str | None = None) -> list[Path]:
    """Write charts (PNG+SVG), summary.csv, rtt_table_{mean,max}.{csv,md},
    validations.csv and report.html for the run in run_dir (default: into run_dir).

    `unit`: the throughput unit instead of the run's (rig.description.units).
    Raises rig.errors.InputError when run_dir holds no readable results.sqlite.
    """
    run = load_run(Path(run_dir))
    if unit is not None:          # `rig report --unit`: over the run's report.unit
        run.env["report_unit"] = unit
    given = None
    if reference_file is not None:    # checked before anything is written
        given = reference.load(reference_file)
    out = Path(out_dir) if out_dir is not None else run.dir
    if out.exists() and not out.is_dir():
        raise InputError("is not a folder: cannot draw the report into it", file=str(out))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the report folder ({err.strerror})",
                         file=str(out)) from None
    userpath.check_out_dir(out)
    with units.throughput_unit(run.unit):     # the page's prose and tables say this unit
        vmap = verdicts(run)
        images, notes = draw_charts(run, out, vmap)
        files = images + write_tables(run, vmap, out)
        section, more = against_study(run, vmap, out, given)
        tsec, tfiles = threadview.section(run, vmap, out)
        page = out / "report.html"
        page.write_text(report_html(run, vmap, images, notes, section, tsec), encoding="utf-8")
    return files + more + tfiles + [page]


def stored_reference(run: Run) -> Reference | None:
    """The study reference the run stored (scenario key `reproduces`), checked again."""
    stored = run.env.get("reference")
    if stored is None:
        return None
    if not isinstance(stored, dict) or not isinstance(stored.get("text"), str):
        raise InputError("environment.reference is not {file, text}",
                         file=str(run.dir / "results.sqlite"))
    return reference.from_text(stored["text"],
                               f"{run.dir / 'results.sqlite'}: reference "
                               f"{stored.get('file', '?')}")


def srtt_by_key(run: Run) -> dict:
    """The sender's mean smoothed RTT (ms) per point: a tool's own `extra.srtt_ms`
    (iperf3) where given, else the tcp_samples of the point's connections."""
    given: dict = {}
    for t in run.transfers:
        try:
            extra = json.loads(t.extra or "null")
        except ValueError:
            continue
        if t.ok and isinstance(extra, dict) and isinstance(extra.get("srtt_ms"),
                                                                   (int, float)):
            given.setdefault(_key(t), []).append(float(extra["srtt_ms"]))
    out = {k: statistics.fmean(v) for k, v in given.items()}
    for k, ev in tcp_evidence(run).items():
        if k not in out and ev.srtt_ms:
            out[k] = statistics.fmean(ev.srtt_ms)
    return out


def against_of(run: Run, vmap: dict, given: Reference | None = None) -> against.Against | None:
    """The run against its study (the stored reference, or `given`); None without one."""
    ref = given or stored_reference(run)
    if ref is None:
        return None
    return against.compare(ref, run.points + against.storage_points(run), vmap,
                           srtt_by_key(run), artefacts.artefacts(run, vmap))


def against_study(run: Run, vmap: dict, out: Path, given: Reference | None = None
                  ) -> tuple[list[str], list[Path]]:
    """The section "against the study" and against.md (+ its charts), if the run has a
    reference (or one is `given`: `rig report DIR --reference FILE`); ([], []) otherwise."""
    a = against_of(run, vmap, given)
    if a is None:
        return [], []
    notes: list[str] = []
    if given is not None:
        stored = run.env.get("reference")
        notes.append(f"reference {given.source} given to `rig report`, not the one stored "
                     f"with the run ({stored.get('file') if isinstance(stored, dict) else 'none'})")
    images: dict[str, Path] = {}
    try:       # matplotlib is optional
        from rig.report import against_charts
        images = against_charts.draw(a, out)
    except ImportError as e:
        notes.append(f"charts not drawn: matplotlib is not available ({e})")
    md = out / "against.md"
    md.write_text(against_view.markdown(a, run.run_id, notes), encoding="utf-8")
    files = [md] + [p for png in images.values() for p in (png, png.with_suffix(".svg"))]
    return against_view.html_section(a, images, notes), files
