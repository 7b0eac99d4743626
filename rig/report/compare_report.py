"""Files of a comparison between two runs: compare.csv, compare.md, compare.html and,
when matplotlib is importable, the overlay charts (compare_charts).

Pure Python except for the lazy import of compare_charts; must not import rig.realization.netns,
rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from rig.report import page as H
from rig.report.model import Run
from rig.report.tabular import markdown

from rig.report.compare_decide import MIN_REPEATS
from rig.report.compare_model import TIMELINE_PREFIX, CompareResult, Pair

PAIR_HEADER = ["path", "RTT (ms)", "client", "streams", "conc", "baseline Gbit/s",
               "candidate Gbit/s", "change", "95 % interval", "verdict",
               "bottleneck (base -> cand)", "to decide"]
CSV_COLUMNS = ["path", "rtt_ms", "client", "streams", "concurrency", "status", "change_pct",
               "interval_low_pct", "interval_high_pct", "base_mean_gbps", "cand_mean_gbps",
               "base_n", "cand_n", "base_failed", "cand_failed", "base_verdict",
               "cand_verdict", "settings_changed", "p_value", "p_holm", "repeats_needed",
               "undecided_why"]
# drawn by compare_timeline (matplotlib): one overlay per regressed point
TIMELINE_CAPTION = ("Timelines of a regressed point: the sending side's tcp_info of one "
                    "transfer per run (first successful repeat, first instance), baseline "
                    "dashed, candidate solid: throughput, congestion window (all "
                    "connections) and srtt.")


def _pct(v: float | None) -> str:
    return "" if v is None or math.isnan(v) else f"{v * 100:.2f}"


def _p(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}"


def _gb(samples: tuple[float, ...]) -> str:
    return f"{statistics.fmean(samples) / 1e9:.4g}" if samples else "failed"


def _rtt(p: Pair) -> str:
    return "real" if p.key.rtt_ms is None else f"{p.key.rtt_ms:g}"


def pair_row(p: Pair) -> list[str]:
    k = p.key
    change = "" if math.isnan(p.change) else f"{p.change:+.1%}"
    return [k.path, _rtt(p), k.client, str(k.streams), str(k.concurrency), _gb(p.base),
            _gb(p.cand), change, p.interval_text(), p.status,
            f"{p.base_verdict} -> {p.cand_verdict}", p.needed_text()]


def write_csv(result: CompareResult, path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for p in result.pairs:
            k = p.key
            w.writerow([k.path, _rtt(p) if k.rtt_ms is not None else "", k.client,
                        k.streams, k.concurrency, p.status, _pct(p.change), _pct(p.low),
                        _pct(p.high), _gb(p.base) if p.base else "",
                        _gb(p.cand) if p.cand else "", len(p.base), len(p.cand),
                        p.base_failed, p.cand_failed, p.base_verdict, p.cand_verdict,
                        "; ".join(f"{n}: {b} -> {c}" for n, (b, c) in p.settings.items()),
                        _p(p.p), _p(p.p_holm), "" if p.needed is None else p.needed,
                        p.why])
    return path


def _run_line(run: Run) -> str:
    return f"{run.dir} (run {run.run_id}, {H.when(run.meta)})"


def _method(result: CompareResult) -> str:
    tested = sum(1 for p in result.pairs if p.p is not None)
    few = sum(1 for p in result.pairs if p.p is None and p.base and p.cand)
    text = (f"Matched on path, RTT, client configuration, streams and concurrency. The "
            f"change is that of the geometric mean throughput over the successful repeats, "
            f"with its 95 % interval from a t on log throughput whose noise is each "
            f"point's own, shrunk toward the noise of the whole grid (empirical Bayes, "
            f"limma's moderated t). Regressed / improved: a change of {result.threshold:.0%} "
            f"or more (magnitude floor) that stays significant after Holm's correction over "
            f"the {tested} pair(s) with at least {MIN_REPEATS} repeats on both sides (at "
            f"most 5 % chance of any false alarm), or a point that failed in every "
            f"candidate repeat while most baseline repeats succeeded. Same: the 90 % "
            f"interval lies within +-{result.margin:.0%} (equivalence margin; two one-sided "
            f"tests at 5 %). Undecided: neither; the table says about how many repeats a "
            f"side would decide it if the change and noise stay as measured.")
    if few:
        text += (f" {few} pair(s) have fewer than {MIN_REPEATS} successful repeats on a "
                 f"side: their noise is unknown, they are undecided and do not fail the "
                 f"comparison.")
    return text


def metadata_lines(result: CompareResult) -> list[str]:
    """The runs' metadata differences, environment first: what the output starts with."""
    env = [d for d in result.metadata if not d.by_scenario]
    scen = [d for d in result.metadata if d.by_scenario]
    return [f"metadata differs: {d.line()}" for d in env + scen]


def markdown_text(result: CompareResult, base: Run, cand: Run) -> str:
    lines = ["# rig compare", "", f"- baseline: {_run_line(base)}",
             f"- candidate: {_run_line(cand)}", ""]
    meta = metadata_lines(result)
    if meta:
        lines += [f"- **{m}**" for m in meta] + [""]
    lines += [f"**{result.summary()}**", ""]
    if result.undecided_line():
        lines += [f"{result.undecided_line()}", ""]
    lines += [_method(result), ""]
    regs = result.regressions
    if regs:
        lines += ["## Regressions", "", markdown(PAIR_HEADER, [pair_row(p) for p in regs], left=3)]
    lines += ["## Environment differences", ""]
    lines += [f"- {d}" for d in result.env_diffs] or ["- none"]
    if result.scenario_diff:
        lines += ["", "```diff", *result.scenario_diff, "```"]
    lines += ["", "## All matched measurements", "",
              markdown(PAIR_HEADER, [pair_row(p) for p in result.pairs], left=3)]
    for title, keys in (("Only in baseline", result.only_baseline),
                        ("Only in candidate", result.only_candidate)):
        if keys:
            lines += [f"## {title}", ""] + [f"- {k.label()}" for k in keys] + [""]
    if result.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def html_text(result: CompareResult, base: Run, cand: Run, images: list[Path]) -> str:
    status_cls = {"regressed": "flag", "failed": "flag", "improved": "good",
                  "undecided": "note"}
    body = ["<h1>rig compare</h1>",
            f'<p class="meta">baseline: {H.esc(_run_line(base))}<br>'
            f"candidate: {H.esc(_run_line(cand))}</p>",
            *[f'<p class="note"><b>{H.esc(m)}</b></p>' for m in metadata_lines(result)],
            f'<p class="{"note" if result.regressions else ""}"><b>'
            f"{H.esc(result.summary())}</b></p>",
            *([f"<p>{H.esc(result.undecided_line() or '')}</p>"] if result.undecided_line()
              else []),
            f"<p>{H.esc(_method(result))}</p>"]
    if result.regressions:
        body += ["<h2>Regressions</h2>", H.table(PAIR_HEADER, [pair_row(p) for p in
                                                                result.regressions])]
    timelines = [p for p in images if p.suffix == ".png"
                 and p.stem.startswith(TIMELINE_PREFIX)]
    if timelines:
        body.append("<h2>Timelines of the regressed points</h2>")
        body += [H.image(p, TIMELINE_CAPTION) for p in timelines]
    body.append("<h2>Charts</h2>")
    body += [H.image(p, p.stem.replace("_", " ")) for p in images if p.suffix == ".png"
             and p not in timelines]
    body += [f'<p class="note">{H.esc(n)}</p>' for n in result.notes]
    body += ["<h2>Environment differences</h2>", "<ul>" + "".join(
        f"<li>{H.esc(d)}</li>" for d in result.env_diffs) + "</ul>"
        if result.env_diffs else "<p>none</p>"]
    if result.scenario_diff:
        body.append(f"<pre>{H.esc(chr(10).join(result.scenario_diff))}</pre>")
    body += ["<h2>All matched measurements</h2>",
             H.table(PAIR_HEADER, [pair_row(p) for p in result.pairs],
                     [status_cls.get(p.status, "") for p in result.pairs])]
    for title, keys in (("Only in baseline", result.only_baseline),
                        ("Only in candidate", result.only_candidate)):
        if keys:
            body += [f"<h2>{title}</h2>", "<ul>" + "".join(
                f"<li>{H.esc(k.label())}</li>" for k in keys) + "</ul>"]
    return H.page("rig compare", body)


def write_all(result: CompareResult, base: Run, cand: Run) -> list[Path]:
    out = result.out_dir
    images: list[Path] = []
    try:
        from rig.report import compare_charts
    except ImportError as e:
        result.notes.append(f"charts not drawn: matplotlib is not available ({e})")
    else:
        images = compare_charts.draw_all(result, base, cand)
    files = images + [write_csv(result, out / "compare.csv")]
    md = out / "compare.md"
    md.write_text(markdown_text(result, base, cand), encoding="utf-8")
    page = out / "compare.html"
    page.write_text(html_text(result, base, cand, images), encoding="utf-8")
    return files + [md, page]
