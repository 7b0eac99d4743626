"""Table helpers shared by every report module: a Markdown table and a CSV file.

Pure Python, no rig imports: the bottom of rig.report, so no table-writing module needs
another's to write its own.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable


def markdown(header: Iterable[str], rows: Iterable[Iterable[Any]], left: int = 1) -> str:
    """A Markdown table; the first `left` columns are text (left-aligned)."""
    header = list(header)

    def esc(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, header: Iterable[str], rows: Iterable[Iterable[Any]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(header))
        w.writerows(rows)
    return path
