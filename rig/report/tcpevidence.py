"""What the sending side's kernel said about each measurement (tcp_samples), summed over
the data-carrying connections of its successful transfers, and what limited it.

Shares are of each connection's steady state (from the end of slow start) when that is
at least STEADY_MIN of its sampled life; slow start is reported apart. The chrono
counters of tcp_info split a connection's life into time with nothing to
send (idle: the application did not supply data, or the peer did not ask for it) and
busy time, of which part was limited by the receiver's advertised window (rwnd_limited)
and part by the send buffer (sndbuf_limited); the rest of busy time the congestion
window (or pacing) set the pace. Retransmitted bytes say whether loss drove cwnd.

The receiver's advertised window (snd_wnd at the sender) is measured too: its largest
value in each connection's steady state, and how full the sender kept it (the steady
state's delivery, bytes acked over its time, x srtt / that window). Linux 6.x sizes the
window from the receive buffer by the measured payload/truesize of what it receives
(scaling_ratio, 0.75 of tcp_rmem on this host's veth at MTU 1500), not by
tcp_adv_win_scale: the advertised window is the kernel's own figure, the computed one a guess.

Classification, in this order (each share with its number, cited in the verdict):
  application-limited    busy < IDLE_BUSY of the connections' lifetime
  window-limited         rwnd_limited >= DOMINANT of busy time (or, with sndbuf_limited,
                         together, rwnd the larger); or the advertised window kept full
                         (>= WINDOW_FULL in flight, median over connections) with
                         rwnd_limited >= RWND_SOME: cwnd had grown to the window, the two
                         limits alternate and the chrono counters split the time between
                         them (a 1 MiB rmem at 40 ms: rwnd_limited 28 %, the window full)
  sender-buffer-limited  sndbuf_limited >= DOMINANT of busy time (or together, the larger);
                         or, busy and without loss, in flight < SPARE of cwnd and of the
                         receiver's window at once (medians over the steady samples): the
                         sender always had data but its socket held no more. Linux starts
                         the sndbuf_limited chrono only where a write waits for buffer space,
                         not for sendfile/splice (xrootd): 512 KiB tcp_wmem at 40 ms gave
                         sndbuf_limited 0-3 %, 362 of cwnd 1548 segments in flight
  loss-limited           cwnd-limited >= DOMINANT of busy and retransmitted >= LOSSY of sent
  cwnd-limited           cwnd-limited >= DOMINANT of busy (slow start, congestion control)
  None                   no share dominates (the numbers are still given)

Pure Python: must not import matplotlib, realization, services, process or orchestration.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from rig.report.model import Key, client_label
from rig.results.store import TcpSample

DOMINANT = 0.5       # a limit that held the sender at least half of its busy time
IDLE_BUSY = 0.5      # busy less than half the connection's sampled life: idle sender
LOSSY = 0.001        # >= 0.1 % of bytes sent again
DATA_SHARE = 0.01    # connections with < 1 % of a transfer's bytes (control) are left out
STEADY_CWND = 0.9    # slow start ends when cwnd first reaches 90 % of its largest value
STEADY_MIN = 0.3     # shares are of the steady state when it is >= 30 % of the life
WINDOW_FULL = 0.85   # >= 85 % of the advertised window in flight: the window is the limit
SPARE = 0.5          # in flight < half of cwnd and of the receiver's window: neither limited
SPARE_RTT_MS = 2.0   # ... on a path with a round trip (configured; at ~0 ms little is
                     # ever in flight, and a slow receiver's late ACKs inflate srtt)
RWND_SOME = 0.1      # ... when the kernel also saw the window stop the sender >= 10 % of busy


@dataclass
class Evidence:
    """Sums over the data connections of one point's successful transfers."""
    conns: int = 0
    busy_s: float = 0.0
    rwnd_s: float = 0.0
    sndbuf_s: float = 0.0
    life_s: float = 0.0          # sampled steady-state life (whole life when too short)
    slow_start_s: float = 0.0    # left out of the shares: slow start before steady state
    bytes_sent: int = 0
    rtt_ms: float | None = None  # the path's configured RTT (None: a real path)
    bytes_retrans: int = 0
    srtt_ms: list[float] = field(default_factory=list)    # last sample of each connection
    # per connection: the largest window the receiver advertised (steady state), bytes,
    # and the share of it kept in flight (steady delivery x srtt / that window)
    adv_wnd: list[int] = field(default_factory=list)
    fill: list[float] = field(default_factory=list)
    # per connection, medians over its steady samples: in flight / cwnd, in flight x mss /
    # the receiver's window of that sample
    of_cwnd: list[float] = field(default_factory=list)
    of_rwnd: list[float] = field(default_factory=list)

    @property
    def window_fill(self) -> float | None:
        """Median share of the advertised window in flight over the connections."""
        return statistics.median(self.fill) if self.fill else None

    @property
    def adv_window(self) -> int | None:
        """Median of the connections' largest advertised windows, bytes."""
        return int(statistics.median(self.adv_wnd)) if self.adv_wnd else None

    @property
    def cwnd_s(self) -> float:
        return max(0.0, self.busy_s - self.rwnd_s - self.sndbuf_s)

    def share(self, part: float) -> float:
        return part / self.busy_s if self.busy_s > 0 else 0.0

    @property
    def busy_share(self) -> float:
        return min(1.0, self.busy_s / self.life_s) if self.life_s > 0 else 0.0

    @property
    def retrans_share(self) -> float:
        return self.bytes_retrans / self.bytes_sent if self.bytes_sent else 0.0

    def numbers(self) -> str:
        slow = f"; slow start {self.slow_start_s:.3g} s left out" if self.slow_start_s else ""
        fill = self.window_fill
        wnd = (f"; advertised window {self.adv_window / 2**20:.3g} MiB, {fill:.0%} of it "
               f"in flight" if fill is not None and self.adv_window else "")
        return (f"rwnd_limited {self.share(self.rwnd_s):.0%}, sndbuf_limited "
                f"{self.share(self.sndbuf_s):.0%}, cwnd {self.share(self.cwnd_s):.0%} of "
                f"busy time; busy {self.busy_share:.0%} of {self.life_s:.3g} s; "
                f"retransmitted {self.retrans_share:.2%} of {self.bytes_sent / 2**20:.4g} MiB"
                f" over {self.conns} connection{'s' if self.conns != 1 else ''}{wnd}{slow}")

    def classify(self) -> tuple[str | None, str]:
        """(kind or None, evidence text citing the deciding share first)."""
        n = self.numbers()
        if self.busy_share < IDLE_BUSY:
            return ("application-limited",
                    f"sender busy only {self.busy_share:.0%} of the time, idle "
                    f"{1 - self.busy_share:.0%} (kernel: {n})")
        for kind, part, name in (("window-limited", self.rwnd_s, "rwnd_limited"),
                                 ("sender-buffer-limited", self.sndbuf_s, "sndbuf_limited")):
            if self.share(part) >= DOMINANT:
                return kind, f"{name} {self.share(part):.0%} of busy time (kernel: {n})"
        if self.share(self.rwnd_s + self.sndbuf_s) >= DOMINANT:
            # the receiver's window and the sender's buffer together: a window limit,
            # named after the larger part
            rw = self.rwnd_s >= self.sndbuf_s
            return ("window-limited" if rw else "sender-buffer-limited",
                    f"rwnd_limited + sndbuf_limited "
                    f"{self.share(self.rwnd_s + self.sndbuf_s):.0%} of busy time, "
                    f"{'rwnd' if rw else 'sndbuf'} the larger (kernel: {n})")
        fill = self.window_fill
        if fill is not None and fill >= WINDOW_FULL and self.share(self.rwnd_s) >= RWND_SOME \
                and self.retrans_share < LOSSY:
            return ("window-limited", f"the receiver's advertised window full: {fill:.0%} of "
                    f"its {(self.adv_window or 0) / 2**20:.3g} MiB in flight, rwnd_limited "
                    f"{self.share(self.rwnd_s):.0%} of busy time (kernel: {n})")
        rtt = self.rtt_ms if self.rtt_ms is not None else (
            statistics.median(self.srtt_ms) if self.srtt_ms else 0.0)
        if self.of_cwnd and self.of_rwnd and self.retrans_share < LOSSY and \
                rtt >= SPARE_RTT_MS:
            oc, orw = statistics.median(self.of_cwnd), statistics.median(self.of_rwnd)
            if oc < SPARE and orw < SPARE:
                return ("sender-buffer-limited",
                        f"busy {self.busy_share:.0%} with only {oc:.0%} of cwnd and {orw:.0%} "
                        f"of the receiver's window in flight: the sender's socket held no "
                        f"more (kernel: {n})")
        if self.share(self.cwnd_s) >= DOMINANT:
            if self.retrans_share >= LOSSY:
                return ("loss-limited", f"retransmitted {self.retrans_share:.2%} of bytes, "
                        f"cwnd-limited {self.share(self.cwnd_s):.0%} of busy time "
                        f"(kernel: {n})")
            return ("cwnd-limited", f"cwnd-limited {self.share(self.cwnd_s):.0%} of busy "
                    f"time, no window or buffer limit (kernel: {n})")
        return None, f"no limit dominates (kernel: {n})"


def _steady(ss: list[TcpSample]) -> TcpSample | None:
    """The first sample once cwnd reached STEADY_CWND of its largest value: the end of
    slow start (ssthresh says nothing under BBR, which leaves it infinite)."""
    top = max((s.cwnd_segs or 0) for s in ss)
    if top <= 0:
        return None
    return next(s for s in ss if (s.cwnd_segs or 0) >= STEADY_CWND * top)


def _chrono_s(now_us: int | None, then_us: int | None) -> float:
    """Seconds a chrono counter (tcp_info, microseconds) grew between two samples."""
    return ((now_us or 0) - (then_us or 0)) / 1e6


@dataclass
class Conn:
    """One connection of a transfer, from its first and last samples (the chrono shares
    from its steady state on when it had one)."""
    key: Key
    acked: int
    busy: float
    life: float
    rwnd: float
    sndbuf: float
    slow: float
    sent: int
    retrans: int
    srtt_ms: float
    adv_wnd: int = 0        # largest snd_wnd of its steady state (0: not sampled)
    fill: float | None = None   # steady delivery x srtt / adv_wnd
    of_cwnd: float | None = None    # median in flight / cwnd over the steady samples
    of_rwnd: float | None = None    # median in flight x mss / snd_wnd over them


def _conn_summaries(samples: list[TcpSample]) -> dict[int, list[Conn]]:
    """transfer_id -> per-connection summaries (first/last sample)."""
    by_conn: dict[tuple[int, int], list[TcpSample]] = defaultdict(list)
    for s in samples:
        if s.ok:
            by_conn[(s.transfer_id, s.conn)].append(s)
    out: dict[int, list[Conn]] = defaultdict(list)
    for (tid, _), ss in by_conn.items():
        ss.sort(key=lambda s: s.t_s)
        first, last = ss[0], ss[-1]
        steps = [b.t_s - a.t_s for a, b in zip(ss, ss[1:])]
        # the connection began at most one tick before its first sample, and never
        # before its client (t_s counts from the client's start): a transfer shorter
        # than two ticks has one sample, whose counters cover the whole connection
        tick = min(statistics.median(steps), first.t_s) if steps else first.t_s
        whole = last.t_s - first.t_s + max(0.0, tick)
        st = _steady(ss)
        base = TcpSample(busy_us=0, rwnd_limited_us=0, sndbuf_limited_us=0)  # its start
        if st is not None and last.t_s > st.t_s and \
                last.t_s - st.t_s >= STEADY_MIN * whole:
            base = st                    # chrono shares of the steady state only
            life = last.t_s - st.t_s
            slow = st.t_s - first.t_s + tick
        else:
            life, slow = whole, 0.0

        busy = _chrono_s(last.busy_us, base.busy_us)
        start = st if base is st and st is not None else first
        steady = [s for s in ss if s.t_s >= start.t_s]
        adv = max((s.snd_wnd_bytes or 0) for s in steady)
        span = last.t_s - start.t_s
        acked = (last.bytes_acked or 0) - (start.bytes_acked or 0)
        srtt = (last.srtt_us or 0) / 1e6
        fill = (acked / span * srtt / adv) if adv > 0 and span > 0 and srtt > 0 \
            and len(steady) >= 2 else None
        oc = [s.in_flight_pkts / s.cwnd_segs for s in steady
              if s.in_flight_pkts is not None and s.cwnd_segs]
        orw = [s.in_flight_pkts * s.mss_bytes / s.snd_wnd_bytes for s in steady
               if s.in_flight_pkts is not None and s.mss_bytes and s.snd_wnd_bytes]
        out[tid].append(Conn(
            key=Key(last.path, None if last.rtt_ms_configured is None
                    else float(last.rtt_ms_configured), client_label(last),
                    int(last.streams), int(last.concurrency)),
            acked=last.bytes_acked or 0, busy=busy, life=max(life, busy),
            rwnd=_chrono_s(last.rwnd_limited_us, base.rwnd_limited_us),
            sndbuf=_chrono_s(last.sndbuf_limited_us, base.sndbuf_limited_us), slow=slow,
            sent=last.bytes_sent or 0, retrans=last.bytes_retrans or 0,
            srtt_ms=(last.srtt_us or 0) / 1e3, adv_wnd=adv, fill=fill,
            of_cwnd=statistics.median(oc) if len(oc) >= 2 else None,
            of_rwnd=statistics.median(orw) if len(orw) >= 2 else None))
    return out


def evidence_by_key(samples: list[TcpSample]) -> dict[Key, Evidence]:
    """Evidence of every point that has tcp_samples of a successful transfer."""
    out: dict[Key, Evidence] = {}
    for conns in _conn_summaries(samples).values():
        total = sum(c.acked for c in conns)
        for c in conns:
            if total and c.acked < DATA_SHARE * total:
                continue
            e = out.setdefault(c.key, Evidence(rtt_ms=c.key.rtt_ms))
            e.conns += 1
            e.busy_s += c.busy
            e.rwnd_s += c.rwnd
            e.sndbuf_s += c.sndbuf
            e.life_s += c.life
            e.slow_start_s += c.slow
            e.bytes_sent += c.sent
            e.bytes_retrans += c.retrans
            e.srtt_ms.append(c.srtt_ms)
            if c.adv_wnd:
                e.adv_wnd.append(c.adv_wnd)
            if c.fill is not None:
                e.fill.append(c.fill)
            if c.of_cwnd is not None and c.of_rwnd is not None:
                e.of_cwnd.append(c.of_cwnd)
                e.of_rwnd.append(c.of_rwnd)
    return {k: e for k, e in out.items() if e.conns and e.life_s > 0}
