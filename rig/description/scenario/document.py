"""The scenario document: its top-level keys, and the small sections that are only keys
(`validation:`, `sampling:`); the larger sections are declared by paths, clients, sweep,
rig.description.tuningspec and rig.description.storage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.description import limits as L, schema as S
from rig.description.reference import Reference
from rig.description.units import DEFAULT_THROUGHPUT_UNIT, THROUGHPUT_UNITS
from rig.description.scenario.clients import BackgroundSpec, ClientSpec, FileSpec, ServerSpec
from rig.description.scenario.paths import LOCAL, HostSpec, PathSpec, _hosts
from rig.description.scenario.sweep import Sweep, _sweep_ip, _sweep_servers
from rig.description.scenario.topologies import (TOPOLOGY_DIR, Topology, _mininet_scenario,
                                                 _topology_ref, list_topologies,
                                                 parse_topology)
from rig.description.storage import Storage
from rig.description.tuningspec import Tuning


def _ms(parse: S.Parser) -> S.Parser:
    """A duration parser whose value is kept in milliseconds."""
    return S.described(lambda v: parse(v) * 1e3, **S.info(parse), scale=1e-3)


@dataclass(frozen=True)
class Validation:
    # the path check before (and after) each step: ping_count pings, ping_interval apart,
    # then iperf3 for iperf_duration over iperf_streams streams (rig.orchestration.pathcheck)
    ping_count: int = S.spec(S.integer(L.MIN_PING_COUNT, L.MAX_PING_COUNT), 20)
    ping_interval_s: float = S.spec(S.duration_in(L.MIN_PING_INTERVAL_S,
                                                  L.MAX_PING_INTERVAL_S), 0.05,
                                    key="ping_interval")
    iperf_seconds: float = S.spec(S.duration_in(1.0, L.MAX_IPERF_S, whole=True), 3.0,
                                  key="iperf_duration")
    iperf_streams: int = S.spec(S.integer(1, L.MAX_STREAMS), 8)
    # a step is flagged when its ping's mean is off the path's RTT by more than the largest
    # of rtt_tolerance, rtt_tolerance_relative x RTT and (with jitter) 3 standard errors
    rtt_tolerance_ms: float = S.spec(_ms(S.duration_in(0.0, L.MAX_RTT_TOLERANCE_S)), 0.3,
                                     key="rtt_tolerance")
    rtt_tolerance_rel: float = S.spec(S.fraction, 0.01, key="rtt_tolerance_relative")
    # a ping whose RTT is off is taken again, up to this many times, 1 s apart: a step is
    # flagged on its RTT when its last ping is off too. Every attempt is kept in the row
    # (raw: ping_attempts) and said in the progress line (rig.orchestration.pathcheck)
    rtt_rechecks: int = S.spec(S.integer(0, L.MAX_RTT_RECHECKS), 2)
    # each-step: iperf3 before every step (as before). once: on a path whose capacity
    # does not depend on the RTT (no loss, duplication, jitter or configured queue: a
    # delay line sized to the BDP, and a rate), the first step's capacity serves its
    # later steps, which ping only (rig.orchestration.pathcheck.capacity_source)
    capacity: str = S.spec(S.choice("each-step", "once"), "each-step")
    # full: the check after a step is the check before it again. ping: RTT only, and the
    # capacity run too when the ping or the engine's counters flag the step
    after: str = S.spec(S.choice("full", "ping"), "full")


def _or_off(parse: Any, doc: str) -> Any:
    """`parse`, or `off` for None (YAML reads a bare off as false)."""
    @S.describe(**S.info(parse), off=True)
    def p(v: Any) -> float | None:
        if v is False or v == "off":
            return None
        return parse(v)
    p.__doc__ = doc
    return p


_interval_or_off = _or_off(S.duration_in(0.01, 10.0),
                           "A sampling interval (10ms..10s), or `off`.")
_thread_interval = _or_off(S.duration_in(0.01, 0.1),
                           "Per-thread CPU sampling interval (10-100 ms: 10-100 Hz), or `off`.")


@dataclass(frozen=True)
class Sampling:
    # the sending side's tcp_info of every connection of a transfer (issue #15)
    tcp_info_s: float | None = S.spec(_interval_or_off, 0.1, key="tcp_info")
    # per-thread CPU of client and server processes, 10-100 Hz (issue #27)
    threads_s: float | None = S.spec(_thread_interval, 0.1, key="threads")


@dataclass(frozen=True)
class ReportOptions:
    # the one throughput unit of report.html, its CSVs (column suffix: _gbps, _mbyteps, ...)
    # and the console's progress lines
    unit: str = S.spec(S.choice(*THROUGHPUT_UNITS), DEFAULT_THROUGHPUT_UNIT)


def _items(cls: type, limit: int, min_len: int = 1) -> S.Parser:
    return S.list_of(S.section(cls), scalar_ok=False, min_len=min_len, max_len=limit)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str = S.spec(S.name)
    description: str = S.spec(S.text, "")
    # a file in topologies/, or {mininet: FILE, class: NAME, client:, server:}: a Mininet
    # Topo (rig.description.mininet)
    topology: Topology = S.spec(S.with_ctx(_topology_ref),
                                "client-router-server")
    hosts: dict[str, HostSpec] = S.spec(_hosts, {})                 # remote hosts over SSH
    paths: list[PathSpec] = S.spec(_items(PathSpec, L.MAX_PATHS))
    files: list[FileSpec] = S.spec(_items(FileSpec, L.MAX_FILES, 0), [])
    servers: list[ServerSpec] = S.spec(_items(ServerSpec, L.MAX_SERVERS, 0), [])
    clients: list[ClientSpec] = S.spec(_items(ClientSpec, L.MAX_CLIENTS))
    background: list[BackgroundSpec] = S.spec(_items(BackgroundSpec, L.MAX_BACKGROUND, 0), [])
    # several paths in one step (issue 30; seed 004's 10G + 40G frontends): these emulated
    # paths run each transfer group at the same time, their RTT lists swept side by side
    # (step k: each path at its k-th RTT); the report sums them (together.{csv,md})
    together: list[str] = S.spec(S.list_of(S.name, max_len=L.MAX_PATHS), [])
    sweep: Sweep = S.spec(S.section(Sweep), S.EMPTY)
    tuning: Tuning = S.spec(S.section(Tuning), S.EMPTY)
    validation: Validation = S.spec(S.section(Validation), S.EMPTY)
    sampling: Sampling = S.spec(S.section(Sampling), S.EMPTY)
    storage: Storage = S.spec(S.section(Storage), S.EMPTY)     # rig.description.storage
    report: ReportOptions = S.spec(S.section(ReportOptions), S.EMPTY)
    # a client still running this long after its start is ended (its state kept)
    transfer_timeout_s: float = S.spec(S.duration_in(1.0), 600.0, key="transfer_timeout")
    # a study's reference file (reproductions/), relative to this file: rig.description.reference
    reproduces: str | None = S.spec(S.optional(S.path_text), None)
    reference: Reference | None = None   # loaded from `reproduces`, stored with every run
    source: str = ""           # the file it came from
    text: str = ""             # its text, stored with every run

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if isinstance(d["topology"], dict):
            return _mininet_scenario(ctx, d)
        tp = TOPOLOGY_DIR / f"{d['topology']}.yaml"
        if not tp.is_file():
            raise ctx.child("topology").error(
                f"no such topology (have: {', '.join(list_topologies())})", d["topology"])
        # a real path between remote hosts is tuned on those hosts (rig.realization.
        # remote_tuning); one with an end here would need this host's own network tuned
        here = [p.name for p in d["paths"] if p.kind == "real"
                and LOCAL in (p.client_host, p.server_host)]
        t = d["tuning"]
        for attr, v in (("congestion_control", t.congestion_control),
                        ("tcp_rmem_max", t.tcp_rmem_max), ("tcp_wmem_max", t.tcp_wmem_max),
                        ("tcp_rmem_default", t.tcp_rmem_default),
                        ("mtu", None if t.mtu == 1500 else t.mtu)):
            if here and v is not None:   # the rig tunes only namespaces it made
                raise ctx.child("tuning").child(attr).error(
                    f"not applied on real path {here[0]!r} (an end on this host, whose "
                    f"network is not the rig's): tune it yourself and remove this key", v)
        if d["sweep"].ip:
            d = dict(d, **_sweep_ip(ctx, d["paths"], d["clients"], d["sweep"].ip))
        if d["sweep"].origins or d["sweep"].server_cpus:
            d = dict(d, **_sweep_servers(ctx, d["paths"], d["clients"], d["servers"],
                                         d["sweep"]))
        return dict(d, topology=parse_topology(tp))

    def server(self, name: str) -> ServerSpec:
        return next(s for s in self.servers if s.name == name)

    def file(self, name: str) -> FileSpec:
        return next(f for f in self.files if f.name == name)

    def tunes_local(self) -> bool:
        """Does the tuning concern this host (an emulated path, or a real path's end here)?
        A scenario whose paths all run between remote hosts leaves it untouched."""
        return any(LOCAL in (p.client_host, p.server_host) for p in self.paths)

    def remote_hosts(self) -> dict[str, HostSpec]:
        """The declared hosts some path uses, in path order."""
        used = [h for p in self.paths for h in (p.server_host, p.client_host, p.router_host)
                if h is not None and h != LOCAL]
        return {h: self.hosts[h] for h in dict.fromkeys(used)}
