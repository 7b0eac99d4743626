"""Files of `rig history`: history.csv (one row per point and run), history.md,
history.html and, when matplotlib is importable, history.png/svg (one panel per point:
geometric mean per run with its 95 % interval, change points as vertical lines, the
level of each segment as a horizontal line).

Pure Python except the lazy matplotlib import; must not import rig.realization,
rig.process, rig.services or rig.orchestration.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from rig.report import page as H
from rig.report.history_model import HistoryResult
from rig.report.tabular import markdown

CSV_COLUMNS = ["path", "rtt_ms", "client", "streams", "concurrency", "run_index", "run",
               "gmean_gbps", "ci_low_gbps", "ci_high_gbps", "n_ok", "n_failed",
               "change_point", "change_pct", "change_low_pct", "change_high_pct",
               "p_holm"]
CHANGE_HEADER = ["point", "at run", "change", "95 % interval", "p (Holm)"]
CAPTION = ("Geometric mean throughput of each run with its 95 % interval (t on log "
           "throughput over the run's repeats); dashed red lines: change points (a drop), "
           "green: a rise; grey horizontal lines: the level of each segment.")


def _g(v: float | None) -> str:
    return "" if v is None else f"{v / 1e9:.4g}"


def _pct(v: float | None) -> str:
    return "" if v is None or math.isnan(v) else f"{v * 100:.2f}"


def write_csv(result: HistoryResult, path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for s in result.series:
            k = s.key
            at = {c.at: c for c in s.changes}
            for i, lv in enumerate(s.levels):
                c = at.get(i)
                w.writerow([k.path, "" if k.rtt_ms is None else f"{k.rtt_ms:g}", k.client,
                            k.streams, k.concurrency, i + 1, result.run_label(i),
                            _g(lv.mean), _g(lv.low), _g(lv.high), lv.n, lv.failed,
                            "yes" if c else "", _pct(c.change if c else None),
                            _pct(c.low if c else None), _pct(c.high if c else None),
                            f"{c.p:.3g}" if c else ""])
    return path


def change_rows(result: HistoryResult) -> list[list[str]]:
    rows = []
    for s in result.series:
        for c in s.changes:
            iv = "n/a" if c.low is None or c.high is None else \
                f"[{c.low:+.1%}, {c.high:+.1%}]"
            rows.append([s.key.label(), f"{c.at + 1} ({result.run_label(c.at)})",
                         f"{c.change:+.1%}", iv, f"{c.p:.3g}"])
    return rows


def _method(result: HistoryResult) -> str:
    return (f"{len(result.runs)} runs in the order given, {len(result.series)} points "
            f"measured in every run. Change points: binary segmentation over the runs; "
            f"each split between two runs is scored by the squared two-sample t of log "
            f"throughput summed over the points, its significance by a permutation test "
            f"(samples shuffled within each point, 5 %). At a significant split, a point "
            f"changed when its t on log throughput (noise shrunk toward the grid's) is "
            f"significant after Holm over the points and its geometric mean moved by "
            f"{result.floor:.0%} or more.")


def markdown_text(result: HistoryResult) -> str:
    lines = ["# rig history", "", f"**{result.summary()}**", "", _method(result), "",
             "## Runs", ""]
    lines += [f"{i + 1}. {r.dir} (run {r.run_id}, {H.when(r.meta)})"
              for i, r in enumerate(result.runs)]
    rows = change_rows(result)
    lines += ["", "## Change points", ""]
    lines += [markdown(CHANGE_HEADER, rows), ""] if rows else ["none", ""]
    if result.only_some:
        lines += ["## Not in every run (left out)", ""]
        lines += [f"- {k.label()}" for k in result.only_some] + [""]
    if result.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def html_text(result: HistoryResult, images: list[Path]) -> str:
    body = ["<h1>rig history</h1>", f"<p><b>{H.esc(result.summary())}</b></p>",
            f"<p>{H.esc(_method(result))}</p>"]
    body += [H.image(p, CAPTION) for p in images if p.suffix == ".png"]
    body += [f'<p class="note">{H.esc(n)}</p>' for n in result.notes]
    rows = change_rows(result)
    body += ["<h2>Change points</h2>", H.table(CHANGE_HEADER, rows) if rows else "<p>none</p>",
             "<h2>Runs</h2>", "<ol>" + "".join(
                 f"<li>{H.esc(r.dir)} (run {H.esc(r.run_id)}, {H.esc(H.when(r.meta))})</li>"
                 for r in result.runs) + "</ol>"]
    return H.page("rig history", body)


def write_all(result: HistoryResult) -> list[Path]:
    out = result.out_dir
    images: list[Path] = []
    try:
        from rig.report import history_chart
    except ImportError as e:
        result.notes.append(f"chart not drawn: matplotlib is not available ({e})")
    else:
        images = history_chart.draw(result, out)
    files = images + [write_csv(result, out / "history.csv")]
    md = out / "history.md"
    md.write_text(markdown_text(result), encoding="utf-8")
    page = out / "history.html"
    page.write_text(html_text(result, images), encoding="utf-8")
    return files + [md, page]
