"""Pure tests of the FDT-style protocol core: framing, scheduling, reassembly, adler32.

No sockets, no asyncio: bytes in, bytes or errors out.
"""
from __future__ import annotations

import random
import zlib

import pytest

from rig.fdt import protocol as p


def _random(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


# ----------------------------------------------------------------------- framing

def test_block_header_round_trip_and_size() -> None:
    h = p.BlockHeader(7, 3 << 40, 4 << 20)
    raw = h.pack()
    assert len(raw) == p.HEADER_SIZE == 32
    assert p.BlockHeader.unpack(raw) == h
    end = p.BlockHeader.unpack(p.BlockHeader.end(7).pack())
    assert end.is_end and not h.is_end


@pytest.mark.parametrize("raw, match", [
    (b"XXXX" + bytes(28), "magic"),
    (bytes(31), "32 bytes"),
])
def test_block_header_rejects_garbage(raw: bytes, match: str) -> None:
    with pytest.raises(p.ProtocolError, match=match):
        p.BlockHeader.unpack(raw)


def test_block_header_rejects_huge_length() -> None:
    raw = bytearray(p.BlockHeader(1, 0, 1).pack())
    raw[16:20] = (p.MAX_BLOCK + 1).to_bytes(4, "big")
    with pytest.raises(p.ProtocolError, match="exceeds"):
        p.BlockHeader.unpack(bytes(raw))


def test_data_hello_round_trip_and_bounds() -> None:
    dh = p.DataHello(b"k" * 16, 3, 8)
    assert p.DataHello.unpack(dh.pack()) == dh
    assert len(dh.pack()) == p.DATA_HELLO_SIZE
    with pytest.raises(p.ProtocolError):
        p.DataHello(b"k" * 16, 8, 8)
    with pytest.raises(p.ProtocolError):
        p.DataHello(b"short", 0, 1)


def test_control_frames_survive_any_split() -> None:
    msgs = [p.Hello("get", "a/b.root", 8, 1 << 22, checksum=True),
            p.Ready("ab" * 16, 123), p.Done(123, [100, 23], 0xDEADBEEF, 0.5, 0.25),
            p.Verdict(False, "adler32 mismatch"), p.Failure("no such file")]
    wire = b"".join(p.encode(m) for m in msgs)
    for step in (1, 3, 7, len(wire)):
        dec = p.FrameDecoder()
        got = []
        for i in range(0, len(wire), step):
            got += dec.feed(wire[i:i + step])
        assert got == msgs


@pytest.mark.parametrize("body, match", [
    (b"not json", "malformed"),
    (b'{"type": "bogus"}', "malformed"),
    (b'{"type": "hello", "op": "get"}', "malformed"),
    (b'{"type": "hello", "op": "rm", "name": "x", "streams": 1, "block": 1}', "op must"),
    (b'{"type": "hello", "op": "get", "name": "x", "streams": 0, "block": 1}', "streams"),
    (b'{"type": "hello", "op": "put", "name": "x", "streams": 1, "block": 1}', "size"),
    (b'{"type": "hello", "op": "get", "name": "x", "streams": 1, "block": 1,'
     b' "version": 99}', "version"),
])
def test_bad_control_messages_are_protocol_errors(body: bytes, match: str) -> None:
    frame = len(body).to_bytes(4, "big") + body
    with pytest.raises(p.ProtocolError, match=match):
        p.FrameDecoder().feed(frame)


def test_oversized_control_frame_is_rejected_before_buffering_it() -> None:
    with pytest.raises(p.ProtocolError, match="too large"):
        p.FrameDecoder().feed((p.MAX_CONTROL_FRAME + 1).to_bytes(4, "big"))


# -------------------------------------------------------------------- scheduling

@pytest.mark.parametrize("size, block", [(0, 4), (1, 4), (16, 4), (17, 4), (10**6, 4096)])
def test_scheduler_tiles_the_file_exactly(size: int, block: int) -> None:
    s = p.BlockScheduler(size, block)
    blocks = list(iter(s.next_block, None))
    assert sum(n for _, n in blocks) == size
    assert all(0 < n <= block for _, n in blocks)
    assert [o for o, _ in blocks] == [sum(n for _, n in blocks[:i]) for i in range(len(blocks))]
    assert s.next_block() is None


# ------------------------------------------------------------------------ adler32

@pytest.mark.parametrize("n, cut", [(0, 0), (10, 0), (10, 10), (200_000, 70_000),
                                    (200_000, 65_521), (1, 1)])
def test_adler32_combine_matches_zlib(n: int, cut: int) -> None:
    data = _random(n, n + cut)
    a, b = data[:cut], data[cut:]
    assert p.adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(data)


# --------------------------------------------------------------------- reassembly

def _transfer(data: bytes, block: int, streams: int, seed: int = 0):
    """Sender side in memory: blocks dealt to streams at random, then shuffled."""
    rng = random.Random(seed)
    sched = p.BlockScheduler(len(data), block)
    per = [[] for _ in range(streams)]
    while (b := sched.next_block()) is not None:
        per[rng.randrange(streams)].append(b)
    sent = [sum(n for _, n in blocks) for blocks in per]
    events = [(i, off, n) for i, blocks in enumerate(per) for off, n in blocks]
    rng.shuffle(events)
    return events, sent


def _receive(data: bytes, events, streams: int, corrupt_at: int | None = None):
    r = p.Reassembly(len(data), 1, streams)
    out = bytearray(len(data))
    for stream, off, n in events:
        h = p.BlockHeader.unpack(p.BlockHeader(1, off, n).pack())
        r.accept(stream, h)
        payload = bytearray(data[off:off + n])
        if corrupt_at is not None and off <= corrupt_at < off + n:
            payload[corrupt_at - off] ^= 0x40
        out[off:off + n] = payload
        r.landed(stream, h, zlib.adler32(payload))
    for s in range(streams):
        r.accept(s, p.BlockHeader.end(1))
    return r, bytes(out)


@pytest.mark.parametrize("streams", [1, 8])
def test_out_of_order_blocks_reassemble_and_verify(streams: int) -> None:
    data = _random(1_000_003)
    events, sent = _transfer(data, 65536, streams)
    r, out = _receive(data, events, streams)
    assert out == data
    r.verify(p.Done(len(data), sent, zlib.adler32(data)))
    assert r.adler32() == zlib.adler32(data)


def test_corrupted_byte_fails_the_checksum() -> None:
    data = _random(300_000)
    events, sent = _transfer(data, 65536, 4)
    r, _ = _receive(data, events, 4, corrupt_at=123_456)
    with pytest.raises(p.IntegrityError, match="adler32 mismatch"):
        r.verify(p.Done(len(data), sent, zlib.adler32(data)))


def test_missing_block_is_truncation_even_without_checksum() -> None:
    data = _random(300_000)
    events, sent = _transfer(data, 65536, 4)
    r, _ = _receive(data, events[:-1], 4)
    with pytest.raises(p.IntegrityError, match="truncated"):
        r.verify(p.Done(len(data), sent, None))


def test_unfinished_stream_and_per_stream_mismatch_are_errors() -> None:
    data = _random(10_000)
    r = p.Reassembly(len(data), 1, 2)
    h = p.BlockHeader(1, 0, len(data))
    r.accept(0, h)
    r.landed(0, h)
    r.accept(0, p.BlockHeader.end(1))
    with pytest.raises(p.IntegrityError, match=r"streams \[1\] did not finish"):
        r.verify(p.Done(len(data), [len(data), 0]))
    r.accept(1, p.BlockHeader.end(1))
    with pytest.raises(p.IntegrityError, match="per-stream"):
        r.verify(p.Done(len(data), [0, len(data)]))
    r.verify(p.Done(len(data), [len(data), 0]))


@pytest.mark.parametrize("first, second", [((0, 100), (50, 100)), ((100, 100), (0, 101)),
                                           ((0, 100), (0, 100))])
def test_overlapping_blocks_are_rejected(first, second) -> None:
    r = p.Reassembly(1000, 1, 1)
    r.accept(0, p.BlockHeader(1, *first))
    with pytest.raises(p.IntegrityError, match="overlaps"):
        r.accept(0, p.BlockHeader(1, *second))


def test_block_outside_file_after_end_and_wrong_file_are_rejected() -> None:
    r = p.Reassembly(1000, 1, 1)
    with pytest.raises(p.IntegrityError, match="outside"):
        r.accept(0, p.BlockHeader(1, 900, 101))
    with pytest.raises(p.ProtocolError, match="file id"):
        r.accept(0, p.BlockHeader(2, 0, 10))
    r.accept(0, p.BlockHeader.end(1))
    with pytest.raises(p.ProtocolError, match="after END"):
        r.accept(0, p.BlockHeader(1, 0, 10))


def test_sender_claiming_more_than_arrived_is_truncation() -> None:
    r = p.Reassembly(100, 1, 1)
    h = p.BlockHeader(1, 0, 100)
    r.accept(0, h)
    r.landed(0, h)
    r.accept(0, p.BlockHeader.end(1))
    with pytest.raises(p.IntegrityError, match="sender reports 200"):
        r.verify(p.Done(200))


@pytest.mark.parametrize("length, count", [(1, 0), (1, 1), (7, 5), (4096, 33), (65521, 3)])
def test_adler32_repeat_matches_zlib(length: int, count: int) -> None:
    piece = _random(length, count)
    assert p.adler32_repeat(zlib.adler32(piece), length, count) == zlib.adler32(piece * count)


# ----------------------------------------------------------- timed (open-ended) runs

def _land(r: p.Reassembly, stream: int, offset: int, length: int) -> None:
    h = p.BlockHeader(1, offset, length)
    r.accept(stream, h)
    r.landed(stream, h)


def test_scheduler_stop_ends_the_hand_out_at_a_block_boundary() -> None:
    s = p.BlockScheduler(1 << 40, 100)
    assert s.next_block() == (0, 100) and s.next_block() == (100, 100)
    s.stop()
    assert s.next_block() is None and s.handed_out == 200


def test_open_ended_reassembly_takes_the_senders_total() -> None:
    r = p.Reassembly(1 << 40, 1, 2, open_ended=True)
    _land(r, 1, 100, 100)
    _land(r, 0, 0, 100)
    r.accept(0, p.BlockHeader.end(1))
    r.accept(1, p.BlockHeader.end(1))
    r.verify(p.Done(200, [100, 100]))
    with pytest.raises(p.IntegrityError, match="received 200 of 300"):
        r.verify(p.Done(300))


def test_open_ended_reassembly_finds_a_gap() -> None:
    r = p.Reassembly(1 << 40, 1, 1, open_ended=True)
    _land(r, 0, 0, 100)
    _land(r, 0, 200, 100)                 # [100, 200) never came; total still matches
    r.accept(0, p.BlockHeader.end(1))
    with pytest.raises(p.IntegrityError, match="gap"):
        r.verify(p.Done(200))


@pytest.mark.parametrize("kw", [dict(mem=False, name="f"), dict(mem=True, duration=0.0),
                                dict(mem=True, duration=-1.0), dict(mem=True, duration=1e6)])
def test_hello_duration_needs_memory_mode_and_a_sane_value(kw) -> None:
    kw = {"name": "", "size": 10, "duration": 5.0, **kw}
    with pytest.raises(p.ProtocolError, match="duration"):
        p.Hello("get", streams=1, block=10, **kw)
    assert p.decode_body(p.encode(p.Hello("get", "", 1, 10, size=10, mem=True,
                                          duration=2.5))[4:]).duration == 2.5


# ------------------------------------------------------------- several files per session

def test_scheduler_walks_files_in_order_and_never_crosses_a_file_end() -> None:
    s = p.BlockScheduler([250, 0, 5, 100], 100)
    got = list(iter(s.next_file_block, None))
    assert got == [(1, 0, 100), (1, 100, 100), (1, 200, 50), (3, 0, 5), (4, 0, 100)]
    assert s.handed_out == 355 == s.size


def _fileset_with(blocks: list[tuple[int, int, int]], sizes: list[int]) -> p.FileSet:
    fs = p.FileSet(sizes, 1)
    for fid, off, n in blocks:
        h = p.BlockHeader(fid, off, n)
        fs.accept(0, h)
        fs.landed(0, h, zlib.adler32(bytes(n)))
    fs.accept(0, p.BlockHeader.end(1))
    return fs


def test_fileset_verifies_each_file_and_names_the_bad_one() -> None:
    blocks = [(2, 0, 7), (1, 0, 10)]
    done = p.Done(17, [17], None, files=[[10, zlib.adler32(bytes(10))],
                                         [7, zlib.adler32(bytes(7))]])
    _fileset_with(blocks, [10, 7]).verify(done)
    bad = p.Done(17, [17], None, files=[[10, zlib.adler32(bytes(10))], [7, 12345]])
    with pytest.raises(p.IntegrityError, match="file 2: adler32 mismatch"):
        _fileset_with(blocks, [10, 7]).verify(bad)
    with pytest.raises(p.IntegrityError, match="file 1: truncated"):
        _fileset_with([(2, 0, 7), (1, 0, 5)], [10, 7]).verify(
            p.Done(17, [], None, files=[[10, None], [7, None]]))
    with pytest.raises(p.IntegrityError, match="reports 1 files, expected 2"):
        _fileset_with(blocks, [10, 7]).verify(p.Done(17, [17]))
    with pytest.raises(p.ProtocolError, match="unknown file id 3"):
        p.FileSet([10, 7], 1).accept(0, p.BlockHeader(3, 0, 1))


def test_hello_names_only_for_a_get_of_files() -> None:
    for kw in (dict(op="put", size=1), dict(mem=True, size=1), dict(names=[]),
               dict(names=["ok", ""]), dict(names=["x"] * (p.MAX_FILES + 1))):
        args = {"op": "get", "name": "", "streams": 1, "block": 10, "names": ["a", "b"], **kw}
        with pytest.raises(p.ProtocolError, match="names"):
            p.Hello(**args)
    h = p.Hello("get", "", 2, 10, names=["a", "b/c"])
    assert p.decode_body(p.encode(h)[4:]) == h
    r = p.Ready("00" * 16, 17, 1, [10, 7])
    assert p.decode_body(p.encode(r)[4:]) == r
    with pytest.raises(p.ProtocolError, match="sizes"):
        p.Ready("00" * 16, 18, 1, [10, 7])
