"""Several paths in one step (`together:`, issue 30; seed 004's 10G + 40G frontends): each
joint group's paths side by side, their shares and the aggregate.

  together.csv / together.md   one row per (joint set, client, streams, concurrency,
                               repeat): per path its RTT, Gbit/s (its group's aggregate)
                               and share of the sum; the sum of the paths; the aggregate
                               over the joint span (all bytes over first start to last
                               end, the site's view) and the start skew between the paths

Pure: reads the run's environment (`together`) and transfers; each path's own points,
verdicts and checks are the report's usual ones (a path of a joint set is a path).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rig.report.model import Run
from rig.description.units import column, current_unit, in_unit


def sets(run: Run) -> list[list[int]]:
    """The joint sets of steps the run stored (env `together`)."""
    t = run.env.get("together") or {}
    return [list(s) for s in t.get("sets", []) if isinstance(s, list)]


def table(run: Run) -> tuple[list[str], list[list[Any]]]:
    body: list[list[Any]] = []
    paths: list[str] = list((run.env.get("together") or {}).get("paths") or [])
    header = (["steps", "client", "streams", "concurrency", "repeat"]
              + [f"{p} {column(c)}" for p in paths for c in ("rtt_ms", "gbit_s", "share")]
              + [column("sum_gbit_s"), column("joint_gbit_s"), "start_skew_ms", "failed"])
    for members in sets(run):
        rows = [t for t in run.transfers if t.step in members]
        keys = sorted({(t.client, t.streams, t.concurrency, t.repeat) for t in rows},
                      key=lambda k: (k[3], k[0], k[1], k[2]))
        for client, streams, conc, rep in keys:
            grp = [t for t in rows if (t.client, t.streams, t.concurrency,
                                       t.repeat) == (client, streams, conc, rep)]
            per: dict[str, tuple[float | None, float | None]] = {}
            for p in paths:
                mine = [t for t in grp if t.path == p]
                ok = [t for t in mine if t.ok]
                bps = (ok[0].aggregate_bps or sum(float(t.throughput_bps or 0)
                                                         for t in ok)) if ok else None
                per[p] = (mine[0].rtt_ms_configured if mine else None, bps)
            total = sum(b for _, b in per.values() if b)
            ok = [t for t in grp if t.ok and t.started_at and t.duration_s]
            marks = [(t.started_at, t.duration_s) for t in ok if t.started_at and t.duration_s]
            span = (max(a + d for a, d in marks) - min(a for a, _ in marks)) if ok else 0.0
            joint = sum(int(t.bytes or 0) for t in ok) * 8 / span if span > 0 else None
            starts = [min(t.started_at for t in grp if t.path == p and t.started_at)
                      for p in paths if any(t.path == p and t.started_at for t in grp)]
            skew = (max(starts) - min(starts)) * 1e3 if len(starts) > 1 else None
            cells: list[Any] = []
            for p in paths:
                rtt, b = per[p]
                cells += ["" if rtt is None else f"{rtt:g}", _g(b),
                          f"{b / total:.2f}" if b and total else ""]
            body.append([" ".join(str(m + 1) for m in members), client, streams, conc, rep + 1,
                         *cells, _g(total or None), _g(joint),
                         "" if skew is None else f"{skew:.0f}",
                         sum(1 for t in grp if not t.ok)])
    return header, body


def _g(bps: float | None) -> str:
    return "" if not bps else f"{in_unit(bps):.3f}"


def write(run: Run, out_dir: Path, markdown: Callable, write_csv: Callable) -> list[Path]:
    header, body = table(run)
    if not body:
        return []
    md = out_dir / "together.md"
    md.write_text("### Paths run together (`together:`): each path's share and the aggregate\n\n"
                  + markdown(header, body, left=2)
                  + f"\nPATH {column('gbit_s')} ({current_unit()}): that path's group (all its processes together); share: of "
                  f"the paths' sum; {column('joint_gbit_s')}: every byte of the group over the span from the "
                  "first start to the last end; start_skew_ms: between the paths' first "
                  "starts. Each path's own verdict, checks and emulation timing are in the "
                  "report's per-path tables.\n")
    return [write_csv(out_dir / "together.csv", header, body), md]
