"""Data streams of the FDT-style copy: one sending thread, one blocking thread per receiver.

Why receiving threads: at 0 ms RTT the receiver is CPU-bound in the kernel (the copy
out of the socket and TCP processing), and a single asyncio thread keeps that work on
one core however many streams there are (measured: the client at 0.99 CPU, the other
core half idle).  A thread per stream blocks in ``recv_into(..., MSG_WAITALL)`` for a
whole 256 KiB chunk with the GIL released, so the kernel work of N streams spreads over
every core and each chunk costs one syscall and no loop wake-up.  One thread sends on
every stream (``rig.fdt.sender``; see the note above ``WakeBudget``).

The event loop stays in charge: ``StreamWorkers.start`` returns one asyncio future per
stream (set from the thread with ``call_soon_threadsafe``), which ``run_all`` awaits
with the stall watchdog and the control connection; ``StreamWorkers.close`` ends the
threads within a bound: a stop flag, ``shutdown()`` to wake blocked calls (and
SO_RCVTIMEO of ``POLL_S`` as a backstop), join, then close the sockets.

The protocol rules stay in the sans-IO ``protocol`` module; the shared ``Reassembly`` is
called under a lock, twice per block.  Must not import rig modules outside rig.fdt and
must not print.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time
import zlib
from typing import TYPE_CHECKING, Callable

from rig.fdt import sender
from rig.fdt.protocol import (HEADER_SIZE, BlockHeader, BlockScheduler, FileSet, Reassembly,
                       adler32_combine, adler32_repeat)
from rig.fdt.transport import Progress, TransferError, run_all

if TYPE_CHECKING:
    from rig.fdt.filepool import FilePool

# recv_into target per stream: small enough that N of them stay in cache (2 MiB L2 here).
# 0 ms path, 8 streams, memory mode: 256 KiB 28-41 Gbit/s vs 1 MiB 22-25; file mode level.
# With a fixed receive buffer (--bufsize): one recv_into takes up to RECV_BUFFER, and
# SO_RCVLOWAT makes it wait for RECV_LOWAT first (as MSG_WAITALL of 256 KiB did).  0 ms,
# 4 MiB, 3 rounds: receiver 3,122 -> 1,022 recvfrom and 0.281 -> 0.214 s/GB at N=16
# (Java FDT reads ~1 MiB a call: 911 reads/GB, 0.233 s/GB), bench/README.md, issue 16.
# The kernel wakes a sleeping reader only once RECV_LOWAT bytes are queued or at FIN
# (tcp_data_ready), even for a shorter read: a stream ends with END and FIN (sender._write).
# Autotuned buffers keep MSG_WAITALL of RECV_LOWAT: setting SO_RCVLOWAT while the
# buffer is still small clamps the window to it (tcp_set_rcvlowat), 120 ms N=4 fell
# from 1.04 to 0.33-1.04 Gbit/s.
RECV_BUFFER = 1 << 20
RECV_LOWAT = 256 << 10
POLL_S = 0.5              # blocked calls return this often to look at the stop flag
JOIN_S = 5.0              # bound on close(): shutdown() normally ends a thread at once

StreamFn = Callable[[int, socket.socket, threading.Event], None]


class Stopped(Exception):
    """The stream was asked to stop (another stream failed, stall, cancel)."""


class StreamWorkers:
    """Owns N connected data sockets and the thread that receives on each."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.socks = list(socks)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, fn: StreamFn) -> list[asyncio.Future]:
        """Run fn(index, sock, stop) per socket in its own thread; a future for each."""
        loop = asyncio.get_running_loop()
        futures = []
        for i, sock in enumerate(self.socks):
            sock.setblocking(True)
            _set_io_timeout(sock, POLL_S)
            fut = loop.create_future()
            t = threading.Thread(target=self._run, args=(loop, fut, fn, i, sock),
                                 name=f"rig-fdt-stream-{i}", daemon=True)
            t.start()
            self.threads.append(t)
            futures.append(fut)
        return futures

    def _run(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future, fn: StreamFn,
             i: int, sock: socket.socket) -> None:
        exc: BaseException | None = None
        try:
            fn(i, sock, self.stop)
        except BaseException as e:          # noqa: BLE001 -- handed to the awaiting side
            exc = e
        with contextlib.suppress(RuntimeError):    # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(_settle, fut, exc)

    def close(self) -> None:
        """Stop every thread (bounded by JOIN_S), then close the sockets."""
        self.stop.set()
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)    # wakes a blocked recv at once
        deadline = time.monotonic() + JOIN_S
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for sock in self.socks:
            sock.close()
        self.threads, self.socks = [], []


def _settle(fut: asyncio.Future, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


def _set_io_timeout(sock: socket.socket, seconds: float) -> None:
    """Kernel-side receive timeout: the socket stays blocking (MSG_WAITALL works) but
    a blocked recv returns EAGAIN after `seconds`, so the thread can look at stop."""
    tv = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


# ------------------------------------------------------------------------- senders
# One thread sends every stream (rig.fdt.sender: one epoll over the N sockets, each
# registered once); the sources below queue bytes without blocking: os.sendfile from
# the page cache, or the memory pattern.  On the event loop (before issue 16's change)
# each wake cost a future, add/remove_writer (two epoll_ctl) and a timer in Python:
# 120 ms, N=4, autotuned, sender 0.319 -> 0.183 s/GB (iperf3 0.150), bench/README.md.
# Still one thread, not one per stream: a thread per stream measured 5-8 % slower at
# 0 ms (8 and 16 streams), N runnable threads competing with the receiver's for 2 cores.

class WakeBudget:
    """How much one stream queues per writability wake-up.

    Fixed buffers (``--bufsize``): a quarter of the send buffer.  Writing until EAGAIN
    fills the send buffer and measured 5 % slower on a window-limited 120 ms path
    (rig-fdt N=1 0.382 Gbit/s against iperf3's 0.414); iperf3 writes 10 blocks per
    select() and never fills it.  Capping each wake at a quarter of the buffer got
    0.402, and scales with the buffer, so a 400G host with 64 MiB buffers wakes no more
    often than this VM.

    Autotuned buffers (``fill``): until EAGAIN, and after EAGAIN the next try comes
    on EPOLLOUT or after a sixth of the smoothed RTT (2-20 ms), whichever is first.  The
    send buffer stops at tcp_wmem's ceiling (4 MiB here) and is then the window.  The
    kernel reports EPOLLOUT only once a third of the buffer is free, so a sender that
    waits for it lets the queue (all of it in flight) sag: `ss -tinm` at 120 ms, N=4,
    showed 2.9-3.2 MB of 4.19 queued with nothing unsent for rig-fdt (quarter budget
    and plain until-EAGAIN alike, 0.78-0.80 Gbit/s) against 3.8-3.98 for iperf3 (0.94).
    A top-up after 5 ms kept 4.0 MB queued (1.07 Gbit/s) for 0.49 s/GB of sender CPU;
    after 20 ms (srtt/6 at 120 ms) 1.04 for 0.29 (iperf3 0.11, the quarter budget 0.23);
    at 20 ms, srtt/6 keeps 5.75 Gbit/s against 4.79 without a top-up (iperf3 5.63).
    TCP_NOTSENT_LOWAT does not replace it: it only adds a condition to EPOLLOUT (0.80
    Gbit/s at 120 ms with 256 KiB and no top-up), and with fixed buffers it cost a third
    of the rate at 0 ms, N=16 (bench/README.md, issue 16).

    In both modes a short write ends the wake as EAGAIN would (the failed send would
    only confirm the buffer is full): 120 ms, N=4, sendto 7,885 -> 6,835 per GB.
    """

    FILL = 1 << 30           # a wake's budget when filling: more than any send buffer
    TOPUP_RTT = 1 / 6        # filling: try again after this share of the smoothed RTT,
    TOPUP_S = (0.002, 0.020)  # within these bounds (s), even without EPOLLOUT
    RTT_EVERY = 32           # wakes between two reads of the RTT (TCP_INFO)

    def __init__(self, sock: socket.socket, *, fill: bool = False) -> None:
        self.sock, self.fill = sock, fill
        self.wakes, self.topup = 0, self.TOPUP_S[1]

    def topup_s(self) -> float:
        """Filling: how long a wake waits for EPOLLOUT before trying anyway."""
        if self.wakes % self.RTT_EVERY == 0:
            lo, hi = self.TOPUP_S
            rtt = _srtt_s(self.sock)
            self.topup = hi if rtt is None else min(hi, max(lo, rtt * self.TOPUP_RTT))
        self.wakes += 1
        return self.topup

    def per_wake(self) -> int:
        """The budget of one wake (the send buffer is re-read: autotuning grows it)."""
        if self.fill:
            return self.FILL
        sndbuf = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        return max(64 << 10, sndbuf // 4)


def _srtt_s(sock: socket.socket) -> float | None:
    """The kernel's smoothed RTT of a TCP socket (tcp_info.tcpi_rtt, µs), None if unknown."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return None
    return struct.unpack_from("I", info, 68)[0] / 1e6 if len(info) >= 72 else None


class FileSource:
    """Blocks of a regular file, sent with os.sendfile (zero copy from page cache)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.zero_copy = True

    def put(self, sock: socket.socket, offset: int, done: int, length: int) -> tuple[int, int]:
        """Queue up to length bytes from offset: (bytes queued, bytes tried); fewer
        queued than tried, or BlockingIOError, means the send buffer is full."""
        return self._put(self.fd, sock, offset, done, length)

    def adler32(self, size: int) -> int:
        return file_adler32(self.fd, size)

    def _put(self, fd: int, sock: socket.socket, offset: int, done: int,
             length: int) -> tuple[int, int]:
        if self.zero_copy:
            try:
                n = os.sendfile(sock.fileno(), fd, offset, length)
            except OSError as e:
                if e.errno not in (22, 38) or done != 0:   # EINVAL/ENOSYS: no sendfile
                    raise
                self.zero_copy = False
                return self._put(fd, sock, offset, done, length)
        else:
            data = os.pread(fd, min(length, 1 << 20), offset)
            n, length = (sock.send(data), len(data)) if data else (0, length)
        if n == 0 and length:
            raise TransferError(f"source file shrank below {offset + length} bytes")
        return n, length


class PooledSource(FileSource):
    """A file of a multi-file session, its descriptor borrowed from the session's
    FilePool for each send (rig.fdt.filepool: a bounded number open at once)."""

    def __init__(self, pool: FilePool, index: int) -> None:
        super().__init__(-1)
        self.pool, self.index = pool, index

    def put(self, sock: socket.socket, offset: int, done: int, length: int) -> tuple[int, int]:
        with self.pool.use(self.index) as fd:
            return self._put(fd, sock, offset, done, length)

    def adler32(self, size: int) -> int:
        with self.pool.use(self.index) as fd:
            return file_adler32(fd, size)


class MemSource:
    """Memory-to-memory mode: every block is one short pattern repeated.

    The pattern is small enough to stay in L2 cache (as iperf3's 128 KiB buffer does),
    so the copy into the socket reads cache, not DRAM; sends never cross its end.
    """
    PATTERN = 128 << 10      # as iperf3 -l: sender CPU 0.18-0.21 s/GB vs 0.24-0.28 at 256 KiB

    def __init__(self, block: int) -> None:
        self.buf = memoryview(os.urandom(min(block, self.PATTERN)))
        self.zero_copy = False

    def block_adler(self, length: int) -> int:
        full, rest = divmod(length, len(self.buf))
        total = adler32_repeat(zlib.adler32(self.buf), len(self.buf), full) if full else 1
        if rest:
            total = adler32_combine(total, zlib.adler32(self.buf[:rest]), rest)
        return total

    def put(self, sock: socket.socket, offset: int, done: int, length: int) -> tuple[int, int]:
        """Queue up to length bytes of the block, `done` bytes into it (never across
        the pattern's end: byte k of a block is pattern[k % len])."""
        pos = done % len(self.buf)
        view = self.buf[pos:pos + length]
        return sock.send(view), len(view)


Source = FileSource | MemSource


async def send_all(socks: list[socket.socket], sources: list[Source], sizes: list[int],
                   block: int, progress: Progress, *, checksum: bool,
                   duration: float | None, stall_s: float, what: str,
                   background: tuple = (), autotuned: bool = False
                   ) -> tuple[int, list[int | None]]:
    """Send the files (file ids 1..k, in order) or, timed, what fits in `duration`.

    `autotuned`: the sockets have no fixed SO_SNDBUF; each wake writes until the buffer
    is full (see WakeBudget).  One thread sends on every socket (rig.fdt.sender).

    Returns (bytes sent, each file's adler32 or None).  Files are checksummed in a
    thread while the data flows; memory mode from the pattern, afterwards.
    """
    loop = asyncio.get_running_loop()
    sched = BlockScheduler(sizes, block)
    adler = None
    if checksum and isinstance(sources[0], FileSource):
        adler = loop.run_in_executor(None, files_adler32,
                                     [s for s in sources if isinstance(s, FileSource)], sizes)
    timer = loop.call_later(duration, sched.stop) if duration else None
    by_id: dict[int, sender.Source] = {i + 1: src for i, src in enumerate(sources)}
    budgets: list[sender.Budget] = [WakeBudget(s, fill=autotuned) for s in socks]
    aws = [_in_thread(sender.send_streams, socks, budgets, by_id, sched, progress)]
    try:
        await run_all(aws, progress=progress, stall_s=stall_s, what=what,
                      background=background)
    except BaseException:
        if adler is not None:
            adler.cancel()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    sent = sched.handed_out
    if not checksum:
        return sent, [None] * len(sources)
    if adler is not None:
        return sent, list(await adler)
    source = sources[0]
    assert isinstance(source, MemSource)
    adlers: list[int | None] = [mem_adler32(source, sent, block)]
    return sent, adlers


async def _in_thread(fn: Callable[..., None], *args: object) -> None:
    """fn(*args, stop) in a thread of its own; cancelling sets stop and joins it."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    stop = threading.Event()

    def run() -> None:
        exc: BaseException | None = None
        try:
            fn(*args, stop)
        except BaseException as e:          # noqa: BLE001 -- handed to the awaiting side
            exc = e
        with contextlib.suppress(RuntimeError):    # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(_settle, fut, exc)
    t = threading.Thread(target=run, name="rig-fdt-sender", daemon=True)
    t.start()
    try:
        await fut
    finally:
        stop.set()
        t.join(JOIN_S)           # the thread looks at stop every sender.POLL_S


def mem_adler32(source: MemSource, size: int, block: int) -> int:
    """Whole-stream adler32 of memory mode without touching size bytes."""
    full, rest = divmod(size, block)
    total = adler32_repeat(source.block_adler(block), block, full) if full else 1
    if rest:
        total = adler32_combine(total, source.block_adler(rest), rest)
    return total


def files_adler32(sources: list[FileSource], sizes: list[int]) -> list[int]:
    return [src.adler32(size) for src, size in zip(sources, sizes)]


def file_adler32(fd: int, size: int) -> int:
    """adler32 of a file's first size bytes (run in a thread: zlib drops the GIL)."""
    value, offset = 1, 0
    while offset < size:
        data = os.pread(fd, min(8 << 20, size - offset), offset)
        if not data:
            raise TransferError(f"source file shrank to {offset} bytes")
        value = zlib.adler32(data, value)
        offset += len(data)
    return value


# ----------------------------------------------------------------------- receivers

def _recv_exact(sock: socket.socket, view: memoryview, stop: threading.Event, stream: int,
                progress: Progress | None, flags: int = socket.MSG_WAITALL) -> None:
    """Fill view from sock (MSG_WAITALL: one syscall when the data flows)."""
    got, want = 0, len(view)
    while got < want:
        try:
            n = sock.recv_into(view[got:], want - got, flags)
        except (BlockingIOError, InterruptedError):     # SO_RCVTIMEO: look at stop
            if stop.is_set():
                raise Stopped() from None
            continue
        if n == 0:
            if stop.is_set():
                raise Stopped()
            done = progress.per_stream[stream] if progress is not None else 0
            raise TransferError(f"stream {stream} closed by peer after {done} bytes")
        got += n
        if progress is not None:
            progress.add(stream, n)


def receiver(reasm: Reassembly | FileSet, fds: dict[int, int], block: int,
             progress: Progress, checksum: bool) -> StreamFn:
    """The per-stream receiving loop: header, payload into a reusable buffer, pwrite.

    The kernel copies straight into the stream's buffer (allocated once per stream);
    there is no per-block allocation.  `fds` maps file ids to the descriptors written
    by offset; a file id without one is discarded (/dev/null, memory mode).  Returns
    when END arrives; EOF, a reset or a protocol violation raises.
    """
    lock = threading.Lock()
    size = min(block, RECV_BUFFER)

    def run(i: int, sock: socket.socket, stop: threading.Event) -> None:
        lowat = step = min(size, RECV_LOWAT)
        flags: int = socket.MSG_WAITALL
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 4 * RECV_LOWAT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            flags, step = 0, size
        buf, hbuf = memoryview(bytearray(step)), bytearray(HEADER_SIZE)
        hview = memoryview(hbuf)
        while True:
            _recv_exact(sock, hview, stop, i, None)
            h = BlockHeader.unpack(hbuf)
            with lock:
                reasm.accept(i, h)
            if h.is_end:
                return
            done, adler = 0, 1
            fd = fds.get(h.file_id)
            while done < h.length:
                chunk = buf[:min(step, h.length - done)]
                _recv_exact(sock, chunk, stop, i, progress, flags)
                if checksum:
                    adler = zlib.adler32(chunk, adler)
                if fd is not None:
                    _pwrite_all(fd, chunk, h.offset + done)
                done += len(chunk)
            with lock:
                reasm.landed(i, h, adler if checksum else None)
    return run


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n
