"""Header captures (tcpdump in the router, `capture: headers`) read with scapy into
per-flow TCP facts: retransmissions, out-of-order arrivals, zero-window advertisements,
RTT samples from TCP timestamps, and a decimated time-sequence series (the tcptrace
view) of each flow.

Where a capture is taken decides what its counts mean. The router has one interface
towards each end; the emulation (delay, loss) sits between them. For the data
direction, the interface facing the sender ("sender" side) sees every segment the
sender sent, before the engine dropped any; the one facing the receiver ("receiver"
side) sees what survived, after it.

Definitions, per flow (one direction of a connection) and per capture point:
  retransmission  a data segment whose bytes lie (partly) at or below the highest
                  sequence already seen at this point and fill no gap seen here. On the
                  sender side nothing was lost before the capture, so each is a segment
                  the sender sent again; counted in segments of the flow's MSS
                  (`retrans_segs`: a GSO burst of k segments counts k, as the engine,
                  which sees segmented packets, counts its drops).
  out-of-order    a data segment below the highest sequence that fills a gap (sequence
                  space skipped earlier at this point): on the receiver side, the repair
                  of a segment the engine dropped.
  zero window     an ACK of the other direction advertising a window of 0, counted once
                  per closed episode (a run of zero-window ACKs is one event).
  RTT sample      the time from a data segment carrying TSval X to the first ACK of the
                  other direction echoing X (TSecr), both seen at this point: on the
                  sender side, the round trip the sender sees, less the veth hop.
                  It never reads shorter than the round trip of the segment the ACK
                  answers: X is timed from its first sighting, and the segment whose
                  arrival made the receiver echo X (RFC 7323 TS.Recent) carried X, so
                  it passed here no earlier. It reads longer by the receiver's ACK
                  delay and by up to one TS clock tick (1 ms on Linux: segments sent
                  within a tick share X and are timed from the first). Its floor is
                  the path's RTT less RTT_RESOLUTION_MS (the pcap timestamps) on a
                  quiet host; under CPU load less also the router's receive lag: the
                  userspace engine starts a forwarded TCP packet's delay at its kernel
                  stamp (the sender's departure), the tap sees it when the router's
                  softirq handles it (5.5 ms seen at load 2.8 on 2 vCPUs).

Bounded for big captures: packets are streamed (scapy's PcapReader, unused layers not
dissected), at most `max_packets` per file and `budget_s` seconds of analysis; a
file cut short says so (`truncated`, `packets_analysed`).

Pure (files in, rows out): must not import realization, services, process,
orchestration or reports.
"""
from __future__ import annotations

import json
import math
import statistics
import struct
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_PACKETS = 400_000        # analysed per file; the rest is left out (truncated)
BUDGET_S = 60.0              # seconds of analysis per file at most
TSEQ_POINTS = 3000           # time-sequence points kept per flow (decimated)
TSEQ_RETRANS = 3000          # retransmissions kept per flow for the graph
MAX_HOLES = 20_000           # gaps tracked per flow (oldest forgotten beyond)
MAX_TS_PENDING = 50_000      # TSvals waiting for their echo per flow
MAX_FLOWS = 256              # flows reported per file (the largest by data)
_WRAP = 1 << 32
RTT_RESOLUTION_MS = 0.05     # below the path's RTT an RTT sample may read (pcap clock)


@dataclass
class _Series:
    """Decimated (t, value) points: every k-th, k doubling when the list is full."""
    cap: int
    pts: list[tuple[float, int]] = field(default_factory=list)
    stride: int = 1
    n: int = 0

    def add(self, t: float, v: int) -> None:
        if self.n % self.stride == 0:
            self.pts.append((t, v))
            if len(self.pts) >= self.cap:
                self.pts = self.pts[::2]
                self.stride *= 2
        self.n += 1


@dataclass
class Flow:
    """One direction of a TCP connection at one capture point."""
    first_t: float = 0.0
    last_t: float = 0.0
    base: int | None = None          # sequence number of the first byte (ISN + 1)
    last_abs: int = 0
    packets: int = 0
    data_pkts: int = 0
    max_end: int = 0                 # highest relative sequence seen (exclusive)
    holes: list[list[int]] = field(default_factory=list)
    retrans_pkts: int = 0
    retrans_bytes: int = 0
    retrans_segs: int = 0
    ooo_pkts: int = 0
    zero_window: int = 0
    _zero_open: bool = False
    syn_mss: int | None = None
    uses_ts: bool = False
    sizes: Counter = field(default_factory=Counter)
    ts_sent: dict[int, float] = field(default_factory=dict)
    ts_order: deque = field(default_factory=deque)
    rtt_s: list[float] = field(default_factory=list)
    data_t0: float | None = None     # first data segment
    data_t1: float = 0.0             # last new data
    seq_pts: _Series = field(default_factory=lambda: _Series(TSEQ_POINTS))
    ack_pts: _Series = field(default_factory=lambda: _Series(TSEQ_POINTS))
    re_pts: list[tuple[float, int]] = field(default_factory=list)
    peer_seg: int | None = None      # MSS the other side announced (it caps ours)

    def rel(self, seq: int) -> int:
        """Sequence relative to the flow's first byte, unwrapped past 4 GiB."""
        assert self.base is not None
        r = (seq - self.base) % _WRAP
        k = round((self.last_abs - r) / _WRAP)
        a = r + k * _WRAP
        self.last_abs = max(self.last_abs, a)
        return a

    def seg(self) -> int:
        """The segment size the sender used: the MSS the peer announced, less the
        timestamp option; else the most common payload size seen."""
        if self.peer_seg:
            return max(1, self.peer_seg - (12 if self.uses_ts else 0))
        common = [s for s, _ in self.sizes.most_common(3) if s]
        return max(common) if common else 1448

    def data(self, t: float, seq: int, plen: int) -> None:
        if self.base is None:
            self.base = seq
        s = self.rel(seq)
        e = s + plen
        self.data_pkts += 1
        if len(self.sizes) < 64 or plen in self.sizes:
            self.sizes[plen] += 1
        if self.data_t0 is None:
            self.data_t0 = t
        if s >= self.max_end:
            if s > self.max_end:
                self.holes.append([self.max_end, s])
                if len(self.holes) > MAX_HOLES:
                    del self.holes[0]
            self.max_end = e
            self.data_t1 = t
            self.seq_pts.add(t, e)
            return
        old = min(e, self.max_end) - s
        if self._fill(s, min(e, self.max_end)):
            self.ooo_pkts += 1
        else:
            self.retrans_pkts += 1
            self.retrans_bytes += old
            self.retrans_segs += math.ceil(old / self.seg())
            if len(self.re_pts) < TSEQ_RETRANS:
                self.re_pts.append((t, s))
        if e > self.max_end:
            self.max_end = e
            self.data_t1 = t
        self.seq_pts.add(t, e)

    def _fill(self, s: int, e: int) -> bool:
        """Remove [s, e) from the gaps; True when it filled some."""
        filled = False
        out: list[list[int]] = []
        for h in self.holes:
            if h[1] <= s or h[0] >= e:
                out.append(h)
                continue
            filled = True
            if h[0] < s:
                out.append([h[0], s])
            if h[1] > e:
                out.append([e, h[1]])
        if filled:
            self.holes = out
        return filled

    def tsval(self, t: float, val: int) -> None:
        if val not in self.ts_sent:
            self.ts_sent[val] = t
            self.ts_order.append(val)
            if len(self.ts_order) > MAX_TS_PENDING:
                self.ts_sent.pop(self.ts_order.popleft(), None)

    def echoed(self, t: float, ecr: int) -> None:
        t0 = self.ts_sent.get(ecr)
        if t0 is None:
            return
        if t >= t0:        # taps on two directions can disagree by microseconds
            self.rtt_s.append(t - t0)
        while self.ts_order:          # each TSval gives one sample, older ones none
            v = self.ts_order.popleft()
            self.ts_sent.pop(v, None)
            if v == ecr:
                break

    def window(self, win: int) -> None:
        """An ACK of the other direction advertised `win`."""
        if win == 0 and not self._zero_open:
            self.zero_window += 1
        self._zero_open = win == 0

    def ack(self, t: float, ack: int) -> None:
        if self.base is not None:
            self.ack_pts.add(t, self.rel(ack))


@dataclass
class FileResult:
    """What one capture file held."""
    flows: dict[tuple[str, int, str, int], Flow]
    packets_analysed: int
    truncated: str | None            # why the analysis stopped early, or None
    seconds: float


def _options(tcp: Any) -> tuple[int | None, tuple[int, int] | None]:
    mss, ts = None, None
    for opt in tcp.options or ():
        if not isinstance(opt, tuple) or len(opt) != 2:
            continue
        if opt[0] == "MSS":
            mss = int(opt[1])
        elif opt[0] == "Timestamp":
            ts = (int(opt[1][0]), int(opt[1][1]))
    return mss, ts


def analyse(pcap: Path, *, max_packets: int = MAX_PACKETS,
            budget_s: float = BUDGET_S) -> FileResult:
    """Stream one capture file into per-flow facts (bounded in packets and time)."""
    from rig import extras
    extras.require("capture")
    from scapy.config import conf
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapReader
    conf.layers.filter([Ether, IP, IPv6, TCP])
    flows: dict[tuple[str, int, str, int], Flow] = {}
    n, truncated = 0, None
    t_start = time.monotonic()
    try:
        with PcapReader(str(pcap)) as rd:
            for pkt in rd:
                if n >= max_packets:
                    truncated = f"stopped at {max_packets} packets"
                    break
                if n % 1000 == 0 and time.monotonic() - t_start > budget_s:
                    truncated = f"stopped after {budget_s:g} s of analysis"
                    break
                n += 1
                _packet(flows, pkt, IP, IPv6, TCP)
    except EOFError:
        truncated = "file ends mid-packet"
    except (OSError, ValueError, struct.error) as e:      # scapy's Scapy_Exception too
        truncated = f"unreadable after {n} packets: {e}"[:200]
    except Exception as e:       # noqa: BLE001 (scapy raises its own, untyped)
        if type(e).__name__ != "Scapy_Exception":
            raise
        truncated = f"unreadable after {n} packets: {e}"[:200]
    finally:
        conf.layers.unfilter()
    return FileResult(flows, n, truncated, time.monotonic() - t_start)


def _packet(flows: dict, pkt: Any, IP: Any, IPv6: Any, TCP: Any) -> None:
    if TCP not in pkt:
        return
    tcp = pkt[TCP]
    if IP in pkt:
        ip = pkt[IP]
        plen = ip.len - 4 * ip.ihl - 4 * tcp.dataofs
    elif IPv6 in pkt:
        ip = pkt[IPv6]
        plen = ip.plen - 4 * tcp.dataofs
    else:
        return
    t = float(pkt.time)
    key = (ip.src, int(tcp.sport), ip.dst, int(tcp.dport))
    f = flows.get(key)
    if f is None:
        f = flows[key] = Flow(first_t=t)
    f.packets += 1
    f.last_t = t
    flags = int(tcp.flags)
    mss, ts = _options(tcp)
    rev = flows.get((key[2], key[3], key[0], key[1]))
    if flags & 0x02:                       # SYN: the ISN, the MSS it announces
        f.base = (int(tcp.seq) + 1) % _WRAP
        f.syn_mss = mss
        f.uses_ts = ts is not None
        if rev is not None and mss:
            rev.peer_seg = mss
        return
    if rev is not None and rev.syn_mss and not f.peer_seg:
        f.peer_seg = rev.syn_mss
    if plen > 0:
        f.data(t, int(tcp.seq), plen)
        if ts is not None:
            f.uses_ts = True
            f.tsval(t, ts[0])
    if rev is not None and flags & 0x10 and not flags & 0x04:      # ACK, not RST
        if ts is not None:
            rev.echoed(t, ts[1])
        rev.window(int(tcp.window))
        rev.ack(t, int(tcp.ack))


def _pctl(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def flow_facts(key: tuple[str, int, str, int], f: Flow) -> dict[str, Any]:
    """The columns of one flow (rig.results.store.CaptureFlowRow), times in unix s."""
    dur = (f.data_t1 - f.data_t0) if f.data_t0 is not None else 0.0
    return {
        "src": key[0], "sport": key[1], "dst": key[2], "dport": key[3],
        "t_first": f.first_t, "t_last": f.last_t, "packets": f.packets,
        "data_packets": f.data_pkts, "data_bytes": f.max_end, "mss_bytes": f.seg(),
        "goodput_bps": 8.0 * f.max_end / dur if dur > 0 else None,
        "retrans_packets": f.retrans_pkts, "retrans_segs": f.retrans_segs,
        "retrans_bytes": f.retrans_bytes, "ooo_packets": f.ooo_pkts,
        "zero_window": f.zero_window, "rtt_samples": len(f.rtt_s),
        "rtt_ms_min": min(f.rtt_s) * 1e3 if f.rtt_s else None,
        "rtt_ms_median": statistics.median(f.rtt_s) * 1e3 if f.rtt_s else None,
        "rtt_ms_p90": (_pctl(f.rtt_s, 0.9) or 0.0) * 1e3 if f.rtt_s else None}


def tseq_json(f: Flow) -> str:
    """The flow's time-sequence graph: decimated highest sequence sent, ACKs received,
    retransmissions; t in seconds from its first packet, sequence in bytes."""
    t0 = f.first_t

    def pts(xs: list[tuple[float, int]]) -> list[list[float]]:
        return [[round(t - t0, 6), v] for t, v in xs]
    return json.dumps({"seq": pts(f.seq_pts.pts), "ack": pts(f.ack_pts.pts),
                       "retrans": pts(f.re_pts), "seq_stride": f.seq_pts.stride,
                       "retrans_kept": len(f.re_pts), "retrans_total": f.retrans_pkts},
                      separators=(",", ":"))


def data_flows(res: FileResult, min_bytes: int = 1) -> list[tuple[tuple, Flow]]:
    """Flows that carried data, largest first, at most MAX_FLOWS."""
    fl = [(k, f) for k, f in res.flows.items() if f.max_end >= min_bytes]
    fl.sort(key=lambda kf: -kf[1].max_end)
    return fl[:MAX_FLOWS]
