"""Throughput versus concurrent transfers, per client configuration, as tables.

concurrency_table.{csv,md}: for each path and RTT, one row per client configuration
(with the origins that served it and their CPU sets, from the `origin`/`origin_cpus`
columns), one column per number of concurrent transfers: the aggregate Gbit/s (mean
over repeats) and, per active transfer, aggregate / N. The Markdown adds, at the
highest concurrency of each RTT, which configuration moved most and whether its lead
is outside the spread of the repeats (seed 002: do two 1-core origins beat one 2-core
origin at 16 transfers?). Written only when a run sweeps concurrency.

Pure Python, from stored results alone: must not import matplotlib, realization,
services or process.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rig.report.model import Point, Run
from rig.report.tabular import markdown, write_csv
from rig.description.units import THROUGHPUT_SUFFIX, current_unit, in_unit

HEADER = ("path", "rtt_ms", "client", "origins", "concurrency", "n", "aggregate_gbps",
          "min_gbps", "max_gbps", "per_transfer_gbps")


def header() -> tuple[str, ...]:
    """HEADER with the throughput columns in the report's unit (`_gbps`, `_mbyteps`, ...)."""
    return tuple(c.replace("gbps", THROUGHPUT_SUFFIX[current_unit()]) for c in HEADER)


def origins_of(run: Run) -> dict[str, str]:
    """Client configuration -> 'K origin(s): name [cpus], ...' ('' when not recorded)."""
    seen: dict[str, dict[str, str | None]] = defaultdict(dict)
    for r in run.transfers:
        if r.origin:
            seen[r.client][r.origin] = r.origin_cpus
    out = {}
    for client, o in seen.items():
        parts = [f"{name} [cpus {cpus}]" if cpus else name for name, cpus in sorted(o.items())]
        out[client] = f"{len(o)} origin{'s' if len(o) != 1 else ''}: " + ", ".join(parts)
    return out


def _gb(bps: float) -> str:
    """In the report's unit (rig.description.units.current_unit)."""
    return f"{in_unit(bps):.3f}"


def rows(run: Run) -> list[list[str]]:
    orig = origins_of(run)
    out = []
    for p in run.points:
        k = p.key
        # origins are the client's whatever its TLS mode (k.client: "name tls=all")
        out.append([k.path, f"{p.x_rtt_ms:g}", k.client, orig.get(p.base_client or k.client, ""),
                    str(k.concurrency), str(p.n),
                    _gb(p.mean_bps) if p.n else "failed", _gb(p.min_bps) if p.n else "",
                    _gb(p.max_bps) if p.n else "",
                    _gb(p.mean_bps / k.concurrency) if p.n else ""])
    return out


def verdicts(points: list[Point]) -> list[str]:
    """At the highest concurrency of each path and RTT: who moved most, and whether the
    lead is outside the repeats' spread (its lowest repeat above the runner-up's
    highest)."""
    by: dict[tuple[str, float], list[Point]] = defaultdict(list)
    for p in points:
        by[(p.key.path, p.x_rtt_ms)].append(p)
    lines = []
    for (path, rtt), ps in sorted(by.items()):
        top = max(p.key.concurrency for p in ps)
        at = sorted((p for p in ps if p.key.concurrency == top and p.n),
                    key=lambda p: -p.mean_bps)
        if len(at) < 2:
            continue
        a, b = at[0], at[1]
        gain = a.mean_bps / b.mean_bps - 1.0 if b.mean_bps else float("inf")
        n = min(a.n, b.n)
        spread = ("one repeat: no spread to judge" if n < 2 else
                  f"outside the spread of {n} repeats" if a.min_bps > b.max_bps else
                  f"within the spread of {n} repeats")
        lines.append(f"- {path} {rtt:g} ms, {top} concurrent: **{a.key.client}** "
                     f"{_gb(a.mean_bps)} {current_unit()} vs {b.key.client} {_gb(b.mean_bps)} {current_unit()} "
                     f"({gain:+.0%}; {spread})")
    return lines


def write(run: Run, out_dir: Path) -> list[Path]:
    if len({p.key.concurrency for p in run.points}) < 2:
        return []
    body = rows(run)
    csv_path = write_csv(out_dir / "concurrency_table.csv", header(), body)
    md = out_dir / "concurrency_table.md"
    text = (f"### Aggregate throughput ({current_unit()}) vs concurrent transfers\n\n"
            + markdown(header(), body, left=4))
    v = verdicts(run.points)
    if v:
        text += "\n### At the highest concurrency\n\n" + "\n".join(v) + "\n"
    md.write_text(text)
    return [csv_path, md]
