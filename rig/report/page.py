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
"""


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def table(header: Iterable[str], rows: Iterable[Iterable[Any]],
          row_classes: Iterable[str] | None = None,
          cell_class: dict[int, str] | None = None) -> str:
    """An HTML table; cell_class maps a column index to a CSS class prefix (value appended)."""
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
           + "</tr></thead><tbody>"]
    classes = list(row_classes) if row_classes is not None else None
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        cells = []
        for j, c in enumerate(row):
            if cell_class and j in cell_class:
                cells.append(f'<td class="l {cell_class[j]}{esc(c)}">{esc(c)}</td>')
            else:
                cells.append(f"<td>{esc(c)}</td>")
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


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
