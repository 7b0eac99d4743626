"""The section "against the study" of report.html, and its text version against.md, from
an Against (rig.report.against) alone.

Per experiment: the claims (claim | rig | study | ratio | verdict | evidence) and each
numeric table as rig | study | ratio per series and x; the charts
(rig.report.against_charts) lay the study's series over the rig's.

Pure Python: must not import matplotlib, rig.realization, rig.process, rig.services.
"""
from __future__ import annotations

from pathlib import Path

from rig.report.against import AGREES, ARTEFACT, DISAGREES, UNDECIDED, Against, Counts, \
    Outcome, TableResult, _fmt, artefact_summary
from rig.report.page import esc, image, table

TITLE = "against the study"
_CLASS = {AGREES: "good", DISAGREES: "flag", ARTEFACT: "flag", UNDECIDED: ""}
RULES = ("A claim agrees or disagrees only when its outcome on the means holds at both ends "
         "of each series' 90 % confidence interval (else undecided; one repeat: undecided). Points the rig spoiled (a flagged path check, a late "
         "engine, an emulator-limited verdict) are left out as rig artefacts. A "
         "disagreement is explained only by an ablation that closed at least half its gap, "
         "plausible where a bound's model predicts the gap (rig/report/explain.py), "
         "unexplained otherwise. Claims marked as the rig's reading (not stated by the "
         "study) are counted apart and never toward a row's status.")


def _xs(t: TableResult) -> list[float]:
    """The table's x values the rig measured for some series (all, if none)."""
    have = {c.x for r in t.rows for c in r.cells if c.rig is not None}
    return [x for x in t.table.at if x in have] or list(t.table.at)


def table_rows(t: TableResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per series three lines, rig | study | rig/study, per x."""
    xs = _xs(t)
    unit = {"rtt_ms": " ms", "branches_percent": " %"}.get(t.table.x, "")
    header = [f"series ({t.table.unit})", ""] + [f"{_fmt(x)}{unit}" for x in xs]
    rows = []
    for r in t.rows:
        cells = {c.x: c for c in r.cells}
        if r.lacks:
            rig_line = [r.label, "rig"] + ["n/c"] * len(xs)
        else:
            rig_line = [r.label, "rig"] + [_fmt(cells[x].rig) for x in xs]
        rows.append(rig_line)
        rows.append(["", "study"] + [_fmt(cells[x].study) for x in xs])
        rows.append(["", "rig/study"] + [_fmt(cells[x].ratio, 2) for x in xs])
    return header, rows


def claim_row(o: Outcome) -> list[str]:
    why = o.why or "; ".join(o.evidence)
    if o.verdict == DISAGREES:
        why = f"{o.level.upper()}: {o.explanation}" + (f" | evidence: {why}" if why else "")
    if o.left_out and o.verdict != ARTEFACT:
        why += f" | left out as rig artefacts: {artefact_summary(o.left_out, 1)}"
    text = o.claim.text + (f" [the rig's reading: {o.claim.inference}]" if o.reading else "")
    return [o.claim.id, o.claim.kind, text, o.rig, o.study, o.ratio, o.verdict, why]


CLAIM_HEADER = ["claim", "kind", "the study says", "rig", "study", "ratio / band", "verdict",
                "why / rig's evidence"]
COUNT_HEADER = ["experiment", "study's claims", "agrees", "disagrees", "undecided",
                "rig artefact", "not comparable here", "explained", "plausible", "unexplained",
                "the rig's reading (agrees)", "status"]


def _count_row(exp: str, c: Counts) -> list[str]:
    n = c.compared + c.not_comparable
    return [exp, str(n), str(c.agrees), str(c.disagrees), str(c.undecided), str(c.artefact),
            str(c.not_comparable), str(c.explained), str(c.plausible), str(c.unexplained),
            f"{c.reading} ({c.reading_agrees})", c.status() if exp != "all" else ""]


def artefact_lines(a: Against) -> list[str]:
    """Every point left out as a rig artefact, once, grouped by why, first in the section."""
    by: dict[str, list[str]] = {}
    for point, why in dict.fromkeys(w for o in a.outcomes for w in o.left_out):
        by.setdefault(why, []).append(point)
    return [f"{why}: {', '.join(pts)}" for why, pts in by.items()]


def counts_line(a: Against) -> str:
    """The section's answer in one line (its summary when folded): the study's own claims
    by outcome."""
    c = a.counts()["all"]
    n = c.compared + c.not_comparable
    parts = [f"{v} {k}" for k, v in (("agree", c.agrees), ("disagree", c.disagrees),
                                      ("undecided", c.undecided), ("rig artefact", c.artefact),
                                      ("not comparable here", c.not_comparable)) if v]
    return f"{n} claims of the study: {', '.join(parts) or 'none compared'}"


def html_section(a: Against, images: dict[str, Path], notes: list[str]) -> list[str]:
    ref = a.reference
    out = [f"<h2 id=\"against\">{esc(TITLE)}: {esc(ref.title)}</h2>",
           f"<p>Reference <code>{esc(ref.source)}</code> (seed {esc(ref.seed)}), stored "
           "with the run. Compared is what does not depend on scale: rankings (Kendall's "
           "τ), ratios, where a series halves, plateaus, spreads, shares of a bound.</p>"]
    out.insert(1, f'<p class="sum">{esc(counts_line(a))}</p>')
    if ref.scaled:
        out.append(f'<p class="note">Scaled: {esc(ref.scaled)}</p>')
    if ref.conditions:
        out.append(table(["study condition", "value"], ref.conditions.items()))
    counts = a.counts()
    if arts := artefact_lines(a):
        out.append("<p class=\"flag\"><b>Rig artefacts, left out of every claim:</b></p><ul>" + "".join(f"<li>{esc(w)}</li>" for w in arts)
                   + "</ul>")
    out.append(f'<p class="note">{esc(RULES)}</p>')
    out.append(table(COUNT_HEADER, [_count_row(e, c) for e, c in counts.items()]))
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    for exp in ref.experiments():
        out.append(f"<h3>{esc(exp)}</h3>")
        oc = [o for o in a.outcomes if o.claim.experiment == exp]
        if oc:
            out.append(table(CLAIM_HEADER, [claim_row(o) for o in oc],
                             [_CLASS.get(o.verdict, "") for o in oc]))
        for t in a.tables:
            if t.table.experiment != exp:
                continue
            out.append(f"<p><b>{esc(t.table.title)}</b> — {esc(t.table.source)}; "
                       f"precision: {esc(t.table.precision)}</p>")
            header, rows = table_rows(t)
            out.append(table(header, rows))
            if t.table.id in images:
                out.append(image(images[t.table.id], chart_caption(t)))
    return out


def chart_caption(t: TableResult) -> str:
    return (f"{t.table.title}: the study's series (dashed, open markers) and the rig's "
            "(solid), each normalised to its own value at the first x, so the shapes "
            "compare across scales.")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cell(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def markdown(a: Against, run_id: str, notes: list[str] | None = None) -> str:
    ref = a.reference
    out = [f"# Run {run_id} {TITLE}: {ref.title}", "",
           f"Reference: `{ref.source}` (seed `{ref.seed}`).", ""]
    out += [f"Note: {n}" for n in notes or []] + ([""] if notes else [])
    if ref.scaled:
        out += [f"Scaled: {ref.scaled}", ""]
    if arts := artefact_lines(a):
        out += ["**Rig artefacts, left out of every claim:**", ""]
        out += [f"- {w}" for w in arts] + [""]
    out += [RULES, ""]
    out += _md_table(COUNT_HEADER, [_count_row(e, c) for e, c in a.counts().items()]) + [""]
    for exp in ref.experiments():
        out += [f"## {exp}", ""]
        oc = [o for o in a.outcomes if o.claim.experiment == exp]
        if oc:
            out += _md_table(CLAIM_HEADER, [claim_row(o) for o in oc]) + [""]
        for t in a.tables:
            if t.table.experiment == exp:
                out += [f"**{t.table.title}** — {t.table.source}; precision: "
                        f"{t.table.precision}", ""]
                header, rows = table_rows(t)
                out += _md_table(header, rows) + [""]
    return "\n".join(out) + "\n"
