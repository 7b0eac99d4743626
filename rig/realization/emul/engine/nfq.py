"""Raw NETLINK_NETFILTER binding to one NFQUEUE: metadata-only copy, GSO, batch verdicts.

Message layouts follow include/uapi/linux/netfilter/nfnetlink_queue.h. The kernel keeps
the payload; we only read packet ids (and lengths/timestamps) and send verdicts, so no
byte of the data stream is copied into userspace (copy mode META) unless duplication
needs it (copy mode PACKET). In copy mode META a wake-up's messages are read with one
recvmmsg (mmsg.py) and parsed by one struct unpack (parse_slots).

Pure functions build and parse messages (unit-testable without root); `NfQueue` owns the
socket. Must not import asyncio or anything else from rig (mmsg.py is this package).
"""
from __future__ import annotations

import errno
import os
import socket
import struct
import time

from rig.realization.emul.engine.mmsg import MmsgReceiver, batch_struct, be16

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33

NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 0x1, 0x4
NFQNL_COPY_NONE, NFQNL_COPY_META, NFQNL_COPY_PACKET = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_TIMESTAMP, NFQA_PAYLOAD, NFQA_CAP_LEN = 1, 2, 4, 10, 13
NF_DROP, NF_ACCEPT = 0, 1

_MSG_PACKET = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
_NLH = struct.Struct("=IHHII")          # len, type, flags, seq, pid
_NFGEN = struct.Struct("!BBH")          # family, version, res_id (big endian)
_ATTR = struct.Struct("=HH")


_NLH_HEAD = struct.Struct("=IH")
_ERRNO = struct.Struct("=i")
_TS = struct.Struct("!QQ")
_TS_ATTR = (20, NFQA_TIMESTAMP)
_PKT_BE, _ERR_BE = be16(_MSG_PACKET), be16(NLMSG_ERROR)


def parse_slots(view: memoryview, n: int, slot: int, now: float, wall_offset: float,
                hint: list[int]) -> tuple[tuple[int, ...], list[float] | None, int]:
    """Parse n recvmmsg slots of copy-mode META messages: (ids, arrival times or None
    when every packet arrived `now`, how many had a usable kernel timestamp).

    Arrival is on time.monotonic()'s clock, from NFQA_TIMESTAMP when it is plausible
    (wall-clock rx stamp, or the sender's monotonic EDT stamp of a TCP packet). Whether
    a batch carries stamps is decided by its first packet (forwarded TCP usually has
    none; then the batch costs one unpack, whatever its size). hint[0] caches where the
    timestamp attribute sits (the layout repeats); hint[1] counts netlink errors.
    """
    vals = batch_struct(n, slot).unpack_from(view, 0)
    types = vals[0::2]
    ids = vals[1::2]
    bases = range(0, n * slot, slot)
    if types.count(_PKT_BE) != n:           # netlink errors (a refused verdict) among them
        keep = []
        for i, t in enumerate(types):
            if t == _PKT_BE:
                keep.append(i)
            elif t == _ERR_BE and _ERRNO.unpack_from(view, i * slot + 16)[0]:
                hint[1] += 1
        ids = tuple(ids[i] for i in keep)
        bases = [i * slot for i in keep]  # type: ignore[assignment]
    if not ids:
        return ids, None, 0
    ts_off = _ts_offset(view, bases[0], slot, hint)
    if not ts_off:
        return ids, None, 0
    times = []
    used = 0
    lo = now - 0.5
    unpack_attr, unpack_ts = _ATTR.unpack_from, _TS.unpack_from
    for base in bases:
        t = now
        if ts_off + 20 <= slot and unpack_attr(view, base + ts_off) == _TS_ATTR:
            sec, usec = unpack_ts(view, base + ts_off + 4)
            kt = sec + usec * 1e-6
            if kt > 1e9:
                kt -= wall_offset
            if lo < kt <= now:
                t = kt
                used += 1
        times.append(t)
    return ids, times, used


def _ts_offset(view, base: int, slot: int, hint: list[int]) -> int:
    off = hint[0]
    if off and off + 20 <= slot and _ATTR.unpack_from(view, base + off) == _TS_ATTR:
        return off
    mlen = min(_NLH_HEAD.unpack_from(view, base)[0], slot)
    off = _find_attr(view, base, mlen, NFQA_TIMESTAMP)
    if off:
        hint[0] = off
    return off


def _find_attr(buf, off: int, mlen: int, want: int) -> int:
    a = off + 20
    end = off + mlen
    while a + 4 <= end:
        alen, atype = _ATTR.unpack_from(buf, a)
        if alen < 4:
            break
        if atype & 0x7FFF == want:
            return a - off
        a += (alen + 3) & ~3
    return 0


class NfqError(OSError):
    pass


def _attr(atype: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return _ATTR.pack(n, atype) + payload + b"\0" * ((4 - n % 4) % 4)


def _msg(mtype: int, flags: int, queue: int, attrs: bytes, *, seq: int = 0,
         family: int = socket.AF_UNSPEC) -> bytes:
    body = _NFGEN.pack(family, 0, queue) + attrs
    return _NLH.pack(16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | mtype, flags, seq, 0) + body


def config_bind(queue: int, *, seq: int = 1) -> bytes:
    cmd = struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET)
    return _msg(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, queue,
                _attr(NFQA_CFG_CMD, cmd), seq=seq)


def config_params(queue: int, *, copy_mode: int, copy_range: int, maxlen: int, gso: bool,
                  seq: int = 2) -> bytes:
    """Copy mode, queue length and the GSO flag (others left unchanged by the mask)."""
    attrs = (_attr(NFQA_CFG_PARAMS, struct.pack("!IB", copy_range, copy_mode))
             + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))
             + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN))
             # never fail open: a full queue drops, it never lets packets skip the delay
             + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO if gso else 0)))
    return _msg(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, queue, attrs, seq=seq)


_VERDICT_HEADS: dict[tuple[int, bool, bool], bytes] = {}
_ID_BE = struct.Struct("!I").pack


def verdict(queue: int, pkt_id: int, accept: bool, *, batch: bool = False) -> bytes:
    """One verdict; with batch=True it applies to every queued id <= pkt_id. Everything
    but the id is the same for a queue: built once, cached (this is per wake-up work)."""
    head = _VERDICT_HEADS.get((queue, accept, batch))
    if head is None:
        full = _msg(NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT, NLM_F_REQUEST,
                    queue, _attr(NFQA_VERDICT_HDR, struct.pack(
                        "!II", NF_ACCEPT if accept else NF_DROP, 0)))
        head = _VERDICT_HEADS[(queue, accept, batch)] = full[:-4]
    return head + _ID_BE(pkt_id)


def parse_packets(buf: memoryview | bytes, n: int, out: list) -> int:
    """Parse n bytes of netlink messages; append (id, length, tstamp_s|None, payload|None)
    for each queued packet to `out`. Returns the first netlink error code seen (0: none)."""
    off = 0
    err = 0
    unpack_nlh = _NLH.unpack_from
    unpack_attr = _ATTR.unpack_from
    while off + 16 <= n:
        mlen, mtype, _, _, _ = unpack_nlh(buf, off)
        if mlen < 16:
            break
        end = off + mlen
        if mtype == _MSG_PACKET:
            a = off + 20
            pid, length, ts, payload = -1, 0, None, None
            while a + 4 <= end:
                alen, atype = unpack_attr(buf, a)
                if alen < 4:
                    break
                atype &= 0x7FFF
                if atype == NFQA_PACKET_HDR:
                    pid = struct.unpack_from("!I", buf, a + 4)[0]
                elif atype == NFQA_CAP_LEN:
                    length = struct.unpack_from("!I", buf, a + 4)[0]
                elif atype == NFQA_TIMESTAMP:
                    sec, usec = struct.unpack_from("!QQ", buf, a + 4)
                    ts = sec + usec * 1e-6
                elif atype == NFQA_PAYLOAD:
                    payload = bytes(buf[a + 4:a + alen])
                    length = length or len(payload)
                a += (alen + 3) & ~3
            if pid >= 0:
                out.append((pid, length, ts, payload))
        elif mtype == NLMSG_ERROR and mlen >= 20:
            code = struct.unpack_from("=i", buf, off + 16)[0]
            if code and not err:
                err = -code
        off += (mlen + 3) & ~3
    return err


class NfQueue:
    """One bound NFQUEUE on a non-blocking netlink socket."""

    def __init__(self, queue: int, *, rcvbuf: int = 256 << 20, maxlen: int = 1_000_000,
                 gso: bool = True, copy_packet: bool = False) -> None:
        self.queue = queue
        self.maxlen = maxlen
        self._pending: list = []
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
                try:
                    self.sock.setsockopt(socket.SOL_SOCKET, opt, rcvbuf)
                    break
                except PermissionError:
                    continue
            self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self.sock.bind((0, 0))
            self._request(config_bind(queue))
            self.set_mode(gso=gso, copy_packet=copy_packet)
        except BaseException:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.errors = 0
        self.last_error = ""
        self._hint = [0, 0]
        self.recvs = self.msgs = self.sends = 0
        self._mm = MmsgReceiver(self.sock.fileno())
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)

    def fileno(self) -> int:
        return self.sock.fileno()

    def _request(self, msg: bytes) -> None:
        """Send a config message and wait (blocking, bounded) for its ack."""
        self.sock.settimeout(2.0)
        try:
            self.sock.send(msg)
            while True:
                data = self.sock.recv(1 << 20)
                # packets queued meanwhile are kept for the next read, never lost
                err = parse_packets(data, len(data), self._pending)
                mtype = _NLH.unpack_from(data, 0)[1] if len(data) >= 16 else 0
                if mtype == NLMSG_ERROR:
                    if err:
                        raise NfqError(err, f"nfqueue {self.queue}: {os.strerror(err)}")
                    return
        except socket.timeout as e:
            raise NfqError(errno.ETIMEDOUT, f"nfqueue {self.queue}: no answer") from e
        finally:
            self.sock.setblocking(False)

    def set_mode(self, *, gso: bool, copy_packet: bool) -> None:
        """GSO on: offloaded packets arrive whole (64 KB); off: segmented first."""
        blocking = self.sock.getblocking()
        try:
            self._request(config_params(
                self.queue, copy_mode=NFQNL_COPY_PACKET if copy_packet else NFQNL_COPY_META,
                copy_range=0xFFFF if copy_packet else 0, maxlen=self.maxlen, gso=gso))
        finally:
            self.sock.setblocking(blocking)
        self.gso, self.copy_packet = gso, copy_packet

    def read_batches(self, now: float, wall_offset: float, *,
                     max_batches: int = 8) -> tuple[list[tuple[tuple[int, ...],
                                                              list[float] | None]], int]:
        """Drain what is queued now (copy mode META) with recvmmsg, at most max_batches
        full rounds: [(ids, arrival times or None)] (see parse_slots) and the number of
        kernel-timestamped packets. A stamp is plausible up to the clock read after its
        recvmmsg (`now` at the least), which is also the arrival of a packet without one
        (issue 42: `now`, read before, made a packet that arrived meanwhile early)."""
        out: list = []
        used = 0
        if self._pending:
            out.append((tuple(p[0] for p in self._pending), None))
            self._pending.clear()
        mm = self._mm
        for _ in range(max_batches):
            n = mm.recv()
            if not n:
                break
            self.recvs += 1
            self.msgs += n
            ids, times, u = parse_slots(mm.view, n, mm.slot, max(now, time.monotonic()),
                                        wall_offset, self._hint)
            used += u
            if ids:
                out.append((ids, times))
            if n < mm.slots:
                break
        self.errors = self._hint[1]
        return out, used

    def read(self, out: list, *, max_bytes: int = 8 << 20) -> int:
        """Drain what is readable now into `out`; returns bytes read (0: nothing)."""
        total = 0
        if self._pending:
            out.extend(self._pending)
            self._pending.clear()
        recv_into = self.sock.recv_into
        view = self.view
        while total < max_bytes:
            try:
                n = recv_into(view)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:   # should not happen with NO_ENOBUFS
                    continue
                raise
            if n <= 0:
                break
            err = parse_packets(view, n, out)
            if err:      # e.g. a verdict the kernel refused: count, keep serving
                self.errors += 1
                self.last_error = os.strerror(err)
            total += n
        return total

    def send(self, data: bytes) -> None:
        """Send concatenated verdict messages; a full socket buffer is retried briefly."""
        while True:
            try:
                self.sock.send(data)
                self.sends += 1
                return
            except BlockingIOError:
                continue

    def close(self) -> None:
        self.sock.close()
