"""One thread sends every data stream of a session: one epoll over the N sockets.

Why (issue 16): on the event loop every wake of a stream was, in Python, a future, an
``add_writer``/``remove_writer`` pair (two ``epoll_ctl``) and a timer, and ~40 % of the
sender's CPU at 120 ms was the interpreter (perf: ``_PyEval_EvalFrameDefault`` and
malloc beside the kernel's copy).  Here each socket is registered once, level-triggered
for EPOLLOUT, and a wake is one ``epoll_wait`` returning the writable sockets; the
thread releases the GIL in every syscall, so the event loop (control connection, timers,
watchdog) runs beside it.

The rules of a wake are WakeBudget's (streams.py): fixed buffers queue a quarter of the
send buffer per stream per wake and wait for EPOLLOUT; autotuned buffers write until the
buffer is full and try again on EPOLLOUT or after the top-up (a sixth of the srtt), since
the kernel reports EPOLLOUT only once a third of the buffer is free.  A short write means
the buffer is full.  Each stream sends block headers (MSG_MORE), payloads, END, then FIN.

Must not import rig modules outside rig.fdt and must not print.
"""
from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Protocol

from rig.fdt.protocol import BlockHeader, BlockScheduler
from rig.fdt.transport import Progress

POLL_S = 0.2             # the longest epoll_wait: how soon the thread sees `stop`
_FULL, _BUDGET, _DONE = 0, 1, 2


class Stopped(Exception):
    """The sender was asked to stop (another stream failed, stall, cancel)."""


class Source(Protocol):
    def put(self, sock: socket.socket, offset: int, done: int,
            length: int) -> tuple[int, int]: ...


class Budget(Protocol):
    fill: bool

    def per_wake(self) -> int: ...

    def topup_s(self) -> float: ...


class _Stream:
    """One stream's place: the header bytes still to send and the block being sent."""
    __slots__ = ("i", "sock", "budget", "pending", "ending", "src", "offset", "done",
                 "left", "full", "retry_at")

    def __init__(self, i: int, sock: socket.socket, budget: Budget) -> None:
        self.i, self.sock, self.budget = i, sock, budget
        self.pending: memoryview | None = None
        self.ending = False
        self.src: Source | None = None
        self.offset = self.done = self.left = 0
        self.full, self.retry_at = False, 0.0


def _write(st: _Stream, sources: dict[int, Source], sched: BlockScheduler,
           progress: Progress) -> int:
    """Send what one wake allows: _FULL (short write or EAGAIN), _BUDGET, or _DONE."""
    sock, allowed = st.sock, st.budget.per_wake()
    try:
        while allowed > 0:
            if st.pending is not None:
                n = sock.send(st.pending, 0 if st.ending else socket.MSG_MORE)
                if n < len(st.pending):
                    st.pending = st.pending[n:]
                    return _FULL
                st.pending = None
                if st.ending:
                    with contextlib.suppress(OSError):  # a vanished peer: the verdict says
                        sock.shutdown(socket.SHUT_WR)
                    return _DONE
            elif st.left == 0:
                blk = sched.next_file_block()
                if blk is None:
                    st.pending, st.ending = memoryview(BlockHeader.end(1).pack()), True
                    continue
                file_id, st.offset, st.left = blk
                st.src, st.done = sources[file_id], 0
                st.pending = memoryview(BlockHeader(file_id, st.offset, st.left).pack())
            else:
                ask = min(st.left, allowed)
                assert st.src is not None
                n, tried = st.src.put(sock, st.offset, st.done, ask)
                progress.add(st.i, n)
                st.offset, st.done, st.left, allowed = (st.offset + n, st.done + n,
                                                        st.left - n, allowed - n)
                if n < tried:
                    return _FULL
    except (BlockingIOError, InterruptedError):
        return _FULL
    return _BUDGET


def send_streams(socks: list[socket.socket], budgets: list[Budget],
                 sources: dict[int, Source], sched: BlockScheduler, progress: Progress,
                 stop: threading.Event) -> None:
    """Send blocks from `sched` on every socket (non-blocking) until each sent END."""
    live = {s.fileno(): _Stream(i, s, b) for i, (s, b) in enumerate(zip(socks, budgets))}
    ready = set(live)
    with select.epoll(len(live)) as ep:
        for fd in live:
            ep.register(fd, select.EPOLLOUT)
        while live:
            if stop.is_set():
                raise Stopped()
            now = time.monotonic()
            for fd in ready:
                st = live[fd]
                r = _write(st, sources, sched, progress)
                if r == _DONE:
                    ep.unregister(fd)
                    del live[fd]
                elif r == _FULL and st.budget.fill:
                    st.full, st.retry_at = True, now + st.budget.topup_s()
                else:
                    st.full = False
            if not live:         # the last END is queued: no wait (it cost 0.2 s a run)
                break
            retry = [st.retry_at for st in live.values() if st.full]
            timeout = min([POLL_S, *(t - time.monotonic() for t in retry)])
            ready = {fd for fd, _ in ep.poll(max(0.0, timeout))}
            if retry:
                now = time.monotonic()
                ready.update(fd for fd, st in live.items() if st.full and st.retry_at <= now)
