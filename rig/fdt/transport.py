"""Thin asyncio transport for the FDT-style copy: sockets, block senders, receivers.

What the client and the server share: socket set-up (buffers from options, connect with a
deadline), control-frame I/O, the sending loop of one data stream (header, then the
payload with zero-copy ``os.sendfile`` from the file, or from a memory block in
memory-to-memory mode) and the receiving side of one data stream (an
``asyncio.BufferedProtocol`` whose ``get_buffer`` hands the kernel a reusable per-stream
buffer, so ``recv_into`` lands data where it is written from with ``pwrite``).

The protocol rules (framing, scheduling, reassembly, verification) live in
``protocol``; this module only moves bytes.  It must not import anything from rig
outside rig.fdt, and must not print: callers decide what to report.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
import zlib
from dataclasses import dataclass, field

from .protocol import (CONTROL_MAGIC, HEADER_SIZE, BlockHeader, BlockScheduler,
                       FrameDecoder, Message, ProtocolError, Reassembly, adler32_combine,
                       adler32_repeat, encode)

DEFAULT_BLOCK = 4 << 20
# recv_into target per stream: a few of them stay in L2 cache, where the kernel's copy
# is fastest; bigger buffers measured ~15 % slower with 8 streams on loopback.
RECV_BUFFER = 1 << 20
_SENDFILE_MAX = 1 << 30


class TransferError(Exception):
    """A transfer failed: peer gone, stream died, stalled, refused. One-line message."""


class StallError(TransferError):
    """No byte moved on any stream for longer than the stall timeout."""


class DeadlineError(TransferError):
    """The whole transfer did not finish within its deadline."""


@dataclass
class Options:
    block: int = DEFAULT_BLOCK
    bufsize: int | None = None      # SO_SNDBUF and SO_RCVBUF; None: kernel autotuning
    checksum: bool = False
    connect_s: float = 10.0         # connect + handshake deadline
    stall_s: float = 30.0           # no progress on any stream for this long: dead
    timeout_s: float = 3600.0       # whole transfer deadline


@dataclass
class Progress:
    """Byte counters the streams bump and the watchdog / progress line read."""
    streams: int
    per_stream: list[int] = field(default_factory=list)
    last_change: float = field(default_factory=time.monotonic)
    total: int = 0

    def __post_init__(self) -> None:
        self.per_stream = [0] * self.streams

    def add(self, stream: int, n: int) -> None:
        self.per_stream[stream] += n
        self.total += n
        self.last_change = time.monotonic()


def cpu_times() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def set_bufsize(sock: socket.socket, bufsize: int | None) -> None:
    """Fixed socket buffers (as iperf3 -w does); must precede connect/listen."""
    if bufsize:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, bufsize)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)


def close_all(socks: list[socket.socket | None]) -> None:
    for s in socks:
        if s is not None:
            s.close()


async def connect(addr: str, port: int, bufsize: int | None,
                  timeout_s: float) -> socket.socket:
    """A connected non-blocking TCP socket, or TransferError within timeout_s."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(addr, port, type=socket.SOCK_STREAM), timeout_s)
    except (OSError, asyncio.TimeoutError) as e:
        raise TransferError(f"cannot resolve {addr}: {e}") from None
    family, _, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    try:
        sock.setblocking(False)
        set_bufsize(sock, bufsize)
        await asyncio.wait_for(loop.sock_connect(sock, sockaddr), timeout_s)
    except asyncio.TimeoutError:
        sock.close()
        raise TransferError(f"connect to {addr}:{port}: no answer within {timeout_s:g}s") \
            from None
    except OSError as e:
        sock.close()
        why = os.strerror(e.errno) if e.errno else str(e)
        raise TransferError(f"connect to {addr}:{port}: {why}") from None
    except BaseException:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


async def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes (small reads: magics, hellos); EOF is a TransferError."""
    loop = asyncio.get_running_loop()
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = await loop.sock_recv_into(sock, view[got:])
        if k == 0:
            raise TransferError(f"peer closed the connection after {got} of {n} bytes")
        got += k
    return bytes(buf)


class Control:
    """The control connection: framed messages in both directions."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._decoder = FrameDecoder()
        self._pending: list[Message] = []

    async def send(self, msg: Message, *, magic: bool = False) -> None:
        data = (CONTROL_MAGIC if magic else b"") + encode(msg)
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def recv(self) -> Message:
        loop = asyncio.get_running_loop()
        while not self._pending:
            data = await loop.sock_recv(self.sock, 65536)
            if not data:
                raise TransferError("control connection closed by peer")
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)


# ------------------------------------------------------------------------- senders

async def _writable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        loop.remove_writer(fd)


async def _send_header(sock: socket.socket, header: bytes) -> None:
    """Header with MSG_MORE so it leaves in one segment with the payload after it."""
    try:
        n = sock.send(header, socket.MSG_MORE)
    except (BlockingIOError, InterruptedError):
        n = 0
    if n < len(header):
        await asyncio.get_running_loop().sock_sendall(sock, header[n:])


class FileSource:
    """Blocks of a regular file, sent with os.sendfile (zero copy from page cache)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.zero_copy = True

    async def send(self, sock: socket.socket, offset: int, length: int,
                   progress: Progress, stream: int) -> None:
        end = offset + length
        while offset < end:
            if not self.zero_copy:
                data = os.pread(self.fd, min(end - offset, 1 << 20), offset)
                if not data:
                    raise TransferError(f"source file shrank below {end} bytes")
                await asyncio.get_running_loop().sock_sendall(sock, data)
                offset += len(data)
                progress.add(stream, len(data))
                continue
            try:
                n = os.sendfile(sock.fileno(), self.fd, offset,
                                min(end - offset, _SENDFILE_MAX))
            except (BlockingIOError, InterruptedError):
                await _writable(sock)
                continue
            except OSError as e:
                if e.errno in (22, 38) and progress.total == 0:   # EINVAL/ENOSYS
                    self.zero_copy = False
                    continue
                raise
            if n == 0:
                raise TransferError(f"source file shrank below {end} bytes")
            offset += n
            progress.add(stream, n)


class MemSource:
    """Memory-to-memory mode: every block is the same in-memory pattern."""

    def __init__(self, block: int) -> None:
        self.buf = memoryview(os.urandom(min(block, 1 << 16)) * (block // (1 << 16) + 1))
        self.buf = self.buf[:block]
        self.zero_copy = False

    def block_adler(self, length: int) -> int:
        return zlib.adler32(self.buf[:length])

    async def send(self, sock: socket.socket, offset: int, length: int,
                   progress: Progress, stream: int) -> None:
        view = self.buf[:length]
        while view:
            try:
                n = sock.send(view)
            except (BlockingIOError, InterruptedError):
                await _writable(sock)
                continue
            view = view[n:]
            progress.add(stream, n)


async def send_stream(sock: socket.socket, stream: int, source: FileSource | MemSource,
                      sched: BlockScheduler, file_id: int, progress: Progress) -> None:
    """One data stream's sender: take the next block, send it, repeat; then END."""
    while (blk := sched.next_block()) is not None:
        offset, length = blk
        await _send_header(sock, BlockHeader(file_id, offset, length).pack())
        await source.send(sock, offset, length, progress, stream)
    await asyncio.get_running_loop().sock_sendall(sock, BlockHeader.end(file_id).pack())
    with contextlib.suppress(OSError):     # a vanished peer shows up in the verdict
        sock.shutdown(socket.SHUT_WR)        # nothing follows END on this stream


def mem_adler32(source: MemSource, size: int, block: int) -> int:
    """Whole-stream adler32 of memory mode without touching size bytes."""
    full, rest = divmod(size, block)
    total = adler32_repeat(source.block_adler(block), block, full) if full else 1
    if rest:
        total = adler32_combine(total, source.block_adler(rest), rest)
    return total


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

class StreamReceiver(asyncio.BufferedProtocol):
    """Receiving end of one data stream: header, payload into the buffer, pwrite.

    The kernel copies straight into ``buf`` (get_buffer returns the free part of it);
    there is no per-block allocation.  ``done`` resolves when END arrives, or fails on
    EOF, a reset or a protocol violation.
    """

    def __init__(self, stream: int, reasm: Reassembly, out_fd: int | None,
                 buf: bytearray, progress: Progress, checksum: bool) -> None:
        self.stream, self.reasm, self.out_fd = stream, reasm, out_fd
        self.buf, self.view = buf, memoryview(buf)
        self.progress, self.checksum = progress, checksum
        self.hbuf = bytearray(HEADER_SIZE)
        self.hview = memoryview(self.hbuf)
        self.hgot = 0
        self.header: BlockHeader | None = None
        self.filled = 0          # bytes of the current block in buf, not yet written
        self.written = 0         # bytes of the current block already written
        self.adler = 1
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        h = self.header
        if h is None:
            return self.hview[self.hgot:]
        want = min(h.length - self.written - self.filled, len(self.buf) - self.filled)
        return self.view[self.filled:self.filled + want]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self.header is None:
                self.hgot += nbytes
                if self.hgot == HEADER_SIZE:
                    self._on_header()
                return
            self.filled += nbytes
            self.progress.add(self.stream, nbytes)
            h = self.header
            if self.filled == len(self.buf) or self.written + self.filled == h.length:
                self._flush()
        except Exception as e:            # noqa: BLE001 -- any failure ends the stream
            self._fail(e)

    def _on_header(self) -> None:
        self.hgot = 0
        h = BlockHeader.unpack(self.hbuf)
        self.reasm.accept(self.stream, h)
        if h.is_end:
            if not self.done.done():
                self.done.set_result(None)
            return
        self.header, self.filled, self.written, self.adler = h, 0, 0, 1

    def _flush(self) -> None:
        h = self.header
        assert h is not None
        chunk = self.view[:self.filled]
        if self.checksum:
            self.adler = zlib.adler32(chunk, self.adler)
        if self.out_fd is not None:
            _pwrite_all(self.out_fd, chunk, h.offset + self.written)
        self.written += self.filled
        self.filled = 0
        if self.written == h.length:
            self.reasm.landed(self.stream, h, self.adler if self.checksum else None)
            self.header = None

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool:
        if not self.done.done():
            got = self.progress.per_stream[self.stream]
            self._fail(TransferError(
                f"stream {self.stream} closed by peer after {got} bytes"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            why = f": {exc}" if exc else ""
            self._fail(TransferError(f"stream {self.stream} lost{why}"))


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


async def attach_receivers(socks: list[socket.socket], reasm: Reassembly,
                           out_fd: int | None, block: int, progress: Progress,
                           checksum: bool) -> list[StreamReceiver]:
    """Hand each data socket to a StreamReceiver; the transports now own the sockets."""
    loop = asyncio.get_running_loop()
    receivers = []
    size = min(block, RECV_BUFFER)
    for i, sock in enumerate(socks):
        rcv = StreamReceiver(i, reasm, out_fd, bytearray(size), progress, checksum)
        await loop.connect_accepted_socket(lambda r=rcv: r, sock=sock)
        receivers.append(rcv)
    return receivers


def abort_receivers(receivers: list[StreamReceiver]) -> None:
    for r in receivers:
        if r.transport is not None:
            r.transport.abort()
        if not r.done.done():
            r.done.cancel()


async def watchdog(progress: Progress, stall_s: float, what: str) -> None:
    """Raise StallError when no byte has moved for stall_s (checked 10x per period)."""
    period = max(0.02, min(1.0, stall_s / 10))
    while True:
        await asyncio.sleep(period)
        idle = time.monotonic() - progress.last_change
        if idle > stall_s:
            raise StallError(f"{what}: no data moved for {idle:.1f}s"
                             f" (after {progress.total} bytes)")


def reraise_as_transfer(exc: BaseException, what: str) -> BaseException:
    """Map socket errors to one-line TransferErrors; leave ours and others alone."""
    if isinstance(exc, (TransferError, ProtocolError)):
        return exc
    if isinstance(exc, ConnectionError):
        return TransferError(f"{what}: connection {exc.strerror or type(exc).__name__}")
    if isinstance(exc, OSError):
        return TransferError(f"{what}: {exc.strerror or exc}")
    return exc


async def run_all(aws: list, *, progress: Progress | None = None, stall_s: float = 0.0,
                  what: str = "transfer", background: tuple = ()) -> list:
    """Await every awaitable; the first failure (or a stall) cancels and reaps the rest.

    `background` awaitables (progress tickers) run alongside and are cancelled at the end.
    Unlike TaskGroup this raises the first error itself, not an ExceptionGroup, so the
    CLI can print one clear line.  Every task is finished when this returns or raises.
    """
    tasks = [asyncio.ensure_future(a) for a in aws]
    extra = [asyncio.ensure_future(watchdog(progress, stall_s, what))] if progress else []
    extra += [asyncio.ensure_future(a) for a in background]
    pending = set(tasks + extra)
    try:
        while not all(t.done() for t in tasks):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
                if t.cancelled():
                    raise TransferError(f"{what}: a stream was cancelled")
        return [t.result() for t in tasks]
    finally:
        for t in tasks + extra:
            t.cancel()
        await asyncio.gather(*tasks, *extra, return_exceptions=True)
