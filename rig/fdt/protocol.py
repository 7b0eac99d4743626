"""Sans-IO core of the FDT-style multi-stream copy: framing, scheduling, reassembly.

One TCP port carries two kinds of connection, told apart by their first four bytes:

* control (``FDTC``): length-prefixed JSON messages -- ``Hello`` (client asks for an
  operation), ``Ready`` / ``Failure`` (server answers), ``Done`` (sender's totals and
  checksum after its last block), ``Verdict`` (receiver's judgement).
* data (``FDTD``): a ``DataHello`` (session token, stream index) and then blocks, each a
  fixed 32-byte ``BlockHeader`` (file id, offset, length, flags) followed by ``length``
  payload bytes.  A header with the END flag closes the stream's sequence of blocks.

The sender hands out blocks from a shared ``BlockScheduler`` to whichever stream is
ready, so blocks arrive in any order; the receiver's ``Reassembly`` accepts them by
offset, rejects overlaps and out-of-range blocks, and at the end checks that the file is
covered exactly and that the whole-file adler32 (combined from per-block checksums, so
no second pass over the data) matches the sender's.

Plain classes on bytes only: this module must not import asyncio, socket or anything
else that does I/O, nor anything from rig outside rig.fdt.
"""
from __future__ import annotations

import bisect
import json
import math
import re
import struct
import zlib
from dataclasses import asdict, dataclass, field
from typing import ClassVar

VERSION = 1
CONTROL_MAGIC = b"FDTC"
DATA_MAGIC = b"FDTD"
BLOCK_MAGIC = b"FDTB"
MAX_CONTROL_FRAME = 1 << 20
MAX_BLOCK = 1 << 30
MAX_FILES = 4096
MAX_STREAMS = 256
MAX_BUFSIZE = 1 << 30          # SO_SNDBUF/SO_RCVBUF are C ints, which the kernel doubles
MAX_BYTES = (1 << 63) - 1      # any size, offset or byte count on the wire
FLAG_END = 0x1
TOKEN_BYTES = 16

_HEADER = struct.Struct("!4sIQIIQ")        # magic, file id, offset, length, flags, reserved
_DATA_HELLO = struct.Struct("!4s16sHH")    # magic, token, stream index, stream count
_FRAME = struct.Struct("!I")
HEADER_SIZE = _HEADER.size
DATA_HELLO_SIZE = _DATA_HELLO.size
_ADLER_BASE = 65521
_OPS = ("get", "put")
_NAME_OK = re.compile(r"[^\x00]+")


class ProtocolError(Exception):
    """The peer sent something this protocol does not allow (bad magic, bad frame)."""


class IntegrityError(ProtocolError):
    """The received data is not the sent file: missing, overlapping or corrupted."""


# A decoded message is only as good as its field types: JSON may carry a float, a bool or
# a list where an int belongs, and those would fail far from here (or not at all).

def _bad(key: str, what: str, value: object) -> ProtocolError:
    return ProtocolError(f"{key}: must be {what} (got {value!r:.60})")


def _int(key: str, v: object, lo: int, hi: int, optional: bool = False) -> None:
    if v is None and optional:
        return
    if type(v) is not int or not lo <= v <= hi:
        raise _bad(key, f"an integer in {lo}..{hi}", v)


def _num(key: str, v: object, optional: bool = True) -> None:
    if v is None and optional:
        return
    if not isinstance(v, (int, float)) or type(v) is bool or not math.isfinite(v):
        raise _bad(key, "a finite number", v)


def _bool(key: str, v: object) -> None:
    if type(v) is not bool:
        raise _bad(key, "true or false", v)


def _str(key: str, v: object) -> None:
    if type(v) is not str:
        raise _bad(key, "a string", v)


def _ints(key: str, v: object, most: int, optional: bool = False) -> None:
    if v is None and optional:
        return
    if type(v) is not list or len(v) > most:
        raise _bad(key, f"a list of at most {most} integers", v)
    for x in v:
        _int(key, x, 0, MAX_BYTES)


# --------------------------------------------------------------------------- blocks

@dataclass(frozen=True)
class BlockHeader:
    file_id: int
    offset: int
    length: int
    flags: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.file_id < 2**32 or not 0 <= self.offset < 2**63:
            raise ProtocolError(f"block header out of range: {self}")
        if not 0 <= self.length <= MAX_BLOCK:
            raise ProtocolError(f"block length {self.length} exceeds {MAX_BLOCK}")

    @property
    def is_end(self) -> bool:
        return bool(self.flags & FLAG_END)

    def pack(self) -> bytes:
        return _HEADER.pack(BLOCK_MAGIC, self.file_id, self.offset, self.length,
                            self.flags, 0)

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> "BlockHeader":
        if len(data) != HEADER_SIZE:
            raise ProtocolError(f"block header must be {HEADER_SIZE} bytes, got {len(data)}")
        magic, file_id, offset, length, flags, _ = _HEADER.unpack(data)
        if magic != BLOCK_MAGIC:
            raise ProtocolError(f"bad block magic {bytes(magic)!r} (stream out of sync)")
        return cls(file_id, offset, length, flags)

    @classmethod
    def end(cls, file_id: int) -> "BlockHeader":
        return cls(file_id, 0, 0, FLAG_END)


@dataclass(frozen=True)
class DataHello:
    token: bytes
    index: int
    count: int

    def __post_init__(self) -> None:
        if len(self.token) != TOKEN_BYTES:
            raise ProtocolError("session token must be 16 bytes")
        if not 0 <= self.index < self.count <= 0xFFFF:
            raise ProtocolError(f"stream index {self.index} not in 0..{self.count - 1}")

    def pack(self) -> bytes:
        return _DATA_HELLO.pack(DATA_MAGIC, self.token, self.index, self.count)

    @classmethod
    def unpack(cls, data: bytes) -> "DataHello":
        if len(data) != DATA_HELLO_SIZE:
            raise ProtocolError(f"data hello must be {DATA_HELLO_SIZE} bytes")
        magic, token, index, count = _DATA_HELLO.unpack(data)
        if magic != DATA_MAGIC:
            raise ProtocolError(f"bad data magic {magic!r}")
        return cls(token, index, count)


# ------------------------------------------------------------------------ control

@dataclass(frozen=True)
class Hello:
    """Client -> server: what to transfer and how."""
    op: str                      # "get": server sends; "put": client sends
    name: str                    # path below the server root ("" in memory mode)
    streams: int
    block: int
    checksum: bool = False
    size: int | None = None      # put: bytes the client will send; get+mem: bytes wanted
    mem: bool = False            # memory-to-memory: no file at either end
    bufsize: int | None = None   # SO_SNDBUF/SO_RCVBUF the server applies to data sockets
    duration: float | None = None  # memory mode: send for this many seconds (size: a cap)
    names: list[str] | None = None  # get of several files in one session (file ids 1..k)
    version: int = VERSION
    type: ClassVar[str] = "hello"

    def __post_init__(self) -> None:
        if self.version != VERSION:
            raise ProtocolError(f"protocol version {self.version!r:.20} (this side speaks"
                                f" {VERSION})")
        _str("op", self.op)
        _str("name", self.name)
        _int("streams", self.streams, 1, MAX_STREAMS)
        _int("block", self.block, 1, MAX_BLOCK)
        _bool("checksum", self.checksum)
        _bool("mem", self.mem)
        _int("size", self.size, 0, MAX_BYTES, optional=True)
        _int("bufsize", self.bufsize, 1, MAX_BUFSIZE, optional=True)
        _num("duration", self.duration)
        if self.names is not None and type(self.names) is not list:
            raise _bad("names", "a list of file names", self.names)
        if self.op not in _OPS:
            raise ProtocolError(f"op must be one of {_OPS}, got {self.op!r}")
        if self.names is not None:
            if self.op != "get" or self.mem or not 1 <= len(self.names) <= MAX_FILES:
                raise ProtocolError(f"names: a get of 1..{MAX_FILES} files, not memory mode")
            if not all(isinstance(n, str) and _NAME_OK.fullmatch(n) for n in self.names):
                raise ProtocolError("file names must be non-empty and contain no NUL")
        elif not self.mem and not _NAME_OK.fullmatch(self.name):
            raise ProtocolError("file name must be non-empty and contain no NUL")
        if (self.op == "put" or self.mem) and (self.size is None or self.size < 0):
            raise ProtocolError("size is required for put and memory mode")
        if self.duration is not None and (not self.mem or not 0 < self.duration <= 86400):
            raise ProtocolError("duration needs memory mode and 0 < duration <= 86400 s")


@dataclass(frozen=True)
class Ready:
    """Server -> client: session accepted; open the data streams with this token."""
    token: str                   # hex of TOKEN_BYTES
    size: int                    # total bytes
    file_id: int = 1
    sizes: list[int] | None = None   # per file, when the hello named several
    type: ClassVar[str] = "ready"

    def __post_init__(self) -> None:
        _str("token", self.token)
        _int("size", self.size, 0, MAX_BYTES)
        _int("file_id", self.file_id, 0, 2**32 - 1)
        _ints("sizes", self.sizes, MAX_FILES, optional=True)
        if not re.fullmatch(rf"[0-9a-fA-F]{{{2 * TOKEN_BYTES}}}", self.token):
            raise ProtocolError("bad ready message")
        if self.sizes is not None and (sum(self.sizes) != self.size
                                       or any(x < 0 for x in self.sizes)):
            raise ProtocolError("bad ready message: sizes do not add up")


@dataclass(frozen=True)
class Failure:
    """Either side -> peer: the session is over, with this reason."""
    message: str
    type: ClassVar[str] = "failure"

    def __post_init__(self) -> None:
        _str("message", self.message)


@dataclass(frozen=True)
class Done:
    """Sender -> receiver after the last block: totals to verify against."""
    bytes: int
    per_stream: list[int] = field(default_factory=list)
    adler32: int | None = None
    cpu_user_s: float | None = None
    cpu_sys_s: float | None = None
    files: list[list] | None = None     # several files: [bytes, adler32 or None] each
    type: ClassVar[str] = "done"

    def __post_init__(self) -> None:
        _int("bytes", self.bytes, 0, MAX_BYTES)
        _ints("per_stream", self.per_stream, MAX_STREAMS)
        _int("adler32", self.adler32, 0, 2**32 - 1, optional=True)
        _num("cpu_user_s", self.cpu_user_s)
        _num("cpu_sys_s", self.cpu_sys_s)
        if self.files is None:
            return
        if type(self.files) is not list or len(self.files) > MAX_FILES:
            raise _bad("files", f"a list of at most {MAX_FILES} [bytes, adler32]", self.files)
        for f in self.files:
            if type(f) is not list or len(f) != 2:
                raise _bad("files", "[bytes, adler32 or null] pairs", f)
            _int("files", f[0], 0, MAX_BYTES)
            _int("files", f[1], 0, 2**32 - 1, optional=True)


@dataclass(frozen=True)
class Verdict:
    """Receiver -> sender: whether the data arrived whole."""
    ok: bool
    message: str = ""
    cpu_user_s: float | None = None
    cpu_sys_s: float | None = None
    type: ClassVar[str] = "verdict"

    def __post_init__(self) -> None:
        _bool("ok", self.ok)
        _str("message", self.message)
        _num("cpu_user_s", self.cpu_user_s)
        _num("cpu_sys_s", self.cpu_sys_s)


Message = Hello | Ready | Failure | Done | Verdict
_TYPES: dict[str, type] = {c.type: c for c in (Hello, Ready, Failure, Done, Verdict)}


def encode(msg: Message) -> bytes:
    """One control frame: 4-byte big-endian length, then UTF-8 JSON with a 'type'."""
    body = json.dumps({"type": msg.type, **asdict(msg)}, separators=(",", ":")).encode()
    return _FRAME.pack(len(body)) + body


def decode_body(body: bytes) -> Message:
    """One control message from its JSON body; anything else is a ProtocolError."""
    try:
        obj = json.loads(body)
        if type(obj) is not dict or type(obj.get("type")) is not str:
            raise ProtocolError("malformed control message: not an object with a type")
        cls = _TYPES[obj.pop("type")]
        return cls(**obj)
    except ProtocolError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise ProtocolError(f"malformed control message: {str(e)[:200]}") from None
    except RecursionError:               # '[[[[...': nested deeper than the parser goes
        raise ProtocolError("malformed control message: nested too deeply") from None


class FrameDecoder:
    """Feed control-connection bytes, get whole messages out (any split is fine)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= _FRAME.size:
            (n,) = _FRAME.unpack_from(self._buf)
            if n > MAX_CONTROL_FRAME:
                raise ProtocolError(f"control frame of {n} bytes is too large")
            if len(self._buf) < _FRAME.size + n:
                break
            body = bytes(self._buf[_FRAME.size:_FRAME.size + n])
            del self._buf[:_FRAME.size + n]
            out.append(decode_body(body))
        return out


# --------------------------------------------------------------- sender / receiver

class BlockScheduler:
    """Hands out blocks of one file, or of several in order, to whichever stream asks.

    Blocks never cross a file's end.  ``stop()`` ends the hand-out early (a timed
    memory-mode run): blocks already handed out still travel, so what is sent is
    exactly ``[0, handed_out)``.
    """

    def __init__(self, size: int | list[int], block: int) -> None:
        sizes = [size] if isinstance(size, int) else list(size)
        if any(x < 0 for x in sizes) or block <= 0:
            raise ValueError("sizes must be >= 0 and block > 0")
        self.sizes, self.size, self.block = sizes, sum(sizes), block
        self._file, self._next, self.handed_out = 0, 0, 0
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def next_file_block(self) -> tuple[int, int, int] | None:
        """(file id, offset, length) of the next block, or None when all is handed out."""
        if self.stopped:
            return None
        while self._file < len(self.sizes) and self._next >= self.sizes[self._file]:
            self._file, self._next = self._file + 1, 0
        if self._file == len(self.sizes):
            return None
        offset = self._next
        length = min(self.block, self.sizes[self._file] - offset)
        self._next += length
        self.handed_out += length
        return self._file + 1, offset, length

    def next_block(self) -> tuple[int, int] | None:
        """(offset, length), for a single file."""
        blk = self.next_file_block()
        return None if blk is None else blk[1:]


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """adler32 of A+B from adler32(A), adler32(B) and len(B) (zlib's adler32_combine)."""
    a1, b1 = adler1 & 0xFFFF, adler1 >> 16
    a2, b2 = adler2 & 0xFFFF, adler2 >> 16
    a = (a1 + a2 - 1) % _ADLER_BASE
    b = (b1 + b2 + len2 * (a1 - 1)) % _ADLER_BASE
    return (b << 16) | a


def adler32_repeat(adler: int, length: int, count: int) -> int:
    """adler32 of `count` copies of a piece whose adler32 is `adler`, in O(log count)."""
    total, piece, piece_len = 1, adler, length
    while count:
        if count & 1:
            total = adler32_combine(total, piece, piece_len)
        piece = adler32_combine(piece, piece, piece_len)
        piece_len *= 2
        count >>= 1
    return total


class Reassembly:
    """Receiver-side bookkeeping of blocks accepted by offset, for one file.

    ``open_ended``: `size` is only a cap (a timed run); the sender's ``Done`` says how
    many bytes it sent, and those must be exactly ``[0, done.bytes)``.
    """

    def __init__(self, size: int, file_id: int = 1, streams: int = 1,
                 open_ended: bool = False) -> None:
        self.size, self.file_id = size, file_id
        self.open_ended = open_ended
        self.per_stream = [0] * streams
        self.ended = [False] * streams
        self._starts: list[int] = []
        self._blocks: dict[int, tuple[int, int | None]] = {}   # offset -> (length, adler)
        self.received = 0

    def accept(self, stream: int, header: BlockHeader) -> None:
        """Validate a header before its payload is read: in range, no overlap."""
        if _take_end(self.ended, stream, header):
            return
        if header.file_id != self.file_id:
            raise ProtocolError(f"stream {stream}: unknown file id {header.file_id}")
        end = header.offset + header.length
        if header.length == 0 or end > self.size:
            raise IntegrityError(f"stream {stream}: block {header.offset}+{header.length}"
                                 f" outside file of {self.size} bytes")
        i = bisect.bisect_left(self._starts, header.offset)
        nxt = self._starts[i] if i < len(self._starts) else None
        prev = self._starts[i - 1] if i else None
        if (nxt is not None and nxt < end) or \
                (prev is not None and prev + self._blocks[prev][0] > header.offset):
            raise IntegrityError(f"stream {stream}: block at {header.offset} overlaps")
        self._starts.insert(i, header.offset)
        self._blocks[header.offset] = (header.length, None)

    def landed(self, stream: int, header: BlockHeader, adler: int | None = None) -> None:
        """The payload of an accepted block is in place (written, checksummed)."""
        self._blocks[header.offset] = (header.length, adler)
        self.per_stream[stream] += header.length
        self.received += header.length

    def adler32(self) -> int:
        """Whole-file adler32 from the per-block values, in offset order."""
        total = 1
        for off in self._starts:
            length, adler = self._blocks[off]
            if adler is None:
                raise IntegrityError(f"no checksum for block at {off}")
            total = adler32_combine(total, adler, length)
        return total

    def verify(self, done: Done) -> None:
        """Raise IntegrityError unless the file arrived whole and matches `done`."""
        _check_ended(self.ended)
        self.verify_data(done.bytes, done.adler32)
        _check_per_stream(done, self.per_stream)

    def verify_data(self, sent: int, adler: int | None, what: str = "") -> None:
        """The bytes of this file: exactly [0, sent) (or the size) and the checksum."""
        expected = sent if self.open_ended else self.size
        if self.received != expected or sent != expected:
            raise IntegrityError(f"{what}truncated: received {self.received} of {expected}"
                                 f" bytes (sender reports {sent})")
        if self._starts and self._starts[-1] + self._blocks[self._starts[-1]][0] != expected:
            raise IntegrityError(f"{what}blocks do not cover [0, {expected}): a gap")
        if adler is not None:
            got = self.adler32()
            if got != adler:
                raise IntegrityError(f"{what}adler32 mismatch: sent {adler:08x},"
                                     f" received {got:08x}")


def _take_end(ended: list[bool], stream: int, header: BlockHeader) -> bool:
    """A stream's END bookkeeping: True for the END header; nothing may follow it."""
    if ended[stream]:
        raise ProtocolError(f"stream {stream}: block after END")
    if header.is_end:
        ended[stream] = True
    return header.is_end


def _check_ended(ended: list[bool]) -> None:
    if not all(ended):
        missing = [i for i, e in enumerate(ended) if not e]
        raise IntegrityError(f"streams {missing} did not finish")


def _check_per_stream(done: Done, per_stream: list[int]) -> None:
    if done.per_stream and done.per_stream != per_stream:
        raise IntegrityError(f"per-stream bytes differ: sent {done.per_stream},"
                             f" received {per_stream}")


class FileSet:
    """Receiver bookkeeping of one session: a ``Reassembly`` per file id (1..k).

    A stream's END closes it for every file.  With one file this behaves as that
    file's ``Reassembly``; with several, ``Done.files`` carries each file's totals.
    """

    def __init__(self, sizes: list[int], streams: int = 1, open_ended: bool = False) -> None:
        self.files = {i + 1: Reassembly(size, i + 1, streams, open_ended)
                      for i, size in enumerate(sizes)}
        self.ended = [False] * streams
        self.per_stream = [0] * streams

    @property
    def received(self) -> int:
        return sum(r.received for r in self.files.values())

    def accept(self, stream: int, header: BlockHeader) -> None:
        if _take_end(self.ended, stream, header):
            return
        r = self.files.get(header.file_id)
        if r is None:
            raise ProtocolError(f"stream {stream}: unknown file id {header.file_id}")
        r.accept(stream, header)

    def landed(self, stream: int, header: BlockHeader, adler: int | None = None) -> None:
        self.files[header.file_id].landed(stream, header, adler)
        self.per_stream[stream] += header.length

    def verify(self, done: Done) -> None:
        _check_ended(self.ended)
        totals = done.files if done.files is not None else [[done.bytes, done.adler32]]
        if len(totals) != len(self.files):
            raise IntegrityError(f"sender reports {len(totals)} files, expected"
                                 f" {len(self.files)}")
        several = len(totals) > 1
        for (fid, r), (sent, adler) in zip(sorted(self.files.items()), totals):
            r.verify_data(sent, adler, f"file {fid}: " if several else "")
        _check_per_stream(done, self.per_stream)


def adler32(data: bytes | bytearray | memoryview, value: int = 1) -> int:
    return zlib.adler32(data, value)
