"""CheckBefore and CheckAfter: a sweep step's path check (rig.orchestration.pathcheck):
ping and, where the capacity is measured at this step, iperf3, before its transfers;
again after them (the ping only under `validation.after: ping`, unless the ping or the
engine's counters flag the step); the engine's counters stored per phase."""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from rig.description.units import show_throughput
from rig.description import steps as S
from rig.description.linkstats import EmulStats, emulation_late, late_wakeups, wire_audit
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.errors import RigError
from rig.orchestration import faults, storagecheck
from rig.orchestration.actions import PREFIX, Action, Item, cmd, comment, text
from rig.orchestration.context import Context, Live
from rig.orchestration.pathcheck import (capacity_shown, capacity_source, ping_argv,
                                         retaken, validate_path)
from rig.orchestration.sides import TCP_KEYS
from rig.process.proc import ns_argv
from rig.realization import netns, tuning
from rig.results.store import EngineStatsRow, ValidationRow
from rig.orchestration.acts import endpoint
from rig.orchestration.acts.servers import iperf3_port

# why a path to an external endpoint has no capacity run
EXTERNAL_NOTE = "external endpoint (no iperf3 against a server the rig does not own)"


@dataclass(frozen=True)
class CheckBefore(Action):
    kind: str = "check"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _check_before(ctx, ctx.step_of(self))


@dataclass(frozen=True)
class CheckAfter(Action):
    kind: str = "check"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _check_after(ctx, ctx.step_of(self))


def before_items(sc: Scenario, steps: list[S.Step], step: S.Step,
                 n: netns.RealizedPath) -> list[Item]:
    """The TCP settings the rows record, read at each end; ping; the capacity run where
    this step measures it; the storage check."""
    v = sc.validation
    out = _tcp_reads(step, n)
    out.append(_ping(sc, step, n))
    src = capacity_source(steps, step, v.capacity)
    if src is not None:
        out.append(text(comment(
            f"capacity: step {S.shown_step(src)}'s (validation.capacity: once; measured "
            "here, as below after the transfers, if it had none or the ping flags this "
            "step)")))
    else:
        out += _capacity(sc, step, n)
    if sc.storage.on_disk:          # the storage check and the page-cache drops
        out += storagecheck.plan_step(sc, step, PREFIX)
    return out


def after_items(sc: Scenario, step: S.Step, n: netns.RealizedPath) -> list[Item]:
    full = sc.validation.after == "full"
    out = [text(comment(f"again after step {step.number}'s transfers: the ping" + (
        " and the capacity run (validation.after: full)" if full else
        "; the capacity run too if the ping or the engine's counters flag the step "
        "(validation.after: ping)"))), _ping(sc, step, n)]
    return out + _capacity(sc, step, n)


def _ping(sc: Scenario, step: S.Step, n: netns.RealizedPath) -> Item:
    v = sc.validation
    again = (f"   # again after 1 s, up to {v.rtt_rechecks} times, while its mean is off the RTT "
             "(validation.rtt_rechecks)" if v.rtt_rechecks and step.rtt_ms is not None else "")
    addr = n.server_addr
    if endpoint.has_endpoint(sc):      # the endpoint, against the RTT + its base RTT
        ep = endpoint.endpoint_of(sc).endpoint
        assert ep is not None
        addr = ep.host if ep.is_address else f"<address of {ep.host}>"
        again = "   # expected: the step's RTT + the endpoint's base RTT" + again
    return cmd(ns_argv(n.client_ns, ping_argv(addr, v.ping_count, v.ping_interval_s)),
               step.path.client_host, note=again)


def _tcp_reads(step: S.Step, n: netns.RealizedPath) -> list[Item]:
    """_tuned: the TCP settings in force at each end, read in its namespace (this host's
    own from /proc/sys, a remote host's by its agent: no command)."""
    out = []
    for host, ns in ((step.path.client_host, n.client_ns), (step.path.server_host, n.server_ns)):
        if host == LOCAL and ns:
            out += [cmd(tuning.read_argv(ns, k), host) for k in TCP_KEYS]
    return out


def _capacity(sc: Scenario, step: S.Step, n: netns.RealizedPath) -> list[Item]:
    v = sc.validation
    if endpoint.has_endpoint(sc):
        return [text(comment(f"no capacity run: {EXTERNAL_NOTE}"))]
    own = () if step.path.kind == "real" else tuple(
        ns for ns in (n.client_ns, n.server_ns) if ns)
    shown = capacity_shown(n.client_ns, own, n.server_addr, iperf3_port(sc, n),
                           v.iperf_streams, step.rtt_ms, v.iperf_seconds,
                           local=step.path.client_host == LOCAL)
    return [cmd(ns_argv(n.client_ns, a) if a[0] == "iperf3" else a, step.path.client_host,
                note=note) for a, note in shown]


def _check_before(ctx: Context, step: S.Step) -> None:
    live = ctx.lives[step.path_index]
    ctx.commons[step.index] = common = _common_of(ctx, step, live)
    src = capacity_source(ctx.all_steps, step, ctx.sc.validation.capacity)
    bps = ctx.capacities.get(src) if src is not None else None
    v = _validate(ctx, step, live, "before", common, **(
        {"ping_only": "validation.capacity: once", "reused": (S.shown_step(src), bps)}
        if src is not None and bps else {}))
    if src is None:
        ctx.capacities[step.index] = v["capacity_bps"]
    _engine_stats(ctx, step, live, "check-before")
    ctx.disk.check(step, ctx.step_fields(step, live), ctx.store)    # storage: disk
    common["rtt_ms_measured"] = v["rtt_ms_measured"]


def _check_after(ctx: Context, step: S.Step) -> None:
    live = ctx.lives[step.path_index]
    late = _engine_stats(ctx, step, live, "transfers")
    if ctx.sc.validation.after == "ping":
        _validate(ctx, step, live, "after", ctx.commons[step.index],
                       ping_only="validation.after: ping",
                       escalate="the engine was late during the transfers" if late else None)
    else:
        _validate(ctx, step, live, "after", ctx.commons[step.index])
    _engine_stats(ctx, step, live, "check-after")


def _validate(ctx: Context, step: S.Step, live: Live, phase: str, common: dict,
              **only: Any) -> dict:
    """The path check (`only`: validate_path's ping_only, reused, escalate)."""
    ctx.watch(live)
    addr, rtt_ms, ext = live.server_addr, step.rtt_ms, live.endpoint
    if ext is not None:   # ping only, to the endpoint: the step's RTT plus the base beyond
        addr = ext.addr
        rtt_ms = None if rtt_ms is None else rtt_ms + (ext.base_rtt_ms or 0.0)
        only = {"ping_only": EXTERNAL_NOTE, "never_capacity": True}
    v = validate_path(client_ns=live.client_ns, server_addr=addr, **only,
                      iperf_port=live.iperf_port, configured_rtt_ms=rtt_ms,
                      v=ctx.sc.validation, rate_bps=live.spec.rate_bps,
                      jitter_ms=live.spec.jitter_s * 1e3 if step.profile else 0.0,
                      own_ns=() if live.spec.kind == "real" else tuple(
                          ns for ns in (live.client_ns, live.server_ns) if ns),
                      **live.client.run_kw())
    ctx.watch(live)
    if v["flagged"] and live.site is not None and live.applied:
        # what the wire audit saw meanwhile: the engine's releases, measured by the
        # kernel, beside the RTT the check measured (issue 42)
        try:
            audit = wire_audit(live.backend.stats(live.site).since(live.last_stats))
        except RigError:
            audit = None
        if audit:
            v["flag_reason"] = f"{v['flag_reason']} ({audit})"
    if ext is not None:       # what the RTT was checked against, in the row
        v["raw"] = json.dumps({**json.loads(v["raw"]), "endpoint": ext.ep.url,
                               "endpoint_addr": ext.addr,
                               "endpoint_base_rtt_ms": ext.base_rtt_ms,
                               "rtt_ms_expected": rtt_ms})
    ctx.store.add_validation(ValidationRow(**ctx.step_fields(step, live), phase=phase, **v))
    rtt = f"{v['rtt_ms_measured']:.3f} ms" if v["rtt_ms_measured"] is not None else "n/a"
    flag = f"  FLAGGED: {v['flag_reason']}" if v["flagged"] else "  ok"
    if again := retaken(v["raw"]):
        flag += f" ({again})"
    if v["iperf_streams"] is None:        # a ping-only check
        reused = only.get("reused")
        cap = (f"capacity {show_throughput(v['capacity_bps'], ctx.sc.report.unit)} of step {reused[0]}"
               if reused else f"capacity {v['capacity_note']}")
        ctx.say(f"  validate ({phase}): ping {rtt} (±{v['rtt_ms_stddev'] or 0:.3f}), "
                f"{cap}{flag}")
        return v
    cap = show_throughput(v["iperf_bps"], ctx.sc.report.unit) if v["iperf_bps"] else "n/a"
    if v.get("capacity_note"):
        cap += f" (capacity {v['capacity_note']})"
    srtt = f"{v['iperf_srtt_ms']:.2f} ms" if v["iperf_srtt_ms"] else "n/a"
    ctx.say(f"  validate ({phase}): ping {rtt} (±{v['rtt_ms_stddev'] or 0:.3f}), "
            f"iperf3 -P {v['iperf_streams']} {cap} srtt {srtt}{flag}")
    return v


def _engine_stats(ctx: Context, step: S.Step, live: Live, phase: str) -> bool:
    """One row per phase of a step (check-before, transfers, check-after): the path
    check's iperf3 moves 5-10x the transfers' packets, so a step judged as a whole
    hid what happened during its transfers. True: the engine was late in it."""
    if live.site is None or not live.applied:
        return False
    try:
        stats = live.backend.stats(live.site)
    except RigError as e:
        stats = EmulStats(live.backend.name, error=str(e))
    # the engine counts from its start: judge this phase on what happened since the last
    phase_stats = stats.since(live.last_stats)
    late = emulation_late(phase_stats, None if step.rtt_ms is None else step.rtt_ms / 1e3)
    if late and phase_stats.steal_s:     # the VM lost its CPUs meanwhile: say how long
        late.append(f"host steal {phase_stats.steal_s * 1e3:.0f} ms in this phase")
    if late and (wake := late_wakeups(stats, live.last_stats)):
        late.append(wake)            # guest CPU wait or wake-ups late before it
    if live.stalls:      # its own counters miss a stop: packets waited in the kernel
        late.append(f"engine did not answer for {max(live.stalls):.1f} s "
                    f"({len(live.stalls)} watchdog check(s) >= {faults.STALL_S:g} s): "
                    "stopped or starved of CPU, packets held that much longer")
        live.stalls.clear()
    live.last_stats = stats
    ctx.store.add_engine_stats(EngineStatsRow(
        run_id=ctx.run_id, step=step.index, path=live.spec.name, backend=live.backend.name,
        taken_at=time.time(), stats=stats.to_json(), emulation_late=bool(late),
        emulation_late_reason="; ".join(late) or None, phase=phase))
    if late and phase == "transfers":
        ctx.say(f"  EMULATION LATE (transfers): {'; '.join(late)}")
    elif late:   # the check's iperf3 loads the path to its capacity on purpose
        ctx.say(f"  emulation late during the path check ({phase.removeprefix('check-')}"
                f"; its capacity is the engine's under that load): {'; '.join(late)}")
    return bool(late)


def _common_of(ctx: Context, step: S.Step, live: Live) -> dict:
    return {**_tuned(ctx, step, live), "client_host": live.spec.client_host,
            "server_host": live.spec.server_host}


def _tuned(ctx: Context, step: S.Step, live: Live) -> dict:
    """The TCP settings the step's rows record, read where each end runs."""
    t = ctx.sc.tuning
    c = live.client.tcp(live.client_ns)
    rmem = _max_of(c["net.ipv4.tcp_rmem"]) or t.tcp_rmem_max
    scale = c["net.ipv4.tcp_adv_win_scale"]
    return {**ctx.step_fields(step, live),
            "jitter_ms_configured": live.spec.jitter_s * 1e3 if step.profile else None,
            "congestion_control": c["net.ipv4.tcp_congestion_control"],
            "tcp_rmem_max": rmem,
            "tcp_wmem_max": _max_of(live.server.tcp(live.server_ns)["net.ipv4.tcp_wmem"])
            or t.tcp_wmem_max,
            "window_bytes": tuning.window_bytes(rmem, int(scale) if scale else None)}



def _max_of(tcp_mem: str | None) -> int | None:
    """The maximum of a tcp_rmem/tcp_wmem triple ("min default max")."""
    return int(tcp_mem.split()[2]) if tcp_mem else None
