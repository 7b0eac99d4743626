"""Thin asyncio transport for the FDT-style copy: sockets, control frames, supervision.

What the client and the server share: socket set-up (buffers from options, connect with a
deadline), control-frame I/O, progress counters, the stall watchdog and ``run_all``,
which awaits the data streams (threads of ``streams``) and the control connection
together and reaps everything on the first failure.

The protocol rules (framing, scheduling, reassembly, verification) live in
``protocol``; this module only moves bytes.  It must not import anything from rig
outside rig.fdt, and must not print: callers decide what to report.
"""
from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from dataclasses import dataclass, field

from rig.fdt.protocol import CONTROL_MAGIC, FrameDecoder, Message, ProtocolError, encode

DEFAULT_BLOCK = 4 << 20


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
    interval_s: float = 1.0         # report cumulative bytes this often (data phase)
    omit_s: float = 0.0             # steady rate leaves out this start (slow start)


@dataclass
class Progress:
    """Byte counters the streams bump and the watchdog / progress line read.

    Each stream's thread writes only its own ``per_stream`` slot, so there is no shared
    read-modify-write; ``total`` is summed when read.
    """
    streams: int
    per_stream: list[int] = field(default_factory=list)
    last_change: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.per_stream = [0] * self.streams

    def add(self, stream: int, n: int) -> None:
        self.per_stream[stream] += n
        self.last_change = time.monotonic()

    @property
    def total(self) -> int:
        return sum(self.per_stream)


class Intervals:
    """Cumulative bytes every `every` seconds of the data phase, as iperf3's intervals.

    ``run()`` samples on the event loop until cancelled; ``finish()`` adds the last
    point.  Samples are (seconds since the data phase began, bytes so far).
    """

    def __init__(self, progress: Progress, every: float) -> None:
        self.progress, self.every = progress, every
        self.t0 = time.monotonic()
        self.samples: list[tuple[float, int]] = [(0.0, 0)]

    async def run(self) -> None:
        k = 1
        while True:
            await asyncio.sleep(max(0.0, self.t0 + k * self.every - time.monotonic()))
            self.samples.append((time.monotonic() - self.t0, self.progress.total))
            k += 1

    def finish(self) -> list[tuple[float, int]]:
        self.samples.append((time.monotonic() - self.t0, self.progress.total))
        return self.samples


def steady_rate(samples: list[tuple[float, int]], omit_s: float) -> float | None:
    """Bytes per second after the first `omit_s` seconds (from the first sample at or
    after omit_s to the last), as iperf3 --omit does; None when nothing is left."""
    if len(samples) < 2:
        return None
    start = next(((t, b) for t, b in samples if t >= omit_s), None)
    end = samples[-1]
    if start is None or end[0] - start[0] <= 0:
        return None
    return (end[1] - start[1]) / (end[0] - start[0])


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
    except asyncio.TimeoutError:
        raise TransferError(f"cannot resolve {addr} within the {timeout_s:g}s connect"
                            " timeout") from None
    except OSError as e:
        raise TransferError(f"cannot resolve {addr}: {e}") from None
    family, _, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    try:
        sock.setblocking(False)
        set_bufsize(sock, bufsize)
        await asyncio.wait_for(loop.sock_connect(sock, sockaddr), timeout_s)
    except asyncio.TimeoutError:
        sock.close()
        raise TransferError(f"connect to {addr}:{port}: no answer within the {timeout_s:g}s"
                            " connect timeout") from None
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


async def within(aw, seconds: float, what: str, error: type = TransferError):
    """Await aw; past `seconds`, raise `error` "WHAT within Ns" (never a bare
    TimeoutError, which the whole-transfer deadline would claim as its own)."""
    try:
        return await asyncio.wait_for(aw, seconds)
    except TimeoutError as e:
        if e.errno is not None:          # a socket's own ETIMEDOUT, not ours
            raise
        raise error(f"{what} within {seconds:g}s") from None


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
