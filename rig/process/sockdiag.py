"""The kernel's per-socket TCP state (struct tcp_info) read through netlink sock_diag,
inside a network namespace, without starting a process.

A NETLINK_SOCK_DIAG socket answers for the namespace it was created in, so a
short-lived thread joins the namespace (setns, rig.process.nsprobe) only to create it;
every later dump runs from any thread. One dump of a namespace's established TCP
sockets costs a few hundred microseconds of CPU here, where `ip netns exec NS ss -tin`
costs a process start (and ss's own parsing) per sample.

`parse_dump` is pure (bytes in, typed records out) and tested on captured bytes;
`DiagSocket` does the I/O. Both families are dumped: servers listening on `*` (iperf3,
xrootd) accept IPv4 clients on IPv6 sockets, whose v4-mapped addresses are given here
as plain IPv4.

Must not import anything above rig.process.
"""
from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from rig.process.nsprobe import _in_ns

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
TCP_ESTABLISHED = 1
TCPF_ESTABLISHED = 1 << TCP_ESTABLISHED
_NLH = struct.Struct("=IHHII")                 # nlmsghdr
_REQ = struct.Struct("=BBBxI48s")              # inet_diag_req_v2 (sockid zeroed)
_MSG = struct.Struct("=BBBB2H16s16sI8sIIIII")  # inet_diag_msg
_RTA = struct.Struct("=HH")


@dataclass(frozen=True)
class TcpInfo:
    """One socket at one instant: addresses and the tcp_info fields the rig keeps.
    Times in microseconds, sizes in bytes unless named `_pkts`/`_segs`; counters
    (bytes_*, total_retrans, *_us chrono) are cumulative since the connection began."""
    src: str
    sport: int
    dst: str
    dport: int
    inode: int
    state: int
    ca_state: int = 0
    snd_mss: int = 0
    unacked_pkts: int = 0
    sacked_pkts: int = 0
    lost_pkts: int = 0
    retrans_pkts: int = 0
    rtt_us: int = 0
    rttvar_us: int = 0
    snd_ssthresh_segs: int = 0
    snd_cwnd_segs: int = 0
    total_retrans: int = 0
    bytes_acked: int = 0
    notsent_bytes: int = 0
    delivery_rate_Bps: int = 0          # bytes/s, the kernel's latest delivery-rate sample
    app_limited: bool = False           # that sample was application-limited
    busy_us: int | None = None          # chrono: time with data to send (all three below)
    rwnd_limited_us: int | None = None  # ... of which limited by the receiver's window
    sndbuf_limited_us: int | None = None  # ... of which limited by the send buffer
    bytes_sent: int | None = None
    bytes_retrans: int | None = None
    snd_wnd: int | None = None          # the peer's advertised window (kernel >= 5.4)

    @property
    def in_flight_pkts(self) -> int:
        """The kernel's tcp_packets_in_flight(): unacked - (sacked + lost) + retrans."""
        return max(0, self.unacked_pkts - (self.sacked_pkts + self.lost_pkts)
                   + self.retrans_pkts)


# Offsets in struct tcp_info (include/uapi/linux/tcp.h); a field past the length the
# kernel returned is absent (older kernel) and stays None.
_U32 = {"snd_mss": 16, "unacked_pkts": 24, "sacked_pkts": 28, "lost_pkts": 32,
        "retrans_pkts": 36, "rtt_us": 68, "rttvar_us": 72, "snd_ssthresh_segs": 76,
        "snd_cwnd_segs": 80, "total_retrans": 100, "notsent_bytes": 144, "snd_wnd": 228}
_U64 = {"bytes_acked": 120, "delivery_rate_Bps": 160, "busy_us": 168,
        "rwnd_limited_us": 176, "sndbuf_limited_us": 184, "bytes_sent": 200,
        "bytes_retrans": 208}


def parse_tcp_info(b: bytes) -> dict:
    out: dict = {}
    if len(b) >= 8:
        out["ca_state"] = b[1]
        out["app_limited"] = bool(b[7] & 1)
    for name, off in _U32.items():
        if off + 4 <= len(b):
            out[name] = struct.unpack_from("=I", b, off)[0]
    for name, off in _U64.items():
        if off + 8 <= len(b):
            out[name] = struct.unpack_from("=Q", b, off)[0]
    return out


def request(seq: int, *, info: bool, family: int = socket.AF_INET,
            states: int = TCPF_ESTABLISHED) -> bytes:
    """A dump request for TCP sockets of `family` in `states`, with tcp_info if `info`."""
    body = _REQ.pack(family, socket.IPPROTO_TCP,
                     (1 << (INET_DIAG_INFO - 1)) if info else 0, states, b"\0" * 48)
    return _NLH.pack(_NLH.size + len(body), SOCK_DIAG_BY_FAMILY,
                     NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def parse_dump(buf: bytes) -> tuple[list[TcpInfo], bool]:
    """Records of one or more netlink messages; True once NLMSG_DONE was seen.
    Raises OSError for an NLMSG_ERROR answer."""
    out: list[TcpInfo] = []
    off, done = 0, False
    while off + _NLH.size <= len(buf):
        length, typ, _, _, _ = _NLH.unpack_from(buf, off)
        if length < _NLH.size:
            break
        body = off + _NLH.size
        if typ == NLMSG_DONE:
            done = True
        elif typ == NLMSG_ERROR:
            err = struct.unpack_from("=i", buf, body)[0]
            if err:
                raise OSError(-err, os.strerror(-err))
        elif typ == SOCK_DIAG_BY_FAMILY:
            out.append(_record(buf, body, off + length))
        off += (length + 3) & ~3
    return out, done


def _has_done(buf: bytes) -> bool:
    """Whether a reply chunk ends the dump (NLMSG_DONE or an error), headers only."""
    off = 0
    while off + _NLH.size <= len(buf):
        length, typ = _NLH.unpack_from(buf, off)[:2]
        if typ in (NLMSG_DONE, NLMSG_ERROR):
            return True
        if length < _NLH.size:
            return True
        off += (length + 3) & ~3
    return False


def _record(buf: bytes, start: int, end: int) -> TcpInfo:
    (family, state, _, _, sport, dport, src, dst, _, _, _, _, _, _, inode) = \
        _MSG.unpack_from(buf, start)
    fields: dict = {}
    off = start + _MSG.size
    while off + _RTA.size <= end:
        rlen, rtype = _RTA.unpack_from(buf, off)
        if rlen < _RTA.size:
            break
        if rtype == INET_DIAG_INFO:
            fields = parse_tcp_info(bytes(buf[off + _RTA.size: off + rlen]))
        off += (rlen + 3) & ~3
    return TcpInfo(_addr(family, src), socket.ntohs(sport), _addr(family, dst),
                   socket.ntohs(dport), inode, state, **fields)


_V4_MAPPED = b"\0" * 10 + b"\xff\xff"


def _addr(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntoa(raw[:4])
    if raw[:12] == _V4_MAPPED:
        return socket.inet_ntoa(raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw)


class DiagSocket:
    """A sock_diag socket bound to one network namespace (None: the host's)."""

    def __init__(self, ns: str | None) -> None:
        self.ns = ns
        self._seq = 0
        self._sock = _in_ns(ns, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                                      NETLINK_SOCK_DIAG))
        self._sock.settimeout(2.0)

    def dump(self, *, info: bool = True) -> list[TcpInfo]:
        """Every established TCP socket (IPv4 and IPv6) of the namespace, now."""
        return parse_dump(self.raw_dump(info=info))[0]

    def raw_dump(self, *, info: bool = True) -> bytes:
        """The answers' bytes, unparsed (parse_dump reads them; tests keep captures)."""
        chunks = []
        for family in (socket.AF_INET, socket.AF_INET6):
            self._seq += 1
            self._sock.send(request(self._seq, info=info, family=family))
            while True:
                b = self._sock.recv(1 << 16)
                chunks.append(b)
                if _has_done(b):
                    break
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "DiagSocket":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
