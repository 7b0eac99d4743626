"""The FDT-style server: one listening port for control and data connections.

A control connection asks for a session (``Hello``); the server answers ``Ready`` with a
token, waits for the client's data streams to attach with that token, then sends the
file (get) or receives it (put, into an anonymous temporary file renamed only after the
data verified).  Names resolve below a descriptor of the root, never through a symlink
(``safefs``); opens run off the event loop, and a get holds at most
``filepool.SESSION_FILES`` of its files open at once (however many it names).  Every session's sockets, files and tasks are
closed on every path; stalled or vanished clients are dropped after the stall timeout.
Out of file descriptors, new connections are refused with a reason and the accept loop
backs off and goes on.

Uses transport, protocol and safefs; must not import rig modules outside rig.fdt and must not
print except through the ``log`` callable it is given.
"""
from __future__ import annotations

import asyncio
import errno
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rig.fdt import safefs
from rig.fdt.protocol import (DATA_HELLO_SIZE, DATA_MAGIC, CONTROL_MAGIC, DataHello,
                       Done, Failure, FileSet, Hello, IntegrityError, ProtocolError, Ready,
                       Verdict, encode)
from rig.fdt.filepool import FilePool
from rig.fdt.streams import (FileSource, MemSource, PooledSource, StreamWorkers, receiver,
                             send_all)
from rig.fdt.transport import (Control, Options, Progress, StallError, TransferError, close_all,
                        cpu_times, recv_exact, reraise_as_transfer, run_all, set_bufsize,
                        within)

ACCEPT_BACKOFF_S = 0.1        # accept() failed for want of descriptors: retry after this
REFUSE_BATCH = 256            # connections refused per back-off at most
_FD_PRESSURE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_OUT_OF_FDS = Failure("server is out of file descriptors: session refused, try again later")


@dataclass
class Session:
    hello: Hello
    token: bytes
    socks: list[socket.socket | None] = field(default_factory=list)
    attached: asyncio.Event = field(default_factory=asyncio.Event)

    def attach(self, index: int, sock: socket.socket) -> bool:
        if index >= len(self.socks) or self.socks[index] is not None or self.attached.is_set():
            return False
        self.socks[index] = sock
        if all(s is not None for s in self.socks):
            self.attached.set()
        return True


class Server:
    """Serves files below `root` (get) and accepts uploads into it (put)."""

    def __init__(self, root: str | Path, opts: Options,
                 log: Callable[[str], None] = lambda s: None) -> None:
        self.root = Path(root).resolve()
        self.opts, self.log = opts, log
        self.sessions: dict[bytes, Session] = {}
        self.tasks: set[asyncio.Task] = set()
        self.lsock: socket.socket | None = None
        self.root_fd: int | None = safefs.open_root(str(self.root))   # names resolve below it
        self._spare: int | None = None     # freed to accept-and-refuse when out of fds

    def listen(self, bind: str, port: int) -> tuple[str, int]:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            set_bufsize(sock, self.opts.bufsize)    # inherited by accepted sockets
            sock.bind((bind, port))
            sock.listen(256)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.lsock = sock
        self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return sock.getsockname()[:2]

    async def serve_forever(self) -> None:
        """Accept until cancelled; running out of descriptors refuses, never ends, it."""
        assert self.lsock is not None, "listen() first"
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    conn, peer = await loop.sock_accept(self.lsock)
                except OSError as e:
                    if e.errno not in _FD_PRESSURE:
                        raise
                    self._refuse_waiting()
                    await asyncio.sleep(ACCEPT_BACKOFF_S)
                    continue
                try:
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:              # reset before we got to it
                    conn.close()
                    continue
                self._spawn(self._handle(conn, peer))
        finally:
            await self.close()

    def _refuse_waiting(self) -> None:
        """Out of descriptors: free the spare one, and with it accept every connection
        waiting in the backlog, tell each control connection why (a Failure it reads as
        "server refused") and close it; then take the spare back."""
        if self._spare is None or self.lsock is None:
            return
        os.close(self._spare)
        self._spare = None
        try:
            for _ in range(REFUSE_BATCH):
                try:
                    conn, peer = self.lsock.accept()
                except OSError:              # backlog empty (EAGAIN), or still no fd
                    break
                with conn:
                    self.log(f"{peer[0]}: refused, out of file descriptors")
                    _refuse(conn)
        finally:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._retry_spare()

    def _retry_spare(self) -> None:
        asyncio.get_running_loop().call_later(ACCEPT_BACKOFF_S, self._reopen_spare)

    def _reopen_spare(self) -> None:
        if self._spare is None and self.lsock is not None:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._retry_spare()

    async def close(self) -> None:
        if self.lsock is not None:
            self.lsock.close()
            self.lsock = None
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for fd in (self._spare, self.root_fd):
            if fd is not None:
                os.close(fd)
        self._spare = self.root_fd = None

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _handle(self, conn: socket.socket, peer: tuple) -> None:
        keep = False
        try:
            magic = await asyncio.wait_for(recv_exact(conn, 4), self.opts.connect_s)
            if magic == CONTROL_MAGIC:
                await self._control(conn, peer)
            elif magic == DATA_MAGIC:
                rest = await asyncio.wait_for(recv_exact(conn, DATA_HELLO_SIZE - 4),
                                              self.opts.connect_s)
                dh = DataHello.unpack(magic + rest)
                s = self.sessions.get(dh.token)
                keep = s is not None and s.attach(dh.index, conn)
                if not keep:
                    self.log(f"{peer[0]}: data stream for unknown session or slot")
            else:
                self.log(f"{peer[0]}: not an FDT connection (magic {magic!r})")
        except (TransferError, ProtocolError, OSError, asyncio.TimeoutError) as e:
            self.log(f"{peer[0]}: {type(e).__name__}: {e}")
        except Exception as e:            # noqa: BLE001 -- a bug: say so, keep serving
            self.log(f"{peer[0]}: internal error: {e!r}")
        finally:
            if not keep:
                conn.close()

    async def _control(self, conn: socket.socket, peer: tuple) -> None:
        ctrl = Control(conn)
        hello = await asyncio.wait_for(ctrl.recv(), self.opts.connect_s)
        if not isinstance(hello, Hello):
            raise ProtocolError(f"expected hello, got {hello.type}")
        token = os.urandom(16)
        session = Session(hello, token, [None] * hello.streams)
        self.sessions[token] = session
        label = f"{len(hello.names)} files" if hello.names else (hello.name or "<mem>")
        what = f"{peer[0]} {hello.op} {label} x{hello.streams}"
        try:
            await self._run_session(ctrl, session)
            self.log(f"{what}: ok")
        except BaseException as e:
            err = reraise_as_transfer(e, what)
            if isinstance(err, (TransferError, ProtocolError, OSError)):
                self.log(f"{what}: {err}")
                await _try_send(ctrl, Failure(str(err)))
                return
            raise
        finally:
            self.sessions.pop(token, None)
            close_all(session.socks)

    async def _run_session(self, ctrl: Control, s: Session) -> None:
        h = s.hello
        if h.op != "get":
            await self._receive_upload(ctrl, s)
            return
        pool = None if h.mem else FilePool(self._open_read, h.names or [h.name])
        try:
            if pool is not None:
                # one descriptor at a time, off the loop; the files are reopened lazily
                # when sent, at most filepool.SESSION_FILES of them at once
                sizes = await asyncio.get_running_loop().run_in_executor(None, pool.stat_all)
            else:
                sizes = [h.size or 0]
            await ctrl.send(Ready(s.token.hex(), sum(sizes), 1,
                                  sizes if h.names is not None else None))
            await self._await_streams(s)
            await self._send(ctrl, s, pool, sizes)
        finally:
            if pool is not None:
                pool.close()

    def _open_read(self, name: str) -> int:
        if self.root_fd is None:
            raise safefs.PathRefused(f"{name}: the server is closing")
        return safefs.open_read(self.root_fd, name)

    async def _await_streams(self, s: Session) -> None:
        try:
            await asyncio.wait_for(s.attached.wait(), self.opts.connect_s)
        except asyncio.TimeoutError:
            got = sum(x is not None for x in s.socks)
            raise TransferError(f"only {got} of {len(s.socks)} data streams attached"
                                f" within {self.opts.connect_s:g}s") from None
        if s.hello.bufsize:
            for sock in s.socks:
                if sock is not None:
                    set_bufsize(sock, s.hello.bufsize)

    async def _send(self, ctrl: Control, s: Session, pool: FilePool | None,
                    sizes: list[int]) -> None:
        h = s.hello
        sources: list[FileSource | MemSource] = (
            [PooledSource(pool, i) for i in range(len(sizes))] if pool is not None
            else [MemSource(h.block)])
        progress = Progress(h.streams)
        cpu0 = cpu_times()
        socks = [x for x in s.socks if x is not None]
        sent, adlers = await send_all(socks, sources, sizes, h.block, progress,
                                      checksum=h.checksum, duration=h.duration,
                                      stall_s=self.opts.stall_s, what="send",
                                      autotuned=not (h.bufsize or self.opts.bufsize))
        cpu1 = cpu_times()
        files = [[n, a] for n, a in zip(sizes, adlers)] if h.names is not None else None
        await ctrl.send(Done(sent, progress.per_stream, adlers[0] if files is None else None,
                             cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], files))
        verdict = await within(ctrl.recv(), self.opts.stall_s,
                               "send: no verdict from the client (stall timeout)", StallError)
        if isinstance(verdict, Verdict) and not verdict.ok:
            raise IntegrityError(f"client rejected the data: {verdict.message}")

    async def _receive_upload(self, ctrl: Control, s: Session) -> None:
        h = s.hello
        assert h.size is not None
        up = None if h.mem else await _off_loop(safefs.Upload.close, safefs.Upload,
                                                 self.root_fd, h.name)
        fd = None if up is None else up.fd
        workers = StreamWorkers([])
        try:
            await ctrl.send(Ready(s.token.hex(), h.size))
            await self._await_streams(s)
            cpu0 = cpu_times()
            reasm = FileSet([h.size], h.streams, open_ended=h.duration is not None)
            progress = Progress(h.streams)
            workers = StreamWorkers([x for x in s.socks if x is not None])
            s.socks = []                           # the workers own them now
            futs = workers.start(receiver(reasm, {} if fd is None else {1: fd}, h.block,
                                          progress, h.checksum))
            *_, done = await run_all(futs + [ctrl.recv()], progress=progress,
                                     stall_s=self.opts.stall_s, what="receive")
            if not isinstance(done, Done):
                raise ProtocolError(f"expected done, got {done.type}")
            reasm.verify(done)
            if up is not None:
                up.commit()
            cpu1 = cpu_times()
            await ctrl.send(Verdict(True, "", cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]))
        except IntegrityError as e:
            await _try_send(ctrl, Verdict(False, str(e)))
            raise
        finally:
            workers.close()              # threads stopped before the file goes
            if up is not None:
                up.close()               # uncommitted: nothing is left behind


def _refuse(conn: socket.socket) -> None:
    """Best effort, never blocking: a Failure to a control connection, nothing to a data
    stream (which would read it as a block)."""
    try:
        conn.setblocking(False)
        try:
            first = conn.recv(4, socket.MSG_PEEK)
        except BlockingIOError:          # nothing sent yet: take it for a control one
            first = b""
        if first != DATA_MAGIC:
            conn.send(encode(_OUT_OF_FDS))
    except OSError:
        pass


async def _off_loop(undo: Callable, fn: Callable, *args):
    """fn(*args) in a thread, so a slow open never stalls the loop; if the caller is
    cancelled meanwhile, what fn returns is handed to `undo` instead of leaking."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() is not None
                              or undo(f.result()))
        raise


async def _try_send(ctrl: Control, msg) -> None:
    """Best effort: tell the peer why the session ended, never block long on it."""
    try:
        await asyncio.wait_for(ctrl.send(msg), 2.0)
    except (OSError, asyncio.TimeoutError, TransferError):
        pass
