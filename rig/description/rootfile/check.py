"""Check a ROOT file against its own header, record chain and basket table, in bounded
time and memory, before uproot or the planner trusts any number in it.

Users bring their own files, often from a copy that failed: truncated, sparse-extended,
or with a header or tree that promises more than the bytes hold.  Everything here reads
the file with pread in bounded windows, walks it once, and refuses with a one-line
`InputError` naming the file and what is wrong.  The work is linear in the file's size
with a small constant (one struct unpack per record), and the memory is one window.

Pure description layer: imports rig.errors and rig.description.userpath only.
"""
from __future__ import annotations

import dataclasses
import re
import os
import struct
from pathlib import Path

from rig.description.userpath import open_regular
from rig.errors import InputError

# the TTree and streamer-info records are uncompressed into memory by uproot: a NanoAOD
# tree's metadata is a few MiB, a damaged or hostile one may claim gigabytes
MAX_METADATA_BYTES = 64 << 20
MAX_RECORDS = 4_000_000          # ~25 bytes a record over 100 MB: a forged chain
MAX_ZERO_RUN = 1 << 20           # uproot's unmarked gaps are bytes to KiB; more is a hole
_NONZERO = re.compile(rb"[^\x00]")
WINDOW = 1 << 20                 # bytes read at a time by the record walk
MAX_FREE_BYTES = 16 << 20        # the free-segment list: 18 bytes a gap
_KEY_HEAD = 26                   # Nbytes, version, objlen, datime, keylen, cycle, 8-byte seek
_I4 = struct.Struct(">i").unpack_from


def _seek_key(buf: bytes, rel: int) -> int:
    """fSeekKey of the key header at buf[rel:]: 4 bytes for a small file, else 8."""
    version = struct.unpack_from(">h", buf, rel + 4)[0]
    return struct.unpack_from(">q" if version > 1000 else ">i", buf, rel + 18)[0]


@dataclasses.dataclass(frozen=True)
class Header:
    path: str
    size: int           # the file's real size (fstat)
    begin: int          # fBEGIN: the first record
    end: int            # fEND: where the last record ends
    seek_info: int
    nbytes_info: int
    records: int        # records walked from fBEGIN to fEND (gaps not counted)


@dataclasses.dataclass(frozen=True)
class KeyHeader:
    nbytes: int         # the record's bytes on disk
    version: int
    objlen: int         # uncompressed object bytes
    keylen: int
    seek_key: int
    class_name: str
    end: int            # offset just after the key header's strings


def _bad(path: str, msg: str) -> InputError:
    return InputError(f"damaged ROOT file: {msg}", file=path)


class RootFile:
    """A regular file that starts with ROOT's magic, read with pread (no mapping: the
    address space used is a window, whatever the file's size)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.fd = open_regular(self.path)
        try:
            self.size = os.fstat(self.fd).st_size
            if self.size < 64:
                raise InputError(f"not a ROOT file (only {self.size} bytes)", file=self.path)
            if self._read(0, 4) != b"root":
                raise InputError("not a ROOT file (no 'root' magic)", file=self.path)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "RootFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, at: int, n: int) -> bytes:
        try:
            return os.pread(self.fd, n, at)
        except OSError as e:
            raise InputError(f"cannot read it ({e.strerror})", file=self.path) from None

    def _unpack(self, fmt: str, at: int, what: str) -> tuple:
        n = struct.calcsize(fmt)
        if at < 0 or at + n > self.size:
            raise _bad(self.path, f"{what} at byte {at} lies beyond the file's {self.size} bytes")
        data = self._read(at, n)
        if len(data) < n:
            raise _bad(self.path, f"{what} at byte {at}: the file ended while read")
        return struct.unpack(fmt, data)

    def header(self) -> Header:
        version, begin = self._unpack(">ii", 4, "header")
        if version >= 1_000_000:
            end, _sf, _nf, _n, _nn, _u, _c, seek_info, nb_info = self._unpack(">qqiiiBiqi", 12, "header")
        else:
            end, _sf, _nf, _n, _nn, _u, _c, seek_info, nb_info = self._unpack(">iiiiiBiii", 12, "header")
        if not 0 < begin < self.size:
            raise _bad(self.path, f"header's first record at {begin} is outside the file")
        if end > self.size:
            raise _bad(self.path, f"truncated: its header says {end} bytes, the file has "
                                  f"{self.size}")
        if end < self.size:
            raise _bad(self.path, f"{self.size - end} bytes after the end its header "
                                  f"states ({end}): an extended or appended file")
        if not (begin <= seek_info and nb_info > 0 and seek_info + nb_info <= end):
            raise _bad(self.path, f"streamer info ({seek_info}, {nb_info} bytes) outside the file")
        free = self._free_segments(_sf, _nf, begin, end)
        return Header(self.path, self.size, begin, end, seek_info, nb_info,
                      self._walk(begin, end, free))

    def _free_segments(self, seek_free: int, nbytes_free: int, begin: int,
                       end: int) -> dict[int, int]:
        """The file's own list of free gaps (the TFree record at fSeekFree): first byte ->
        last byte.  ROOT marks a freed record with a negative length; uproot does not, and a
        smaller record written into freed space leaves the old record's bytes after it,
        unmarked.  The list is what tells the walk to skip them."""
        if seek_free <= 0 or nbytes_free <= 0:
            return {}
        if not (begin <= seek_free and seek_free + nbytes_free <= end
                and nbytes_free <= MAX_FREE_BYTES):
            raise _bad(self.path, f"free-segment list ({seek_free}, {nbytes_free} bytes) "
                                  "outside the file")
        k = self.key(seek_free, "free-segment list")
        data = self._read(seek_free + k.keylen, k.nbytes - k.keylen)
        free, pos = {}, 0
        while pos + 2 <= len(data):
            (version,) = struct.unpack_from(">h", data, pos)
            fmt, step = (">qq", 18) if version > 1000 else (">ii", 10)
            if pos + step > len(data):
                break
            first, last = struct.unpack_from(fmt, data, pos + 2)
            pos += step
            if first < end and not (begin <= first <= last < end):
                raise _bad(self.path, f"free segment {first}..{last} outside the file")
            if first < end:
                free[first] = last
        return free

    def _walk(self, begin: int, end: int, free: dict[int, int] | None = None) -> int:
        """Follow the record chain fBEGIN -> fEND as TFile::Map does: every record starts
        with its own length (negative for a free gap ROOT marked) and its key names its
        own address; it must land exactly on fEND.  A gap in the file's free-segment list is
        skipped whole.  uproot leaves small unmarked gaps of zeros, skipped here up to
        MAX_ZERO_RUN bytes: a longer run is a hole.  Read in
        windows of WINDOW bytes: memory stays flat however large the file."""
        at, records = begin, 0
        w_at, w = begin, b""
        free = free or {}
        while at < end:
            if at in free:                  # a gap the file lists as free: skip it whole
                at = free[at] + 1
                continue
            if at + _KEY_HEAD > w_at + len(w):
                w_at, w = at, self._read(at, WINDOW)
            rel = at - w_at
            if rel + 4 > len(w) or at + 4 > end:
                raise _bad(self.path, f"record chain runs past its end at byte {at}")
            (n,) = _I4(w, rel)
            if n == 0:
                at = self._after_zeros(at, end)
                continue
            if n > 0:
                records += 1
                if records > MAX_RECORDS:
                    raise _bad(self.path, f"more than {MAX_RECORDS} records")
                if rel + _KEY_HEAD > len(w) or _seek_key(w, rel) != at:
                    raise _bad(self.path, f"record at byte {at} does not name its own address")
            at += abs(n)
        if at != end:
            raise _bad(self.path, f"record chain ends at byte {at}, not at {end}")
        return records

    def _after_zeros(self, at: int, end: int) -> int:
        stop = min(end, at + MAX_ZERO_RUN + 4)
        data = self._read(at, stop - at)
        hit = _NONZERO.search(data)
        if hit is None:
            run = stop - at
            raise _bad(self.path, f"{'a hole: ' if run > MAX_ZERO_RUN else ''}"
                                  f"{run}{'+' if run > MAX_ZERO_RUN else ''} zero bytes at "
                                  f"byte {at} where a record should start")
        q = at + hit.start()
        for cand in range(max(at, q - 3), q + 1):
            head = self._read(cand, _KEY_HEAD)
            if cand + _KEY_HEAD <= end and len(head) == _KEY_HEAD and _seek_key(head, 0) == cand:
                return cand
        raise _bad(self.path, f"no record after the zero bytes at {at}..{q}")

    def key(self, at: int, what: str) -> KeyHeader:
        """The TKey header of the record at `at`, checked against itself."""
        nbytes, version, objlen, _dt, keylen, _cycle = self._unpack(">ihiIhh", at, what)
        wide = version > 1000
        seek_key, _pdir = self._unpack(">qq" if wide else ">ii", at + 18, what)
        pos = at + 18 + (16 if wide else 8)
        name = self._tstring(pos, what)
        if not (0 < keylen <= nbytes and at + nbytes <= self.size and objlen >= 0):
            raise _bad(self.path, f"{what} at byte {at}: key of {nbytes} bytes, header "
                                  f"{keylen}, object {objlen} is inconsistent")
        if seek_key != at:
            raise _bad(self.path, f"{what} at byte {at}: its key says it is at {seek_key}")
        return KeyHeader(nbytes, version, objlen, keylen, seek_key, name[0], name[1])

    def _tstring(self, at: int, what: str) -> tuple[str, int]:
        (n,) = self._unpack(">B", at, what)
        at += 1
        if n == 255:
            (n,) = self._unpack(">i", at, what)
            at += 4
        if n < 0 or at + n > self.size:
            raise _bad(self.path, f"{what}: a name runs past the file at byte {at}")
        return self._read(at, n).decode("latin-1"), at + n

    def basket_entries(self, at: int, nbytes: int, what: str) -> int:
        """fNevBuf of the basket whose record is at `at`, after checking its key against
        the branch's basket table (`nbytes`)."""
        k = self.key(at, what)
        if k.nbytes != nbytes:
            raise _bad(self.path, f"{what} at byte {at}: the branch says {nbytes} bytes, "
                                  f"its key says {k.nbytes}")
        if k.class_name != "TBasket":
            raise _bad(self.path, f"{what} at byte {at} is a {k.class_name!r}, not a TBasket")
        pos = self._tstring(self._tstring(k.end, what)[1], what)[1]    # name, title
        _v, _buf, _nevsize, nev, _last, _flag = self._unpack(">hiiiib", pos, what)
        if not 0 <= nev <= max(1, k.objlen):      # every entry takes at least one byte
            raise _bad(self.path, f"{what} at byte {at}: {nev} entries in "
                                  f"{k.objlen} bytes")
        return nev


def check_header(path: str | Path) -> Header:
    """The header and record chain of the file at `path` (no uproot; for a scenario's
    validation, which must not import it)."""
    with RootFile(path) as f:
        return f.header()
