"""The report's section "Where the CPU goes (per thread)": per point, CPU per GB of each
end and of its busiest thread, the share of that end's cores each Gbit/s costs (seed
004's unit), the busiest threads' shares, the thread verdicts, and the per-thread
timeline charts (rig.report.threadchart); also threads.csv. Empty when the run has no
thread_cpu rows.

Pure Python except draw() (matplotlib imported inside it).
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Sequence

from rig.report.model import Run, key_order
from rig.report.page import esc, image, table
from rig.report.threads import BUSY_CORE, HOT, IDLE, SATURATED, ProcUse, evidence

COLUMNS = ("client", "rtt_ms", "streams", "concurrency", "n", "client_cpu_s_per_gb",
           "client_cores", "client_core_share_per_gbps", "client_top_thread",
           "client_top_share", "client_top_s_per_gb", "client_threads", "server_cpu_s_per_gb",
           "server_cores", "server_core_share_per_gbps", "server_top_thread",
           "server_top_share", "server_top_s_per_gb", "server_threads", "verdict")


def _med(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _f(v: float | None, fmt: str = ".3g") -> str:
    return "" if v is None else format(v, fmt)


def _end(uses: list[ProcUse]) -> dict[str, str]:
    """Medians over the point's transfers (client) or groups (server)."""
    spg = [x for u in uses if (x := u.s_per_gb()) is not None]
    cores = [u.cores for u in uses if u.cores]
    share = [s / 8 / c for u in uses if (s := u.s_per_gb()) is not None and (c := u.cores)]
    tops = [u.threads[0] for u in uses if u.threads]
    top_spg = [x for u in uses if u.threads
               and (x := u.s_per_gb(u.threads[0].cpu_s)) is not None]
    name = statistics.mode(t.name.split("[")[0] for t in tops) if tops else ""
    return {"cpu_s_per_gb": _f(_med(spg)), "cores": _f(_med(cores), "g"),
            "core_share_per_gbps": _f(_med(share), ".2%"),
            "top_thread": name, "top_share": _f(_med([t.cpu for t in tops]), ".0%"),
            "top_s_per_gb": _f(_med(top_spg)),
            "threads": _f(_med([len(u.threads) for u in uses]), "g")}


def rows(run: Run, verdicts: dict) -> list[dict[str, str]]:
    out = []
    ev = evidence(run)
    for key in sorted(ev, key=key_order):
        p = ev[key]
        c, s = _end(p.client), _end(p.server)
        v = verdicts.get(key)
        out.append({"client": key.client, "rtt_ms": "real" if key.rtt_ms is None
                    else f"{key.rtt_ms:g}", "streams": str(key.streams),
                    "concurrency": str(key.concurrency), "n": str(len(p.client)),
                    **{f"client_{k}": x for k, x in c.items()},
                    **{f"server_{k}": x for k, x in s.items()},
                    "verdict": v.kind if v else ""})
    return out


def _cost(run: Run) -> str:
    c = run.env.get("thread_sampling")
    if not isinstance(c, dict) or c.get("cpu_share") is None:
        return ""
    return (f"Sampling every {c.get('interval_s')} s cost {float(c.get('cpu_s') or 0):.3f} s "
            f"of CPU over {float(c.get('wall_s') or 0):.1f} s of groups "
            f"({float(c['cpu_share']):.2%} of a core; "
            f"{c.get('threads')} threads, {c.get('schedstat_reads')} schedstat reads)"
            + (f"; not sampled (remote): {', '.join(c['remote_ends'])}"
               if c.get("remote_ends") else "") + ".")


def write_csv(table: list[dict[str, str]], out: Path) -> Path:
    path = out / "threads.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(table)
    return path


def section(run: Run, verdicts: dict, out: Path) -> tuple[list[str], list[Path]]:
    """(html parts, files written); ([], []) when the run sampled no thread."""
    if not run.threads:
        return [], []
    data = rows(run, verdicts)
    files = [write_csv(data, out)]
    html = ["<h2>Where the CPU goes (per thread)</h2>",
            f"<p>Every thread of each client process and of the server, sampled from "
            f"/proc (schedstat: on a CPU, waiting in a run queue). Busy time: the sample "
            f"intervals in which that end used at least {BUSY_CORE:g} core. "
            f"single-thread-bound / server-thread-bound: one thread on a CPU or waiting for "
            f"one at least {HOT:.0%} of the busy time while every other stays below "
            f"{IDLE:.0%}; server-cpu-bound: the server's threads use or wait for at least "
            f"{SATURATED:.0%} of the cores they may run on, at least half of them really "
            f"used; threads that waited for a CPU longer than they ran add a note (CPU "
            f"contention). CPU per GB is the process "
            f"tree's (and its busiest thread's) CPU seconds per GB moved; core share per "
            f"Gbit/s = CPU seconds per Gbit / cores the end may use. Medians over the "
            f"point's transfers (server: groups).</p>",
            f"<p>{esc(_cost(run))}</p>",
            table(COLUMNS, [[r[c] for c in COLUMNS] for r in data])]
    try:
        from rig.report import threadchart
    except ImportError as e:
        html.append(f'<p class="note">thread timelines not drawn: matplotlib is not '
                    f"available ({esc(e)})</p>")
        return html, files
    images = threadchart.draw(run, out)
    files += images
    html += [image(p, threadchart.CAPTION) for p in images if p.suffix == ".png"]
    return html, files
