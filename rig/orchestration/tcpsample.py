"""The sending side's TCP state during a transfer group: every connection of every
client process sampled at a fixed interval, faster in the group's first half second
(FAST_S, FAST_FOR_S) (tcp_info through netlink sock_diag,
rig.process.sockdiag), matched to the process it belongs to, turned into tcp_samples
rows (rig.results.store.TcpSampleRow).

Matching: concurrent transfers share the server's port, so a connection is known by the
client's end. The client process's open sockets (/proc/PID/fd, its threads' children
too) give socket inodes; a dump of the client namespace gives each inode's local port;
the sending namespace's socket whose client-side port is that port belongs to that
process. The mapping is refreshed only when an unknown client port shows up.

Cost: one dump of the sending namespace per tick (a few hundred microseconds of CPU
for tens of sockets); the thread's own CPU time is counted (`cpu_s`) and stored with
the run (environment key tcp_sampling), so the overhead is measured on every run.

Must not import reports.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from rig.process.sockdiag import DiagSocket, TcpInfo
from rig.results.store import TcpSampleRow

SSTHRESH_INFINITE = 0x7FFFFFFF   # TCP_INFINITE_SSTHRESH: slow start never ended
# The first FAST_FOR_S of a group are sampled every FAST_S (when the interval is longer):
# a transfer of 80 ms at ~0 ms (256 MiB at 27 Gbit/s) would otherwise fall between two
# ticks of 100 ms and leave no kernel account at all; one sample is enough for it (the
# chrono counters cover the whole connection). Cost: 25 dumps more per group.
FAST_S = 0.02
FAST_FOR_S = 0.5


def _tree(pid: int) -> list[int]:
    """pid and its descendants (through /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in
                         Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets a process tree holds open."""
    out: set[int] = set()
    for p in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(int(link[8:-1]))
    return out


class GroupSampler:
    """Samples one group's connections in a thread until stopped."""

    def __init__(self, send_ns: str | None, client_ns: str | None, *, sender: str,
                 interval_s: float) -> None:
        self.interval_s, self.sender = interval_s, sender
        self.send = DiagSocket(send_ns)
        self.client = self.send if client_ns == send_ns else DiagSocket(client_ns)
        self.pids: dict[int, int] = {}                  # pid -> instance
        self.port_inst: dict[int, int] = {}             # client-side port -> instance
        self.unknown: set[int] = set()                  # ports no process of ours holds
        self.series: dict[tuple[int, int], list[tuple[float, TcpInfo]]] = {}
        self.ticks, self.cpu_s, self.errors = 0, 0.0, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tcp_info")

    def track(self, instance: int, pid: int) -> None:
        """A client process of the group started (called from its runner thread)."""
        with self._lock:
            self.pids[pid] = instance
            self.unknown.clear()

    def start(self) -> "GroupSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for s in {id(self.send): self.send, id(self.client): self.client}.values():
            s.close()

    def _loop(self) -> None:
        t0 = nxt = time.monotonic()
        while not self._stop.wait(max(0.0, nxt - time.monotonic())):
            c0 = time.thread_time()
            try:
                self.tick(time.monotonic())
            except OSError:
                self.errors += 1           # a namespace going away at teardown
            self.cpu_s += time.thread_time() - c0
            self.ticks += 1
            nxt = max(nxt + self.step(nxt - t0), time.monotonic())

    def step(self, since_start_s: float) -> float:
        """The time to the next tick: FAST_S in the group's first FAST_FOR_S, then the
        interval (never longer than it)."""
        return min(self.interval_s, FAST_S) if since_start_s < FAST_FOR_S else self.interval_s

    def _client_port(self, r: TcpInfo) -> int:
        return r.dport if self.sender == "server" else r.sport

    def tick(self, t: float) -> None:
        recs = self.send.dump(info=True)
        refreshed = False
        for r in recs:
            port = self._client_port(r)
            inst = self.port_inst.get(port)
            if inst is None and port not in self.unknown and not refreshed:
                self._refresh(recs if self.client is self.send else None)
                refreshed = True
                inst = self.port_inst.get(port)
            if inst is None:
                self.unknown.add(port)
                continue
            self.series.setdefault((inst, port), []).append((t, r))

    def _refresh(self, client_recs: list[TcpInfo] | None) -> None:
        with self._lock:
            pids = dict(self.pids)
        inode_inst = {ino: inst for pid, inst in pids.items() for ino in socket_inodes(pid)}
        for c in client_recs if client_recs is not None else self.client.dump(info=False):
            if c.inode in inode_inst:
                self.port_inst[c.sport] = inode_inst[c.inode]

    def connections(self, instance: int) -> list[list[tuple[float, TcpInfo]]]:
        """Sample series of each connection of one process, in order of first sample."""
        mine = [s for (inst, _), s in self.series.items() if inst == instance]
        return sorted(mine, key=lambda s: s[0][0])


# tcp_info counters that count from the connection's start (rebased for a pooled one)
CUMULATIVE = ("bytes_acked", "bytes_sent", "bytes_retrans", "total_retrans", "busy_us",
              "rwnd_limited_us", "sndbuf_limited_us")


def since(r: TcpInfo, base: TcpInfo) -> TcpInfo:
    """`r` with its cumulative counters counted from `base` (the same socket, earlier)."""
    new: dict[str, Any] = {k: (getattr(r, k) or 0) - (getattr(base, k) or 0)
                           for k in CUMULATIVE if getattr(r, k) is not None}
    return dataclasses.replace(r, **new)


class SourceSampler(GroupSampler):
    """Third-party copy: the data goes from the source origin to the destination origin,
    not to the client process (it only sends the COPY), so the client's sockets say
    nothing. This samples the source namespace's connections from the source's server
    ports. A connection counts from the group's start (a pooled one is rebased on the
    dump taken before the group) and is attributed once it has moved data in this
    group, to a copy already started that has the fewest connections (the earliest
    started first): exact for one copy at a time; with several, each connection is one
    copy's, which copy's is not known."""

    def __init__(self, send_ns: str | None, ports: list[int], *, interval_s: float) -> None:
        super().__init__(send_ns, send_ns, sender="server", interval_s=interval_s)
        self.ports = set(ports)
        self.base = {(r.dst, r.dport): r for r in self.send.dump(info=True)
                     if r.sport in self.ports}
        self.active: dict[tuple[str, int], int] = {}
        self.started: dict[int, float] = {}             # instance -> when it was tracked

    def track(self, instance: int, pid: int) -> None:
        super().track(instance, pid)
        with self._lock:
            self.started.setdefault(instance, time.monotonic())

    def _assign(self, t: float) -> int | None:
        """A copy started before `t` (so its samples count from its start), fewest
        connections first, then the earliest started."""
        with self._lock:
            ready = [(i, s) for i, s in self.started.items() if s <= t]
        if not ready:
            return None
        n = {i: 0 for i, _ in ready}
        for i in self.active.values():
            if i in n:
                n[i] += 1
        return min(ready, key=lambda x: (n[x[0]], x[1], x[0]))[0]

    def tick(self, t: float) -> None:
        for r in self.send.dump(info=True):
            if r.sport not in self.ports:
                continue
            k = (r.dst, r.dport)
            if k in self.base:
                r = since(r, self.base[k])
            inst = self.active.get(k)
            if inst is None:
                if not r.bytes_acked or (inst := self._assign(t)) is None:
                    continue
                self.active[k] = inst
            self.series.setdefault((inst, r.dport), []).append((t, r))


def sample_rows(conns: list[list[tuple[float, TcpInfo]]], transfer_id: int,
                t_start: float) -> list[TcpSampleRow]:
    """tcp_samples rows of one transfer; t_s counted from its process start. That start
    is read when the spawn returns: a tick stamped before it may already see the client's
    connection (seen under qemu TCG: -7.9 ms, which results/check.py refuses), so t_s is
    never below 0."""
    out = []
    for ci, series in enumerate(conns):
        for t, r in series:
            out.append(TcpSampleRow(
                transfer_id=transfer_id, conn=ci, t_s=max(0.0, round(t - t_start, 4)),
                cwnd_segs=r.snd_cwnd_segs,
                ssthresh_segs=(None if r.snd_ssthresh_segs >= SSTHRESH_INFINITE
                               else r.snd_ssthresh_segs),
                mss_bytes=r.snd_mss, srtt_us=r.rtt_us, rttvar_us=r.rttvar_us,
                delivery_rate_bps=8.0 * r.delivery_rate_Bps, app_limited=int(r.app_limited),
                in_flight_pkts=r.in_flight_pkts, snd_wnd_bytes=r.snd_wnd,
                bytes_acked=r.bytes_acked, bytes_sent=r.bytes_sent,
                bytes_retrans=r.bytes_retrans, total_retrans=r.total_retrans,
                busy_us=r.busy_us, rwnd_limited_us=r.rwnd_limited_us,
                sndbuf_limited_us=r.sndbuf_limited_us))
    return out


@contextlib.contextmanager
def sampling(send_ns: str | None, client_ns: str | None, *, sender: str,
             interval_s: float | None, tpc_source: list[int] | None = None
             ) -> Iterator[GroupSampler | None]:
    """A running sampler for one group (None when sampling is off); always stopped.
    `tpc_source` = the source origin's ports: a third-party copy, sampled at the source
    (`send_ns` is the source's namespace)."""
    if not interval_s:
        yield None
        return
    s = (SourceSampler(send_ns, tpc_source, interval_s=interval_s)
         if tpc_source else GroupSampler(send_ns, client_ns, sender=sender,
                                         interval_s=interval_s)).start()
    try:
        yield s
    finally:
        s.stop()
