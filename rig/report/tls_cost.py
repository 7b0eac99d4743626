"""The cost of TLS (seed 000, figure 8): per path, RTT, client and concurrency, the
aggregate throughput and the client's and the server's CPU seconds per GB, for each TLS
mode side by side.

    tls_cost.csv / tls_cost.md    one row per (path, RTT, client, streams, concurrency)
    tls_cost.png / .svg           aggregate throughput vs concurrency, one panel per RTT,
                                  a line per client and TLS mode (solid off, dashed all,
                                  dotted control)

Server CPU per GB: the server tree's CPU over each transfer group (stored split evenly
over the group's rows) divided by the bytes the group moved. Pure: the chart is
rig.report.charts.tls_cost_chart. Must not import realization, services, process or
orchestration.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rig.report.model import Point, Run
from rig.report.tabular import markdown, write_csv
from rig.description.units import column, current_unit, in_unit

MODES = ("off", "control", "all")
COLUMNS_PER_MODE = ("gbit_s", "client_cpu_s_per_gb", "server_cpu_s_per_gb")


def has_tls(run: Run) -> bool:
    return any(p.tls != "off" for p in run.points)


Cell = tuple[str, float | None, str, int, int]   # path, rtt, client, streams, concurrency


def cells(run: Run) -> dict[Cell, dict[str, Point]]:
    out: dict[Cell, dict[str, Point]] = defaultdict(dict)
    for p in run.points:
        k = p.key
        out[(k.path, k.rtt_ms, p.base_client, k.streams, k.concurrency)][p.tls] = p
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1.0, kv[0][2],
                                                     kv[0][3], kv[0][4])))


def _f(v: float | None, fmt: str = ".3g") -> str:
    return "" if v is None or v != v else format(v, fmt)


def table(run: Run) -> tuple[list[str], list[list[str]]]:
    modes = [m for m in MODES if any(p.tls == m for p in run.points)]
    header = ["path", "rtt_ms", "client", "streams", "concurrency"]
    header += [column(f"{m}_{c}") for m in modes for c in COLUMNS_PER_MODE]
    rows = []
    for (path, rtt, client, streams, conc), by in cells(run).items():
        if len(by) < 2:
            continue                  # nothing to compare with (a tool without TLS)
        row = [path, _f(rtt, "g") if rtt is not None else "real", client, str(streams),
               str(conc)]
        for m in modes:
            p = by.get(m)
            row += ["", "", ""] if p is None or not p.n else [
                _f(in_unit(p.mean_bps)), _f(p.cpu_s_per_gb()), _f(p.server_cpu_s_per_gb())]
        rows.append(row)
    return header, rows


def write_table(run: Run, out_dir: Path) -> list[Path]:
    header, rows = table(run)
    csv_path = write_csv(out_dir / "tls_cost.csv", header, rows)
    md = out_dir / "tls_cost.md"
    md.write_text(f"### TLS cost: aggregate {current_unit()}, client and server CPU s/GB per TLS mode\n\n"
                  + markdown(header, rows, left=3))
    return [csv_path, md]
