"""Tables of one run, as CSV and Markdown.

- summary.csv: one line per measurement point (client, RTT, n, mean/min/max/std in the
  run's unit, then path, streams, concurrency, failures, bounds and the bottleneck verdict).
- rtt_table_mean.{csv,md} and rtt_table_max.{csv,md}: the Caltech shape (seed 003):
  one row per client configuration, one column per RTT, in the run's unit (the scenario's
  `report.unit`, default Gbit/s; the seed's MB/s is `report: {unit: MB/s}`); the max
  table is the seed's "only highest values are shown".
- validations.csv: the path checks of every step.

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from rig.description.linkstats import STATS_VERSION, EmulStats, UnreadableStats, \
    emulation_late, rtt_tolerance_s
from rig.description.steps import shown_step
from rig.description.units import DEFAULT_THROUGHPUT_UNIT, THROUGHPUT_SUFFIX, THROUGHPUT_UNITS, \
    in_unit
from rig.report.model import Point, Run, series_id, series_labels
from rig.report.verdict import ALL_PHASES, Verdict, engine_phase_rows
from rig.report.tabular import markdown, write_csv
from rig.results.store import EngineStatsRow
from rig.report import (background, caching, concurrency, origins_cores, small_files, storage,
                        tls_cost, together, xcache)

SUMMARY_COLUMNS = ("client", "rtt_ms", "n", "mean_gbps", "min_gbps", "max_gbps",
                   "std_gbps", "path", "streams", "concurrency", "failed",
                   "window_bound_gbps", "path_gbps", "storage_gbps", "cpu_s_per_gb", "verdict",
                   "detail")
# Window bounds more than this many times the path's are not shown: at ~0 ms RTT the
# bound (1065 Gbit/s in the quick run) says nothing about what limits a transfer.
SHOWN_BOUND_FACTOR = 10.0


def summary_columns(unit: str = DEFAULT_THROUGHPUT_UNIT) -> tuple[str, ...]:
    """summary.csv's columns with the throughput ones in `unit` (suffix _gbps, _mbyteps,
    ...): the default unit keeps the historic names, SUMMARY_COLUMNS."""
    suffix = THROUGHPUT_SUFFIX[unit]
    return tuple(c[:-len("gbps")] + suffix if c.endswith("_gbps") else c
                 for c in SUMMARY_COLUMNS)


def shown_window_bound(p: Point) -> float | None:
    """The window bound where it can say something: not at a configured RTT of 0 (the
    measured ~0.05 ms makes it absurd), nor above SHOWN_BOUND_FACTOR x the path."""
    bound = p.window_bound_bps()
    if bound is None or not p.key.rtt_ms:
        return None
    path = p.path_bound_bps()
    return None if path and bound > SHOWN_BOUND_FACTOR * path else bound


VALIDATION_COLUMNS = ("step", "phase", "path", "backend", "rtt_ms_configured",
                      "rtt_ms_measured", "rtt_ms_stddev", "ping_loss", "loss_configured",
                      "rate_gbps_configured", "iperf_streams", "iperf_gbps", "iperf_retransmits",
                      "iperf_srtt_ms", "flagged", "flag_reason", "capacity_gbps",
                      "capacity_note", "storage_file", "storage_mbps", "storage_note")


def _g(bps: float | None, digits: int = 4, unit: str = DEFAULT_THROUGHPUT_UNIT) -> str:
    if bps is None or (isinstance(bps, float) and math.isnan(bps)):
        return ""
    return f"{in_unit(bps, unit):.{digits}g}"


def _num(v: Any, fmt: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return format(v, fmt) if isinstance(v, (int, float)) else str(v)


def summary_rows(run: Run, verdicts: dict) -> list[dict[str, str]]:
    """One dict per point, keyed by summary_columns(run.unit)."""
    u = run.unit
    cols = dict(zip(SUMMARY_COLUMNS, summary_columns(u)))
    rows = []
    for p in run.points:
        v: Verdict | None = verdicts.get(p.key)
        row = {
            "client": p.key.client, "rtt_ms": _num(p.x_rtt_ms, "g"), "n": str(p.n),
            "mean_gbps": _g(p.mean_bps, unit=u), "min_gbps": _g(p.min_bps, unit=u),
            "max_gbps": _g(p.max_bps, unit=u),
            "std_gbps": _g(p.std_bps, unit=u) if p.n else "", "path": p.key.path,
            "streams": str(p.key.streams), "concurrency": str(p.key.concurrency),
            "failed": str(p.failed), "window_bound_gbps": _g(shown_window_bound(p), unit=u),
            "path_gbps": _g(p.path_bound_bps(), unit=u),
            "storage_gbps": _g(p.storage_bps, unit=u),
            "cpu_s_per_gb": _num(p.cpu_s_per_gb(), ".3g"),
            "verdict": v.kind if v else "", "detail": v.text() if v else ""}
        rows.append({cols[k]: x for k, x in row.items()})
    return rows


def rtt_table(points: list[Point], stat: Callable[[Point], float],
              unit: str = DEFAULT_THROUGHPUT_UNIT) -> tuple[list[str], list[list[str]]]:
    """Caltech shape: header ['client \\ RTT (ms) [Gbit/s]', '0', '20', ...], rows of the
    throughput in `unit` per RTT (the study's was MB/s: scenario `report: {unit: MB/s}`)."""
    labels = series_labels(points)
    rtts = sorted({p.x_rtt_ms for p in points})
    cells: dict[str, dict[float, str]] = {}
    digits = ".1f" if THROUGHPUT_UNITS[unit] < 1e8 else ".3g"
    for p in points:
        row = cells.setdefault(labels[series_id(p.key)], {})
        row[p.x_rtt_ms] = "failed" if not p.n else format(in_unit(stat(p), unit), digits)
    header = [f"client \\ RTT (ms) [{unit}]"] + [f"{r:g}" for r in rtts]
    body = [[name] + [cells[name].get(r, "") for r in rtts] for name in cells]
    return header, body


def validation_columns(unit: str = DEFAULT_THROUGHPUT_UNIT) -> tuple[str, ...]:
    """validations.csv's columns, the throughput ones (`gbps` in VALIDATION_COLUMNS) in
    `unit`; storage_mbps (MB/s, the disk's usual unit) keeps its name and unit."""
    return tuple(c.replace("gbps", THROUGHPUT_SUFFIX[unit]) for c in VALIDATION_COLUMNS)


def validation_rows(run: Run) -> list[dict[str, str]]:
    """One dict per path check, keyed by validation_columns(run.unit)."""
    u = run.unit
    out = []
    for v in sorted(run.validations, key=lambda v: (v.step, v.phase != "before")):
        out.append({
            "step": str(shown_step(v.step)), "phase": v.phase, "path": v.path,
            "backend": v.backend, "rtt_ms_configured": _num(v.rtt_ms_configured, "g"),
            "rtt_ms_measured": _num(v.rtt_ms_measured),
            "rtt_ms_stddev": _num(v.rtt_ms_stddev, ".3g"),
            "ping_loss": _num(v.ping_loss, ".2%"),
            "loss_configured": _num(v.loss_configured, ".2%"),
            "rate_gbps_configured": _g(v.rate_bps_configured, unit=u),
            "iperf_streams": _num(v.iperf_streams, "d"),
            "iperf_gbps": _g(v.iperf_bps, unit=u),
            "iperf_retransmits": _num(v.iperf_retransmits, "d"),
            "iperf_srtt_ms": _num(v.iperf_srtt_ms),
            "flagged": "FLAGGED" if v.flagged else "ok",
            "flag_reason": v.flag_reason or "",
            "capacity_gbps": _g(v.capacity_bps, unit=u),
            "capacity_note": v.capacity_note or "",
            "storage_file": v.storage_file or "",
            "storage_mbps": _num(v.storage_bps / 8e6, ".4g") if v.storage_bps else "",
            "storage_note": v.storage_note or ""})
    names = dict(zip(VALIDATION_COLUMNS, validation_columns(u)))
    return [{names[k]: x for k, x in r.items()} for r in out]


ENGINE_COLUMNS = ("step", "path", "backend", "phase", "direction", "seen", "released",
                  "dropped_loss", "dropped_queue", "nfq_queue_dropped", "nfq_user_dropped",
                  "dropped_unattributed", "dropped_rate_limiter", "applied_delay_ms",
                  "late_mean_ms", "late_p50_ms", "late_p99_ms", "late_max_ms",
                  "late_share_1ms", "late_over_tol", "engine_cpu", "run_wait_ms",
                  "emulation", "engine")
# One line per step: the engine's own timing beside its independent witness (ping).
TIMING_COLUMNS = ("step", "path", "backend", "phase", "rtt_ms_configured", "tolerance_ms",
                  "engine_late_rtt_ms", "engine_late_p99_ms", "engine_late_max_ms",
                  "engine_late_share", "engine_cpu", "run_wait_ms", "steal_ms", "emulation",
                  "ping_off_ms", "ping", "agreement", "why")


def _step_rtt_ms(run: Run, step: int) -> float | None:
    return next((v.rtt_ms_configured for v in run.validations
                 if v.step == step and v.rtt_ms_configured is not None), None)


def _cpu(st: EmulStats) -> str:
    busy = st.run_s if st.run_s is not None else (
        None if st.cpu_user_s is None else st.cpu_user_s + (st.cpu_sys_s or 0.0))
    return _num(busy / st.wall_s, ".0%") if busy is not None and st.wall_s else ""


def _phase(r: EngineStatsRow) -> str:
    """The engine row's phase as shown: the whole step for rows stored before phases."""
    return {"check-before": "path check (before)", "check-after": "path check (after)",
            "transfers": "transfers"}.get(r.phase or "", "whole step")


def _ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:.3g}"


def engine_rows(run: Run) -> list[dict[str, str]]:
    """Per step and direction, what the emulation backend did during that step (counters
    differenced against the same engine's previous snapshot), keyed by ENGINE_COLUMNS."""
    out = []
    for step in sorted({int(r.step) for r in run.engine}):
        rtt = _step_rtt_ms(run, step)
        tol_s = rtt_tolerance_s((rtt or 0.0) / 1e3)
        for r, st in engine_phase_rows(run, step, ALL_PHASES):
            base = {"step": str(shown_step(step)), "path": r.path, "backend": r.backend,
                    "phase": _phase(r)}
            if isinstance(st, UnreadableStats):
                out.append({**base, "engine": f"unreadable: {st.reason}"})
                continue
            state = ("not alive" if st.alive is False else "alive" if st.alive else "")
            if st.error:
                state = f"{state + ': ' if state else ''}error: {st.error}"
            if st.source_version != STATS_VERSION:
                state += f" (stats v{st.source_version})"
            timed = any(d.lateness is not None and d.lateness.count for d in st.directions)
            late = emulation_late(st, None if rtt is None else rtt / 1e3)
            base.update(emulation="LATE" if late else "on time" if timed else "",
                        engine_cpu=_cpu(st), run_wait_ms=_ms(st.run_wait_s))
            for d in st.directions or (None,):
                row = dict(base, engine=state.strip())
                if d is not None:
                    lat = d.lateness
                    row.update({k: _num(getattr(d, k), "d") for k in ENGINE_COLUMNS[5:13]})
                    share = lat.share_late() if lat else None
                    row.update(direction=d.direction,
                               applied_delay_ms=_ms(d.applied_delay_mean_s),
                               late_mean_ms=_ms(lat.mean_s if lat and lat.count else None),
                               late_p50_ms=_ms(lat.p50_s if lat else None),
                               late_p99_ms=_ms(lat.p99_s if lat else None),
                               late_max_ms=_ms(lat.max_s if lat else None),
                               late_share_1ms=_num(share, ".2%"))
                    so = lat.share_over(tol_s) if lat else None
                    if so:
                        row["late_over_tol"] = f"{so[0]:.2%} > {so[1] * 1e3:.3g} ms"
                out.append(row)
    return out


def timing_rows(run: Run) -> list[dict[str, str]]:
    """Per step, phase and path: the engine's timing (lateness per round trip, worst direction's
    p99 bound, max and share beyond the RTT tolerance, CPU and run-queue wait), its
    "emulation late" flag, and what ping found, with whether the two agree."""
    out = []
    for step in sorted({int(r.step) for r in run.engine}):
        rtt = _step_rtt_ms(run, step)
        tol_s = rtt_tolerance_s((rtt or 0.0) / 1e3)
        for r, st in engine_phase_rows(run, step, ALL_PHASES):
            row = {c: "" for c in TIMING_COLUMNS}
            row.update(step=str(shown_step(step)), path=r.path, backend=r.backend, phase=_phase(r),
                       rtt_ms_configured=_num(rtt, "g"), tolerance_ms=_ms(tol_s))
            late: list[str] = []
            if isinstance(st, EmulStats):
                lat = [d.lateness for d in st.directions if d.lateness and d.lateness.count]
                late = emulation_late(st, None if rtt is None else rtt / 1e3)
                if lat:
                    shares = [x.share_over(tol_s) for x in lat]
                    row.update(engine_late_rtt_ms=f"{sum(x.mean_s for x in lat) * 1e3:.3f}",
                               engine_late_p99_ms=_ms(max(x.p99_s or 0.0 for x in lat)),
                               engine_late_max_ms=_ms(max(x.max_s for x in lat)),
                               engine_late_share=_num(max(s[0] for s in shares if s), ".2%"),
                               emulation="LATE" if late else "on time")
                row.update(engine_cpu=_cpu(st), run_wait_ms=_ms(st.run_wait_s),
                           steal_ms=_ms(st.steal_s))
            # a path check's row against that check's ping; transfers (no ping ran during
            # them) and whole-step rows against every ping of the step
            check = {"check-before": "before", "check-after": "after"}.get(r.phase or "")
            pings = [v for v in run.validations if v.step == step and v.path == r.path
                     and v.rtt_ms_measured is not None and rtt is not None
                     and (check is None or v.phase == check)]
            offs = [v.rtt_ms_measured - rtt for v in pings
                    if v.rtt_ms_measured is not None and rtt is not None]
            ping_flag = any(v.flagged and "RTT" in (v.flag_reason or "")
                            for v in pings)
            if offs:
                worst = max(offs, key=abs)
                row.update(ping_off_ms=f"{worst:+.3f}", ping="off" if ping_flag else "ok")
            if row["emulation"] and row["ping"]:
                row["agreement"] = ("agree" if (row["emulation"] == "LATE") == ping_flag else
                                    "ping off, engine on time" if ping_flag else
                                    "engine late, ping within tolerance")
            row["why"] = "; ".join(late)
            out.append(row)
    return out


def write_tables(run: Run, verdicts: dict, out_dir: Path) -> list[Path]:
    """Write summary.csv, the Caltech-shaped tables and validations.csv; return paths."""
    written = []
    rows = summary_rows(run, verdicts)
    cols = summary_columns(run.unit)
    written.append(write_csv(out_dir / "summary.csv", cols, [[r[c] for c in cols] for r in rows]))
    for name, stat in (("mean", lambda p: p.mean_bps), ("max", lambda p: p.max_bps)):
        header, body = rtt_table(run.points, stat, run.unit)
        written.append(write_csv(out_dir / f"rtt_table_{name}.csv", header, body))
        md = out_dir / f"rtt_table_{name}.md"
        title = (f"Mean throughput ({run.unit}) over repeats" if name == "mean" else
                 f"Highest throughput ({run.unit}) over repeats")
        md.write_text(f"### {title}\n\n" + markdown(header, body))
        written.append(md)
    written += caching.write(run, out_dir, markdown, write_csv)
    written += storage.write(run, out_dir, markdown, write_csv)
    if tls_cost.has_tls(run):
        written += tls_cost.write_table(run, out_dir)
    written += xcache.write(run, out_dir, markdown, write_csv)
    written += small_files.write(run, out_dir, markdown, write_csv)
    written += background.write(run, out_dir, markdown, write_csv)
    written += origins_cores.write(run, verdicts, out_dir, markdown, write_csv)
    written += together.write(run, out_dir, markdown, write_csv)
    vcols = validation_columns(run.unit)
    written.append(write_csv(out_dir / "validations.csv", vcols,
                             [[r[c] for c in vcols] for r in validation_rows(run)]))
    written += concurrency.write(run, out_dir)
    if run.engine:
        written.append(write_csv(out_dir / "emulation_timing.csv", TIMING_COLUMNS,
                                 [[r[c] for c in TIMING_COLUMNS] for r in timing_rows(run)]))
    return written
