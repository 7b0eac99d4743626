"""One self-contained report.html per run: charts embedded as data: URIs, tables, the
bottleneck verdicts, the path validations, engine statistics and the environment.
Readable offline, no script, no external resource.

The answer first (issue 41): flags and failures, the throughput-vs-RTT chart, the table
per client and RTT and the verdict per point; every other section below, collapsed in a
<details> whose summary is its heading.

The helpers every page shares (escaping, tables, images, the shell) are in
rig.report.page.

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rig.description.units import DEFAULT_THROUGHPUT_UNIT
from rig.report import artefacts, captures, concurrency, small_files, storage, xcache
from rig.report.model import Run, series_id, series_labels
from rig.report.page import esc, fold, image, page, table, when
from rig.results.budget import budget, budget_rows, summary
from rig.report.verdict import flag_headline, step_flags
from rig.report.tables import ENGINE_COLUMNS, SHOWN_BOUND_FACTOR, TIMING_COLUMNS, \
    engine_rows, rtt_table, summary_columns, summary_rows, timing_rows, validation_columns, \
    validation_rows

def _header(run: Run) -> list[str]:
    env = run.env
    backends = sorted({str(t.backend) for t in run.transfers}) or [env.get("backend", "?")]
    return [f"<h1>rig report: run {esc(run.run_id)}</h1>",
            f'<p class="meta">created {esc(when(run.meta))} &middot; rig '
            f'{esc(run.meta.get("rig_version", "?"))} &middot; backend '
            f'{esc(", ".join(backends))} &middot; kernel {esc(env.get("kernel", "?"))}</p>'] \
        + _endpoints(env)


def _endpoints(env: dict) -> list[str]:
    """The external endpoints the run read from (issue 40 item 1), by URL."""
    eps = env.get("endpoints")
    if not isinstance(eps, dict):
        return []
    out = []
    for name, e in sorted(eps.items()):
        if not isinstance(e, dict):
            continue
        base = e.get("base_rtt_ms")
        out.append(f'<p class="endpoint">External endpoint {esc(str(name))}: '
                   f'{esc(str(e.get("url", "?")))} (at {esc(str(e.get("address", "?")))}, '
                   "not started by the rig; base RTT beyond the emulation "
                   f"{esc(f'{base:.3f} ms' if isinstance(base, (int, float)) else 'unknown')}; "
                   "each step's RTT is checked as the configured RTT plus it).</p>")
    return out


def _flags(run: Run, verdicts: dict) -> list[str]:
    """The one block of flags and failures: flagged steps, failed transfers, the points
    the rig itself spoiled, and the bottlenecks at a glance."""
    ok = sum(1 for t in run.transfers if t.ok)
    failed = len(run.transfers) - ok
    kinds = Counter(v.kind for v in verdicts.values())
    glance = ", ".join(f'<span class="k-{esc(k)}">{n} {esc(k)}</span>'
                       for k, n in kinds.most_common())
    spoiled = artefacts.artefacts(run, verdicts)
    headline = flag_headline(run)
    bad = bool(failed or spoiled or step_flags(run))
    lines = [f"{len(run.points)} measurement points from {len(run.transfers)} transfers: "
             f"<b>{failed} failed</b>." if failed else
             f"{len(run.points)} measurement points from {len(run.transfers)} transfers, "
             "none failed.", esc(headline)]
    if spoiled:
        first = next(iter(spoiled.values()))
        lines.append(f"<b>Rig artefacts: {len(spoiled)} point(s)</b> the rig itself spoiled "
                     f"(e.g. {esc(first[:140])}{'…' if len(first) > 140 else ''}).")
    lines.append(f"Bottlenecks: {glance or 'none'}.")
    return [f'<div class="flags{" bad" if bad else ""}" id="flags"><p>'
            + " ".join(lines) + "</p></div>"]


def _verdict_grid(run: Run, verdicts: dict) -> str:
    """The verdict of every point in one short cell, shaped like the throughput table
    (a row per client configuration, a column per RTT); the detail on hover and below."""
    labels = series_labels(run.points)
    rtts = sorted({p.x_rtt_ms for p in run.points})
    cells: dict[str, dict[float, str]] = {}
    for p in run.points:
        v = verdicts.get(p.key)
        cells.setdefault(labels[series_id(p.key)], {})[p.x_rtt_ms] = (
            f'<td class="l k-{esc(v.kind)}" title="{esc(v.text())}">{esc(v.kind)}</td>'
            if v else "<td></td>")
    head = "".join(f"<th>{r:g}</th>" for r in rtts)
    body = "".join(f"<tr><td>{esc(name)}</td>"
                   + "".join(row.get(r, "<td></td>") for r in rtts) + "</tr>"
                   for name, row in cells.items())
    return (f'<div class="scroll"><table id="headline-verdicts"><thead><tr>'
            f"<th>client \\ RTT (ms)</th>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _headline(run: Run, verdicts: dict, images: list[Path]) -> list[str]:
    """The answer first (issue 41): flags and failures, throughput vs RTT, the table per
    client and RTT, the verdict per point."""
    out = _flags(run, verdicts)
    chart = next((p for p in images if p.name == "throughput_vs_rtt.png"), None)
    out.append('<div class="headline">')
    if chart is not None:
        out.append(image(chart, CAPTIONS["throughput_vs_rtt"]).replace(
            "<figure>", '<figure id="headline-chart">', 1))
    out.append('<div class="side">')
    unit = run.unit
    stated = (f"scenario key <code>report.unit</code>: Gbit/s, Mbit/s, GB/s, MB/s or MiB/s; "
              f"default {DEFAULT_THROUGHPUT_UNIT}")
    reps = max((p.n for p in run.points), default=0)
    header, body = rtt_table(run.points, lambda p: p.mean_bps, unit)
    out += [f"<h2>Throughput per client and RTT<br>({esc(unit)}, mean of "
            f"{'up to ' + str(reps) + ' repeats' if reps > 1 else 'one repeat'})</h2>",
            table(header, body).replace("<table>", '<table id="headline-table">', 1),
            f'<p class="meta">Throughput is in {esc(unit)} on this page, in summary.csv, '
            f"the rtt_table files and the console ({stated}).</p>",
            "<h3>Verdict per point</h3>", _verdict_grid(run, verdicts),
            '<p class="meta">Hover a verdict for its evidence; every detail is under '
            "Measurements below.</p>", "</div></div>"]
    return out


CAPTIONS = {
    "throughput_vs_rtt": "Throughput vs RTT per client configuration (mean; min-max bars "
                         "where a point has repeats, as the legend says); dotted: window "
                         "bound streams x window / RTT; black: path rate; dashed: "
                         "validated iperf3 capacity.",
    "throughput_vs_concurrency": "Aggregate throughput vs concurrent transfers, per RTT.",
    "throughput_vs_streams": "Throughput vs TCP streams, per RTT.",
    "cpu_per_gb": "Client CPU seconds per GB moved (user solid, system hatched); dots: "
                  "each RTT point.",
}


TIMELINE_CAPTION = ("TCP timeline of the step (sending side's tcp_info, first repeat, "
                    "first instance): throughput, congestion window and smoothed RTT "
                    "over time; slow start, then the steady state.")


def _charts(images: list[Path], notes: list[str]) -> list[str]:
    out = ["<h2>More charts</h2>"]
    for p in images:
        if p.suffix == ".png" and p.name != "throughput_vs_rtt.png":
            out.append(image(p, CAPTIONS.get(p.stem, TIMELINE_CAPTION
                                             if p.stem.startswith("timeline_") else
                                             captures.CAPTION if p.stem.startswith("tseq_")
                                             else p.stem)))
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    return out


def _measurements(run: Run, verdicts: dict) -> list[str]:
    rows = summary_rows(run, verdicts)
    cols = [c for c in summary_columns(run.unit) if c not in ("verdict", "detail")] + [
        "verdict", "detail"]
    classes = ["flag" if r["verdict"] in ("failed", "emulator-limited") else "" for r in rows]
    out = ["<h2>Measurements and bottleneck verdicts</h2>",
           f"<p>Throughput in {esc(run.unit)}; window bound = concurrency x streams x "
           "window / measured RTT, left blank at 0 ms and where it exceeds "
           f"{SHOWN_BOUND_FACTOR:g} x the path (it says nothing there); path = "
           "min(validated iperf3 capacity, configured rate).</p>",
           table(cols, [[r[c] for c in cols] for r in rows], classes,
                 {cols.index("verdict"): "k-"})]
    for _name, stat, title in (("mean", lambda p: p.mean_bps, "mean over repeats"),
                              ("max", lambda p: p.max_bps, "highest value over repeats")):
        header, body = rtt_table(run.points, stat, run.unit)
        out += [f"<h3>{esc(run.unit)} per client and RTT ({title})</h3>", table(header, body)]
    if len({p.key.concurrency for p in run.points}) > 1:
        out += [f"<h3>Aggregate {esc(run.unit)} vs concurrent transfers (with the origins that "
                "served them)</h3>", table(concurrency.header(), concurrency.rows(run))]
        out += [f"<p>{esc(v[2:]).replace('**', '')}</p>" for v in
                concurrency.verdicts(run.points)]
    if small_files.has_files(run):
        header, body = small_files.table(run)
        out += [f"<h3>{esc(small_files.TITLE)}</h3>",
                "<p>The workload is a set of small files: files/s is the number of files "
                "over the fetch's wall time; ttfb_ms the first file's time to first byte "
                "from its process's start; connect and TLS ms per file are curl's own "
                "handshake timers summed over the files and divided by their number; "
                "tls_extra_ms_per_file is the TLS row's ms per file minus the same client's "
                "plain one (docs/results-format.md).</p>", table(header, body)]
    if xcache.has_cache(run):
        header, body = xcache.table(run)
        out += ["<h3>Direct vs cold vs warm cache, with the bytes the cache fetched from "
                "its origin (medians over repeats)</h3>", table(header, body)]
        out += [f"<p>{esc(v[2:])}</p>" for v in xcache.rtt_ratios(run)]
    return out


def _validations(run: Run) -> list[str]:
    rows = validation_rows(run)
    vcols = validation_columns(run.unit)
    classes = ["flag" if r["flagged"] == "FLAGGED" else "" for r in rows]
    out = ["<h2>Path validation</h2>",
           "<p>ping and an iperf3 run (iperf3 -P iperf_streams, past slow start) before "
           "and after each step; a step is flagged when the measured path differs from "
           "the configured one.</p>",
           table(vcols, [[r[c] for c in vcols] for r in rows],
                 classes) if rows else "<p>none recorded</p>"]
    if storage.has_storage(run):
        srows = storage.rows(run)
        out += ["<h2>Storage check beside the network check</h2>",
                "<p>storage: disk. Per step, the path's iperf3 capacity, dd's cold "
                "sequential read of the served file (its page cache dropped before), the same "
                "read from the page cache (cached) and the step's transfers (median).</p>",
                table(storage.header(), [[r[c] for c in storage.COLUMNS] for r in srows],
                      ["flag" if r["storage_note"] else "" for r in srows])]
    if run.engine:
        trows = timing_rows(run)
        out += ["<h2>Emulation timing per step</h2>",
                "<p>The engine's own release lateness is each step's self-check: a step's "
                "emulation is LATE when the mean lateness of a round trip exceeds the RTT "
                "tolerance, or more than 1 % of one direction's packets are later than it. "
                "Ping is the independent witness; where the two disagree it is said.</p>",
                table(TIMING_COLUMNS, [[r[c] for c in TIMING_COLUMNS] for r in trows],
                      ["flag" if r["emulation"] == "LATE" or r["ping"] == "off" else ""
                       for r in trows])]
        erows = engine_rows(run)
        classes = ["flag" if r.get("engine", "").startswith(("not alive", "unreadable"))
                   or "error" in r.get("engine", "") or r.get("emulation") == "LATE"
                   else "" for r in erows]
        out += ["<details><summary>Engine statistics per step (packets during the step; "
                "lateness quantiles are histogram-bin upper bounds)</summary>",
                table(ENGINE_COLUMNS, [[r.get(c, "") for c in ENGINE_COLUMNS] for r in erows],
                      classes), "</details>"]
    return out


def _time_budget(run: Run) -> list[str]:
    """Where the wall time went, from the actions table (rig.results.budget)."""
    b = budget(run.actions)
    if b is None:
        return []
    return ["<h2>Time budget</h2>", f"<p>{esc(summary(b))}</p>",
            table(["phase", "seconds", "of wall"], budget_rows(b))]


def _kv(d: dict) -> str:
    return table(["key", "value"], [[k, v if isinstance(v, str) else json.dumps(v)]
                                    for k, v in sorted(d.items())])


def _environment(env: dict) -> list[str]:
    out = ["<h2>Environment</h2>"]
    before, after = env.get("sysctls_before") or {}, env.get("sysctls_after") or {}
    simple = {k: v for k, v in env.items() if k not in
              ("sysctls_before", "sysctls_after", "scenario_text", "tools", "tuning",
               "scenario")}
    out.append(_kv(simple))
    for key in ("tools", "tuning"):
        if isinstance(env.get(key), dict):
            out += [f"<h3>{key}</h3>", _kv(env[key])]
    if before or after:
        keys = sorted(set(before) | set(after))
        rows = [[k, before.get(k, ""), after.get(k, "")] for k in keys]
        classes = ["flag" if before.get(k) != after.get(k) else "" for k in keys]
        out += ["<h3>sysctls before / after (changed rows highlighted)</h3>",
                table(["sysctl", "before", "after"], rows, classes)]
    text = env.get("scenario_text") or env.get("scenario")
    if text:
        shown = text if isinstance(text, str) else json.dumps(text, indent=2)
        out += ["<h3>scenario</h3>", f"<pre>{esc(shown)}</pre>"]
    return out


def report_html(run: Run, verdicts: dict, images: list[Path], notes: list[str],
                against: list[str] | None = None, threads: list[str] | None = None) -> str:
    """The page: the headline first, then every other section collapsed. `against`: the
    section "against the study" (rig.report.against_view); `threads`: "Where the CPU goes"
    (rig.report.threadview)."""
    rest = (_charts(images, notes) + _measurements(run, verdicts) + (threads or [])
            + captures.section(run) + _validations(run) + _time_budget(run)
            + _environment(run.env))
    body = (_header(run) + _headline(run, verdicts, images) + fold(against or [])
            + ['<h2 class="below">Details</h2>'] + fold(rest))
    return page(f"rig report {run.run_id}", body)
