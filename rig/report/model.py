"""Measurement points built from a run's stored results: the one input of charts,
tables, verdicts and comparisons.

A *point* is one (path, RTT, client configuration, streams, concurrency) cell of a sweep;
its samples are the aggregate throughputs of its repeats (concurrency N stores N rows
with one aggregate_bps per repeat). Everything here is read from results.sqlite alone.

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul.
"""
from __future__ import annotations

import json
import math
import sqlite3
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rig.description.units import DEFAULT_THROUGHPUT_UNIT, THROUGHPUT_UNITS
from rig.errors import InputError
from rig.report.style import sort_key
from rig.results import check as results_check
from rig.results.store import ActionRow, BackgroundRow, CaptureFlowRow, EngineStatsRow, Store, \
    TcpSample, ThreadCpu, TransferRow, ValidationRow

# Per-measurement settings that, when they differ between two runs, explain a change.
SETTINGS = ("backend", "window_bytes", "tcp_rmem_max", "tcp_wmem_max",
            "congestion_control", "page_checksum", "file_bytes", "tool")


@dataclass(frozen=True)
class Key:
    """What a measurement is matched on, within a run and between runs."""
    path: str
    rtt_ms: float | None          # configured RTT; None on a real (not emulated) path
    client: str
    streams: int
    concurrency: int

    def label(self) -> str:
        rtt = "real" if self.rtt_ms is None else f"{self.rtt_ms:g} ms"
        return (f"{self.path} {rtt} {self.client} streams={self.streams} "
                f"conc={self.concurrency}")


def key_order(k: Key) -> tuple:
    return (k.path, k.rtt_ms if k.rtt_ms is not None else -1.0, sort_key(k.client),
            k.streams, k.concurrency)


@dataclass
class GroupCpu:
    """One transfer group's CPU on its host(s), from its rows' host_cpu_* columns: the
    busy share of the busier host (client's, or server's when elsewhere), that host's
    CPU count, the wall time between the marks, and the CPU seconds of the group's
    clients, servers and the emulation engine over it."""
    share: float
    cpus: int | None
    wall_s: float
    client_s: float = 0.0
    server_s: float = 0.0
    engine_s: float | None = None
    irq_share: float | None = None      # of the client's host: interrupts and softirqs
    steal_share: float | None = None    # of the client's host: the hypervisor's

    def cores(self, seconds: float | None) -> float | None:
        return seconds / self.wall_s if seconds is not None and self.wall_s > 0 else None


@dataclass
class Point:
    key: Key
    tool: str
    samples_bps: list[float] = field(default_factory=list)   # one per ok repeat
    failed: int = 0                                           # repeats with a failure
    errors: list[str] = field(default_factory=list)
    window_bytes: int | None = None         # computed from tcp_rmem when run (tuning.window_bytes)
    # the largest receive window the receiver advertised, per connection (the sender's
    # tcp_info snd_wnd, median over the point's data connections): the kernel's own
    # figure, which the window bound prefers (Linux 6.x: ~0.75 x tcp_rmem here, not 0.5)
    adv_window_bytes: int | None = None
    rate_bps: float | None = None           # configured path rate (None: unlimited)
    capacity_bps: float | None = None       # validated iperf3 goodput of the step
    rtt_ms_measured: float | None = None
    loss_configured: float | None = None
    cpu_s: list[float] = field(default_factory=list)         # per process, user+sys
    cpu_sys_s: float = 0.0                                    # sum over processes
    cpu_ratio: list[float] = field(default_factory=list)     # per process, cpu / wall
    # per process that measured it over its own wall (replays: extra.cpu_wait_s): (cpu /
    # wall, time runnable but waiting in a run queue for a CPU / wall)
    runnable: list[tuple[float, float]] = field(default_factory=list)
    tls: str = "off"                                          # off | control | all
    base_client: str = ""                                     # client name without TLS
    server_cpu_s: list[float] = field(default_factory=list)  # per process: group's / N
    server_cpu_sys_s: float = 0.0
    bytes_ok: int = 0
    steps: set[int] = field(default_factory=set)
    # the engine's timing over the point's own groups (extra.engine_late, rows since issue
    # 38): per step, the reasons of its late groups ([]: every group kept time); a step
    # with a row that lacks it (older runs, no engine) is absent: judged by its phase
    engine_late_groups: dict[int, list[str]] = field(default_factory=dict)
    engine_untimed_steps: set[int] = field(default_factory=set)
    settings: dict[str, set] = field(default_factory=lambda: defaultdict(set))
    # caching-mode replays (NULL columns elsewhere): per ok process
    round_trips: list[int] = field(default_factory=list)
    durations_s: list[float] = field(default_factory=list)
    cache_mode: str | None = None
    read_library: str | None = None
    branch_fraction: float | None = None
    server: str | None = None
    rounds_s: list[list[float]] = field(default_factory=list)   # extra.round_s, per process
    round_bytes: list[list[int]] = field(default_factory=list)  # extra.round_bytes, per process
    storage_bps: float | None = None        # storage: disk: the step's cold dd read (slowest file)
    # a storage check's figure, not a transfer (rig.report.against.storage_points):
    # storage-read (cold dd), storage-cached (the same again), storage-write (the file's write)
    measure: str | None = None
    # read through a cache holding all of the file (extra.cache "warm" on every row): its
    # bytes never crossed the emulated path, so the path's bounds do not apply
    warm_cache: bool = False
    # the host CPU of each of the point's groups (rows' host_cpu_* columns), keyed by
    # (step, repeat): the busier host's share, its CPUs, and cores used over the group
    host_cpu: dict[tuple[int, int], "GroupCpu"] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.samples_bps)

    @property
    def mean_bps(self) -> float:
        return statistics.fmean(self.samples_bps) if self.samples_bps else math.nan

    @property
    def min_bps(self) -> float:
        return min(self.samples_bps) if self.samples_bps else math.nan

    @property
    def max_bps(self) -> float:
        return max(self.samples_bps) if self.samples_bps else math.nan

    @property
    def std_bps(self) -> float:
        return statistics.stdev(self.samples_bps) if self.n > 1 else 0.0

    @property
    def x_rtt_ms(self) -> float:
        """RTT used as a chart axis: configured, or measured on a real path."""
        if self.key.rtt_ms is not None:
            return self.key.rtt_ms
        return self.rtt_ms_measured or 0.0

    def window_bound_bps(self) -> float | None:
        """concurrency x streams x window / RTT (measured RTT when known), bits/s; None for
        reads from a warm cache on the client's LAN (they do not cross the path)."""
        if self.warm_cache:
            return None
        rtt = self.rtt_ms_measured or self.key.rtt_ms
        window = self.window()
        if not window or not rtt or rtt <= 0:
            return None
        return self.key.concurrency * self.key.streams * window * 8 / (rtt / 1e3)

    def window(self) -> int | None:
        """Per-stream window of the bound: the advertised one when the kernel's was sampled
        and the configured buffer could hold more (autotuning had room to grow it), else
        the one computed from tcp_rmem."""
        if self.adv_window_bytes and (not self.window_bytes
                                      or self.adv_window_bytes > self.window_bytes):
            return self.adv_window_bytes
        return self.window_bytes

    def path_bound_bps(self) -> float | None:
        """What the path carries: the smaller of the validated capacity and the rate (None
        for reads from a warm cache: the path's check is of the WAN they do not cross)."""
        if self.warm_cache:
            return None
        vals = [v for v in (self.capacity_bps, self.rate_bps) if v]
        return min(vals) if vals else None

    def cpu_s_per_gb(self) -> float | None:
        if not self.bytes_ok or not self.cpu_s:
            return None
        return sum(self.cpu_s) / (self.bytes_ok / 1e9)

    def server_cpu_s_per_gb(self) -> float | None:
        if not self.bytes_ok or not self.server_cpu_s:
            return None
        return sum(self.server_cpu_s) / (self.bytes_ok / 1e9)


@dataclass
class Run:
    dir: Path
    meta: dict[str, str]
    env: dict[str, Any]
    transfers: list[TransferRow]
    validations: list[ValidationRow]
    engine: list[EngineStatsRow]
    points: list[Point]
    tcp: list[TcpSample] = field(default_factory=list)   # tcp_samples with their transfer
    captures: list[CaptureFlowRow] = field(default_factory=list)   # header captures' flows
    actions: list[ActionRow] = field(default_factory=list)    # the plan's actions as executed
    threads: list[ThreadCpu] = field(default_factory=list)    # thread_cpu with their transfer
    background: list[BackgroundRow] = field(default_factory=list)   # competing flows

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id", self.dir.name)

    @property
    def unit(self) -> str:
        """The report's one throughput unit: the scenario's `report.unit` as the run
        stored it, Gbit/s for runs written before that key (or with an unknown value)."""
        u = self.env.get("report_unit")
        return u if u in THROUGHPUT_UNITS else DEFAULT_THROUGHPUT_UNIT

    def paths(self) -> list[str]:
        return sorted({p.key.path for p in self.points})

    def validations_for(self, steps: set[int]) -> list[ValidationRow]:
        return [v for v in self.validations if v.step in steps]


class PointRow(Protocol):
    """The columns that place a row in a point: a transfer, or a sample joined with its
    transfer (rig.results.store.OfTransfer)."""
    path: str
    rtt_ms_configured: float | None
    client: str
    tls: str | None
    streams: int
    concurrency: int


def tls_mode(row: PointRow) -> str:
    return row.tls or "off"          # NULL: a run from before TLS existed


def client_label(row: PointRow) -> str:
    """The client configuration a point belongs to: its name, plus the TLS mode when on
    (so charts, tables and comparisons keep TLS and plain apart)."""
    t = tls_mode(row)
    return row.client if t == "off" else f"{row.client} tls={t}"


def _key(row: PointRow) -> Key:
    rtt = row.rtt_ms_configured
    return Key(row.path, None if rtt is None else float(rtt), client_label(row),
               int(row.streams), int(row.concurrency))


def _group_value(rows: list[TransferRow]) -> float | None:
    """Aggregate throughput of one repeat (N concurrent rows), None if it failed."""
    if not all(r.ok for r in rows):
        return None
    for r in rows:
        if r.aggregate_bps is not None:
            return float(r.aggregate_bps)
    vals = [r.throughput_bps for r in rows if r.throughput_bps is not None]
    return float(sum(vals)) if vals else None


def _add_process(p: Point, r: TransferRow) -> None:
    for name in SETTINGS:
        if getattr(r, name) is not None:
            p.settings[name].add(getattr(r, name))
    if r.window_bytes:
        p.window_bytes = int(r.window_bytes)
    if r.rate_bps_configured:
        p.rate_bps = float(r.rate_bps_configured)
    p.loss_configured = r.loss_configured
    p.steps.add(int(r.step))
    late, st = _json_field(r.extra, "engine_late"), int(r.step)
    if isinstance(late, list) and st not in p.engine_untimed_steps:
        have = p.engine_late_groups.setdefault(st, [])
        have += [x for x in dict.fromkeys(map(str, late)) if x not in have]
    else:
        p.engine_untimed_steps.add(st)
        p.engine_late_groups.pop(st, None)
    if not r.ok:
        if r.error:
            p.errors.append(str(r.error))
        return
    p.bytes_ok += int(r.bytes or 0)
    if r.cache_mode is not None:
        p.cache_mode, p.read_library = r.cache_mode, r.read_library
        p.branch_fraction, p.server = r.branch_fraction, r.server
        if r.round_trips is not None and r.duration_s:
            p.round_trips.append(int(r.round_trips))
            p.durations_s.append(float(r.duration_s))
            rounds = _json_field(r.extra, "round_s")
            if isinstance(rounds, list) and rounds:
                p.rounds_s.append([float(x) for x in rounds])
            sizes = _json_field(r.extra, "round_bytes")
            if isinstance(sizes, list) and sizes and all(isinstance(x, int) for x in sizes):
                p.round_bytes.append(sizes)
    cpu = (r.cpu_user_s or 0.0) + (r.cpu_sys_s or 0.0)
    if r.cpu_user_s is not None or r.cpu_sys_s is not None:
        p.cpu_s.append(cpu)
        p.cpu_sys_s += r.cpu_sys_s or 0.0
        if r.duration_s:
            p.cpu_ratio.append(cpu / float(r.duration_s))
            wait = _json_field(r.extra, "cpu_wait_s")
            if isinstance(wait, (int, float)) and wait >= 0:
                p.runnable.append((cpu / float(r.duration_s), wait / float(r.duration_s)))
    if r.server_cpu_user_s is not None or r.server_cpu_sys_s is not None:
        p.server_cpu_s.append((r.server_cpu_user_s or 0.0)
                              + (r.server_cpu_sys_s or 0.0))
        p.server_cpu_sys_s += r.server_cpu_sys_s or 0.0
    _add_host_cpu(p, r, cpu)


# A measure taken around a process (the group's host-CPU marks, its threads' busy time)
# says something of its transfer only when the transfer fills at least this share of it:
# a replay of 20 ms in a process of 0.45 s (its ROOT setup) does not.
WINDOW_FILL = 0.5


def _add_host_cpu(p: Point, r: TransferRow, client_cpu_s: float) -> None:
    """The row's share of its group's host CPU (GroupCpu), when the run recorded it and
    the transfer filled at least WINDOW_FILL of the time between the marks."""
    shares = [float(x) for x in (r.host_cpu_share, r.server_host_cpu_share)
              if x is not None]
    wall = r.host_cpu_wall_s
    if not shares or not wall or (r.duration_s or 0.0) < WINDOW_FILL * wall:
        return
    key = (int(r.step), int(r.repeat or 0))
    g = p.host_cpu.get(key)
    if g is None:
        eng = r.engine_cpu_s
        g = p.host_cpu[key] = GroupCpu(max(shares), r.host_cpus, float(wall),
                                       engine_s=None if eng is None else float(eng),
                                       irq_share=r.host_irq_share,
                                       steal_share=r.host_steal_share)
    g.client_s += client_cpu_s
    g.server_s += (r.server_cpu_user_s or 0.0) + (r.server_cpu_sys_s or 0.0)


def _json_field(text: Any, name: str) -> Any:
    """One field of a row's `extra` JSON (None when absent or unreadable)."""
    try:
        d = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return d.get(name) if isinstance(d, dict) else None


def _attach_validations(p: Point, validations: list[ValidationRow]) -> None:
    vals = [v for v in validations if v.step in p.steps]
    before = [v for v in vals if v.phase == "before"] or vals
    # capacity_bps: measured past slow start and not window-limited; NULL with a note:
    # not measured. Folders from before the column (both NULL): the iperf3 goodput.
    # Before and after the transfers: two samples of one path, the mean of both is the
    # steadier figure on a shared machine (seen: 11.8 and 17.3 Gbit/s at one 120 ms step).
    checks = [v for v in vals if v.phase in ("before", "after")] or before
    caps = [v.capacity_bps if v.capacity_bps or v.capacity_note
            else v.iperf_bps for v in checks]
    got = [c for c in caps if c]
    if got:
        p.capacity_bps = statistics.fmean(got)
    # storage: disk: dd's cold read of the served file(s), its own rows (phase storage);
    # the slowest of a step's files, the mean over the point's steps
    disk: dict[int, float] = {}
    for v in vals:
        if v.phase == "storage" and v.storage_bps:
            disk[v.step] = min(disk.get(v.step, math.inf), float(v.storage_bps))
    if disk:
        p.storage_bps = statistics.fmean(disk.values())
    before = [v for v in before if v.phase != "storage"] or before
    rtts = [v.rtt_ms_measured for v in before if v.rtt_ms_measured is not None]
    if rtts:
        p.rtt_ms_measured = statistics.fmean(rtts)


def build_points(transfers: list[TransferRow], validations: list[ValidationRow]) -> list[Point]:
    groups: dict[Key, dict[tuple[int, int], list[TransferRow]]] = \
        defaultdict(lambda: defaultdict(list))
    for r in transfers:
        groups[_key(r)][(int(r.step), int(r.repeat))].append(r)
    points = []
    for key, reps in groups.items():
        first = next(iter(reps.values()))[0]
        p = Point(key, str(first.tool), tls=tls_mode(first), base_client=first.client)
        for rows in reps.values():
            for r in rows:
                _add_process(p, r)
            value = _group_value(rows)
            if value is None:
                p.failed += 1
            else:
                p.samples_bps.append(value)
        _attach_validations(p, validations)
        p.warm_cache = all(_json_field(r.extra, "cache") == "warm"
                           for rows in reps.values() for r in rows)
        if p.rtt_ms_measured is None:
            meas = [m for rows in reps.values() for r in rows
                    if (m := r.rtt_ms_measured) is not None]
            p.rtt_ms_measured = statistics.fmean(meas) if meas else None
        points.append(p)
    return sorted(points, key=lambda q: key_order(q.key))


def load_run(run_dir: Path) -> Run:
    """Read everything a report needs; raises rig.errors.InputError for a bad directory."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise InputError("results folder does not exist", file=str(run_dir))
    if not run_dir.is_dir():
        raise InputError("not a folder (give the run's folder, which holds results.sqlite)",
                         file=str(run_dir))
    db = run_dir / "results.sqlite"
    if not db.is_file():
        raise InputError("no results.sqlite in this folder" if not db.exists() else
                         "results.sqlite is not a file", file=str(run_dir))
    results_check.check(db)          # one line per defect, before anything is read
    store = Store.open(run_dir)
    try:
        transfers = store.transfers()      # columns an older file lacks read as None
        validations = store.validations()
        engine = store.engine_stats()
        tcp = store.tcp_samples()
        captures = store.capture_flows()
        actions = store.actions()
        threads, background = store.thread_cpu(), store.background()
        meta, env = store.meta(), store.environment()
    except (sqlite3.DatabaseError, ValueError) as e:
        raise InputError(f"unreadable results database ({e})", file=str(store.path)) from e
    finally:
        store.close()
    points = build_points(transfers, validations)
    advertised_windows(points, tcp)
    return Run(store.path.parent, meta, env, transfers, validations, engine,
               points, tcp, captures, actions, threads, background)


DATA_SHARE = 0.01   # connections with < 1 % of a transfer's bytes acked carry no data


def advertised_windows(points: list[Point], tcp: list[TcpSample]) -> None:
    """Set each point's adv_window_bytes: the largest snd_wnd of each data connection of
    its ok transfers (the receiver's advertised window, seen by the sender), median."""
    top: dict[tuple[int, int], int] = defaultdict(int)
    acked: dict[tuple[int, int], int] = defaultdict(int)
    key_of: dict[int, Key] = {}
    for s in tcp:
        if not s.ok or s.snd_wnd_bytes is None:
            continue
        c = (s.transfer_id, s.conn)
        top[c] = max(top[c], s.snd_wnd_bytes)
        acked[c] = max(acked[c], s.bytes_acked or 0)
        key_of[s.transfer_id] = _key(s)
    total: dict[int, int] = defaultdict(int)
    for (tid, _), a in acked.items():
        total[tid] += a
    per: dict[Key, list[int]] = defaultdict(list)
    for c, w in top.items():
        if w > 0 and acked[c] >= DATA_SHARE * total[c[0]]:
            per[key_of[c[0]]].append(w)
    for p in points:
        if per.get(p.key):
            p.adv_window_bytes = int(statistics.median(per[p.key]))


SeriesId = tuple[str, str, int, int]        # path, client, streams, concurrency


def series_id(k: Key) -> SeriesId:
    return (k.path, k.client, k.streams, k.concurrency)


def series_labels(points: list[Point], *, with_concurrency: bool = True
                  ) -> dict[SeriesId, str]:
    """Short, unambiguous row/line labels: the client configuration name, with streams,
    concurrency or path added only when the run varies them for that client."""
    paths = {p.key.path for p in points}
    streams: dict[str, set[int]] = defaultdict(set)
    concs: dict[str, set[int]] = defaultdict(set)
    for p in points:
        streams[p.key.client].add(p.key.streams)
        concs[p.key.client].add(p.key.concurrency)
    out = {}
    for p in points:
        k = p.key
        label = k.client
        if len(streams[k.client]) > 1:
            label += f" ({k.streams} stream{'s' if k.streams != 1 else ''})"
        if with_concurrency and len(concs[k.client]) > 1:
            label += f" x{k.concurrency}"
        if len(paths) > 1:
            label = f"{k.path}: {label}"
        out[series_id(k)] = label
    return out
