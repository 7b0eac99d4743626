"""Sans-IO scheduling core of the userspace link-emulation engine.

Decides, for each packet id handed over by the kernel, whether it is dropped (random or
Gilbert-Elliott loss, full queue), when it is released (delay + jitter, order-preserving
unless the profile allows reordering) and whether it is duplicated; keeps the live
statistics (incl. a release-lateness histogram). Time is always passed in (`now`, in
seconds of any monotonic clock), so tests drive it with a fake clock.

Must not import asyncio, sockets or anything that does I/O; only rig.description.profile and
the pure stats contract rig.description.linkstats (whose histogram edges it fills).

Order-preserving jitter (netem's behaviour when packets may not overtake each other):
a packet's deadline is max(own jittered deadline, previous deadline). At packet rates
well above 1/jitter this ratchets the mean applied delay up towards delay + jitter; the
applied delay is measured (`applied_delay_mean_s`) and reported, never hidden.
"""
from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from rig.description.linkstats import (LATENESS_LABELS, DirStats, Lateness,
                                       lateness_bin)
from rig.description.profile import Direction

HOLD, DROP_LOSS, DROP_QUEUE, HOLD_DUP = 0, 1, 2, 3


@dataclass
class DirectionStats:
    """Live counters of one direction; reported through report() as the typed
    rig.description.linkstats.DirStats every backend returns (the contract the verdicts read)."""
    seen: int = 0
    released: int = 0
    dropped_loss: int = 0
    dropped_queue: int = 0
    duplicated: int = 0
    applied_delay_sum_s: float = 0.0
    late_sum_s: float = 0.0
    late_max_s: float = 0.0
    late_min_s: float = float("inf")   # the most early (negative) or least late release
    late_hist: list[int] = field(default_factory=lambda: [0] * len(LATENESS_LABELS))
    tol_s: float = float("inf")     # releases later than this are counted in late_over
    late_over: int = 0

    def report(self, direction: str, held: int, **extra: Any) -> DirStats:
        accepted = self.seen - self.dropped_loss - self.dropped_queue
        return DirStats(
            direction, seen=self.seen, released=self.released, held=held,
            duplicated=self.duplicated, dropped_loss=self.dropped_loss,
            dropped_queue=self.dropped_queue,
            applied_delay_mean_s=(self.applied_delay_sum_s / accepted) if accepted else 0.0,
            lateness=Lateness(self.released,
                              (self.late_sum_s / self.released) if self.released else 0.0,
                              self.late_max_s, tuple(self.late_hist),
                              None if self.tol_s == float("inf") else self.tol_s,
                              None if self.tol_s == float("inf") else self.late_over,
                              self.late_min_s if self.released else None),
            extra=extra)


class DirectionQueue:
    """The packets of one direction (one NFQUEUE) held until their release time.

    Without reordering the queue is a FIFO of *runs*: (deadline, ids, dup), the packets
    of one read batch that share a deadline (plain delay), or a single packet (jitter,
    loss, duplication, per-packet kernel timestamps). A run costs the same whether it
    holds 1 or 500 packets, which keeps the per-packet Python work near zero at high
    packet rates. With reordering it is a heap of (deadline, id, dup).
    """

    def __init__(self, d: Direction, *, limit: int, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.stats = DirectionStats()
        self._fifo: deque[tuple[float, tuple[int, ...], bool]] = deque()
        self._nfifo = 0                      # packets in _fifo (sum of run lengths)
        self._heap: list[tuple[float, int, bool]] = []
        self._last_deadline = float("-inf")
        self._ge_bad = False
        self.last_released = float("-inf")    # the latest deadline released so far
        self.configure(d, limit=limit)

    def configure(self, d: Direction, *, limit: int) -> None:
        """Take a new profile; packets already held keep their release times."""
        if limit < 1:
            raise ValueError("queue limit must be >= 1")
        self.d = d
        self.limit = limit
        self._delay = d.delay_s
        self._jitter = d.jitter_s
        self._normal = d.jitter_dist == "normal"
        self._loss = d.loss
        self._ge = d.gemodel
        self._dup = d.duplicate
        self._plain = not (d.jitter_s > 0 or d.loss > 0 or d.gemodel is not None
                           or d.duplicate > 0)
        reorder = bool(d.reorder and d.jitter_s > 0)
        if reorder != getattr(self, "reorder", reorder):
            self._migrate(reorder)
        self.reorder = reorder

    def _migrate(self, reorder: bool) -> None:
        # Switching discipline with packets held: keep them, in deadline order.
        items = sorted([(d, pid, dup) for d, ids, dup in self._fifo for pid in ids]
                       + self._heap)
        self._fifo.clear()
        self._nfifo = 0
        self._heap = []
        if reorder:
            self._heap = items
        else:
            self._fifo.extend((d, (pid,), dup) for d, pid, dup in items)
            self._nfifo = len(items)
            self._last_deadline = items[-1][0] if items else self._last_deadline

    @property
    def held(self) -> int:
        return len(self._heap) if self.reorder else self._nfifo

    def _lost(self) -> bool:
        ge = self._ge
        if ge is None:
            return self._loss > 0.0 and self.rng.random() < self._loss
        # netem's loss_gilb_ell: transition first, then lose with the state's probability.
        r = self.rng.random
        if not self._ge_bad:
            if r() < ge.p:
                self._ge_bad = True
            return r() < ge.loss_good
        if r() < ge.r:
            self._ge_bad = False
        return r() < ge.loss_bad

    def _jittered(self) -> float:
        j = self._jitter
        if j <= 0.0:
            return self._delay
        x = self.rng.gauss(0.0, j) if self._normal else self.rng.uniform(-j, j)
        return max(0.0, self._delay + x)

    def arrive(self, pkt_id: int, now: float) -> int:
        """Register a packet; returns HOLD, HOLD_DUP (held, send twice), DROP_LOSS or
        DROP_QUEUE."""
        st = self.stats
        st.seen += 1
        if self._lost():
            st.dropped_loss += 1
            return DROP_LOSS
        if self.held >= self.limit:
            st.dropped_queue += 1
            return DROP_QUEUE
        deadline = now + self._jittered()
        dup = self._dup > 0.0 and self.rng.random() < self._dup
        if self.reorder:
            heapq.heappush(self._heap, (deadline, pkt_id, dup))
        else:
            if deadline < self._last_deadline:
                deadline = self._last_deadline
            self._last_deadline = deadline
            self._fifo.append((deadline, (pkt_id,), dup))
            self._nfifo += 1
        st.applied_delay_sum_s += deadline - now
        return HOLD_DUP if dup else HOLD

    def arrive_batch(self, ids: Sequence[int], now: float,
                     times: Sequence[float] | None = None) -> list[tuple[int, int]]:
        """arrive() for the packets of one read, in kernel order; `times` are their
        arrival times (default: all `now`). Returns (id, code) of every packet not simply
        held (drops and duplicates). Plain delay without per-packet times stores the
        whole batch as one run, with no per-packet work at all."""
        n = len(ids)
        if not n:
            return []
        if not self._plain or self.reorder or self._nfifo + n > self.limit:
            arrive = self.arrive
            if times is None:
                return [(pid, c) for pid in ids if (c := arrive(pid, now)) != HOLD]
            return [(pid, c) for pid, t in zip(ids, times) if (c := arrive(pid, t)) != HOLD]
        st = self.stats
        st.seen += n
        self._nfifo += n
        delay = self._delay
        last = self._last_deadline
        if times is None:
            d = now + delay
            if d < last:
                d = last
            self._last_deadline = d
            self._fifo.append((d, tuple(ids), False))
            st.applied_delay_sum_s += (d - now) * n
            return []
        append = self._fifo.append
        applied = 0.0
        for pid, t in zip(ids, times):
            d = t + delay
            if d < last:
                d = last
            last = d
            applied += d - t
            append((d, (pid,), False))
        self._last_deadline = last
        st.applied_delay_sum_s += applied
        return []

    def arrive_many(self, pkts: list[tuple[int, float]]) -> list[tuple[int, int]]:
        """arrive_batch() for (id, arrival) pairs."""
        return self.arrive_batch([p for p, _ in pkts], 0.0, [t for _, t in pkts])

    def next_deadline(self) -> float | None:
        if self.reorder:
            return self._heap[0][0] if self._heap else None
        return self._fifo[0][0] if self._fifo else None

    def last_due(self, limit: float) -> float | None:
        """The latest deadline <= limit among the held packets (None: none is due by
        then); with reordering, the head's (the heap keeps no order beyond it)."""
        if self.reorder:
            return self._heap[0][0] if self._heap and self._heap[0][0] <= limit else None
        last = None
        for deadline, _, _ in self._fifo:
            if deadline > limit:
                break
            last = deadline
        return last

    def release(self, upto: float, *, now: float | None = None) -> tuple[list[int], list[int]]:
        """Pop every packet due by `upto` (never one due later: a packet must not leave
        before its deadline, issue 31); lateness is measured against `now` (default:
        upto), when the release is expected to reach the wire, which the caller keeps
        >= upto.

        Returns (ids in release order, ids to duplicate). Without reordering the ids are
        a prefix of the kernel queue in id order, so one batch verdict on ids[-1] covers
        them all.
        """
        limit = upto
        if now is None:
            now = upto
        ids: list[int] = []
        dups: list[int] = []
        st = self.stats
        if self.reorder:
            h = self._heap
            lates: list[float] = []
            while h and h[0][0] <= limit:
                deadline, pid, dup = heapq.heappop(h)
                self.last_released = max(self.last_released, deadline)
                ids.append(pid)
                lates.append(now - deadline)
                if dup:
                    dups.append(pid)
            for x in lates:
                self._late(x, 1)
        else:
            q = self._fifo
            while q and q[0][0] <= limit:
                deadline, run, dup = q.popleft()
                self.last_released = deadline
                ids += run
                if dup:
                    dups += run
                self._late(now - deadline, len(run))
            self._nfifo -= len(ids)
        st.released += len(ids)
        st.duplicated += len(dups)
        return ids, dups

    def _late(self, late: float, k: int) -> None:
        st = self.stats
        st.late_sum_s += late * k
        if late > st.late_max_s:
            st.late_max_s = late
        if late < st.late_min_s:
            st.late_min_s = late
        if late > st.tol_s:
            st.late_over += k
        st.late_hist[lateness_bin(late)] += k

    def drain(self) -> list[int]:
        """Forget every held packet (engine shutdown); returns their ids."""
        ids = [p for _, run, _ in self._fifo for p in run] + [p for _, p, _ in self._heap]
        self._fifo.clear()
        self._nfifo = 0
        self._heap = []
        return ids


class WakeCompensator:
    """Learns how late timer wake-ups are, so timers are armed that much earlier.

    Tracks the running median of the observed wake-up latency (a step towards each
    sample), not its mean: VM timers now and then overshoot by milliseconds, and a mean
    pulled up by those would make every ordinary release early.
    """

    def __init__(self, *, step_s: float = 2e-6, cap_s: float = 1e-3,
                 initial_s: float = 50e-6, quantile: float = 0.5) -> None:
        self.step_s = step_s
        self.cap_s = cap_s
        self.value_s = initial_s
        # steps up q/(1-q) times larger than down: settles where a share q of the samples
        # is below (0.5: the median)
        self.up_s = step_s * quantile / (1.0 - quantile)

    def observe(self, latency_s: float) -> None:
        if latency_s > self.value_s:
            self.value_s = min(self.value_s + self.up_s, self.cap_s)
        elif latency_s < self.value_s:
            self.value_s = max(self.value_s - self.step_s, 0.0)
