"""Origins and cores (`sweep.origins` x `sweep.server_cpus`, issue 27; seed 002's "1 x 128
vs 2 x 64 vs 4 x 16"): each path copy's server configuration beside its throughput.

  origins_cores.csv / .md   one row per (path, RTT, client, concurrency, configuration):
                            origins, CPUs per origin, total cores the origins could use
                            (the distinct CPUs of their effective sets; unpinned: the
                            host's), mean Gbit/s over repeats, its verdict, and the
                            servers' CPU per transfer (seconds, user + sys)

Pure: reads the run's environment (`server_sweep`, `origins`, `cpus`) and its points.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rig.report.model import Point, Run
from rig.description.units import column, in_unit

COLUMNS = ["path", "rtt_ms", "client", "concurrency", "origins", "cpus_per_origin",
           "total_cores", "gbit_s", "n", "verdict", "server_cpu_s"]


@dataclass(frozen=True)
class Row:
    path: str                 # the swept path (the copies' original)
    rtt_ms: float | None
    client: str
    concurrency: int
    origins: int
    cpus_per_origin: int | None    # None: not pinned
    total_cores: int
    point: Point


def cpu_list(text: Any) -> set[int]:
    """The CPUs of a list as taskset and Cpus_allowed_list print it ("0-1,3")."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _cores(run: Run, path: str) -> tuple[int, int]:
    """(origins, distinct CPUs they could run on) on one path copy, from the run's own
    record of where each instance ran (env `origins`: cpus_effective)."""
    insts = (run.env.get("origins") or {}).get(path) or {}
    host = run.env.get("cpus")
    host_n = int(host) if isinstance(host, (int, float, str)) and str(host).isdigit() else 0
    used: set[int] = set()
    n = 0
    for i in insts.values():
        if not isinstance(i, dict):
            continue
        n += 1
        got = cpu_list(i.get("cpus_effective") or i.get("cpus"))
        used |= got if got else set(range(host_n))
    return n, len(used)


def rows(run: Run) -> list[Row]:
    sweep = run.env.get("server_sweep") or {}
    out = []
    for p in run.points:
        conf = sweep.get(p.key.path)
        if not isinstance(conf, dict):
            continue
        n, total = _cores(run, p.key.path)
        out.append(Row(conf.get("path") or p.key.path, p.key.rtt_ms, p.key.client,
                       p.key.concurrency, conf.get("origins") or n, conf.get("server_cpus"),
                       total, p))
    return sorted(out, key=lambda r: (r.path, r.rtt_ms or 0.0, r.client, r.concurrency,
                                      r.origins, r.total_cores))


def table(run: Run, vmap: dict) -> tuple[list[str], list[list[Any]]]:
    body = []
    for r in rows(run):
        v = vmap.get(r.point.key)
        cpu = statistics.fmean(r.point.server_cpu_s) if r.point.server_cpu_s else None
        body.append([r.path, "" if r.rtt_ms is None else f"{r.rtt_ms:g}", r.client,
                     r.concurrency, r.origins, r.cpus_per_origin or "all", r.total_cores,
                     f"{in_unit(r.point.mean_bps):.3f}" if r.point.samples_bps else "",
                     r.point.n, v.kind if v is not None else "",
                     "" if cpu is None else f"{cpu:.2f}"])
    return [column(c) for c in COLUMNS], body


def series(run: Run) -> dict[tuple[str, float | None, str, int], dict[int, list[Row]]]:
    """For the chart: (path, RTT, client, concurrency) -> origins -> rows by total cores."""
    out: dict = {}
    for r in rows(run):
        if r.point.samples_bps:
            out.setdefault((r.path, r.rtt_ms, r.client, r.concurrency), {}) \
                .setdefault(r.origins, []).append(r)
    return out


def write(run: Run, vmap: dict, out_dir: Path, markdown: Callable,
          write_csv: Callable) -> list[Path]:
    header, body = table(run, vmap)
    if not body:
        return []
    md = out_dir / "origins_cores.md"
    md.write_text("### Origins and cores (`sweep.origins` x `sweep.server_cpus`)\n\n"
                  + markdown(header, body)
                  + "\ntotal_cores: the distinct CPUs the path's origins could run on (their "
                  "effective CPU sets, read from each running instance; `all`: not pinned, "
                  "the host's); server_cpu_s: the origins' CPU per transfer (user + sys).\n")
    return [write_csv(out_dir / "origins_cores.csv", header, body), md]
