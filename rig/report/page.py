"""HTML helpers shared by the report pages (report.html, compare.html, history.html):
escaping, a table, an embedded image, the page shell with its style sheet.

Pure Python, no rig imports: the bottom of rig.report, beside tabular (Markdown, CSV)
and figure (matplotlib), so a section module writes its HTML without importing another
section's module.
"""
from __future__ import annotations

import base64
import html
import time
from pathlib import Path
from typing import Any, Iterable

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;
margin-top:1.6em}table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
td.l{text-align:left}tr.flag td{background:#fde2e0}tr.good td{background:#e3f4e1}
.meta{color:#555}.k-window-limited{color:#1f5fa8}.k-path-limited{color:#2e8b3a}
.k-client-CPU-bound{color:#a84f00}.k-host-CPU-bound{color:#a84f00}.k-emulator-limited{color:#c0392b;font-weight:bold}
.k-unexplained{color:#7b3fa0}.k-failed{color:#c0392b;font-weight:bold}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.85em;color:#555}pre{background:#f7f7f7;padding:.6em;
overflow-x:auto;font-size:.8em}.note{background:#fff8e1;padding:.4em .8em}
.scroll{overflow-x:auto;max-width:100%}.scroll table{margin:.3em 0}
td.p{text-align:left;min-width:22em;max-width:48em}
details.more{margin:.6em 0;border-top:1px solid #ccc}details.more>summary{cursor:pointer;
padding:.3em 0}details.more>summary h2{display:inline;border:none;font-size:1.15em;margin:0}
details.more>summary .sum{color:#555;margin-left:.6em}
.headline{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
.headline figure{flex:3 1 620px;margin:.4em 0}.headline .side{flex:2 1 380px;min-width:0}
.headline h2{margin-top:.3em;font-size:1.1em}
.flags{padding:.4em .8em;background:#f4f6f8;border-left:4px solid #888}
.flags.bad{background:#fdecea;border-left-color:#c0392b}
"""


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def table(header: Iterable[str], rows: Iterable[Iterable[Any]],
          row_classes: Iterable[str] | None = None,
          cell_class: dict[int, str] | None = None) -> str:
    """An HTML table; cell_class maps a column index to a CSS class prefix (value appended)."""
    body = [list(r) for r in rows]
    prose = _prose_columns(body)
    out = ['<div class="scroll"><table><thead><tr>'
           + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    classes = list(row_classes) if row_classes is not None else None
    for i, row in enumerate(body):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        cells = []
        for j, c in enumerate(row):
            if cell_class and j in cell_class:
                cells.append(f'<td class="l {cell_class[j]}{esc(c)}">{esc(c)}</td>')
            elif j in prose:
                cells.append(f'<td class="p">{esc(c)}</td>')
            else:
                cells.append(f"<td>{esc(c)}</td>")
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


PROSE_CHARS = 48      # a column with a longer cell is prose: left-aligned, given width


def _prose_columns(rows: list[list[Any]]) -> set[int]:
    """Columns holding sentences (a verdict's detail, a why): left-aligned with a minimum
    width, so that a row is not squeezed to a word per line (issue 41)."""
    out: set[int] = set()
    for row in rows:
        for j, c in enumerate(row):
            if j not in out and len(str(c)) > PROSE_CHARS and " " in str(c):
                out.add(j)
    return out


def fold(parts: list[str]) -> list[str]:
    """Each section of `parts` (from one <h2> to the next) collapsed into a
    <details class="more"> whose summary is the heading, with the section's
    <p class="sum"> line when it starts with one (a one-line answer of the section)."""
    out: list[str] = []
    sections: list[list[str]] = []
    for part in parts:
        if part.startswith("<h2") or not sections:
            sections.append([])
        sections[-1].append(part)
    for sec in sections:
        if not sec[0].startswith("<h2"):
            out += sec
            continue
        head = [sec[0]] + (sec[1:2] if len(sec) > 1 and sec[1].startswith('<p class="sum"')
                           else [])
        summary = "".join(h.replace('<p class="sum">', '<span class="sum">')
                          .replace("</p>", "</span>") for h in head)
        out += [f'<details class="more"><summary>{summary}</summary>', *sec[len(head):],
                "</details>"]
    return out


def image(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    svg = path.with_suffix(".svg")
    link = f' (<a href="{esc(svg.name)}">SVG</a>)' if svg.exists() else ""
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}{link}</figcaption></figure>")


def page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><link rel=\"icon\" href=\"data:,\">"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def when(meta: dict) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(meta["created"])))
    except (KeyError, ValueError):
        return "?"
