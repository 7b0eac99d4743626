"""BackgroundStart and BackgroundStop: a step's competing flows (`background:`, issue
30): iperf3 -R until stopped, in the client namespace, through the same emulation, with
a settle time before the transfers; stopped after them, a background row each."""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass

from rig.description.units import show_throughput
from rig.description import steps as S
from rig.description.scenario.document import Scenario
from rig.description.scenario.queries import background_on
from rig.orchestration.actions import Action, Item, cmd, comment, text
from rig.orchestration.context import Context
from rig.process import proc
from rig.process.proc import ns_argv
from rig.realization import netns
from rig.results.store import BackgroundRow
from rig.services import servers
from rig.services.tools import iperf3 as iperf3_tool

SETTLE_RTTS = 20       # a competing flow is past its start-up before the transfers begin


@dataclass(frozen=True)
class BackgroundStart(Action):
    kind: str = "background"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        stack.callback(ctx.background_halt)
        _background_start(ctx, ctx.step_of(self))


@dataclass(frozen=True)
class BackgroundStop(Action):
    kind: str = "background"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _background_stop(ctx, ctx.step_of(self))


def start_items(sc: Scenario, step: S.Step, n: netns.RealizedPath) -> list[Item]:
    flows = background_on(sc, step.path)
    return [*(cmd(ns_argv(n.client_ns, iperf3_tool.background_argv(
        n.server_addr, servers.BACKGROUND_PORT + i, b.streams, b.congestion, b.rate_bps)),
        step.path.client_host, note=f"   # {b.name}, until stopped")
        for i, b in enumerate(flows)),
        text(comment("then max(1 s, 20 RTT) for them to settle"))]


def stop_items() -> list[Item]:
    return [text(comment("stop them (TERM: iperf3 prints its summary), a background row "
                         "each; then max(1 s, 10 RTT) for the queue to drain"))]


def _background_start(ctx: Context, step: S.Step) -> None:
    """Each competing flow of the step's path: iperf3 -R until stopped, in the client
    namespace, through the same emulation; then a settle time, max(1 s, 20 RTT)."""
    live = ctx.lives[step.path_index]
    ctx.background_halt()
    for b in background_on(ctx.sc, live.spec):
        argv = iperf3_tool.background_argv(live.server_addr, live.bg_ports[b.name],
                                           b.streams, b.congestion, b.rate_bps)
        log = ctx.workdir / live.spec.name / f"background-{b.name}-{step.index}.json"
        svc = proc.Service(argv, netns=live.client_ns, log_path=log,
                           name=f"background:{b.name}").start()
        ctx.bg_running.append((step, b, svc, time.time()))
    names = ", ".join(b.name for _, b, _, _ in ctx.bg_running)
    ctx.say(f"  background: {names} started")
    time.sleep(max(1.0, SETTLE_RTTS * (step.rtt_s or 0.0)))


def _background_stop(ctx: Context, step: S.Step) -> None:
    """Stop the flows (TERM: iperf3 prints its summary) and store a row each; then
    max(1 s, 10 RTT) for the servers to notice and the queue to drain before the
    path check after (seen without it: ping 22.4 +- 7.0 ms on a 20 ms path)."""
    running, ctx.bg_running = ctx.bg_running, []
    for st, b, svc, t0 in running:
        alive = svc.alive()
        svc.stop()
        got = iperf3_tool.parse_background(svc.log_tail(1 << 20))
        err = got.get("error") or (None if alive else "exited before it was stopped")
        bps = (got["bytes"] * 8 / got["seconds"]) if got.get("seconds") else None
        ctx.store.add_background(BackgroundRow(
            run_id=ctx.run_id, step=st.index, path=st.path.name, flow=b.name,
            tool=b.tool, congestion=b.congestion, congestion_used=got.get("congestion_used"),
            streams=b.streams, rate_bps_configured=b.rate_bps, started_at=t0,
            bytes=got.get("bytes"), seconds=got.get("seconds"), throughput_bps=bps,
            error=err, argv=json.dumps(svc.argv)))
        ctx.say(f"  background {b.name}: " + (f"{show_throughput(bps, ctx.sc.report.unit)} over "
                                                f"{got['seconds']:.1f} s" if bps else
                                                f"no figure ({err})"))
    if running:
        time.sleep(max(1.0, 10 * (step.rtt_s or 0.0)))

