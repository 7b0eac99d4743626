"""The threaded receivers of rig.fdt.streams on socketpairs: reassembly by offset, errors,
bounded shutdown and no thread or descriptor left behind."""
from __future__ import annotations

import asyncio
import os
import select
import socket
import threading
import zlib
from pathlib import Path

import pytest

from rig.fdt import protocol as p
from rig.fdt.streams import MemSource, StreamWorkers, receiver
from rig.fdt.transport import Progress, TransferError, run_all

from hangguard import hang_guard

BLOCK = 64 * 1024


def _stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rig-fdt-stream")]


def _pairs(n: int) -> tuple[list[socket.socket], list[socket.socket]]:
    pairs = [socket.socketpair() for _ in range(n)]
    return [a for a, _ in pairs], [b for _, b in pairs]


def test_blocks_in_any_order_land_by_offset(tmp_path: Path) -> None:
    data = os.urandom(5 * BLOCK + 777)
    blocks = list(iter(p.BlockScheduler(len(data), BLOCK).next_block, None))
    out = tmp_path / "out.bin"

    async def main() -> Progress:
        ours, theirs = _pairs(2)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644)
        reasm = p.Reassembly(len(data), 1, 2)
        progress = Progress(2)
        workers = StreamWorkers(ours)
        try:
            futs = workers.start(receiver(reasm, {1: fd}, BLOCK, progress, checksum=True))
            for k, (off, n) in enumerate(reversed(blocks)):     # last block first
                s = theirs[k % 2]
                s.sendall(p.BlockHeader(1, off, n).pack() + data[off:off + n])
            for s in theirs:
                s.sendall(p.BlockHeader.end(1).pack())
            await run_all(futs, progress=progress, stall_s=5)
            reasm.verify(p.Done(len(data), progress.per_stream, zlib.adler32(data)))
            return progress
        finally:
            workers.close()
            os.close(fd)
            for s in theirs:
                s.close()

    progress = asyncio.run(main())
    assert out.read_bytes() == data
    assert progress.total == len(data) and len(progress.per_stream) == 2
    assert _stream_threads() == []


def _one_stream_fails(send, error: type[Exception], match: str) -> None:
    """One receiver thread; the peer's socket gets `send(sock)`; the run must raise."""
    async def main() -> None:
        ours, theirs = _pairs(1)
        workers = StreamWorkers(ours)
        try:
            futs = workers.start(receiver(p.Reassembly(BLOCK, 1, 1), {}, BLOCK,
                                          Progress(1), checksum=False))
            send(theirs[0])
            with pytest.raises(error, match=match):
                await run_all(futs, stall_s=5)
        finally:
            workers.close()
            theirs[0].close()
    asyncio.run(main())
    assert _stream_threads() == []


def test_peer_closing_mid_block_is_an_error() -> None:
    def send(sock) -> None:
        sock.sendall(p.BlockHeader(1, 0, BLOCK).pack() + b"x" * 1000)
        sock.close()
    _one_stream_fails(send, TransferError, "stream 0 closed by peer after 1000")


def test_bad_header_is_a_protocol_error() -> None:
    _one_stream_fails(lambda sock: sock.sendall(b"XXXX" + bytes(p.HEADER_SIZE - 4)),
                      p.ProtocolError, "bad block magic")


def test_close_ends_blocked_receivers_at_once_and_closes_their_sockets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A silent peer: the stall watchdog fires, close() wakes and joins every thread.
    With the SO_RCVTIMEO backstop at 10 min, a close() that relied on it instead of
    shutdown() waking the threads would run into the 30 s hang guard (idle: ms)."""
    from rig.fdt import streams
    monkeypatch.setattr(streams, "POLL_S", 600.0)
    monkeypatch.setattr(streams, "JOIN_S", 1200.0)
    before = set(os.listdir("/proc/self/fd"))

    async def main() -> None:
        ours, theirs = _pairs(4)
        workers = StreamWorkers(ours)
        progress = Progress(4)
        futs = workers.start(receiver(p.Reassembly(BLOCK, 1, 4), {}, BLOCK, progress,
                                      checksum=False))
        try:
            with pytest.raises(TransferError, match="no data moved"):
                await run_all(futs, progress=progress, stall_s=0.2)
        finally:
            workers.close()
            for s in theirs:
                s.close()
        assert all(s.fileno() == -1 for s in ours)

    with hang_guard(30, "close() of 4 blocked receivers"):
        asyncio.run(main())
    assert _stream_threads() == []
    assert set(os.listdir("/proc/self/fd")) == before


def test_progress_total_is_exact_under_concurrent_adds() -> None:
    progress = Progress(8)

    def bump(i: int) -> None:
        for _ in range(20000):
            progress.add(i, 3)
    threads = [threading.Thread(target=bump, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert progress.total == 8 * 20000 * 3 and progress.per_stream == [60000] * 8


@pytest.mark.parametrize("length", [1, 1000, 256 << 10, 3 * (256 << 10) + 17, 4 << 20])
def test_memory_pattern_block_checksum_matches_the_bytes_sent(length: int) -> None:
    src = MemSource(4 << 20)
    pattern = bytes(src.buf)
    sent = (pattern * (length // len(pattern) + 1))[:length]
    assert src.block_adler(length) == zlib.adler32(sent)


@pytest.mark.parametrize("length", [1, (128 << 10) + 5, 3 * (128 << 10) + 17, 4 << 20])
def test_memory_mode_sends_put_the_pattern_block_on_the_wire(length: int) -> None:
    """MemSource.put, with short writes and EAGAIN (small socket buffers), sends
    exactly the block block_adler describes, and never reports a full buffer as sent."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)
    a.setblocking(False)
    got = bytearray()

    def drain() -> None:
        while len(got) < length:
            got.extend(b.recv(1 << 20))
    t = threading.Thread(target=drain)
    t.start()
    src, done, short = MemSource(4 << 20), 0, 0
    while done < length:
        try:
            n, tried = src.put(a, 0, done, length - done)
        except BlockingIOError:
            select.select([], [a], [], 1.0)
            continue
        assert 0 < n <= tried <= min(length - done, len(src.buf))
        short += n < tried
        done += n
    t.join(10)
    a.close()
    b.close()
    assert len(got) == length
    assert zlib.adler32(got) == src.block_adler(length)
    if length == 4 << 20:
        assert short > 0        # the 16 KiB buffer did cut sends short


def test_one_thread_sends_every_stream_headers_blocks_end_and_fin() -> None:
    """sender.send_streams: 3 streams, blocks of a memory source; each stream carries
    header + payload per block, then END and FIN, and the blocks cover the size."""
    from rig.fdt import sender
    from rig.fdt.streams import WakeBudget
    size, block = 5 * BLOCK + 123, BLOCK
    ours, theirs = _pairs(3)
    for s in ours:
        s.setblocking(False)
    src, sched, progress = MemSource(block), p.BlockScheduler(size, block), Progress(3)
    got: list[bytes] = [b""] * 3

    def drain(k: int) -> None:
        while chunk := theirs[k].recv(1 << 20):
            got[k] += chunk
    ths = [threading.Thread(target=drain, args=(k,)) for k in range(3)]
    for t in ths:
        t.start()
    sender.send_streams(ours, [WakeBudget(s) for s in ours], {1: src}, sched, progress,
                        threading.Event())
    for t in ths:
        t.join(10)
    covered = 0
    for k in range(3):
        data, pos = got[k], 0
        while True:
            h = p.BlockHeader.unpack(data[pos:pos + p.HEADER_SIZE])
            pos += p.HEADER_SIZE
            if h.is_end:
                break
            assert zlib.adler32(data[pos:pos + h.length]) == src.block_adler(h.length)
            pos += h.length
            covered += h.length
        assert pos == len(data)       # END last, then FIN (recv returned b"")
    assert covered == size == progress.total
    for s in ours + theirs:
        s.close()


def test_steady_rate_leaves_out_the_omitted_start() -> None:
    from rig.fdt.transport import steady_rate
    samples = [(0.0, 0), (1.0, 10), (2.0, 110), (3.0, 210), (3.5, 260)]
    assert steady_rate(samples, 0.0) == pytest.approx(260 / 3.5)
    assert steady_rate(samples, 1.0) == pytest.approx(250 / 2.5)   # from the 1.0 s sample
    assert steady_rate(samples, 1.5) == pytest.approx(150 / 1.5)   # first sample >= 1.5
    assert steady_rate(samples, 3.5) is None and steady_rate(samples[:1], 0.0) is None


def _full_pair() -> tuple[socket.socket, socket.socket]:
    """A socketpair whose sending end is full (nobody reads the other end)."""
    a, b = socket.socketpair()
    a.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            a.send(b"x" * 65536)
    return a, b


def test_fixed_buffer_budget_is_a_quarter_of_the_send_buffer() -> None:
    from rig.fdt.streams import WakeBudget
    for size, floor in ((4 << 20, False), (16 << 10, True)):
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        sndbuf = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        got = WakeBudget(a).per_wake()
        assert got == (64 << 10 if floor else sndbuf // 4), (size, sndbuf, got)
        a.close()
        b.close()


def test_autotuned_budget_fills_the_send_buffer() -> None:
    from rig.fdt.streams import WakeBudget
    a, b = socket.socketpair()
    assert WakeBudget(a, fill=True).per_wake() > 8 * a.getsockopt(socket.SOL_SOCKET,
                                                                  socket.SO_SNDBUF)
    a.close()
    b.close()


def test_autotuned_topup_follows_the_smoothed_rtt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sixth of the kernel's srtt within 2-20 ms, re-read every RTT_EVERY wakes;
    unknown (not TCP) -> the upper bound."""
    from rig.fdt import streams
    from rig.fdt.streams import WakeBudget
    rtts = iter([0.030, 0.120, 0.0001])
    monkeypatch.setattr(streams, "_srtt_s", lambda sock: next(rtts))
    budget = WakeBudget(socket.socket(), fill=True)
    got = [budget.topup_s() for _ in range(3 * WakeBudget.RTT_EVERY)]
    assert got[0] == pytest.approx(0.005)
    assert set(got[:WakeBudget.RTT_EVERY]) == {got[0]}
    assert got[WakeBudget.RTT_EVERY] == pytest.approx(0.020)        # 120 ms / 6 = the cap
    assert got[-1] == pytest.approx(0.002)                           # 0.1 ms / 6: the floor
    budget.sock.close()
    monkeypatch.undo()
    a, b = socket.socketpair()
    assert WakeBudget(a, fill=True).topup_s() == WakeBudget.TOPUP_S[1]
    a.close()
    b.close()


def test_srtt_of_a_loopback_tcp_socket() -> None:
    from rig.fdt.streams import _srtt_s
    lst = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(lst.getsockname())
    s, _ = lst.accept()
    try:
        rtt = _srtt_s(c)
        assert rtt is not None and 0 < rtt < 0.05, rtt
    finally:
        for x in (c, s, lst):
            x.close()


def test_the_sender_returns_once_the_last_end_is_queued(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """No epoll_wait after the last stream's END: a version that polled once more waited
    out POLL_S (0.2 s) at the end of every run, 4-6 % of a 6 s timed run's rate."""
    from rig.fdt import sender
    from rig.fdt.streams import WakeBudget
    monkeypatch.setattr(sender, "POLL_S", 600.0)   # one more poll: a 30 s hang guard's stop
    ours, theirs = _pairs(2)
    for s in ours:
        s.setblocking(False)
    drains = [threading.Thread(target=lambda b=b: [None for _ in iter(lambda: b.recv(1 << 20), b"")])
              for b in theirs]
    for t in drains:
        t.start()
    try:
        with hang_guard(30, "send_streams after the last END"):   # idle: milliseconds
            sender.send_streams(ours, [WakeBudget(s) for s in ours], {1: MemSource(BLOCK)},
                                p.BlockScheduler(4 * BLOCK, BLOCK), Progress(2),
                                threading.Event())
    finally:
        for s in ours:
            s.close()              # the drains see the end
        for t in drains:
            t.join(10)
        for s in theirs:
            s.close()


@pytest.mark.slow
def test_autotuned_budget_retries_a_full_socket_without_epollout() -> None:
    """Filling: the sender tries a full socket again after the top-up even though it
    never polls writable (the kernel reports EPOLLOUT only once a third of the buffer is
    free; issue 16); fixed buffers keep waiting for EPOLLOUT."""
    from rig.fdt import sender

    class Counting:
        def __init__(self, fill: bool) -> None:
            self.fill, self.wakes = fill, 0

        def per_wake(self) -> int:
            self.wakes += 1
            return 1 << 30

        def topup_s(self) -> float:
            return 0.02

    for fill in (True, False):
        a, b = _full_pair()
        budget, stop = Counting(fill), threading.Event()
        timer = threading.Timer(0.4, stop.set)
        timer.start()
        try:
            with pytest.raises(sender.Stopped):
                sender.send_streams([a], [budget], {1: MemSource(BLOCK)},
                                    p.BlockScheduler(1 << 30, BLOCK), Progress(1), stop)
        finally:
            timer.cancel()
            a.close()
            b.close()
        if fill:        # 1 + 0.4 s / 20 ms = 21 here (3 runs); fewer on a busy host,
            assert 4 <= budget.wakes <= 25, budget.wakes    # thousands if it spun
        else:           # the first try only: the socket never polls writable
            assert budget.wakes == 1, budget.wakes


def _tcp_pairs(n: int, rcvbuf: int | None) -> tuple[list[socket.socket], list[socket.socket]]:
    """n loopback TCP connections (receiving end, sending end); rcvbuf fixes SO_RCVBUF."""
    ours, theirs = [], []
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(n)
        for _ in range(n):
            c = socket.create_connection(lsock.getsockname(), timeout=5)
            s, _ = lsock.accept()
            if rcvbuf is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            ours.append(s)
            theirs.append(c)
    return ours, theirs


@pytest.mark.parametrize("rcvbuf", [4 << 20, None])
def test_tcp_receivers_land_4mib_blocks_with_a_fixed_or_autotuned_buffer(
        tmp_path: Path, rcvbuf: int | None) -> None:
    """Fixed buffer: 1 MiB reads with SO_RCVLOWAT 256 KiB; autotuned: MSG_WAITALL, no
    SO_RCVLOWAT (it would clamp the window).  Either way every byte lands by offset."""
    block = 4 << 20
    data = os.urandom(2 * block + (1 << 20) + 777)
    blocks = list(iter(p.BlockScheduler(len(data), block).next_block, None))
    out = tmp_path / "out.bin"

    async def main() -> list[int]:
        ours, theirs = _tcp_pairs(2, rcvbuf)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644)
        reasm = p.Reassembly(len(data), 1, 2)
        progress = Progress(2)
        workers = StreamWorkers(ours)
        try:
            futs = workers.start(receiver(reasm, {1: fd}, block, progress, checksum=True))

            def send() -> None:
                for k, (off, n) in enumerate(reversed(blocks)):
                    theirs[k % 2].sendall(p.BlockHeader(1, off, n).pack() + data[off:off + n])
                for s in theirs:        # END, then FIN as the sender does: with
                    s.sendall(p.BlockHeader.end(1).pack())   # SO_RCVLOWAT the kernel wakes
                    s.shutdown(socket.SHUT_WR)   # a reader for less only at FIN
            await asyncio.gather(asyncio.to_thread(send), run_all(futs, progress=progress,
                                                                   stall_s=10))
            reasm.verify(p.Done(len(data), progress.per_stream, zlib.adler32(data)))
            return [s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) for s in ours]
        finally:
            workers.close()
            os.close(fd)
            for s in theirs:
                s.close()

    lowats = asyncio.run(main())
    assert out.read_bytes() == data
    assert lowats == ([256 << 10] * 2 if rcvbuf else [1, 1])
    assert _stream_threads() == []
