"""A/B of the userspace engine's timing inside real scenario runs: `rig run SCENARIO` with
RIG_ENGINE_TIMING set per variant, variants alternating (order rotating each repeat),
each run holding /tmp/rig-bench.lock on its own so other work can interleave. Reads back
every run's per-phase engine rows (check-before, transfers, check-after) and prints, per
variant, RTT and phase: the emulation-late verdicts, the share of one direction's packets
beyond the tolerance and beyond 1 ms (the worse direction), p99/max lateness, mean
lateness per round trip, the engine's run-queue wait, host steal, the standby waker's
wake-ups and releases, and the transfers' summed throughput.

    .venv/bin/python bench/quick_ab.py SCENARIO --repeats 4 \\
        --variant twin= --variant notwin=twin_us=0 [--out DIR] [--json out.json]

Must not import reports' charts or matplotlib.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rig.description.linkstats import EmulStats, rtt_tolerance_s  # noqa: E402
from rig.report.model import load_run  # noqa: E402
from rig.report.verdict import ALL_PHASES, engine_phase_rows  # noqa: E402
from rig.results.store import EngineStatsRow  # noqa: E402

LOCK = "/tmp/rig-bench.lock"


def run_once(scenario: Path, out: Path, timing: str, timeout_s: float) -> tuple[int, float]:
    env = dict(os.environ, RIG_ENGINE_TIMING=timing)
    with open(LOCK, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "rig", "run", str(scenario), "--out", str(out)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=timeout_s)
        wall = time.monotonic() - t0
    (out.parent / f"{out.name}.stderr").write_text(p.stderr)
    return p.returncode, wall


def twin_counts(row: EngineStatsRow, prev: EngineStatsRow | None) -> tuple[int | None, int | None]:
    def get(r: EngineStatsRow | None, k: str) -> int:
        if r is None:
            return 0
        return int(json.loads(r.stats).get("extra", {}).get("timing", {}).get(k, 0) or 0)
    t = json.loads(row.stats).get("extra", {}).get("timing", {})
    if "twin_wakeups" not in t:
        return None, None
    return (get(row, "twin_wakeups") - get(prev, "twin_wakeups"),
            get(row, "twin_releases") - get(prev, "twin_releases"))


def hist_deltas(row: EngineStatsRow, prev: EngineStatsRow | None) -> dict[str, list[int]]:
    """The engine's diagnostic histograms (wake_hist, twin_hist, busy_hist) over this phase."""
    def get(r: EngineStatsRow | None) -> dict:
        return {} if r is None else json.loads(r.stats).get("extra", {}).get("timing", {})
    cur, old = get(row), get(prev)
    out = {}
    for k in ("wake_hist", "twin_hist", "busy_hist"):
        if k in cur:
            base = old.get(k) or [0] * len(cur[k])
            out[k] = [a - b for a, b in zip(cur[k], base)]
    return out


def summarize(run_dir: Path) -> list[dict]:
    run = load_run(run_dir)
    out = []
    steps = sorted({r.step for r in run.engine})
    rtt_of = {}
    for v in run.validations:
        rtt_of[v.step] = v.rtt_ms_configured
    for t in run.transfers:
        rtt_of.setdefault(t.step, t.rtt_ms_configured)
    for step in steps:
        rtt_ms = rtt_of.get(step)
        if not rtt_ms:
            continue
        tol = rtt_tolerance_s(rtt_ms / 1e3)
        engine_rows = sorted(run.engine, key=lambda r: (r.step, r.taken_at or 0))
        for row, st in engine_phase_rows(run, step, ALL_PHASES):
            if not isinstance(st, EmulStats):
                continue
            i = engine_rows.index(row)
            prev = engine_rows[i - 1] if i > 0 else None
            tw, tr = twin_counts(row, prev)
            lat = [d.lateness for d in st.directions if d.lateness and d.lateness.count]
            over = [x.share_over(tol) for x in lat]
            out.append({
                "step": step, "rtt_ms": rtt_ms, "phase": row.phase,
                "late": bool(row.emulation_late),
                "packets": sum(x.count for x in lat),
                "over_tol_pct": max((s[0] * 100 for s in over if s), default=None),
                "over_1ms_pct": max((x.share_late() * 100 for x in lat
                                     if x.share_late() is not None), default=None),
                "p99_ms": max(((x.p99_s or 0) * 1e3 for x in lat), default=None),
                "max_ms": max((x.max_s * 1e3 for x in lat), default=None),
                "mean_rt_ms": sum(x.mean_s for x in lat) * 1e3,
                "run_wait_ms": None if st.run_wait_s is None else st.run_wait_s * 1e3,
                "steal_ms": None if st.steal_s is None else st.steal_s * 1e3,
                "twin_wakeups": tw, "twin_releases": tr, **hist_deltas(row, prev),
                "gbps": (sum(t.throughput_bps or 0 for t in run.transfers
                             if t.step == step and t.ok) / 1e9
                         if row.phase == "transfers" else None)})
    return out


def fmt(x: float | None, f: str = ".2f") -> str:
    return "–" if x is None else format(x, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME=RIG_ENGINE_TIMING (may be empty: the default)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/rig-quick-ab"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    variants = [tuple(v.split("=", 1)) for v in a.variant]
    a.out.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    for rep in range(a.repeats):
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        for name, timing in order:
            d = a.out / f"{name}-{rep}"
            rc, wall = run_once(a.scenario, d, timing, a.timeout)
            rows = summarize(d) if rc == 0 else []
            results.append({"variant": name, "timing": timing, "repeat": rep, "rc": rc,
                            "wall_s": wall, "dir": str(d), "rows": rows})
            late = [f"{r['rtt_ms']:g}ms/{r['phase']}" for r in rows if r["late"]]
            tr = [f"{r['rtt_ms']:g}ms {fmt(r['over_1ms_pct'])}%>1ms {fmt(r['gbps'])}G"
                  for r in rows if r["phase"] == "transfers"]
            print(f"[{name} #{rep}] rc={rc} {wall:.0f}s late={late or 'none'} "
                  f"transfers: {'; '.join(tr)}", flush=True)
            if a.json:
                a.json.write_text(json.dumps(results, indent=1))
    print("\n| variant | RTT | phase | runs late | > tol % (each run) | > 1 ms % (each run) | "
          "max ms (each run) | mean/RT ms (median) | run wait ms (median) | standby "
          "wake-ups / releases (sum) | Σ Gbit/s (each run) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(r["rtt_ms"], r["phase"] or "") for x in results for r in x["rows"]})
    for name, _ in variants:
        for rtt, phase in keys:
            rs = [r for x in results if x["variant"] == name for r in x["rows"]
                  if r["rtt_ms"] == rtt and (r["phase"] or "") == phase]
            if not rs:
                continue
            tw = [r["twin_wakeups"] for r in rs if r["twin_wakeups"] is not None]
            tr = [r["twin_releases"] for r in rs if r["twin_releases"] is not None]
            gb = [r["gbps"] for r in rs if r["gbps"] is not None]
            print(f"| {name} | {rtt:g} | {phase} | {sum(r['late'] for r in rs)}/{len(rs)} | "
                  f"{', '.join(fmt(r['over_tol_pct']) for r in rs)} | "
                  f"{', '.join(fmt(r['over_1ms_pct']) for r in rs)} | "
                  f"{', '.join(fmt(r['max_ms'], '.1f') for r in rs)} | "
                  f"{fmt(statistics.median(r['mean_rt_ms'] for r in rs), '.3f')} | "
                  f"{fmt(statistics.median(r['run_wait_ms'] or 0 for r in rs), '.0f')} | "
                  f"{(str(sum(tw)) + ' / ' + str(sum(tr))) if tw else '–'} | "
                  f"{', '.join(fmt(g) for g in gb) or '–'} |")


if __name__ == "__main__":
    main()
