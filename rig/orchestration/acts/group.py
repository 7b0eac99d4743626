"""Group: one transfer group of a sweep step (rig.description.steps.Group): its clients'
commands, one per origin it is spread over (rig.orchestration.transfer), run with the
group's samplers around them (rig.orchestration.samplers), a row per instance stored as
it lands; under `together:` the group runs on every path of the joint set at once."""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rig.description.units import show_throughput
from rig.description import steps as S
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.description.scenario.queries import runs_on
from rig.errors import RigError, StepAborted
from rig.orchestration import capture, faults, samplers, threadsample, transfer, xcache
from rig.orchestration.actions import PREFIX, Action, Item, cmd, comment, text
from rig.orchestration.acts.data import DOWNLOADS
from rig.orchestration.acts.emulate import recover
from rig.orchestration.acts.pinning import pinned
from rig.orchestration.acts.servers import iperf3_port, plans as server_plans
from rig.orchestration.context import Context, Live, group_kind
from rig.process.proc import ns_argv
from rig.realization import netns
from rig.results.store import ValidationRow
from rig.services import tools

JOINT_START_S = 120.0
LIST_SHOWN = 4             # lines of a long list file `rig plan` shows (a set's files)      # a joint set's paths wait this long for each other to start


@dataclass(frozen=True)
class Group(Action):
    kind: str = "group"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _run_group(ctx, ctx.step_of(self), self.group or 0)


def items(sc: Scenario, g: S.Group, n: netns.RealizedPath, step: S.Step, wd: Path,
          swd: Path) -> list[Item]:
    """A transfer group's lines: its capture, one client command per origin."""
    out: list[Item] = []
    host = step.path.client_host
    at = "" if host == LOCAL else f"@{host} "
    site = n.site
    plans = server_plans(sc, n, swd)
    jobs = transfer.build_jobs(sc, g, plans, n.server_addr, iperf3_port(sc, n), PREFIX,
                               keep_dir=str(wd / DOWNLOADS) if host == LOCAL else None)
    a = tools.get(g.client.tool)
    if site is not None and capture.wanted(step.path.capture, g.client.capture):
        name = capture.group_name(g.client.name, g.streams, g.concurrency, g.repeat, g.tls)
        folder = Path("<out>/captures") / f"step{step.number}"
        out += [cmd(ns_argv(site.router_ns, capture.tcpdump_argv(
            iface, folder / f"{name}-{iface}.pcap",
            max_s=capture.wait_s(sc.transfer_timeout_s))),
            note="   # header capture during the group, then read with scapy")
            for iface in (site.to_server_if, site.to_client_if)]
    seen: set[tuple] = set()
    origins = len({job.origin for job in jobs})
    for i, job in enumerate(jobs):    # one line per distinct command of its instances
        one = g.client.cpus if isinstance(g.client.cpus, str) else None
        pre, argv = pinned(wd.name, f"client-{g.client.name}", one or job.cpus,
                           a.command(job), local=not at and one is not None)
        argv, env = ns_argv(n.client_ns, argv), a.env(job)
        key = (tuple(argv), tuple((env or {}).items()))
        if key in seen:
            continue
        for path, body in job.files:       # an extreme copy's metalink, a set's list
            lines = body.strip().splitlines()
            out.append(text(f"# write {path}:"))
            shown = (lines[:LIST_SHOWN] if job.members and len(lines) > 2 * LIST_SHOWN
                     else lines)
            out += [text(f"#   {ln}") for ln in shown]
            if len(shown) < len(lines):
                out.append(text(f"#   .. {len(lines) - len(shown)} more lines, "
                                f"{len(lines)} in all"))
        if not seen and isinstance(g.client.cpus, tuple):
            out.append(text(f"# instance i on CPU set i of "
                            f"{', '.join(g.client.cpus[:g.concurrency])} (taskset -c each)"))
        out += [text(x) for x in pre]
        if seen:
            note = f"   # instance {i + 1}"
        else:
            note = f"   # x{g.concurrency} at once" if g.concurrency > 1 else ""
            if origins > 1:
                note += f", round-robin over {origins} origins"
        seen.add(key)
        out.append(cmd(argv, host, env, note + f"   # repeat {g.repeat + 1}"))
    out += [cmd(argv, env=env, note=note) for argv, env, note in xcache.shown(g, jobs, plans, n)]
    return out


def joint_note(ms: list[S.Step]) -> Item:
    return text(comment(f"at once on paths {', '.join(m.path.name for m in ms)}"
                        f" (steps {', '.join(str(m.number) for m in ms)})"))


def _run_group(ctx: Context, step: S.Step, gi: int) -> None:
    if step.joint is not None:
        return _run_joint_group(ctx, step, gi)
    live = ctx.lives[step.path_index]
    gs = S.groups(ctx.sc, step.path)
    try:
        _group(ctx, step, live, gs[gi], ctx.commons[step.index], f"{gi + 1}/{len(gs)}")
        _origins_alive(ctx, live)
    except StepAborted as e:
        _step_aborted(ctx, step, live, e)


def _step_aborted(ctx: Context, step: S.Step, live: Live, e: StepAborted) -> None:
    ctx.say(f"  step aborted: {faults.one_line(e)}")
    ctx.store.add_validation(ValidationRow(**ctx.step_fields(step, live),
                                            phase="aborted", flagged=True,
                                            flag_reason=str(e), started_at=time.time()))
    # its later groups and check (a joint set's: every path's later groups) are skipped
    ctx.aborted = step.index if step.joint is None else step.joint
    recover(ctx, live, step)


def _run_joint_group(ctx: Context, step: S.Step, gi: int) -> None:
    """`together:` one group on every path of the joint set at once: a thread per path
    runs its part (its own samplers, rows and checks); all start their clients past
    one barrier, so the transfers overlap as one site's do over several links."""
    ms = S.members(ctx.all_steps, step)
    gs = S.joint_groups(ctx.sc, ms)
    g = gs[gi]
    runs = [m for m in ms if runs_on(g.client, m.path)]
    start = threading.Barrier(len(runs), timeout=JOINT_START_S)
    failed: list[BaseException] = []

    def one(m: S.Step) -> None:
        live = ctx.lives[m.path_index]
        try:
            _group(ctx, m, live, g, ctx.commons[m.index],
                        f"{gi + 1}/{len(gs)} {m.path.name}", start=start)
            _origins_alive(ctx, live)
        except StepAborted as e:
            start.abort()
            _step_aborted(ctx, m, live, e)
        except threading.BrokenBarrierError:    # another path of the set stopped first
            ctx.say(f"  {m.path.name}: group not started (another path of the joint "
                    "set stopped before the start)")
        except BaseException as e:  # noqa: BLE001 - raised again below, in this thread
            start.abort()
            failed.append(e)
    threads = [threading.Thread(target=one, args=(m,), daemon=True) for m in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def _origins_alive(ctx: Context, live: Live) -> None:
    """An origin server of this host that died during the step stops the run: every
    later transfer to it would only measure a refused connection."""
    for origin, pid, how in faults.dead_origins(live.server_svcs):
        del live.server_svcs[origin]
        msg = f"origin {origin} (pid {pid}) on path {live.spec.name} died ({how})"
        ctx.fault("origin-died", msg)
        raise RigError(msg + "; the run cannot go on without it")



def _group(ctx: Context, step: S.Step, live: Live, g: S.Group, common: dict, pos: str,
           start: threading.Barrier | None = None) -> None:
    """The group's transfers, its samplers started before them and stopped after."""
    ctx.watch(live)
    samplers.CacheDrop(ctx, g).start()      # storage: disk: the file's page cache dropped
    jobs = transfer.build_jobs(ctx.sc, g, live.servers, live.server_addr, live.iperf_port,
                               ctx.prefix, checksums=ctx.file_adler32,
                               keep_dir=None if live.client.run_kw() else ctx.keep_dir,
                               sizes=live.endpoint.sizes if live.endpoint else None)
    spids, sids = samplers.server_ids(live, g)
    sender = samplers.sender_of(g)
    cache = samplers.XCache(ctx, g, jobs, live)      # a cold or warm cache
    cache.start()
    scpu = samplers.ServerCpu(live, spids, sids)     # after a warm cache's fill
    scpu.start()
    hcpu = samplers.HostCpu(live)
    hcpu.start()
    quota = samplers.CpuQuota(live, spids)    # each end's cgroup CPU quota, if any
    tcp = samplers.TcpInfo(ctx, live, g, sender)
    cap, thr = samplers.Capture(ctx, step, live, g, sender), samplers.Threads(ctx, live, spids)
    eng = samplers.EngineTiming(live, step.rtt_ms)   # the engine's timing over this group
    eng.start()
    with cap.running(), tcp.running(), thr.running(), quota.running():
        if start is not None:       # a joint set: every path's clients start together
            start.wait()
        outcomes, alive_after = transfer.run_group(
            jobs, live.client_ns, watchdog=lambda: ctx.watch(live),
            on_start=threadsample.on_start(tcp.track, thr.track, quota.track),
            **live.client.run_kw(),
            cgroup=live.client.cgroup(lambda: ctx.client_cgroups.get(g.client.name)))
    eng.stop()
    scpu.stop()
    if alive_after is None:
        try:
            ctx.watch(live)
        except StepAborted as e:
            alive_after = e
    hcpu.stop()
    rows = transfer.rows(outcomes, dict(
        common, concurrency=g.concurrency, repeat=g.repeat,
        server=g.client.server, **hcpu.columns), server_cpu=scpu.value)
    cache.annotate(rows)       # bytes the cache fetched from its origin
    transfer.verify_uploads(outcomes, rows, ctx.sent_adler32)   # then removed
    transfer.verify_downloads(outcomes, rows)     # against the file's adler32; kept removed
    thr.annotate(rows)
    eng.annotate(rows)
    quota.annotate(rows, {i: o.t_start for i, o in enumerate(outcomes)})
    ids: list[tuple[int, int, float]] = []      # (instance, rowid, start): thread rows
    for r in rows:
        if alive_after is not None:   # never store an undelayed measurement as good
            r.ok, r.error = False, f"emulation not in force: {faults.one_line(alive_after)}"
        tid = ctx.store.add_transfer(r)
        ids.append((r.instance, tid, outcomes[r.instance].t_start))
        tcp.stored(r.instance, tid, outcomes[r.instance].t_start)
    tcp.done()
    thr.stored(ids)
    _say(ctx, g, rows, scpu.value, f"{pos}, {ctx.reporter.group_done(group_kind(g))}")
    if alive_after is not None:
        raise alive_after


def _say(ctx: Context, g: S.Group, rows: list, server_cpu: tuple[float, float] | None,
         pos: str) -> None:
    """The group's console line."""
    ok = [r for r in rows if r.ok]
    if ok:
        agg = rows[0].aggregate_bps or sum(r.throughput_bps or 0 for r in ok)
        cpu = sum((r.cpu_user_s or 0) + (r.cpu_sys_s or 0) for r in ok)
        lag = max(json.loads(r.extra or "{}").get("exit_lag_s", 0) or 0 for r in ok)
        note = f", exit lag {lag:.1f}s" if lag > 1.0 else ""
        tls_note = f" tls={g.tls}" if g.tls != "off" else ""
        scpu = (f", server cpu {server_cpu[0] + server_cpu[1]:.2f}s"
                if server_cpu is not None else "")
        files = [r.files_per_s for r in ok if r.files_per_s]
        fps = f"{sum(files):.3g} files/s ({rows[0].files} files), " if files else ""
        ctx.say(f"  [{pos}] {g.client.name}{tls_note} streams={g.streams} x{g.concurrency} "
                f"rep={g.repeat + 1}: {fps}{show_throughput(agg, ctx.sc.report.unit)}, "
                f"{rows[0].duration_s or 0:.2f}s, cpu {cpu:.2f}s{scpu}{note}"
                + ("" if len(ok) == len(rows) else f" ({len(rows) - len(ok)} failed)"))
    else:
        ctx.say(f"  [{pos}] {g.client.name}{' tls=' + g.tls if g.tls != 'off' else ''} "
                f"streams={g.streams} x{g.concurrency} "
                f"rep={g.repeat + 1}: FAILED: {faults.one_line(rows[0].error)}")
