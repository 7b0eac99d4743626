"""Synthetic runs written through rig.results.store.Store, where the right answer is known.

Throughput of each transfer is min(concurrency x streams x window / RTT, path rate,
client CPU ceiling) x factor x (1 + noise * N(0, 1)), so a test can state which bound
limits every point and how much a candidate run dropped against its baseline.
"""
from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from rig.results.store import Store


@dataclass(frozen=True)
class Client:
    name: str
    tool: str
    streams: int = 1
    cpu_ceiling_bps: float | None = None    # one saturated thread caps the client here
    cpu_s_per_gb: float = 0.8


DEFAULT_CLIENTS = (
    Client("xrdcp", "xrdcp", 1, cpu_s_per_gb=1.2),
    Client("xrdcp-S4", "xrdcp", 4, cpu_s_per_gb=1.3),
    Client("davix-get", "davix-get", 1, cpu_s_per_gb=0.5),
    Client("curl", "curl", 1, cpu_s_per_gb=0.6),
)
FILE_BYTES = 256 * 2**20
SCENARIO_TEXT = "name: synthetic\npaths:\n  - name: wan\n    rtt: [0ms, 20ms, 60ms, 120ms]\n"

# Shaped like the userspace engine's stats(): one object per direction.
ENGINE_OK = {"backend": "userspace", "alive": True,
             "forward": {"seen": 1000, "released": 1000, "dropped_loss": 0,
                         "dropped_queue": 0, "late_mean_s": 2e-5, "late_max_s": 1e-4,
                         "late_hist": {"0..50us": 1000}},
             "kernel_queues": [{"queue": 1, "queue_dropped": 0, "user_dropped": 0}]}

Factor = Callable[[str, float, int, int], float]


def _ideal_bps(c: Client, rtt_ms: float, conc: int, window: int, rate: float | None,
               streams: int) -> float:
    bounds = [conc * streams * window * 8 / max(rtt_ms / 1e3, 50e-6)]
    if rate:
        bounds.append(rate)
    if c.cpu_ceiling_bps:
        bounds.append(conc * c.cpu_ceiling_bps)
    return min(bounds)


def _environment(store: Store, window: int, env: dict | None) -> None:
    base = {
        "kernel": "6.1.0-synthetic", "backend": "userspace",
        "tools": {"xrdcp": "v5.5.3", "davix-get": "0.8.4", "curl": "7.88.1",
                  "iperf3": "3.12"},
        "sysctls_before": {"net.core.rmem_max": window, "net.ipv4.tcp_congestion_control":
                           "bbr"},
        "sysctls_after": {"net.core.rmem_max": window, "net.ipv4.tcp_congestion_control":
                          "bbr"},
        "tuning": {"congestion_control": "bbr", "tcp_rmem_max": window},
        "scenario_text": SCENARIO_TEXT,
    }
    base.update(env or {})
    for k, v in base.items():
        store.set_env(k, v)


def _validation(store: Store, run_id: str, step: int, rtt: float, rate: float | None,
                flagged: bool, capacity: float) -> None:
    for phase in ("before", "after"):
        store.add_validation({
            "run_id": run_id, "step": step, "phase": phase, "path": "wan",
            "backend": "userspace", "rtt_ms_configured": rtt, "loss_configured": 0.0,
            "rate_bps_configured": rate, "rtt_ms_measured": rtt * (1.1 if flagged else 1)
            + 0.05, "rtt_ms_min": rtt + 0.03, "rtt_ms_max": rtt + 0.2,
            "rtt_ms_stddev": 0.02, "ping_count": 20, "ping_loss": 0.0,
            "iperf_bps": capacity, "iperf_streams": 4, "iperf_retransmits": 0,
            "iperf_srtt_ms": rtt + 0.1, "flagged": int(flagged),
            "flag_reason": "measured RTT 10% above configured" if flagged else None,
            "started_at": 1.7e9 + step, "raw": {}})


def make_run(run_dir: Path, *, run_id: str = "syn", rtts: Iterable[float] = (0, 20, 60, 120),
             clients: Iterable[Client] = DEFAULT_CLIENTS, streams_sweep: Iterable[int] = (),
             concurrency: Iterable[int] = (1,), repeats: int = 3,
             window_bytes: int = 4 * 2**20, rate_bps: float | None = 5e9,
             capacity_bps: float = 4.8e9, noise: float = 0.01,
             factor: Factor | None = None, seed: int = 1,
             flagged_steps: Iterable[int] = (), engine_stats: dict | None = None,
             env: dict | None = None, failing: Iterable[tuple[str, float]] = (),
             engine_by_step: dict[int, dict] | None = None) -> Path:
    """Write run_dir/results.sqlite; `streams_sweep` overrides each client's streams;
    `engine_by_step` gives some steps engine stats of their own."""
    rng = random.Random(seed)
    store = Store.create(Path(run_dir) / "results.sqlite", run_id)
    _environment(store, window_bytes, env)
    flagged, failing = set(flagged_steps), set(failing)
    for step, rtt in enumerate(rtts):
        _validation(store, run_id, step, float(rtt), rate_bps, step in flagged,
                    min(capacity_bps, rate_bps or capacity_bps))
        store.add_engine_stats({"run_id": run_id, "step": step, "path": "wan",
                                "backend": "userspace", "taken_at": 1.7e9 + step,
                                "stats": (engine_by_step or {}).get(step)
                                or engine_stats or ENGINE_OK})
        for c in clients:
            for streams in (tuple(streams_sweep) or (c.streams or 1,)):
                for conc in concurrency:
                    for rep in range(repeats):
                        f = factor(c.name, float(rtt), streams, conc) if factor else 1.0
                        agg = (_ideal_bps(c, rtt, conc, window_bytes, rate_bps, streams)
                               * f * (1 + noise * rng.gauss(0, 1)))
                        ok = (c.name, float(rtt)) not in failing
                        _transfers(store, run_id, step, float(rtt), c, streams, conc, rep,
                                   agg, ok, window_bytes, rate_bps)
    store.close()
    return Path(run_dir)


def _transfers(store: Store, run_id: str, step: int, rtt: float, c: Client, streams: int,
               conc: int, rep: int, agg: float, ok: bool, window: int,
               rate: float | None) -> None:
    per = agg / conc
    duration = FILE_BYTES * 8 / per
    cpu = c.cpu_s_per_gb * FILE_BYTES / 1e9
    if c.cpu_ceiling_bps and agg >= 0.9 * conc * c.cpu_ceiling_bps:
        cpu = duration * 0.98
    for inst in range(conc):
        store.add_transfer({
            "run_id": run_id, "step": step, "path": "wan", "backend": "userspace",
            "rtt_ms_configured": rtt, "rtt_ms_measured": rtt + 0.05,
            "jitter_ms_configured": 0.0, "loss_configured": 0.0,
            "rate_bps_configured": rate, "client": c.name, "tool": c.tool,
            "server": "xrootd", "url": "root://10.0.0.2//data/f256M",
            "streams": streams, "concurrency": conc, "instance": inst, "repeat": rep,
            "file_bytes": FILE_BYTES, "bytes": FILE_BYTES if ok else 0,
            "duration_s": duration, "throughput_bps": per if ok else None,
            "aggregate_bps": agg if ok else None,
            "cpu_user_s": cpu * 0.7, "cpu_sys_s": cpu * 0.3,
            "exit_code": 0 if ok else 54, "ok": int(ok),
            "error": None if ok else "exit 54: connection timed out",
            "argv": [c.tool, "root://10.0.0.2//data/f256M", "/dev/null"],
            "env": {}, "stderr_tail": "", "page_checksum": 1 if c.tool == "xrdcp" else None,
            "congestion_control": "bbr", "tcp_rmem_max": window, "tcp_wmem_max": window,
            "window_bytes": window, "started_at": 1.7e9 + step, "extra": {}})


def downgrade_to_format1(db: Path) -> None:
    """Make a results.sqlite look written by format 1: drop every table and column
    listed in ADDED_AFTER_V1 (what a folder of an older rig does not have)."""
    from rig.results.store import ADDED_AFTER_V1
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for c in sorted(ADDED_AFTER_V1):
        if c in tables:
            con.execute(f"DROP TABLE {c}")
            continue
        for t in tables - ADDED_AFTER_V1:
            if c in {r[1] for r in con.execute(f"PRAGMA table_info({t})")}:
                con.execute(f"ALTER TABLE {t} DROP COLUMN {c}")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    con.commit()
    con.close()
