"""Tables of one run, as CSV and Markdown.

- summary.csv: one line per measurement point (client, RTT, n, mean/min/max/std Gbit/s,
  then path, streams, concurrency, failures, bounds and the bottleneck verdict).
- rtt_table_mean.{csv,md} and rtt_table_max.{csv,md}: the Caltech shape (seed 003):
  one row per client configuration, one column per RTT, MB/s (10^6 bytes/s); the max
  table is the seed's "only highest values are shown".
- validations.csv: the path checks of every step.

Pure Python: must not import matplotlib, rig.netns, rig.proc, rig.services or rig.emul.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from .model import Point, Run, series_id, series_labels
from .verdict import Verdict

SUMMARY_COLUMNS = ("client", "rtt_ms", "n", "mean_gbps", "min_gbps", "max_gbps",
                   "std_gbps", "path", "streams", "concurrency", "failed",
                   "window_bound_gbps", "path_gbps", "cpu_s_per_gb", "verdict", "detail")
VALIDATION_COLUMNS = ("step", "phase", "path", "backend", "rtt_ms_configured",
                      "rtt_ms_measured", "rtt_ms_stddev", "ping_loss", "loss_configured",
                      "rate_gbps_configured", "iperf_gbps", "iperf_retransmits",
                      "iperf_srtt_ms", "flagged", "flag_reason")


def _g(bps: float | None, digits: int = 4) -> str:
    if bps is None or (isinstance(bps, float) and math.isnan(bps)):
        return ""
    return f"{bps / 1e9:.{digits}g}"


def _num(v: Any, fmt: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return format(v, fmt) if isinstance(v, (int, float)) else str(v)


def summary_rows(run: Run, verdicts: dict) -> list[dict[str, str]]:
    rows = []
    for p in run.points:
        v: Verdict | None = verdicts.get(p.key)
        rows.append({
            "client": p.key.client, "rtt_ms": _num(p.x_rtt_ms, "g"), "n": str(p.n),
            "mean_gbps": _g(p.mean_bps), "min_gbps": _g(p.min_bps), "max_gbps": _g(p.max_bps),
            "std_gbps": _g(p.std_bps) if p.n else "", "path": p.key.path,
            "streams": str(p.key.streams), "concurrency": str(p.key.concurrency),
            "failed": str(p.failed), "window_bound_gbps": _g(p.window_bound_bps()),
            "path_gbps": _g(p.path_bound_bps()), "cpu_s_per_gb": _num(p.cpu_s_per_gb(), ".3g"),
            "verdict": v.kind if v else "", "detail": v.text() if v else ""})
    return rows


def rtt_table(points: list[Point], stat: Callable[[Point], float]) -> tuple[list[str],
                                                                         list[list[str]]]:
    """Caltech shape: header ['client', '0', '20', ...], rows of MB/s per RTT."""
    labels = series_labels(points)
    rtts = sorted({p.x_rtt_ms for p in points})
    cells: dict[str, dict[float, str]] = {}
    for p in points:
        row = cells.setdefault(labels[series_id(p.key)], {})
        row[p.x_rtt_ms] = "failed" if not p.n else f"{stat(p) / 8e6:.1f}"
    header = ["client \\ RTT (ms)"] + [f"{r:g}" for r in rtts]
    body = [[name] + [cells[name].get(r, "") for r in rtts] for name in cells]
    return header, body


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


def validation_rows(run: Run) -> list[list[str]]:
    out = []
    for v in sorted(run.validations, key=lambda v: (v["step"], v["phase"] != "before")):
        out.append([str(v["step"]), v["phase"], v["path"], v["backend"],
                    _num(v.get("rtt_ms_configured"), "g"), _num(v.get("rtt_ms_measured")),
                    _num(v.get("rtt_ms_stddev"), ".3g"), _num(v.get("ping_loss"), ".2%"),
                    _num(v.get("loss_configured"), ".2%"),
                    _g(v.get("rate_bps_configured")), _g(v.get("iperf_bps")),
                    _num(v.get("iperf_retransmits"), "d"), _num(v.get("iperf_srtt_ms")),
                    "FLAGGED" if v.get("flagged") else "ok", v.get("flag_reason") or ""])
    return out


def write_tables(run: Run, verdicts: dict, out_dir: Path) -> list[Path]:
    """Write summary.csv, the Caltech-shaped tables and validations.csv; return paths."""
    written = []
    rows = summary_rows(run, verdicts)
    written.append(write_csv(out_dir / "summary.csv", SUMMARY_COLUMNS,
                             [[r[c] for c in SUMMARY_COLUMNS] for r in rows]))
    for name, stat in (("mean", lambda p: p.mean_bps), ("max", lambda p: p.max_bps)):
        header, body = rtt_table(run.points, stat)
        written.append(write_csv(out_dir / f"rtt_table_{name}.csv", header, body))
        md = out_dir / f"rtt_table_{name}.md"
        title = ("Mean throughput (MB/s) over repeats" if name == "mean" else
                 "Highest throughput (MB/s) over repeats")
        md.write_text(f"### {title}\n\n" + markdown(header, body))
        written.append(md)
    written.append(write_csv(out_dir / "validations.csv", VALIDATION_COLUMNS,
                             validation_rows(run)))
    return written
