"""Fuzzing rig-fdt's protocol decoder: any bytes give a valid message or ProtocolError.

Pure tier, bounded budget (a few hundred examples per target, well under 10 s in all):
every control-message decoder (``decode_body``), the framing (``FrameDecoder``), the
fixed-size decoders (``BlockHeader``, ``DataHello``) and the receiver's bookkeeping
(``FileSet.accept``).  A "valid message" must also survive encode -> decode unchanged,
so a decoded message never carries a field of the wrong type.  Length fields of 2^32
and offsets of 2^63 and more are refused without allocating.
"""
from __future__ import annotations

import functools
import json
import struct
import tracemalloc
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rig.fdt import protocol as p

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

BUDGET = settings(max_examples=300, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
RUNS: Counter = Counter()       # examples run / handled cleanly, printed at the end


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nfuzz: {RUNS['run']} examples run, {RUNS['clean']} handled cleanly")


def _counted(test):
    """Count each example, and those that ended without an unexpected exception."""
    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        RUNS["run"] += 1
        test(*args, **kwargs)
        RUNS["clean"] += 1
    return run


def _decode(fn, *args):
    """fn(*args) -> result or None for ProtocolError; anything else fails the test."""
    try:
        return fn(*args)
    except p.ProtocolError:
        return None


# The field types a valid message carries, written out here as an independent oracle.
_NUM, _OPT_INT, _OPT_NUM = (int, float), (int, type(None)), (int, float, type(None))
_FIELD_TYPES = {"op": (str,), "name": (str,), "message": (str,), "token": (str,),
                "streams": (int,), "block": (int,), "size": _OPT_INT, "bytes": (int,),
                "file_id": (int,), "version": (int,), "bufsize": _OPT_INT,
                "adler32": _OPT_INT, "checksum": (bool,), "mem": (bool,), "ok": (bool,),
                "duration": _OPT_NUM, "cpu_user_s": _OPT_NUM, "cpu_sys_s": _OPT_NUM,
                "names": (list, type(None)), "sizes": (list, type(None)),
                "per_stream": (list,), "files": (list, type(None))}


def _roundtrip(msg: p.Message) -> None:
    """A decoded message has fields of the declared types and survives encode/decode."""
    for key, value in vars(msg).items():
        assert type(value) in _FIELD_TYPES[key], (key, value)
    for key in ("names", "sizes", "per_stream"):
        for x in getattr(msg, key, None) or []:
            assert type(x) is (str if key == "names" else int), (key, x)
    body = p.encode(msg)[4:]
    assert p.decode_body(body) == msg


# JSON values of every kind, nested a little; keys from the messages' own fields.
_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                max_size=4),
    max_leaves=10)
_KEYS = sorted({f for cls in (p.Hello, p.Ready, p.Failure, p.Done, p.Verdict)
                for f in cls.__dataclass_fields__} | {"type"})
_VALID = [json.loads(p.encode(m)[4:]) for m in (
    p.Hello("get", "a/b", 4, 1 << 20, True, None, False, 1 << 20),
    p.Hello("put", "x", 2, 4096, False, 10, False, None),
    p.Hello("get", "", 1, 10, False, 100, True, None, 2.5),
    p.Hello("get", "", 2, 10, names=["a", "b"]), p.Ready("ab" * 16, 17, 1, [10, 7]),
    p.Failure("no"), p.Done(17, [10, 7], 1, 0.5, 0.25, [[10, 1], [7, None]]),
    p.Verdict(True, "", 0.1, 0.2))]
# Valid messages with one or two fields replaced by any JSON value (or a key dropped).
_mutants = st.builds(lambda base, new, drop: {k: v for k, v in {**base, **new}.items()
                                              if k != drop or k == "type"},
                     st.sampled_from(_VALID),
                     st.dictionaries(st.sampled_from(_KEYS), _json, max_size=2),
                     st.sampled_from(_KEYS + [""]))
_objects = _mutants | st.dictionaries(st.sampled_from(_KEYS), _json, max_size=12) | st.builds(
    lambda t, d: {**d, "type": t}, st.sampled_from(["hello", "ready", "failure", "done",
                                                   "verdict", "x"]),
    st.dictionaries(st.sampled_from(_KEYS), _json, max_size=12))


@BUDGET
@given(st.binary(max_size=512))
@_counted
def test_any_body_bytes_decode_or_raise_protocol_error(body: bytes) -> None:
    msg = _decode(p.decode_body, body)
    if msg is not None:
        _roundtrip(msg)


@BUDGET
@given(_objects)
@_counted
def test_json_objects_with_wrong_field_types_never_escape_as_other_errors(obj: dict) -> None:
    msg = _decode(p.decode_body, json.dumps(obj).encode())
    if msg is not None:
        _roundtrip(msg)


@BUDGET
@given(st.lists(st.binary(max_size=64), max_size=8),
       st.lists(st.sampled_from([b'{"type":"failure","message":"x"}', b"{}", b"[",
                                 b'{"type":"done","bytes":1e400}']), max_size=3))
@_counted
def test_framing_of_any_byte_stream_in_any_split(chunks: list[bytes],
                                                 bodies: list[bytes]) -> None:
    stream = b"".join(struct.pack("!I", len(b)) + b for b in bodies) + b"".join(chunks)
    dec = p.FrameDecoder()
    cut = len(chunks[0]) if chunks else 0
    for piece in (stream[:cut], stream[cut:]):
        msgs = _decode(dec.feed, piece)
        if msgs is None:
            break
        for m in msgs:
            _roundtrip(m)


@BUDGET
@given(st.binary(min_size=p.HEADER_SIZE, max_size=p.HEADER_SIZE),
       st.binary(min_size=p.DATA_HELLO_SIZE, max_size=p.DATA_HELLO_SIZE), st.booleans())
@_counted
def test_fixed_size_decoders(header: bytes, hello: bytes, magic: bool) -> None:
    if magic:                        # past the magic check, into the field checks
        header, hello = p.BLOCK_MAGIC + header[4:], p.DATA_MAGIC + hello[4:]
    h = _decode(p.BlockHeader.unpack, header)
    if h is not None:
        assert p.BlockHeader.unpack(h.pack()) == h and h.offset < 2**63
    d = _decode(p.DataHello.unpack, hello)
    if d is not None:
        assert p.DataHello.unpack(d.pack()) == d


@BUDGET
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3),
                          st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 3)), max_size=12))
@_counted
def test_receiver_bookkeeping_takes_any_header_sequence(seq: list[tuple]) -> None:
    fs = p.FileSet([1000, 0, 2**62], streams=3)     # a 2^62-byte file costs nothing
    for stream, file_id, offset, length, flags in seq:
        raw = struct.pack("!4sIQIIQ", p.BLOCK_MAGIC, file_id, offset, length, flags, 0)
        h = _decode(p.BlockHeader.unpack, raw)
        if h is not None:
            _decode(fs.accept, stream, h)


def test_huge_length_fields_are_refused_without_allocating() -> None:
    tracemalloc.start()
    try:
        dec = p.FrameDecoder()
        with pytest.raises(p.ProtocolError, match="too large"):
            dec.feed(struct.pack("!I", 2**32 - 1) + b"{")
        for off in (2**63, 2**64 - 1):
            with pytest.raises(p.ProtocolError):
                p.BlockHeader.unpack(struct.pack("!4sIQIIQ", p.BLOCK_MAGIC, 1, off, 1, 0, 0))
        for body in ({"type": "hello", "op": "put", "name": "a", "streams": 1, "block": 1,
                      "size": 2**63},
                     {"type": "ready", "token": "00" * 16, "size": 2**63},
                     {"type": "done", "bytes": 2**64, "per_stream": [2**63]},
                     {"type": "ready", "token": "00" * 16, "size": 1, "sizes": [1] * 10**5}):
            with pytest.raises(p.ProtocolError):
                p.decode_body(json.dumps(body).encode())
        with pytest.raises(p.ProtocolError, match="nested too deeply"):
            p.decode_body(b"[" * 200_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak          # the 10^5-element list is the biggest thing here
