"""Many small files (issue 40 item 7): where a run's workload is a `count:` set, files per
second, time to first byte and the cost per file of connecting and TLS, per path, RTT,
client and TLS mode (medians over the repeats that succeeded).

    small_files.csv / small_files.md    one row per (path, RTT, client, TLS mode)

Columns: `files` in the set; `files_per_s` (files / the fetch's wall time) and
`ms_per_file` (its inverse); `ttfb_ms`, the first file's time to first byte from its
process's start; `connections` (curl's num_connects summed over the files; one per file
for one process per file; blank where the tool does not say: xrdcp); `connect_ms_per_file`
and `tls_ms_per_file`, curl's own timers (time_connect, time_appconnect - time_connect)
summed over the files and divided by their number; `tls_extra_ms_per_file`, derived:
this TLS mode's ms_per_file minus the same client's plain ms_per_file at the same path
and RTT (the whole cost of TLS per file as the user sees it: handshakes, the server's and
the client's crypto). Pure; must not import realization, services, process or
orchestration.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from rig.report.model import Run
from rig.results.store import TransferRow

HEADER = ["path", "rtt_ms", "client", "tls", "repeats", "files", "files_per_s",
          "ms_per_file", "ttfb_ms", "connections", "connect_ms_per_file", "tls_ms_per_file",
          "tls_extra_ms_per_file"]


def has_files(run: Run) -> bool:
    return any(r.files for r in run.transfers)


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def _f(v: float | None, fmt: str = ".3g") -> str:
    return "" if v is None else format(v, fmt)


Key = tuple[str, float | None, str, str]


def medians(rows: list[TransferRow]) -> dict[Key, dict[str, Any]]:
    """(path, rtt, client, tls) -> the medians over its ok rows of a set (pure)."""
    by: dict[Key, list[TransferRow]] = defaultdict(list)
    for r in rows:
        if r.files and r.ok and r.files_per_s:
            by[(r.path, r.rtt_ms_configured, r.client, r.tls or "off")].append(r)
    out = {}
    for k, rs in by.items():
        ms = _median([1000.0 / r.files_per_s for r in rs if r.files_per_s])
        out[k] = {"repeats": len(rs), "files": rs[0].files,
                  "files_per_s": _median([r.files_per_s for r in rs]), "ms_per_file": ms,
                  "ttfb_ms": _ms(_median([r.ttfb_s for r in rs])),
                  "connections": _median([r.connections for r in rs]),
                  "connect_ms_per_file": _ms(_median([r.connect_s_per_file for r in rs])),
                  "tls_ms_per_file": _ms(_median([r.tls_s_per_file for r in rs]))}
    return out


def _ms(s: float | None) -> float | None:
    return None if s is None else 1000.0 * s


def table(run: Run) -> tuple[list[str], list[list[str]]]:
    m = medians(run.transfers)
    body = []
    for k in sorted(m, key=lambda k: (k[0], k[1] if k[1] is not None else -1.0, k[2],
                                      k[3] != "off", k[3])):
        path, rtt, client, tls = k
        v = m[k]
        plain = m.get((path, rtt, client, "off"))
        extra = (v["ms_per_file"] - plain["ms_per_file"]
                 if tls != "off" and plain and v["ms_per_file"] is not None
                 and plain["ms_per_file"] is not None else None)
        body.append([path, _f(rtt, "g") if rtt is not None else "real", client, tls,
                     str(v["repeats"]), str(v["files"]), _f(v["files_per_s"]),
                     _f(v["ms_per_file"]), _f(v["ttfb_ms"]), _f(v["connections"], "g"),
                     _f(v["connect_ms_per_file"]), _f(v["tls_ms_per_file"]), _f(extra)])
    return HEADER, body


TITLE = ("Small files: files/s, time to first byte, cost per file of connecting and TLS "
         "(medians over repeats)")


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    if not has_files(run):
        return []
    header, body = table(run)
    csv_path = write_csv(out_dir / "small_files.csv", header, body)
    md = out_dir / "small_files.md"
    md.write_text(f"### {TITLE}\n\n" + markdown(header, body, left=4))
    return [csv_path, md]
