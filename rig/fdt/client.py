"""The FDT-style client: fetch (get) or upload (put) one file over N data streams.

``get`` writes blocks by offset into DEST (a temporary name beside it, renamed after the
data verified; ``/dev/null`` and other non-regular destinations are written in place),
or discards them in memory-to-memory mode.  ``put`` sends a local file (zero copy) or a
memory pattern.  Both return a ``Stats`` whose ``as_json`` is the tool's result line.
Every socket and task is closed on every path; the whole transfer obeys a deadline.

Must not print (the CLI does) and must not import rig modules outside rig.fdt.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rig.fdt.protocol import (DataHello, Done, Failure, FileSet, Hello, IntegrityError,
                       ProtocolError, Ready, Verdict)
from rig.fdt.streams import FileSource, MemSource, StreamWorkers, receiver, send_all
from rig.fdt.transport import (Control, DeadlineError, Intervals, Options, Progress, StallError,
                        TransferError, close_all, connect, cpu_times, run_all, steady_rate,
                        within)


@dataclass
class Stats:
    op: str
    streams: int
    bytes: int = 0
    seconds: float = 0.0
    per_stream: list[int] = field(default_factory=list)
    cpu_user_s: float = 0.0
    cpu_sys_s: float = 0.0
    peer_cpu_user_s: float | None = None
    peer_cpu_sys_s: float | None = None
    block: int = 0
    bufsize: int | None = None
    checksum: str | None = None
    mem: bool = False
    setup_s: float = 0.0         # connect + handshake + data streams attached
    intervals: list[tuple[float, int]] = field(default_factory=list)
    omit_s: float = 0.0
    time_s: float | None = None
    files: list[dict] | None = None    # several files: name, dest, bytes, adler32 each

    def as_json(self) -> dict:
        bps = self.bytes * 8 / self.seconds if self.seconds > 0 else 0.0
        steady = steady_rate(self.intervals, self.omit_s)
        return {"tool": "rig-fdt", "op": self.op, "bytes": self.bytes,
                "seconds": round(self.seconds, 6), "throughput_bps": round(bps, 1),
                "setup_s": round(self.setup_s, 6),
                "data_throughput_bps": round(self.bytes * 8 / max(1e-9, self.seconds
                                                                  - self.setup_s), 1),
                "streams": self.streams, "per_stream_bytes": self.per_stream,
                "cpu_user_s": round(self.cpu_user_s, 4),
                "cpu_sys_s": round(self.cpu_sys_s, 4),
                "server_cpu_user_s": _r(self.peer_cpu_user_s),
                "server_cpu_sys_s": _r(self.peer_cpu_sys_s),
                "block_bytes": self.block, "bufsize": self.bufsize,
                "checksum_adler32": self.checksum, "mem": self.mem,
                "time_s": self.time_s, "omit_s": self.omit_s,
                "steady_throughput_bps": None if steady is None else round(steady * 8, 1),
                "intervals": [[round(t, 4), b] for t, b in self.intervals],
                **({"files": self.files} if self.files is not None else {})}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


ProgressHook = Callable[[Progress, float], None]


class _Dest:
    """Where a get lands: a temp file renamed on success, a device in place, or nothing."""

    def __init__(self, dest: str | None, size: int) -> None:
        self.final = Path(dest) if dest else None
        self.tmp: Path | None = None
        self.fd: int | None = None
        if self.final is None:
            return
        try:
            mode = os.stat(self.final).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if stat.S_ISREG(mode):
            # a fresh name, created here and never through a link someone planted
            self.tmp = self.final.with_name(
                f".{self.final.name}.{secrets.token_hex(4)}.rig-fdt-part")
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                              0o644)
            os.ftruncate(self.fd, size)
        elif not os.path.samefile(self.final, os.devnull):   # /dev/null: skip the syscalls
            # O_NONBLOCK: a FIFO nobody reads fails now (ENXIO) instead of hanging
            self.fd = os.open(self.final, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(self.fd, True)

    def commit(self) -> None:
        if self.tmp is not None and self.final is not None:
            os.replace(self.tmp, self.final)
            self.tmp = None

    def close(self) -> None:
        """Close; a get that did not commit leaves no partial file."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


async def _open_session(addr: str, port: int, hello: Hello,
                        opts: Options) -> tuple[Control, Ready, list]:
    """Control connection + Ready + N attached data sockets; closes all on failure."""
    ctrl_sock = await connect(addr, port, opts.bufsize, opts.connect_s)
    ctrl = Control(ctrl_sock)
    socks: list = []
    try:
        await ctrl.send(hello, magic=True)
        ready = await within(ctrl.recv(), opts.connect_s,
                             f"{addr}:{port}: no answer to the request (connect timeout)")
        if isinstance(ready, Failure):
            raise TransferError(f"server refused: {ready.message}")
        if not isinstance(ready, Ready):
            raise ProtocolError(f"expected ready, got {ready.type}")
        token = bytes.fromhex(ready.token)
        socks = list(await asyncio.gather(*(
            connect(addr, port, opts.bufsize, opts.connect_s) for _ in range(hello.streams)),
            return_exceptions=True))
        for s in socks:
            if isinstance(s, BaseException):
                raise s
        loop = asyncio.get_running_loop()
        for i, s in enumerate(socks):
            await loop.sock_sendall(s, DataHello(token, i, hello.streams).pack())
        return ctrl, ready, socks
    except BaseException:
        close_all([s for s in socks if not isinstance(s, BaseException)])
        ctrl_sock.close()
        raise


async def _ticker(progress: Progress, hook: ProgressHook | None, t0: float) -> None:
    if hook is None:
        return
    while True:
        await asyncio.sleep(0.5)
        hook(progress, time.monotonic() - t0)


def _peer_failure(msg: object, expected: str) -> Exception:
    if isinstance(msg, Failure):
        return TransferError(f"server: {msg.message}")
    return ProtocolError(f"expected {expected}, got {getattr(msg, 'type', msg)}")


async def get(addr: str, port: int, name: str | list[str], dest: str | None, *,
              streams: int, opts: Options, mem_size: int | None = None,
              duration: float | None = None, hook: ProgressHook | None = None) -> Stats:
    """Fetch `name` (or mem_size bytes of memory pattern) into `dest` (None: discard).

    Several names travel in one session (one set of streams, blocks of file after file)
    into the directory `dest` (or ``/dev/null``), each under its base name.
    `duration` (memory mode): the server sends for that many seconds, mem_size a cap.
    """
    async with _deadline(opts.timeout_s, "get"):
        return await _get(addr, port, name, dest, streams=streams, opts=opts,
                          mem_size=mem_size, duration=duration, hook=hook)


async def put(addr: str, port: int, src: str | None, name: str, *, streams: int,
              opts: Options, mem_size: int | None = None, duration: float | None = None,
              hook: ProgressHook | None = None) -> Stats:
    """Upload local `src` (or mem_size bytes of memory pattern) as `name` on the server."""
    async with _deadline(opts.timeout_s, "put"):
        return await _put(addr, port, src, name, streams=streams, opts=opts,
                          mem_size=mem_size, duration=duration, hook=hook)


@contextlib.asynccontextmanager
async def _deadline(seconds: float, what: str):
    """The whole transfer's deadline, reported as a TransferError."""
    cm = asyncio.timeout(seconds)
    try:
        async with cm:
            yield
    except TimeoutError:
        if not cm.expired():             # some other timeout: not this deadline's
            raise
        raise DeadlineError(f"{what}: not finished within the {seconds:g}s deadline") \
            from None


def _targets(names: list[str], dest: str | None) -> list[str | None]:
    """Where each of several files lands: DIR/basename, or /dev/null for all."""
    if dest is None or os.path.exists(dest) and os.path.samefile(dest, os.devnull):
        return [dest] * len(names)
    if not os.path.isdir(dest):
        raise TransferError(f"{dest}: several files need a directory (or /dev/null)")
    bases = [os.path.basename(n.rstrip("/")) for n in names]
    dup = next((b for b in bases if bases.count(b) > 1), None)
    if dup is not None or "" in bases:
        raise TransferError(f"two files would land as {dup or 'an empty name'!r} in {dest}")
    return [os.path.join(dest, b) for b in bases]


async def _get(addr: str, port: int, name: str | list[str], dest: str | None, *,
               streams: int, opts: Options, mem_size: int | None, duration: float | None,
               hook: ProgressHook | None) -> Stats:
    names = [name] if isinstance(name, str) else list(name)
    several = len(names) > 1
    targets = _targets(names, dest) if several else [dest]
    hello = Hello("get", "" if mem_size is not None or several else names[0], streams,
                  opts.block, opts.checksum, mem_size, mem_size is not None, opts.bufsize,
                  duration, names if several else None)
    cpu0, t0 = cpu_times(), time.monotonic()
    ctrl, ready, socks = await _open_session(addr, port, hello, opts)
    setup_s = time.monotonic() - t0
    outs: list[_Dest] = []
    workers = StreamWorkers(socks)                  # owns the data sockets from here
    try:
        sizes = ready.sizes if several else [ready.size]
        if sizes is None or len(sizes) != len(targets):
            raise ProtocolError("ready: the server's file sizes do not match the request")
        for target, size in zip(targets, sizes):
            outs.append(_Dest(target, 0 if duration else size))
        reasm = FileSet(sizes, streams, open_ended=bool(duration))
        progress = Progress(streams)
        intervals = Intervals(progress, opts.interval_s)
        fds = {i + 1: o.fd for i, o in enumerate(outs) if o.fd is not None}
        futs = workers.start(receiver(reasm, fds, opts.block, progress, opts.checksum))
        *_, done = await run_all(futs + [ctrl.recv()],
                                 progress=progress, stall_s=opts.stall_s, what="get",
                                 background=(_ticker(progress, hook, t0), intervals.run()))
        if not isinstance(done, Done):
            raise _peer_failure(done, "done")
        seconds = time.monotonic() - t0
        samples = intervals.finish()
        try:
            reasm.verify(done)
        except IntegrityError as e:
            await ctrl.send(Verdict(False, str(e)))
            raise
        for o in outs:
            o.commit()
        await ctrl.send(Verdict(True))
        cpu1 = cpu_times()
        files = None if not several else [
            {"name": n, "dest": t, "bytes": b, "adler32": None if a is None else f"{a:08x}"}
            for n, t, (b, a) in zip(names, targets, done.files or [])]
        return Stats("get", streams, reasm.received, seconds, reasm.per_stream,
                     cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], done.cpu_user_s, done.cpu_sys_s,
                     opts.block, opts.bufsize,
                     None if done.adler32 is None else f"{done.adler32:08x}",
                     mem_size is not None, setup_s, samples, opts.omit_s, duration, files)
    finally:
        workers.close()
        ctrl.sock.close()
        for o in outs:
            o.close()


def open_source(src: str) -> int:
    """A read descriptor of the regular file `src`: opened without blocking (a FIFO or a
    device never hangs the put) and refused unless it is a regular file."""
    fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO"
                    if stat.S_ISFIFO(st.st_mode) else "a device or socket")
            raise OSError(errno.EINVAL, f"is {kind}, not a regular file", src)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


async def _put(addr: str, port: int, src: str | None, name: str, *, streams: int,
               opts: Options, mem_size: int | None, duration: float | None,
               hook: ProgressHook | None) -> Stats:
    fd = None if src is None else open_source(src)
    try:
        size = mem_size if fd is None else os.fstat(fd).st_size
        assert size is not None, "src or mem_size"
        hello = Hello("put", name if fd is not None else "", streams, opts.block,
                      opts.checksum, size, fd is None, opts.bufsize, duration)
        cpu0, t0 = cpu_times(), time.monotonic()
        ctrl, _, socks = await _open_session(addr, port, hello, opts)
        setup_s = time.monotonic() - t0
        try:
            source = FileSource(fd) if fd is not None else MemSource(opts.block)
            progress = Progress(streams)
            intervals = Intervals(progress, opts.interval_s)
            sent, adlers = await send_all(
                socks, [source], [size], opts.block, progress, checksum=opts.checksum,
                duration=duration, stall_s=opts.stall_s, what="put",
                background=(_ticker(progress, hook, t0), intervals.run()),
                autotuned=not opts.bufsize)
            value = adlers[0]
            await ctrl.send(Done(sent, progress.per_stream, value))
            verdict = await within(ctrl.recv(), opts.stall_s,
                                   "put: no verdict from the server (stall timeout)",
                                   StallError)
            seconds = time.monotonic() - t0
            samples = intervals.finish()
            if not isinstance(verdict, Verdict):
                raise _peer_failure(verdict, "verdict")
            if not verdict.ok:
                raise IntegrityError(f"server rejected the upload: {verdict.message}")
            cpu1 = cpu_times()
            return Stats("put", streams, sent, seconds, progress.per_stream,
                         cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], verdict.cpu_user_s,
                         verdict.cpu_sys_s, opts.block, opts.bufsize,
                         None if value is None else f"{value:08x}", fd is None, setup_s,
                         samples, opts.omit_s, duration)
        finally:
            close_all(socks)
            ctrl.sock.close()
    finally:
        if fd is not None:
            os.close(fd)
