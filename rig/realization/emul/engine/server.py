"""The engine process: asyncio glue between NFQUEUE sockets, a deadline timer, the
sans-IO core and a unix-socket control channel (ping, stats, configure).

One NFQUEUE per direction. Packets are read in batches (recvmmsg: one syscall per wake-up,
not one per packet), a batch is held as one run when the delay is plain; drop verdicts
are sent at once, held packets are released when due with one batch verdict per queue
(individual verdicts only when reordering is allowed). The timer is a timerfd armed at the earliest head-of-
queue deadline minus the learned wake-up latency.

Fail-closed by construction: when this process dies its netlink sockets close, the kernel
unbinds the queues and drops what they held, and the NFQUEUE rules (no --queue-bypass)
drop every later packet of the path.

Must not import services, orchestration or reports; only rig.description.profile, this package
and the pure stats contract rig.description.linkstats.
"""
from __future__ import annotations

import asyncio
from typing import Any
import gc
import json
import os
import random
import resource
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rig.description.linkstats import (LATENESS_EDGES_S, EmulStats, Lateness, lateness_bin,
                                       rtt_tolerance_s)
from rig.description.profile import Direction, LinkProfile
from rig.realization.emul.engine.core import HOLD_DUP, DirectionQueue, WakeCompensator
from rig.realization.emul.engine.nfq import NfQueue, verdict
from rig.realization.emul.engine.timer import current_cpu
from rig.realization.emul.engine import bpf

# A wake-up that comes before its release time finishes the wait in a busy loop when it
# is this close (or the learned wake-up compensation, if larger), else releases what is
# due and sleeps again: a packet never leaves before its deadline (issue 31).
SPIN_MAX_S = 100e-6
# Kernel timestamps (NFQA_TIMESTAMP, wall clock) trusted only when this close to now.
TSTAMP_SANITY_S = 0.5
# Release ahead of the deadline (issue 42) by what the wire audit shows is always spent
# after the send. The Python work between decision and send is not guessed: a release is
# picked ahead by the learned send lag, then its send waits (a short busy loop) until only
# the lead is left before its last deadline. Every AUDIT_EVERY_S the audit's window
# minimum plus the lead in force is that window's floor of the kernel's own part (verdict
# to the router's egress); the lead is the smallest floor seen since the engine started
# (AUDIT_WINDOWS of them at least, each with AUDIT_MIN_PACKETS packets or more) less
# AUDIT_MARGIN_S, at most Timing.lead_max_s. Never the median: that would send half early.
# Measured here (50 ms path, 4 streams, lead off): the floor under load is 4-5 us, on idle
# windows (pings) ~25 us, and a lead learned on idle windows sent packets ~20 us early
# when the streams started; hence loaded windows only, the whole history and the margin.
# On this host the learned lead is therefore 0: the send gate alone keeps every packet on
# time, and what is left after it is the kernel's few microseconds.
AUDIT_EVERY_S = 0.25
LAG_QUANTILE = 0.8
COMP_QUANTILE = 0.9
SPARSE_S = 2e-3
AUDIT_WINDOWS = 8
AUDIT_MIN_PACKETS = 500
AUDIT_MARGIN_S = 10e-6


@dataclass(frozen=True)
class Timing:
    """How the engine keeps time; each idea can be switched off to measure it
    (bench/engine_timing.py sets RIG_ENGINE_TIMING, e.g. "spin_us=0,comp=0,rt=0").

    spin_s   wake this much before the deadline and finish the wait in a busy loop on
             the monotonic clock (a timer wake-up on a VM is late by tens of us or more)
    comp     arm the timer earlier by the learned median wake-up latency (WakeCompensator)
    lag      the time from a release decision to its verdict's send (the engine's own
             Python work; measured with kernel tracepoints on this idle VM: 70-160 us
             from the timer's epoll_wait exit to sendto, while the packet then leaves
             within 35 us of entering sendto) is learned as a running median, and
             lateness is counted at the expected send, not at the decision (without it
             the engine reported itself on time while each direction left ~0.1 ms late
             and an idle 20 ms path pinged 20.2-20.4 ms). Since issue 31 the timer is
             no longer armed earlier by it: a packet is released only once the clock
             has passed its deadline, so that work is always on the late side
    rt       release from a dedicated timer thread at SCHED_FIFO (when permitted), the
             packet path staying at normal priority; the two share the core under a lock
    rt_all   the whole engine (packet path too) at SCHED_FIFO, when permitted: the default.
             Measured (bench/engine_timing.py, 8 iperf3 streams through the path on this
             2-core VM): the engine's run-queue wait fell from ~2.5 s to ~0.08 s per 5 s
             and its mean lateness per round trip from 1-3 ms to <= 0.03 ms; a timer
             thread alone (rt) does not help under load, as the packet path (and the GIL)
             still wait for a CPU. The price: the engine's CPU is no longer taken from it,
             so the iperf3 endpoints on the same 2 cores get less (-P8 at 120 ms: 6.2
             against 10.0 Gbit/s, medians of 2). Hence the default also batches:
    batch_s  release batching: a timer wake-up is armed at the last deadline within
             batch_s/2 after the head and releases every packet due by then (release
             error within [0, batch_s/2]; a lone packet leaves on time; fewer wake-ups
             and verdict sends per packet). Until issue 31 the window was batch_s,
             released midway (error +-batch_s/2): half the packets left early, and a
             50 ms path pinged 48.5-49.4 ms (bench/early_release.py)
    hold_s   read cadence while traffic flows: after a read, sleep this long (never past
             the next release) and read again, instead of waking per arriving packet;
             arrivals read after such a sleep without a kernel stamp (see stamp) are
             stamped after the read (the latest they can have arrived: never early, up to
             hold_s late; until issue 42 before the read, until issue 31 at the
             sleep's middle, +-hold_s/2, so hold_s was 0.2 ms)
    qos      hold a PM QoS request for idle-exit latency 0 (/dev/cpu_dma_latency) while the
             engine runs: idle CPUs poll instead of halting, so a timer wake-up does not
             first wait for its CPU to leave an idle state (see bench/README.md)
    cpu      pin the engine to this CPU (-1: wherever the scheduler puts it)
    twin_s   a standby waker (with rt_all, on a host with two or more CPUs the engine may
             use, not pinned): a second SCHED_FIFO thread, kept off the CPU the engine
             last ran on, sleeps on a timer armed this long after the engine's own and
             releases what is due when the engine has not (0: off). On a kernel that does
             not preempt in kernel mode (CONFIG_PREEMPT_NONE/VOLUNTARY), a real-time
             wake-up waits on its CPU until the task running there, an endpoint inside a
             long syscall, reaches a preemption point: 0.5-1.1 ms, by `perf sched
             timehist` on this VM. The kernel wakes a real-time task on its previous CPU
             when that CPU runs an ordinary task, so the standby's wake-up lands on the
             other CPU. Costs a wake-up only when the engine is late by more than twin_s.
             Off by default: measured (bench/README.md, "Session 8") it took ~40 % off
             the wake-ups >= 0.5 ms late but not the share of packets > 1 ms late, as
             the other CPU is in such a syscall too as often, and the VM itself stalls
             both (cyclictest, idle: wake-ups up to 7.5 ms late). `twin_us=150` turns it on.
    stamp    (issue 42) arrival stamps in the kernel: a tcx-ingress eBPF program at the
             router's two interfaces writes each packet's CLOCK_MONOTONIC arrival into
             skb->tstamp, which NFQUEUE hands over as NFQA_TIMESTAMP (bpf.py), and a
             tcx-egress program audits every packet's real delay on the wire. Without it
             (stamp=0, an end host, a kernel without tcx) a packet keeps a kernel stamp
             only when some socket on the host asked for receive timestamps, and is
             otherwise stamped when read (after the read: never early, up to a read
             cadence late). Stats `extra.arrival_stamp` names the method used
    lead     (issue 42) release ahead of the deadline by the audit's window minimum (what
             is always spent after the decision: the rest of the wake-up, the verdict's
             send, the kernel's re-injection), so the least late packet leaves the router
             AUDIT_MARGIN_S late, never early; needs the audit (stamp)
    scale    batch_s and hold_s are meant for the tightest RTT tolerance (0.3 ms) and grow
             with the step's tolerance, max(0.3 ms, 1 % of the RTT): at 120 ms four times
    Default: rt_all + batch 0.4 ms + hold 0.1 ms, scaled (bench variant `scaled`): the
    engine's CPU under 8 streams about halves against rtall alone and -P8 comes back
    most of the way to the normal-priority engine's, whose figure is carried by releases
    milliseconds late; see bench/README.md "Engine timing" for the numbers. Any knob can
    be set back through RIG_ENGINE_TIMING (e.g. "batch_us=0,hold_us=0" for rtall alone,
    "rt_all=0,batch_us=0,hold_us=0" for the engine before issue 11).
    """
    spin_s: float = 0.0
    comp: bool = True
    lag: bool = True
    rt: bool = False
    rt_all: bool = True
    batch_s: float = 400e-6
    hold_s: float = 100e-6
    cpu: int = -1
    scale: bool = True
    qos: bool = True
    twin_s: float = 0.0
    stamp: bool = True
    lead: bool = True
    lead_max_s: float = 100e-6

    @classmethod
    def from_env(cls, text: str | None = None) -> "Timing":
        text = os.environ.get("RIG_ENGINE_TIMING", "") if text is None else text
        kv = dict(x.split("=", 1) for x in text.split(",") if "=" in x)
        d = cls()
        return cls(spin_s=float(kv.get("spin_us", d.spin_s * 1e6)) / 1e6,
                   comp=kv.get("comp", "1" if d.comp else "0") == "1",
                   lag=kv.get("lag", "1" if d.lag else "0") == "1",
                   rt=kv.get("rt", "1" if d.rt else "0") == "1",
                   rt_all=kv.get("rt_all", "1" if d.rt_all else "0") == "1",
                   batch_s=float(kv.get("batch_us", d.batch_s * 1e6)) / 1e6,
                   hold_s=float(kv.get("hold_us", d.hold_s * 1e6)) / 1e6,
                   cpu=int(kv.get("cpu", d.cpu)),
                   scale=kv.get("scale", "1" if d.scale else "0") == "1",
                   qos=kv.get("qos", "1" if d.qos else "0") == "1",
                   twin_s=float(kv.get("twin_us", d.twin_s * 1e6)) / 1e6,
                   stamp=kv.get("stamp", "1" if d.stamp else "0") == "1",
                   lead=kv.get("lead", "1" if d.lead else "0") == "1",
                   lead_max_s=float(kv.get("lead_max_us", d.lead_max_s * 1e6)) / 1e6)

    def factor(self, rtt_s: float) -> float:
        """How much batch_s and hold_s grow at this RTT (1 without `scale`)."""
        return rtt_tolerance_s(rtt_s) / rtt_tolerance_s(0.0) if self.scale else 1.0

    @property
    def window_s(self) -> float:
        """How far past the head's deadline a release may wait for later packets (half
        the batching window); nothing leaves before its own deadline."""
        return self.batch_s / 2


def queue_limit(d: Direction, profile: LinkProfile) -> int:
    return d.bdp_packets(profile.rtt_s)




class Lane:
    """One direction: its NFQUEUE, its core queue, payloads of packets to duplicate."""
    read_stamped = 0    # class defaults: a test-built lane reads them
    lead_s = 0.0

    def __init__(self, name: str, queue: int, d: Direction, profile: LinkProfile,
                 rng: random.Random) -> None:
        self.name = name
        self.core = DirectionQueue(d, limit=queue_limit(d, profile), rng=rng)
        self.core.stats.tol_s = rtt_tolerance_s(profile.rtt_s)
        self.nfq = NfQueue(queue, gso=not d.per_segment, copy_packet=d.duplicate > 0)
        self.stash: dict[int, bytes] = {}       # payloads of packets to duplicate
        self.payloads: dict[int, bytes] = {}    # this batch's payloads (copy mode)
        self.tstamp_used = 0
        self.floor_s = float("inf")    # Engine.audit_tick: the lowest floor seen
        self.windows = 0
        self.audited = 0
        self.read_stamped = 0      # packets stamped when read (no plausible kernel stamp)
        self.wakeups = 0
        self.lead_s = 0.0          # learned from the audit (Engine.audit_tick)

    def configure(self, d: Direction, profile: LinkProfile) -> None:
        self.core.configure(d, limit=queue_limit(d, profile))
        tol = rtt_tolerance_s(profile.rtt_s)
        if tol != self.core.stats.tol_s:     # a new RTT: count against its tolerance
            self.core.stats.tol_s, self.core.stats.late_over = tol, 0
        gso, copy = not d.per_segment, d.duplicate > 0
        if (gso, copy) != (self.nfq.gso, self.nfq.copy_packet):
            self.nfq.set_mode(gso=gso, copy_packet=copy)


class Engine:
    timing = Timing()          # class defaults: stats() of a test-built engine reads them
    rt_note = "off"
    qos_note = "off"
    twin_note = "off"
    twin_timer: Any = None      # the standby waker's DeadlineTimer (Timing.twin_s)
    twin_tid: int | None = None
    twin_cpus: set[int] = set()
    main_cpu = -1
    twin_wakeups = twin_releases = twin_moves = 0
    # diagnostics, LATENESS_EDGES_S bins: the engine's timer wake-ups (now - armed), the
    # standby's releases (now - the engine's armed time), packet-path calls' duration
    wake_hist: list[int] = []
    twin_hist: list[int] = []
    busy_hist: list[int] = []
    spins = 0
    holds = 0
    early_wakeups = 0     # timer wake-ups before their release time (waited, never sent)
    release_at: float | None = None
    lag: WakeCompensator | None = None
    first_send: float | None = None     # when this wake-up's first verdict went out
    batch_s = hold_s = 0.0     # Timing's, scaled to the profile's RTT (set_windows)

    stamper: "bpf.Stamper | None" = None
    stamp_note = "read time (no stamp interfaces given)"
    audit_ticks = lead_raises = lead_cuts = 0
    audit_skip = False
    send_spins = 0
    read_gap = 1.0
    last_read = 0.0
    comp_hi: WakeCompensator | None = None

    def __init__(self, queues: tuple[int, int], profile: LinkProfile, control: Path,
                 *, seed: int | None = None,
                 stamp_ifs: tuple[str, str] | None = None) -> None:
        rng = random.Random(seed)
        self.profile = profile
        self.lanes = [Lane("forward", queues[0], profile.forward, profile, rng),
                      Lane("reverse", queues[1], profile.reverse, profile, rng)]
        self.control_path = control
        self.timing = Timing.from_env()
        # the timer's wake-up latency: its median, and its 90th percentile for sparse
        # traffic with the send gate (see sparse)
        self.comp = WakeCompensator()
        self.comp_hi = WakeCompensator(quantile=COMP_QUANTILE)
        self.last_read = time.monotonic()
        self.read_gap = 1.0
        # wake-up -> verdict sent (Timing.lag); its 80th percentile, as a release picked
        # ahead by it is sent no earlier than its deadline (the send gate, Timing.lead)
        self.lag = WakeCompensator(initial_s=0.0, quantile=LAG_QUANTILE)
        self.timer_wakeups = 0
        self.timer: Any = None                # a DeadlineTimer once run() starts
        self.target: float | None = None      # head deadline the timer was armed for
        self.release_at: float | None = None  # when that wake-up releases (batching)
        self.armed: float | None = None       # when it was armed to fire
        self.raw: socket.socket | None = None
        self.started = time.monotonic()
        self.stopping: asyncio.Event | None = None
        self.timing = Timing.from_env()
        self.lock = threading.Lock()          # the core, shared with the RT timer thread
        self.rt_note = "off"
        self.spins = 0
        self.holds = 0
        self.early_wakeups = 0
        n = len(LATENESS_EDGES_S) + 1
        self.wake_hist, self.twin_hist, self.busy_hist = [0] * n, [0] * n, [0] * n
        self.set_windows()
        self.audit_ticks = self.lead_raises = self.lead_cuts = 0
        self.stamper = None
        if stamp_ifs is None:
            self.stamp_note = "read time (no stamp interfaces: an end host or a test)"
        else:
            try:
                self.stamper = bpf.Stamper(stamp_ifs, stamp=self.timing.stamp)
                self.stamp_note = (f"tcx-ingress eBPF on {stamp_ifs[0]},{stamp_ifs[1]} "
                                   "(CLOCK_MONOTONIC), audited at tcx-egress"
                                   if self.timing.stamp else
                                   "kernel NFQA stamp when some socket asked for one, else "
                                   "read time (stamp=0); audited at tcx-egress")
                self._audit_delays()
            except (OSError, ValueError) as e:
                self.stamp_note = ("kernel NFQA stamp when some socket asked for one, else "
                                   f"read time (tcx unavailable: {e}); no wire audit")
        print(f"engine: arrival stamps: {self.stamp_note}", flush=True)

    @property
    def lead_s(self) -> float:
        """How far ahead of its deadline a packet is released (Timing.lead): the smaller
        of the two directions' learned leads, as one wake-up releases both."""
        if self.stamper is None or not self.timing.lead:
            return 0.0
        return min((lane.lead_s for lane in self.lanes if _leads(lane)), default=0.0)

    def _audit_delays(self) -> None:
        if self.stamper is not None:
            for i, lane in enumerate(self.lanes):
                self.stamper.set_delay(i, lane.core.d.delay_s)

    def audit_tick(self) -> None:
        """Learn the release lead from the audit's window minimum (Timing.lead; see
        AUDIT_WINDOWS). A window with an early packet lowers the lead at once."""
        if self.stamper is None:
            return
        self.audit_ticks += 1
        for i, lane in enumerate(self.lanes):
            try:
                snap = self.stamper.read(i)
                self.stamper.reset(i)
            except OSError:
                continue
            n, lane.audited = snap.count - lane.audited, snap.count
            if snap.window_min_ns is None or not _leads(lane) or self.audit_skip \
                    or n < AUDIT_MIN_PACKETS:
                continue     # too few packets; jitter or no delay; the delay changed
            lane.floor_s = min(lane.floor_s, lane.lead_s + snap.window_min_ns * 1e-9)
            lane.windows += 1
            lead = 0.0 if lane.windows < AUDIT_WINDOWS else \
                min(self.timing.lead_max_s, max(0.0, lane.floor_s - AUDIT_MARGIN_S))
            if lead < lane.lead_s:
                self.lead_cuts += 1
            elif lead > lane.lead_s:
                self.lead_raises += 1
            lane.lead_s = lead
        self.audit_skip = False

    def set_windows(self) -> None:
        f = self.timing.factor(self.profile.rtt_s)
        self.batch_s, self.hold_s = self.timing.batch_s * f, self.timing.hold_s * f

    # -- packet path ---------------------------------------------------------------
    def on_readable(self, lane: Lane) -> None:
        with self.lock:
            t0 = time.monotonic()
            got = self._on_readable(lane)
            self.busy_hist[lateness_bin(time.monotonic() - t0)] += 1
        if got and self.hold_s > 0:
            self._hold_loop()

    def _hold_loop(self) -> None:
        """Read at a cadence while traffic flows (Timing.hold_s): sleep, read both lanes,
        repeat; back to the event loop when a read finds nothing or a release is due.
        Sleeps without the lock, so a standby waker (Timing.twin_s) can release meanwhile."""
        while self.stopping is None or not self.stopping.is_set():
            t0 = time.monotonic()
            d = self.hold_s
            if self.target is not None and self.armed is not None:
                d = min(d, self.armed - t0)
            if d < 20e-6:
                return
            time.sleep(d)
            self.holds += 1
            now = time.monotonic()
            got = 0
            with self.lock:
                for lane in self.lanes:
                    got += self._on_readable(lane)
                self.busy_hist[lateness_bin(time.monotonic() - now)] += 1
            if not got:
                return

    def _on_readable(self, lane: Lane) -> int:
        """Read what is queued, hold/drop it, release what is due; returns how many
        packets were read. A packet without a kernel stamp is stamped after its read."""
        lane.wakeups += 1
        # the wall clock read around the monotonic one (issue 42: read after it, a stall
        # between the two moved a whole batch of wall-stamped arrivals earlier)
        w0 = time.time()
        now = time.monotonic()
        offset = (w0 + time.time()) / 2 - now
        try:
            if lane.nfq.copy_packet:
                batches = self._read_full(lane, offset)
            else:
                batches, used = lane.nfq.read_batches(now, offset)
                lane.tstamp_used += used
                lane.read_stamped += sum(len(ids) for ids, _ in batches) - used
        except OSError as e:
            print(f"engine: {lane.name}: read failed: {e}", flush=True)
            if self.stopping is not None:
                self.stopping.set()
            return 0
        if not batches:
            return 0
        q = lane.nfq.queue
        drops = []
        core = lane.core
        got = 0
        # packets without a usable kernel stamp: after the read, the latest they can
        # have arrived (never early)
        seen = time.monotonic()
        self.read_gap += 0.25 * (min(seen - self.last_read, 1.0) - self.read_gap)
        self.last_read = seen
        for ids, times in batches:
            got += len(ids)
            for pid, code in core.arrive_batch(ids, seen, times):
                if code == HOLD_DUP:
                    payload = lane.payloads.pop(pid, None)
                    if payload is not None:
                        lane.stash[pid] = payload
                else:
                    drops.append(verdict(q, pid, False))
        lane.payloads.clear()
        # only what is due by now (the read time; the clock has passed it)
        self._release_lane(lane, now, b"".join(drops))
        self._rearm(now)
        return got

    def _read_full(self, lane: Lane, offset: float) -> list:
        """Copy-mode PACKET (duplication): keep payloads until the core has decided.
        Arrival times: a plausible kernel stamp (monotonic from the tcx stamp, else wall
        clock less `offset`), else None (stamped by the caller after the read)."""
        raw: list = []
        lane.nfq.read(raw)
        now = time.monotonic()
        ids: list[int] = []
        times: list[float] = []
        for pid, _, ts, payload in raw:
            t = now
            if ts is not None and now - TSTAMP_SANITY_S < (
                    kt := ts - offset if ts > 1e9 else ts) <= now:
                t = kt
                lane.tstamp_used += 1
            else:
                lane.read_stamped += 1
            ids.append(pid)
            times.append(t)
            if payload is not None:
                lane.payloads[pid] = payload
        return [(ids, times)] if ids else []

    def on_timer(self) -> None:
        with self.lock:
            self._on_timer()

    def _on_timer(self) -> None:
        self.timer_wakeups += 1
        if not self.timer.consume():
            return                       # stale event: the timer was re-armed meanwhile
        if self.twin_tid is not None:
            self._track_cpu()
        now = time.monotonic()
        if self.armed is not None and self.target is not None:
            self.wake_hist[lateness_bin(now - self.armed)] += 1
        self._fired(now)

    def on_twin(self) -> None:
        """The standby waker's timer fired: release what the engine has not (Timing.twin_s)."""
        self.twin_timer.consume()
        self.twin_wakeups += 1
        with self.lock:
            if self.timer.consume():     # the engine's own wake-up has not come yet
                self.twin_releases += 1
                now = time.monotonic()
                if self.armed is not None:
                    self.twin_hist[lateness_bin(now - self.armed)] += 1
                self._fired(now, twin=True)

    def _track_cpu(self) -> None:
        """Keep the standby waker off the CPU the engine runs on (where the kernel will
        wake the engine next)."""
        cpu = current_cpu()
        if cpu == self.main_cpu or cpu < 0 or self.twin_tid is None:
            return
        self.main_cpu = cpu
        others = self.twin_cpus - {cpu}
        if others:
            try:
                os.sched_setaffinity(self.twin_tid, others)
                self.twin_moves += 1
            except OSError:
                pass

    def _fired(self, now: float, twin: bool = False) -> None:
        """Release what the timer was armed for (a wake-up of the engine or its standby).
        Nothing leaves before its deadline: a wake-up that comes early finishes the wait
        in a busy loop when the release time is near (SPIN_MAX_S, or the learned wake-up
        compensation), else releases what is due and sleeps again (issue 31)."""
        if self.target is not None:
            if self.armed is not None and not twin:
                self.comp.observe(now - self.armed - self.timing.spin_s)
                if self.comp_hi is not None:
                    self.comp_hi.observe(now - self.armed - self.timing.spin_s)
            at = self.release_at or self.target
            if now < at:
                self.early_wakeups += 1
                if at - now <= max(SPIN_MAX_S, self._comp_s()) + self.timing.spin_s:
                    self.spins += 1
                    while now < at:
                        now = time.monotonic()
            self.target = None
        self.first_send = None
        decided = time.monotonic()
        sparse = self.sparse
        for lane in self.lanes:
            self._release_lane(lane, decided, b"", ahead_ok=sparse)
        if self.lag is not None and self.timing.lag and self.first_send is not None \
                and not twin:
            self.lag.observe(self.first_send - decided)
        self._rearm(now)

    @property
    def sparse(self) -> bool:
        """Sparse traffic (reads SPARSE_S apart on average: pings, a request now and then):
        a timer release is picked ahead and sent through the gate, the timer armed at the
        90th percentile of its wake-up latency; an early wake-up then only spins. Under
        load (measured, bench/engine_stamps.py) that spin cost a third of a core more and
        made releases later, as the busy loop held the CPU the packet path needed."""
        return self.stamper is not None and self.timing.lead and self.read_gap > SPARSE_S

    def _comp_s(self) -> float:
        hi = self.comp_hi
        return hi.value_s if hi is not None and self.sparse else self.comp.value_s

    def _lag_s(self) -> float:
        """How long after a release decision its verdict is expected to leave (Timing.lag)."""
        return self.lag.value_s if self.lag is not None and self.timing.lag else 0.0

    def _release_lane(self, lane: Lane, upto: float, prefix: bytes,
                      ahead_ok: bool = False) -> None:
        """Release what is due by `upto` (a time the clock has passed); lateness is
        counted at the expected send (Timing.lag). With the audit and Timing.lead, a
        timer's release (ahead_ok) picks what is due by upto + the send lag + the lead
        and sends once the clock is within the lead of the last deadline picked (the
        send gate; the read path releases only what is already due: it never waits)."""
        k = self.lead_s
        gate = ahead_ok and self.stamper is not None and self.timing.lead
        ahead = k + self._lag_s() if gate else 0.0
        ids, dups = lane.core.release(upto + ahead, now=upto + max(self._lag_s(), ahead))
        q = lane.nfq.queue
        if ids:
            if lane.core.reorder:
                msg = prefix + b"".join(verdict(q, i, True) for i in ids)
            else:
                msg = prefix + verdict(q, ids[-1], True, batch=True)
        elif prefix:
            msg = prefix
        else:
            return
        if self.first_send is None:
            self.first_send = time.monotonic()
        if gate and ids:
            # picked ahead by the expected Python work; the send itself waits until only
            # the kernel's own part (k, the audit's floor) is left before the last deadline
            until = lane.core.last_released - k
            if time.monotonic() < until:
                self.send_spins += 1
                while time.monotonic() < until:
                    pass
        lane.nfq.send(msg)
        for pid in dups:
            self._inject(lane.stash.pop(pid, None))

    def _inject(self, payload: bytes | None) -> None:
        """Send the duplicate of an IP packet from the router (it skips FORWARD). A raw
        IPPROTO_RAW socket sends the header as given, in either family (Linux sets
        IPV6_HDRINCL for it on AF_INET6)."""
        if not payload or payload[0] >> 4 not in (4, 6):
            return
        v6 = payload[0] >> 4 == 6
        if self.raw is None or (self.raw.family == socket.AF_INET6) != v6:
            if self.raw is not None:
                self.raw.close()
            self.raw = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET,
                                     socket.SOCK_RAW, socket.IPPROTO_RAW)
        dst = (socket.inet_ntop(socket.AF_INET6, payload[24:40]) if v6
               else socket.inet_ntoa(payload[16:20]))
        try:
            self.raw.sendto(payload, (dst, 0))
        except OSError:
            pass

    def _rearm(self, now: float) -> None:
        a, b = self.lanes[0].core.next_deadline(), self.lanes[1].core.next_deadline()
        if a is None or (b is not None and b < a):
            a = b
        if a is None:
            if self.target is not None:
                self.timer.disarm()
                self.target = None
            if self.twin_timer is not None and self.twin_timer.armed_at is not None:
                self.twin_timer.disarm()     # nothing held: no standby wake-up either
            return
        head = a
        if self.target is not None and self.target <= head:
            return                       # already armed early enough
        self.target = self.release_at = head
        if self.batch_s:
            # at the last deadline within half the window after the head: nothing early
            lasts = [x for lane in self.lanes
                     if (x := lane.core.last_due(head + self.batch_s / 2)) is not None]
            self.release_at = max(lasts, default=head)
        if self.stamper is not None and self.timing.lead and self.sparse:   # _release_lane
            self.release_at -= self.lead_s + self._lag_s()
        self.armed = self.release_at - (self._comp_s() if self.timing.comp else 0.0) \
            - self.timing.spin_s
        self.timer.arm(self.armed)
        if self.twin_timer is not None:
            self.twin_timer.arm(self.armed + self.timing.spin_s + self.timing.twin_s)

    # -- control channel -----------------------------------------------------------
    def stats(self) -> EmulStats:
        """The typed snapshot (rig.description.linkstats); the control channel carries its to_dict()."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        kernel = {kq.get("queue"): kq for kq in kernel_queue_stats()}
        dirs = []
        for i, lane in enumerate(self.lanes):
            kq = kernel.get(lane.nfq.queue, {})
            d = lane.core.stats.report(
                lane.name, lane.core.held, queue=lane.nfq.queue, gso=lane.nfq.gso,
                copy_packet=lane.nfq.copy_packet, limit=lane.core.limit,
                reorder=lane.core.reorder, netlink_errors=lane.nfq.errors,
                kernel_tstamps=lane.tstamp_used, read_stamped=lane.read_stamped,
                lead_us=lane.lead_s * 1e6, wakeups=lane.wakeups, recvs=lane.nfq.recvs,
                messages=lane.nfq.msgs, verdict_sends=lane.nfq.sends)
            dirs.append(replace(d, nfq_queue_dropped=kq.get("queue_dropped"),
                                nfq_user_dropped=kq.get("user_dropped"),
                                wire=self._wire(i, lane)))
        run_s, wait_s = schedstat()
        return EmulStats("userspace", tuple(dirs), alive=True, instance=os.getpid(),
                         cpu_user_s=ru.ru_utime, cpu_sys_s=ru.ru_stime, run_s=run_s,
                         run_wait_s=wait_s, wall_s=time.monotonic() - self.started,
                         steal_s=host_steal_s(),
                         extra={"engine": "python",
                                "uptime_s": time.monotonic() - self.started,
                                "arrival_stamp": self.stamp_note,
                                "lead_s": self.lead_s,
                                "audit": {"ticks": self.audit_ticks,
                                          "send_spins": self.send_spins,
                                          "lead_raises": self.lead_raises,
                                          "lead_cuts": self.lead_cuts},
                                "wake_compensation_s": self.comp.value_s,
                                "send_lag_s": self._lag_s(),
                                "timer_wakeups": self.timer_wakeups,
                                "timing": {"spin_us": self.timing.spin_s * 1e6,
                                           "comp": self.timing.comp, "lag": self.timing.lag,
                                           "rt": self.rt_note,
                                           "spins": self.spins,
                                           "early_wakeups": self.early_wakeups,
                                           "batch_us": self.batch_s * 1e6,
                                           "hold_us": self.hold_s * 1e6,
                                           "holds": self.holds, "cpu": self.timing.cpu,
                                           "qos": self.qos_note,
                                           "twin": self.twin_note,
                                           "twin_wakeups": self.twin_wakeups,
                                           "twin_releases": self.twin_releases,
                                           "twin_moves": self.twin_moves,
                                           "wake_hist": list(self.wake_hist),
                                           "twin_hist": list(self.twin_hist),
                                           "busy_hist": list(self.busy_hist)},
                                "profile": self.profile.to_dict()})

    def _wire(self, i: int, lane: Lane) -> Lateness | None:
        """The wire audit of one direction (bpf.Stamper), None without one or while the
        direction has jitter (its configured delay is then only a mean)."""
        if self.stamper is None or lane.core.d.jitter_s > 0:
            return None
        try:
            w = self.stamper.read(i)
        except OSError:
            return None
        return Lateness(w.count, w.sum_ns * 1e-9 / w.count if w.count else 0.0,
                        (w.max_ns or 0) * 1e-9, w.hist,
                        min_s=None if w.min_ns is None else w.min_ns * 1e-9)

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "stats":
            return {"ok": True, "stats": self.stats().to_dict()}
        if op == "configure":
            profile = LinkProfile.from_dict(req["profile"])
            with self.lock:
                for lane, d in zip(self.lanes, (profile.forward, profile.reverse)):
                    lane.configure(d, profile)
                    self._on_readable(lane)      # packets read while waiting for the ack
                self.profile = profile
                self.set_windows()
                self._audit_delays()
                self.audit_skip = True       # packets held under the old delay
                self._rearm(time.monotonic())
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def serve_client(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    ans = self.handle(json.loads(line))
                except Exception as e:         # a bad request must not stop the engine
                    ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                writer.write(json.dumps(ans).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    # -- lifecycle ---------------------------------------------------------------
    async def run(self) -> None:
        from rig.realization.emul.engine.timer import (DeadlineTimer, hold_cpu_latency,
                                                       tighten_timer_slack)
        tighten_timer_slack()
        qos_fd = None
        if self.timing.qos:
            qos_fd, self.qos_note = hold_cpu_latency(0)
            print(f"engine: pm qos {self.qos_note}", flush=True)
        loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.timer = DeadlineTimer()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        for lane in self.lanes:
            loop.add_reader(lane.nfq.fileno(), self.on_readable, lane)
        if self.timing.rt_all:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
                self.rt_note = "engine SCHED_FIFO 10"
            except (PermissionError, OSError) as e:
                self.rt_note = f"not permitted ({e}); engine at normal priority"
            print(f"engine: {self.rt_note}", flush=True)
        if self.timing.cpu >= 0:
            try:
                os.sched_setaffinity(0, {self.timing.cpu})
                print(f"engine: pinned to CPU {self.timing.cpu}", flush=True)
            except OSError as e:
                print(f"engine: not pinned to CPU {self.timing.cpu}: {e}", flush=True)
        threads: list[tuple[threading.Thread, int]] = []
        if self.timing.rt:
            threads.append(self._start_rt_thread("engine-timer", self.timer.fileno(),
                                                 self.on_timer, "rt_note"))
            sys.setswitchinterval(100e-6)   # the packet path is asked for the GIL often
        else:
            loop.add_reader(self.timer.fileno(), self.on_timer)
            twin = self._twin_cpus()
            if isinstance(twin, str):
                self.twin_note = twin
            else:
                self.twin_cpus, self.twin_timer = twin, DeadlineTimer()
                threads.append(self._start_rt_thread(
                    "engine-standby", self.twin_timer.fileno(), self.on_twin, "twin_note"))
                self.twin_tid = threads[-1][0].native_id
                self.twin_note += f", {self.timing.twin_s * 1e6:.0f} us after the engine's" \
                    " wake-up, kept off its CPU"
                self._track_cpu()
            print(f"engine: standby waker {self.twin_note}", flush=True)
        if self.stamper is not None:
            def tick() -> None:
                with self.lock:
                    self.audit_tick()
                loop.call_later(AUDIT_EVERY_S, tick)
            loop.call_later(AUDIT_EVERY_S, tick)
        self.control_path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self.serve_client, path=str(self.control_path))
        # Few cycles are created on the packet path; a collection pause is a late release.
        gc.collect()
        gc.freeze()
        gc.set_threshold(200_000, 50, 50)
        print(f"engine: ready pid={os.getpid()} queues="
              f"{[lane.nfq.queue for lane in self.lanes]}", flush=True)
        try:
            await self.stopping.wait()
        finally:
            server.close()
            for thread, stop_w in threads:
                os.write(stop_w, b"x")
                thread.join(timeout=2)
                os.close(stop_w)
            for lane in self.lanes:
                loop.remove_reader(lane.nfq.fileno())
                lane.nfq.close()       # the kernel drops what was held: never undelayed
            if not self.timing.rt:
                loop.remove_reader(self.timer.fileno())
            self.timer.close()
            if self.twin_timer is not None:
                self.twin_timer.close()
            if qos_fd is not None:
                os.close(qos_fd)           # the kernel drops the request
            if self.stamper is not None:
                self.stamper.close()       # the kernel detaches the programs
            self.control_path.unlink(missing_ok=True)
            print("engine: stopped", flush=True)


    def _twin_cpus(self) -> set[int] | str:
        """The CPUs the standby waker may use (Timing.twin_s), or why there is none."""
        if self.timing.twin_s <= 0:
            return "off (twin_us=0)"
        if not self.timing.rt_all:
            return "off (the engine is not real-time: rt_all=0)"
        if self.timing.cpu >= 0:
            return f"off (the engine is pinned to CPU {self.timing.cpu})"
        cpus = os.sched_getaffinity(0)
        if len(cpus) < 2:
            return f"off (one CPU allowed: {sorted(cpus)})"
        return set(cpus)

    def _start_rt_thread(self, name: str, fd: int, on_event: Any,
                         note: str) -> tuple[threading.Thread, int]:
        """A thread that calls `on_event` whenever `fd` is readable, at SCHED_FIFO when the
        kernel lets us: its wake-up then preempts ordinary tasks (iperf3, servers, the
        packet path) instead of waiting its turn. It takes the GIL like any thread.
        Sets self.<note> to what it got; returns the thread and its stop pipe's write end."""
        stop_r, stop_w = os.pipe()
        ready = threading.Event()

        def body() -> None:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
                got = "SCHED_FIFO 10"
            except (PermissionError, OSError) as e:
                got = f"not permitted ({e}); at normal priority"
            setattr(self, note, got)
            ready.set()
            poll = select.poll()
            poll.register(fd, select.POLLIN)
            poll.register(stop_r, select.POLLIN)
            try:
                while True:
                    events = poll.poll()
                    if any(f == stop_r for f, _ in events):
                        return
                    on_event()
            finally:
                os.close(stop_r)

        t = threading.Thread(target=body, name=name, daemon=True)
        t.start()
        ready.wait(2)
        print(f"engine: {name} thread {getattr(self, note)}", flush=True)
        return t, stop_w


def _leads(lane: Lane) -> bool:
    """Whether a direction's audit minimum can teach the release lead: it holds packets
    for a plain delay (no jitter: a jittered deadline is not the configured delay)."""
    d = lane.core.d
    return d.delay_s > 0 and d.jitter_s <= 0


def schedstat() -> tuple[float | None, float | None]:
    """(seconds on a CPU, seconds runnable but waiting for one) of the engine's thread,
    from /proc/thread-self/schedstat; (None, None) where the kernel has no schedstats."""
    try:
        run_ns, wait_ns = Path("/proc/thread-self/schedstat").read_text().split()[:2]
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        return None, None


def host_steal_s(path: str = "/proc/stat") -> float | None:
    """The host's steal time so far, all CPUs (the 8th value of /proc/stat's `cpu` line,
    in USER_HZ ticks); None where it cannot be read."""
    try:
        with open(path) as f:
            ticks = int(f.readline().split()[8])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def kernel_queue_stats() -> list[dict]:
    """/proc/net/netfilter/nfnetlink_queue of this namespace (kernel-side drops)."""
    keys = ("queue", "portid", "queue_total", "copy_mode", "copy_range",
            "queue_dropped", "user_dropped", "id_sequence")
    try:
        text = Path("/proc/net/netfilter/nfnetlink_queue").read_text()
    except OSError:
        return []
    return [dict(zip(keys, map(int, line.split()[:8]))) for line in text.splitlines() if line]
