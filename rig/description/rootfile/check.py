"""Check a ROOT file against its own header, record chain and basket table, in bounded
time and memory, before uproot or the planner trusts any number in it.

Users bring their own files, often from a copy that failed: truncated, sparse-extended,
or with a header or tree that promises more than the bytes hold.  Everything here reads
the file through one mmap (no copy), walks it once, and refuses with a one-line
`InputError` naming the file and what is wrong.  The work is linear in the file's size
with a small constant (one struct unpack per record), and the memory is the mapping plus
a few integers.

Pure description layer: imports rig.errors and rig.description.userpath only.
"""
from __future__ import annotations

import dataclasses
import mmap
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
    """A read-only mapping of a regular file that starts with ROOT's magic."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        fd = open_regular(self.path)
        try:
            self.size = os.fstat(fd).st_size
            if self.size < 64:
                raise InputError(f"not a ROOT file (only {self.size} bytes)", file=self.path)
            self.map = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
        except OSError as e:
            raise InputError(f"cannot read it ({e.strerror})", file=self.path) from None
        finally:
            os.close(fd)
        if self.map[:4] != b"root":
            self.close()
            raise InputError("not a ROOT file (no 'root' magic)", file=self.path)

    def close(self) -> None:
        self.map.close()

    def __enter__(self) -> "RootFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unpack(self, fmt: str, at: int, what: str) -> tuple:
        if at < 0 or at + struct.calcsize(fmt) > self.size:
            raise _bad(self.path, f"{what} at byte {at} lies beyond the file's {self.size} bytes")
        try:
            return struct.unpack_from(fmt, self.map, at)
        except (struct.error, ValueError) as e:
            raise _bad(self.path, f"{what} at byte {at} unreadable ({e})") from None

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
        return Header(self.path, self.size, begin, end, seek_info, nb_info,
                      self._walk(begin, end))

    def _walk(self, begin: int, end: int) -> int:
        """Follow the record chain fBEGIN -> fEND as TFile::Map does: every record starts
        with its own length (negative for a free gap ROOT marked) and its key names its
        own address; it must land exactly on fEND.  uproot leaves small unmarked gaps of
        zeros, skipped here up to MAX_ZERO_RUN bytes: a longer run is a hole."""
        m, at, records = self.map, begin, 0
        head = struct.Struct(">ihiIhh").unpack_from
        while at < end:
            if at + 4 > end:
                raise _bad(self.path, f"record chain runs past its end at byte {at}")
            (n,) = struct.unpack_from(">i", m, at)
            if n == 0:
                at = self._after_zeros(at, end)
                continue
            if n > 0:
                records += 1
                if records > MAX_RECORDS:
                    raise _bad(self.path, f"more than {MAX_RECORDS} records")
                if at + 26 > end or self._seek_key(at, head) != at:
                    raise _bad(self.path, f"record at byte {at} does not name its own address")
            at += abs(n)
        if at != end:
            raise _bad(self.path, f"record chain ends at byte {at}, not at {end}")
        return records

    def _seek_key(self, at: int, head) -> int:
        version = head(self.map, at)[1]
        fmt = ">q" if version > 1000 else ">i"
        if at + 18 + 8 > self.size:
            return -1
        return struct.unpack_from(fmt, self.map, at + 18)[0]

    def _after_zeros(self, at: int, end: int) -> int:
        stop = min(end, at + MAX_ZERO_RUN + 4)
        hit = _NONZERO.search(self.map, at, stop)
        if hit is None:
            run = stop - at
            raise _bad(self.path, f"{'a hole: ' if run > MAX_ZERO_RUN else ''}"
                                  f"{run}{'+' if run > MAX_ZERO_RUN else ''} zero bytes at "
                                  f"byte {at} where a record should start")
        head = struct.Struct(">ihiIhh").unpack_from
        for cand in range(max(at, hit.start() - 3), hit.start() + 1):
            if cand + 26 <= end and self._seek_key(cand, head) == cand:
                return cand
        raise _bad(self.path, f"no record after the zero bytes at {at}..{hit.start()}")

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
        return self.map[at:at + n].decode("latin-1"), at + n

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
