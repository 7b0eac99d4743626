"""What is measured or prepared around one transfer group, one sampler per concern, each
with a `start` (before the group's transfers) and a `stop` (after them): the page-cache
drop of a disk origin, a cold or warm XCache, the server's CPU, the hosts' CPU, the
header capture, the tcp_info sampling and the per-thread CPU sampling. The group
(rig.orchestration.acts.group) starts them in order and stops them in reverse; those
that wrap a context manager run inside `running()`, so an error in the transfers reaches
them as it would a `with`.
"""
from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from rig.description import steps as S
from rig.description.linkstats import EmulStats, emulation_late
from rig.errors import RigError
from rig.orchestration import capture, sides, tcpsample, threadsample, xcache
from rig.orchestration.context import Context, Live
from rig.orchestration.transfer import Job
from rig.process import cgroupcpu, cputree
from rig.services import tools


class Sampler:
    """One concern around a group: start() before its transfers, stop() after them."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        self.start()
        yield self
        self.stop()


class Wrapping(Sampler):
    """A sampler over a context manager (`open`): entered at start, left at stop; an
    error of the transfers is handed to it as a `with` would."""
    value: Any = None
    _cm: contextlib.AbstractContextManager | None = None

    def open(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def start(self) -> None:
        self._cm = self.open()
        self.value = self._cm.__enter__()

    def stop(self) -> None:
        assert self._cm is not None
        self._cm.__exit__(None, None, None)
        self.after()

    def after(self) -> None:
        pass

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        self.start()
        try:
            yield self
        except BaseException:
            assert self._cm is not None
            if not self._cm.__exit__(*sys.exc_info()):
                raise
        else:
            self.stop()


class CacheDrop(Sampler):
    """storage: disk: the file's page cache dropped before the group (a cold read)."""

    def __init__(self, ctx: Context, g: S.Group) -> None:
        self.ctx, self.g = ctx, g

    def start(self) -> None:
        self.ctx.disk.before_group(self.g)


class XCache(Sampler):
    """A client that reads through a cache: cold or warm (its fill before the group);
    after it, the bytes the cache fetched from its origin on each row."""

    def __init__(self, ctx: Context, g: S.Group, jobs: list[Job], live: Live) -> None:
        self.ctx, self.g, self.jobs, self.live = ctx, g, jobs, live
        self.cache: xcache.CacheGroup | None = None

    def start(self) -> None:
        self.cache = xcache.begin(self.g, self.jobs, self.live.servers, self.live.path,
                                  say=self.ctx.say, timeout_s=self.ctx.sc.transfer_timeout_s)

    def annotate(self, rows: list) -> None:
        if self.cache is not None:
            self.cache.annotate(rows)


def server_ids(live: Live, g: S.Group) -> tuple[list[int], list[str]]:
    """The group's server's processes: pids on this host, pid files on another."""
    mine = live.servers.get(g.client.server or "", [])
    return ([live.server_pids[p.origin] for p in mine if p.origin in live.server_pids],
            [live.server_ids[p.origin] for p in mine if p.origin in live.server_ids])


class ServerCpu(Sampler):
    """The server's CPU (user, sys) over the group, every origin of it."""

    def __init__(self, live: Live, pids: list[int], ids: list[str]) -> None:
        self.live, self.pids, self.ids = live, pids, ids
        self.value: tuple[float, float] | None = None

    def start(self) -> None:
        # an external endpoint's CPU is not the rig's to read: unknown, not zero
        self.cpu0 = (None if self.live.endpoint is not None
                     else self.live.server.server_cpu(self.pids, self.ids))

    def stop(self) -> None:
        if self.cpu0 is None:
            return
        cpu1 = self.live.server.server_cpu(self.pids, self.ids)
        if self.cpu0 is not None and cpu1 is not None:
            self.value = (cpu1[0] - self.cpu0[0], cpu1[1] - self.cpu0[1])


@dataclass(frozen=True)
class HostCpuMark:
    """A group's start or end for its host CPU columns."""
    t: float                                # monotonic
    client: cputree.HostCpu | None          # the client's host
    server: cputree.HostCpu | None          # the server's, when another host
    engine: tuple[float, float] | None      # the engine's (user, sys) so far, here


class HostCpu(Sampler):
    """The group's host CPU columns (the same on each of its rows): how busy the
    client's host was over the group (of it: interrupts, steal), the server's host's
    share when another host, the client's host's CPU count, the wall time between the
    two marks, and the engine's CPU over it."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.columns: dict = {}

    def mark(self) -> HostCpuMark:
        live = self.live
        other = live.server.host != live.client.host
        pids = live.backend.engine_pids(live.site) if live.site is not None else []
        return HostCpuMark(time.monotonic(), live.client.host_cpu(),
                           live.server.host_cpu() if other else None,
                           sides.tree_cpu(pids) if pids else None)

    def start(self) -> None:
        self.before = self.mark()

    def stop(self) -> None:
        before, after = self.before, self.mark()

        def share(a: cputree.HostCpu | None, b: cputree.HostCpu | None,
                  what: str = "busy_s") -> float | None:
            return b.share_since(a, what) if a is not None and b is not None else None
        eng = (sum(after.engine) - sum(before.engine)
               if before.engine is not None and after.engine is not None else None)
        self.columns = {"host_cpu_share": share(before.client, after.client),
                        "host_irq_share": share(before.client, after.client, "irq_s"),
                        "host_steal_share": share(before.client, after.client, "steal_s"),
                        "host_cpus": after.client.cpus if after.client else None,
                        "server_host_cpu_share": share(before.server, after.server),
                        "host_cpu_wall_s": after.t - before.t,
                        "engine_cpu_s": max(0.0, eng) if eng is not None else None}


class EngineTiming(Sampler):
    """The engine's release timing over this group alone (issue 38): its statistics
    snapshotted before and after the group's transfers and differenced, judged as a
    step's transfers phase is (linkstats.emulation_late). A step's phase row mixes its
    groups: a heavy transfer's late releases spoiled every light replay of the step, and
    a late group hid inside a step whose mean kept time. `late` is None where there is
    no engine to ask (netem, none, a real path) or it did not answer; else the reasons,
    [] when the engine kept time over the group."""

    def __init__(self, live: Live, rtt_ms: float | None) -> None:
        self.live, self.rtt_s = live, None if rtt_ms is None else rtt_ms / 1e3
        self.before: EmulStats | None = None
        self.late: list[str] | None = None

    def _snap(self) -> EmulStats | None:
        live = self.live
        if live.site is None or not live.applied:
            return None
        try:
            st = live.backend.stats(live.site)
        except RigError:
            return None
        return st if st.alive and not st.error and st.directions else None

    def start(self) -> None:
        self.before = self._snap()

    def stop(self) -> None:
        after = self._snap()
        if self.before is None or after is None:
            return
        self.late = emulation_late(after.since(self.before), self.rtt_s)

    def annotate(self, rows: list) -> None:
        """Each row's extra.engine_late: the group's reasons ([]: kept time)."""
        if self.late is None:
            return
        for r in rows:
            extra = json.loads(r.extra) if r.extra else {}
            extra["engine_late"] = self.late
            r.extra = json.dumps(extra, sort_keys=True)


class Capture(Wrapping):
    """The group's header capture (rig.orchestration.capture), when asked for; its flows
    stored once it stopped."""

    def __init__(self, ctx: Context, step: S.Step, live: Live, g: S.Group,
                 sender: str) -> None:
        self.ctx, self.step, self.live, self.g, self.sender = ctx, step, live, g, sender

    def open(self) -> contextlib.AbstractContextManager:
        ctx, live, g = self.ctx, self.live, self.g
        if live.site is None or not capture.wanted(live.spec.capture, g.client.capture):
            return contextlib.nullcontext()
        name = capture.group_name(g.client.name, g.streams, g.concurrency, g.repeat, g.tls)
        return capture.capturing(live.site, live.backend,
                                 ctx.out / "captures" / f"step{self.step.number}", name,
                                 sender=self.sender, logdir=ctx.workdir / "captures",
                                 max_s=capture.wait_s(ctx.sc.transfer_timeout_s),
                                 record=ctx.state.record_pid)

    def after(self) -> None:
        if self.value is None:
            return
        ctx, g = self.ctx, self.g
        f = ctx.step_fields(self.step, self.live)
        common = {k: f[k] for k in ("run_id", "step", "path", "rtt_ms_configured",
                                    "loss_configured")}
        rows, summary = capture.flow_rows(self.value, dict(
            common, client=g.client.name, streams=g.streams, concurrency=g.concurrency,
            repeat=g.repeat), ctx.out)
        for r in rows:
            ctx.store.add_capture_flow(r)
        ctx.say(f"  capture: {summary}")


class TcpInfo(Wrapping):
    """tcp_info of the sender's sockets, sampled on this host only: the sender's sockets
    and the client's pids must be here (a remote host's are not seen from here); a
    third-party copy's at its source."""

    def __init__(self, ctx: Context, live: Live, g: S.Group, sender: str) -> None:
        self.ctx, self.live, self.g, self.sender = ctx, live, g, sender
        self.t0 = time.monotonic()

    def open(self) -> contextlib.AbstractContextManager:
        live, sc = self.live, self.ctx.sc
        here = live.client.local and (self.sender == "client" or live.server.local)
        src = live.servers.get(self.g.client.source or "", [])[:1]
        return tcpsample.sampling(
            src[0].ns if src else live.server_ns if self.sender == "server" else live.client_ns,
            live.client_ns, sender=self.sender,
            interval_s=sc.sampling.tcp_info_s if here and not (src and src[0].host) else None,
            tpc_source=list(src[0].ports.values()) if src else None)

    @property
    def track(self) -> Callable[[int, int], None] | None:
        return self.value.track if self.value is not None else None

    def stored(self, instance: int, tid: int, t_start: float) -> None:
        """A row's samples, once the row has its id."""
        if self.value is None:
            return
        samples = tcpsample.sample_rows(self.value.connections(instance), tid, t_start)
        self.ctx.store.add_tcp_samples(samples)
        self.ctx.tcp_cost["samples"] += len(samples)

    def done(self) -> None:
        """The sampler's own CPU time against the wall time it ran, per run."""
        smp = self.value
        if smp is None:
            return
        c = self.ctx.tcp_cost
        c["groups"] += 1
        c["ticks"] += smp.ticks
        c["cpu_s"] = round(c["cpu_s"] + smp.cpu_s, 6)
        c["wall_s"] = round(c["wall_s"] + time.monotonic() - self.t0, 6)
        c["errors"] += smp.errors
        c["cpu_share"] = round(c["cpu_s"] / c["wall_s"], 6) if c["wall_s"] else None
        self.ctx.store.set_env("tcp_sampling", c)


class Threads(Wrapping):
    """Per-thread CPU of the client and the server (issue 27): where each instance ran."""

    def __init__(self, ctx: Context, live: Live, spids: list[int]) -> None:
        self.ctx, self.live, self.spids = ctx, live, spids

    def open(self) -> contextlib.AbstractContextManager:
        return threadsample.group(self.ctx.sc.sampling.threads_s, self.spids,
                                  cost=self.ctx.thread_cost,
                                  client_local=self.live.client.local,
                                  server_local=bool(self.spids))

    @property
    def track(self) -> Callable[[int, int], None] | None:
        return self.value.track if self.value is not None else None

    def annotate(self, rows: list) -> None:
        if self.value is None:       # where each instance really ran (per-instance pinning)
            return
        for r in rows:
            seen = sorted({s.cpus_allowed for s in self.value.of(str(r.instance))
                           if s.cpus_allowed})
            r.client_cpus_seen = ";".join(seen) or None

    def stored(self, ids: list[tuple[int, int, float]]) -> None:
        threadsample.store_rows(self.ctx.store, self.value, ids, self.ctx.thread_cost)


class CpuQuota(Sampler):
    """The CPU quota of each end's cgroup and how often it throttled them over the group
    (rig.process.cgroupcpu): every client process as it starts (`track`), the server's
    processes and the engine's from the group's start; each read again every TICK_S (a
    process may be moved into a cgroup after it started) and once more at the end. Local
    processes only. Stored in the rows' extra (`cpu_quota`: per end, each cgroup with a
    quota, own first, then its ancestors), read by rig.report.quota."""
    TICK_S = 0.05

    def __init__(self, live: Live, spids: list[int]) -> None:
        self.live, self.spids = live, spids
        self.watch: cgroupcpu.QuotaWatch | None = None
        self.value: dict[str, list[cgroupcpu.Quota]] = {}
        self._lock = threading.Lock()
        self._new: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, instance: int, pid: int) -> None:
        if self.live.client.local:
            with self._lock:
                self._new.append((pid, str(instance)))

    def start(self) -> None:
        live = self.live
        self.watch = cgroupcpu.QuotaWatch()
        if not any(self.watch.mounts or ()):
            self.watch = None           # no cpu controller mounted: nothing to read
            return
        eng = live.backend.engine_pids(live.site) if live.site is not None else []
        self._new = [(p, "server") for p in self.spids] + [(p, "engine") for p in eng]
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cpu-quota")
        self._thread.start()

    def _loop(self) -> None:
        assert self.watch is not None
        while True:
            with self._lock:
                new, self._new = self._new, []
            for pid, key in new:
                self.watch.add(pid, key)
            try:
                self.watch.tick()
            except OSError:
                pass
            if self._stop.wait(self.TICK_S):
                return

    def stop(self) -> None:
        if self.watch is None or self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        self.value = self.watch.finish()

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        self.start()
        try:
            yield self
        finally:            # its thread never outlives the group, whatever ended it
            self.stop()

    def annotate(self, rows: list, starts: dict[int, float]) -> None:
        """Each row's extra.cpu_quota: its client's cgroups over its transfer (`starts`:
        each instance's start, monotonic; its duration_s after it), the server's and the
        engine's over the group's transfers, from the first start to the last end (the
        same on each of its rows); only ends with a quota."""
        if not self.value:
            return
        ends = [starts[r.instance] + r.duration_s for r in rows
                if r.duration_s and r.instance in starts]
        t0, t1 = (min(starts.values()), max(ends)) if ends and starts else (None, None)
        common = {end: [q.over(t0, t1).to_json() for q in self.value[end]]
                  for end in ("server", "engine") if self.value.get(end)}
        for r in rows:
            mine = dict(common)
            client = self.value.get(str(r.instance))
            if client:
                a = starts.get(r.instance)
                b = a + r.duration_s if a is not None and r.duration_s else None
                mine["client"] = [q.over(a, b).to_json() for q in client]
            if not mine:
                continue
            extra = json.loads(r.extra or "{}")
            extra["cpu_quota"] = mine
            r.extra = json.dumps(extra)


def sender_of(g: S.Group) -> str:
    return "client" if g.client.direction == "upload" else tools.get(g.client.tool).caps.sender
