"""Kernel arrival stamps and a wire audit for the engine's router: two tiny tc eBPF
programs, attached through tcx, built here as raw instructions and loaded with the bpf()
syscall through ctypes (no compiler, no libbpf, nothing to build or install).

stamp (tcx ingress of both router interfaces)
    Writes the packet's arrival time into skb->tstamp: CLOCK_MONOTONIC (the clock of
    time.monotonic()), rounded UP to the microsecond because NFQUEUE reports the stamp
    as NFQA_TIMESTAMP in whole microseconds (truncated): a stamp rounded down would make
    a packet leave up to 1 us before its time. NFQUEUE hands it to the engine as the
    arrival time of every packet, TCP included (without it a forwarded TCP packet
    carries a kernel stamp only while some socket on the host has receive timestamps on,
    and the engine must stamp it when it reads it). The same instant goes into skb->mark
    (in 64 ns units, modulo 2^32: 275 s) for the audit: the kernel clears skb->tstamp
    when it forwards (ip_forward_finish), the mark stays until the packet leaves the
    namespace (veth scrubs it).

audit (tcx egress of both router interfaces)
    For every packet that was stamped on the way in: departure (here, before the egress
    qdisc: a TBF's rate queue is the path's, not the engine's) minus arrival minus the
    direction's configured delay (a map the engine fills on every profile change). Per
    direction, per CPU: count, sum, minimum (cumulative and a window the engine resets),
    maximum, packets early (< 0) and a histogram in rig.description.linkstats'
    LATENESS_EDGES_S bins. It is independent of the engine's bookkeeping: it reads the
    kernel's clock when the packet is on its way out, whatever the engine believes.
    With jitter the configured delay is the mean, so the early side also holds jitter.

Both programs return TCX_NEXT: whatever else is attached runs as before. Their links are
file descriptors of the engine process: when it exits, the kernel detaches them.
Linux >= 6.6 (tcx). Must not import anything from rig but linkstats' edges.
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass

from rig.description.linkstats import LATENESS_EDGES_S

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_PROG_LOAD = 0, 1, 2, 5
BPF_LINK_CREATE = 28
BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_ARRAY = 2, 6
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_TCX_INGRESS, BPF_TCX_EGRESS = 46, 47
TCX_NEXT = -1
FN_MAP_LOOKUP_ELEM, FN_KTIME_GET_NS = 1, 5
SKB_MARK, SKB_PROTOCOL, SKB_TSTAMP = 8, 16, 152   # offsetof(struct __sk_buff, ...)
# skb->protocol as the u32 load sees it on a little-endian CPU (htons of the EtherType)
ETH_P_IP_LE, ETH_P_IPV6_LE = 0x0008, 0xDD86
MARK_SHIFT = 6                         # skb->mark holds arrival ns >> 6 (64 ns units)
MAX_HELD_S = 60.0                      # the audit ignores a packet "held" longer

# The audit's value per direction and CPU: these u64 fields, then the histogram.
F_COUNT, F_SUM, F_MIN, F_WMIN, F_MAX, F_EARLY = range(6)
NFIELDS = 6
NBINS = len(LATENESS_EDGES_S) + 1
VALUE_SIZE = 8 * (NFIELDS + NBINS)
I64_MAX, I64_MIN = (1 << 63) - 1, -(1 << 63)

_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(OSError):
    pass


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise BpfError(0, f"bpf(): no syscall number known for {platform.machine()}")
    r = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if r < 0:
        e = ctypes.get_errno()
        raise BpfError(e, os.strerror(e))
    return int(r)


def _attr(size: int = 128) -> ctypes.Array:
    return ctypes.create_string_buffer(size)


def _addr(buf: ctypes.Array) -> int:
    return ctypes.addressof(buf)


# --- an assembler for the few instructions used -------------------------------------------

def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


R0, R1, R2, R3, R6, R7, R8, R9, R10 = 0, 1, 2, 3, 6, 7, 8, 9, 10
_ALU64, _ALU32, _JMP, _LDX, _STX, _ST, _LD = 0x07, 0x04, 0x05, 0x01, 0x03, 0x02, 0x00
_K, _X = 0x00, 0x08
_W, _DW = 0x00, 0x18
_MEM, _IMM = 0x60, 0x00
ADD, SUB, MUL, DIV, LSH, RSH, MOV = 0x00, 0x10, 0x20, 0x30, 0x60, 0x70, 0xb0
JA, JEQ, JGT, JNE, JSGE, JSLT, JSLE, CALL, EXIT = (0x00, 0x10, 0x20, 0x50, 0x70, 0xc0, 0xd0,
                                                   0x80, 0x90)


def alu(op: int, dst: int, imm: int) -> bytes:
    return _insn(_ALU64 | op | _K, dst, imm=imm)


def alux(op: int, dst: int, src: int) -> bytes:
    return _insn(_ALU64 | op | _X, dst, src)


def mov32(dst: int, src: int) -> bytes:
    return _insn(_ALU32 | MOV | _X, dst, src)


def ldx(size: int, dst: int, src: int, off: int) -> bytes:
    return _insn(_LDX | _MEM | size, dst, src, off)


def stx(size: int, dst: int, src: int, off: int) -> bytes:
    return _insn(_STX | _MEM | size, dst, src, off)


def st(size: int, dst: int, off: int, imm: int) -> bytes:
    return _insn(_ST | _MEM | size, dst, 0, off, imm)


def jmp(op: int, dst: int, imm: int, off: int) -> bytes:
    return _insn(_JMP | op | _K, dst, 0, off, imm)


def jmpx(op: int, dst: int, src: int, off: int) -> bytes:
    return _insn(_JMP | op | _X, dst, src, off)


def call(fn: int) -> bytes:
    return _insn(_JMP | CALL, imm=fn)


def exit_() -> bytes:
    return _insn(_JMP | EXIT)


def ld_map_fd(dst: int, fd: int) -> bytes:
    """The two-slot 64-bit load of a map (BPF_PSEUDO_MAP_FD)."""
    return _insn(_LD | _DW | _IMM, dst, 1, 0, fd) + _insn(0)


class Asm:
    """Instructions with forward jumps to labels (offsets counted in 8-byte slots)."""

    def __init__(self) -> None:
        self.code: list[bytes] = []
        self.fix: list[tuple[int, str]] = []
        self.labels: dict[str, int] = {}

    def __call__(self, *insns: bytes) -> "Asm":
        for i in insns:
            for k in range(0, len(i), 8):
                self.code.append(i[k:k + 8])
        return self

    def jump(self, op: int, dst: int, imm: int, label: str, *, src: int | None = None) -> "Asm":
        self.fix.append((len(self.code), label))
        self.code.append(jmpx(op, dst, src, 0) if src is not None else jmp(op, dst, imm, 0))
        return self

    def label(self, name: str) -> "Asm":
        self.labels[name] = len(self.code)
        return self

    def build(self) -> bytes:
        code = list(self.code)
        for at, name in self.fix:
            c = bytearray(code[at])
            struct.pack_into("<h", c, 2, self.labels[name] - at - 1)
            code[at] = bytes(c)
        return b"".join(code)


def _ip_only(a: "Asm", out: str) -> None:
    """Go to `out` unless the packet is IPv4 or IPv6 (ARP, neighbour discovery: not the
    path's traffic)."""
    a(ldx(_W, R2, R1, SKB_PROTOCOL))
    a.jump(JEQ, R2, ETH_P_IP_LE, "ip")
    a.jump(JNE, R2, ETH_P_IPV6_LE, out)
    a.label("ip")


def stamp_program(tstamp: bool = True) -> bytes:
    """The ingress program; tstamp=False writes only the audit's mark (the engine then
    keeps whatever stamp the kernel gives NFQUEUE, as before issue 42)."""
    a = Asm()
    _ip_only(a, "out")
    a(alux(MOV, R6, R1), call(FN_KTIME_GET_NS), alux(MOV, R7, R0))
    if tstamp:
        a(alu(ADD, R0, 999), alu(DIV, R0, 1000), alu(MUL, R0, 1000),
          stx(_DW, R6, R0, SKB_TSTAMP))
    a(alu(RSH, R7, MARK_SHIFT))
    a.jump(JNE, R7, 0, "store")
    a(alu(MOV, R7, 1))
    a.label("store")
    a(stx(_W, R6, R7, SKB_MARK))
    a.label("out")
    a(alu(MOV, R0, TCX_NEXT), exit_())
    return a.build()


def audit_program(direction: int, cfg_fd: int, stats_fd: int) -> bytes:
    a = Asm()
    _ip_only(a, "out")
    a(alux(MOV, R6, R1), ldx(_W, R7, R6, SKB_MARK))
    a.jump(JEQ, R7, 0, "out")
    a(call(FN_KTIME_GET_NS), alu(RSH, R0, MARK_SHIFT), alux(SUB, R0, R7), mov32(R0, R0))
    # "before its arrival" (a mark this program did not write, or CPU clocks a few ns
    # apart on a packet that was not held) or more than MAX_HELD_S after it: not counted.
    # Measured: the first seconds of a fresh path showed a few packets 10-137 s "late"
    # (bench/engine_stamps.py, first sample; cause not found), which no held packet can be
    a.jump(JGT, R0, int(MAX_HELD_S * 1e9) >> MARK_SHIFT, "out")
    a(alu(LSH, R0, MARK_SHIFT), alux(MOV, R8, R0),            # r8: ns since arrival
      st(_W, R10, -4, direction), ld_map_fd(R1, cfg_fd), alux(MOV, R2, R10),
      alu(ADD, R2, -4), call(FN_MAP_LOOKUP_ELEM))
    a.jump(JEQ, R0, 0, "out")
    a(ldx(_DW, R1, R0, 0), alux(SUB, R8, R1),                 # r8: lateness, signed ns
      ld_map_fd(R1, stats_fd), alux(MOV, R2, R10), alu(ADD, R2, -4),
      call(FN_MAP_LOOKUP_ELEM))
    a.jump(JEQ, R0, 0, "out")
    a(alux(MOV, R9, R0),
      ldx(_DW, R1, R9, 8 * F_COUNT), alu(ADD, R1, 1), stx(_DW, R9, R1, 8 * F_COUNT),
      ldx(_DW, R1, R9, 8 * F_SUM), alux(ADD, R1, R8), stx(_DW, R9, R1, 8 * F_SUM),
      ldx(_DW, R1, R9, 8 * F_MIN))
    a.jump(JSGE, R8, 0, "min_done", src=R1)
    a(stx(_DW, R9, R8, 8 * F_MIN))
    a.label("min_done")
    a(ldx(_DW, R1, R9, 8 * F_WMIN))
    a.jump(JSGE, R8, 0, "wmin_done", src=R1)
    a(stx(_DW, R9, R8, 8 * F_WMIN))
    a.label("wmin_done")
    a(ldx(_DW, R1, R9, 8 * F_MAX))
    a.jump(JSLE, R8, 0, "max_done", src=R1)
    a(stx(_DW, R9, R8, 8 * F_MAX))
    a.label("max_done")
    a.jump(JSGE, R8, 0, "early_done")
    a(ldx(_DW, R1, R9, 8 * F_EARLY), alu(ADD, R1, 1), stx(_DW, R9, R1, 8 * F_EARLY))
    a.label("early_done")
    # bin = how many edges are <= lateness (bisect_right), unrolled
    a(alu(MOV, R2, 8 * NFIELDS))
    for k, edge in enumerate(LATENESS_EDGES_S):
        a.jump(JSLT, R8, round(edge * 1e9), "bin")
        a(alu(MOV, R2, 8 * (NFIELDS + k + 1)))
    a.label("bin")
    a(alux(ADD, R9, R2), ldx(_DW, R1, R9, 0), alu(ADD, R1, 1), stx(_DW, R9, R1, 0))
    a.label("out")
    a(alu(MOV, R0, TCX_NEXT), exit_())
    return a.build()


# --- maps, programs, links ---------------------------------------------------------------

def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """How many per-CPU slots a per-CPU map has (the kernel's possible CPUs)."""
    try:
        text = open(path).read().strip()
    except OSError:
        return os.cpu_count() or 1
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n = max(n, int(hi or lo) + 1)
    return n


def map_create(map_type: int, key_size: int, value_size: int, entries: int) -> int:
    a = _attr()
    struct.pack_into("=IIII", a, 0, map_type, key_size, value_size, entries)
    return _bpf(BPF_MAP_CREATE, a)


def map_update(fd: int, key: int, value: bytes) -> None:
    k = ctypes.create_string_buffer(struct.pack("=I", key), 4)
    v = ctypes.create_string_buffer(value, len(value))
    a = _attr()
    struct.pack_into("=IIQQQ", a, 0, fd, 0, _addr(k), _addr(v), 0)
    _bpf(BPF_MAP_UPDATE_ELEM, a)


def map_lookup(fd: int, key: int, size: int) -> bytes:
    k = ctypes.create_string_buffer(struct.pack("=I", key), 4)
    v = ctypes.create_string_buffer(size)
    a = _attr()
    struct.pack_into("=IIQQQ", a, 0, fd, 0, _addr(k), _addr(v), 0)
    _bpf(BPF_MAP_LOOKUP_ELEM, a)
    return v.raw


def prog_load(insns: bytes, name: bytes) -> int:
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    a = _attr()
    struct.pack_into("=IIQQIIQ", a, 0, BPF_PROG_TYPE_SCHED_CLS, len(insns) // 8, _addr(code),
                     _addr(lic), 1, len(log), _addr(log))
    struct.pack_into("=16s", a, 48, name[:15])
    try:
        return _bpf(BPF_PROG_LOAD, a)
    except BpfError as e:
        msg = log.value.decode(errors="replace").strip().splitlines()[-3:]
        raise BpfError(e.errno, f"{e.strerror}: {' / '.join(msg)}") from None


def link_tcx(prog_fd: int, ifindex: int, attach_type: int) -> int:
    a = _attr()
    struct.pack_into("=IIII", a, 0, prog_fd, ifindex, attach_type, 0)
    return _bpf(BPF_LINK_CREATE, a)


@dataclass
class WireSnapshot:
    """The audit of one direction, summed over CPUs (ns)."""
    count: int
    sum_ns: int
    min_ns: int | None
    window_min_ns: int | None
    max_ns: int | None
    early: int
    hist: tuple[int, ...]


class Stamper:
    """The stamp and audit programs on a router's two interfaces, held by this process.

    ifaces: (forward's ingress, forward's egress), i.e. (to_client_if, to_server_if):
    forward packets arrive on the first and leave by the second, reverse the other way.
    stamp=False: the audit only (skb->tstamp left as the kernel made it).
    """

    def __init__(self, ifaces: tuple[str, str], *, stamp: bool = True) -> None:
        self.stamping = stamp
        self.fds: list[int] = []
        self.ncpu = possible_cpus()
        try:
            idx = [socket_if_index(name) for name in ifaces]
            self.cfg = self._keep(map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 2))
            self.stats = self._keep(map_create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, VALUE_SIZE, 2))
            for d in (0, 1):
                self.reset(d, window_only=False)
            ingress = self._keep(prog_load(stamp_program(stamp), b"rig_stamp"))
            for i in sorted(set(idx)):       # one interface twice (a probe on lo)
                self._keep(link_tcx(ingress, i, BPF_TCX_INGRESS))
            # forward (0) leaves by the server side, reverse (1) by the client side
            for d, i in ((0, idx[1]), (1, idx[0])):
                prog = self._keep(prog_load(audit_program(d, self.cfg, self.stats),
                                            b"rig_audit_%d" % d))
                self._keep(link_tcx(prog, i, BPF_TCX_EGRESS))
        except BaseException:
            self.close()
            raise

    def _keep(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def set_delay(self, direction: int, delay_s: float) -> None:
        map_update(self.cfg, direction, struct.pack("=Q", max(0, round(delay_s * 1e9))))

    def reset(self, direction: int, *, window_only: bool = True) -> None:
        """Zero a direction's audit, or (window_only) start a new window minimum."""
        if window_only:
            raw = bytearray(map_lookup(self.stats, direction, VALUE_SIZE * self.ncpu))
            for c in range(self.ncpu):
                struct.pack_into("=q", raw, c * VALUE_SIZE + 8 * F_WMIN, I64_MAX)
            map_update(self.stats, direction, bytes(raw))
            return
        one = struct.pack(f"={NFIELDS + NBINS}q", 0, 0, I64_MAX, I64_MAX, I64_MIN, 0,
                          *([0] * NBINS))
        map_update(self.stats, direction, one * self.ncpu)

    def read(self, direction: int) -> WireSnapshot:
        raw = map_lookup(self.stats, direction, VALUE_SIZE * self.ncpu)
        vals = [struct.unpack_from(f"={NFIELDS + NBINS}q", raw, c * VALUE_SIZE)
                for c in range(self.ncpu)]
        count = sum(v[F_COUNT] for v in vals)
        mins = [v[F_MIN] for v in vals if v[F_MIN] != I64_MAX]
        wmins = [v[F_WMIN] for v in vals if v[F_WMIN] != I64_MAX]
        maxs = [v[F_MAX] for v in vals if v[F_MAX] != I64_MIN]
        return WireSnapshot(count, sum(v[F_SUM] for v in vals), min(mins, default=None),
                            min(wmins, default=None), max(maxs, default=None),
                            sum(v[F_EARLY] for v in vals),
                            tuple(sum(v[NFIELDS + b] for v in vals) for b in range(NBINS)))

    def close(self) -> None:
        for fd in reversed(self.fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def socket_if_index(name: str) -> int:
    import socket
    try:
        return socket.if_nametoindex(name)
    except OSError as e:
        raise BpfError(e.errno or 0, f"interface {name!r}: {e.strerror}") from None
