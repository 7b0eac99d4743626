"""A ROOT file's own basket layout, read with uproot: what a reader would request.

Pure description layer (reads the file's metadata, starts no process). Works on the
rig's generated files and on a user's own ROOT file (opened read-only); bad input is a
one-line `InputError`.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from rig.description.rootfile.check import MAX_METADATA_BYTES, Header, RootFile
from rig.errors import InputError


@dataclasses.dataclass(frozen=True)
class Basket:
    branch: str            # the top-level branch (a CMS product) it belongs to
    seek: int              # file offset of the basket's key
    nbytes: int            # bytes on disk (key + compressed payload)
    entry_start: int
    entry_stop: int        # exclusive


@dataclasses.dataclass(frozen=True)
class Branch:
    name: str
    total_bytes: int       # fTotBytes summed over the branch and its sub-branches
    baskets: tuple[Basket, ...]

    @property
    def disk_bytes(self) -> int:
        return sum(b.nbytes for b in self.baskets)


@dataclasses.dataclass(frozen=True)
class Layout:
    path: str
    file_bytes: int
    tree: str
    entries: int
    clusters: tuple[tuple[int, int], ...]     # [start, stop) entry ranges
    cluster_source: str                       # "fClusterRangeEnd", "fAutoFlush" or "baskets"
    branches: tuple[Branch, ...]
    open_reads: tuple[tuple[int, int], ...]   # (offset, length) a reader needs before any basket

    def branch(self, name: str) -> Branch:
        for b in self.branches:
            if b.name == name:
                return b
        raise KeyError(name)


def _err(path: Path, msg: str) -> InputError:
    return InputError(msg, file=str(path))


def _open(path: Path):
    from rig import extras
    uproot = extras.require("rootfile")
    try:
        return uproot.open(path)
    except Exception as e:  # uproot raises many types for damaged files
        raise _err(path, f"not a readable ROOT file ({_why(e)})") from None


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _pick_tree(f, path: Path, tree: str | None) -> str:
    names = [k.split(";")[0] for k, c in f.classnames().items() if c == "TTree"]
    if tree is not None:
        if tree not in names:
            raise InputError(f"no TTree named {tree!r}; trees: {', '.join(names) or 'none'}",
                             file=str(path))
        return tree
    if not names:
        raise _err(path, "no TTree in the file")
    return "Events" if "Events" in names else names[0]


def _cluster_bounds(t, entries: int, cap: int) -> tuple[list[int] | None, str]:
    """Cluster starts from fClusterRangeEnd or fAutoFlush; at most `cap` of them (the
    number of baskets: a cluster holds at least one), else InputError via ValueError."""
    n_ranges = int(t.member("fNClusterRange"))
    flush = int(t.member("fAutoFlush"))
    bounds: list[int] = []

    def step(start: int, size: int) -> int:
        bounds.append(start)
        if len(bounds) > cap:
            raise ValueError(f"its cluster sizes (fAutoFlush {flush}) make more clusters "
                             f"than its {cap} baskets")
        return start + max(1, size)

    if n_ranges > 0:
        # ROOT's TClusterIterator: range i covers entries up to fClusterRangeEnd[i] (inclusive)
        ends, sizes = t.member("fClusterRangeEnd"), t.member("fClusterSize")
        if len(ends) < n_ranges or len(sizes) < n_ranges:
            raise ValueError(f"fNClusterRange {n_ranges} but {len(ends)} cluster ranges")
        start = 0
        for end, size in zip(ends[:n_ranges], sizes[:n_ranges]):
            size = int(size) if size > 0 else (flush if flush > 0 else int(end) + 1 - start)
            while start <= min(int(end), entries - 1):
                start = step(start, size)
        size = flush if flush > 0 else entries - start
        while start < entries:
            start = step(start, size)
        return bounds, "fClusterRangeEnd"
    if flush > 0:
        if -(-entries // flush) > cap:
            raise ValueError(f"fAutoFlush {flush} makes {-(-entries // flush)} clusters, more "
                             f"than its {cap} baskets")
        return list(range(0, entries, flush)), "fAutoFlush"
    return None, "baskets"


def _clusters(t, entries: int, branches: list[Branch]) -> tuple[tuple[tuple[int, int], ...], str]:
    cap = max(1, sum(len(b.baskets) for b in branches))
    bounds, source = _cluster_bounds(t, entries, cap)
    if bounds is None:
        # ROOT would estimate from fAutoFlush bytes; the baskets' common boundaries are exact
        common: set[int] | None = None
        for br in branches:
            starts = {b.entry_start for b in br.baskets} | {entries}
            common = starts if common is None else common & starts
        bounds = sorted(x for x in (common or {0}) if x < entries) or [0]
    bounds = sorted(set(b for b in bounds if b < entries))
    if not bounds or bounds[0] != 0:
        bounds.insert(0, 0)
    return tuple(zip(bounds, bounds[1:] + [entries])), source


def _branch(top, rf: RootFile, entries: int) -> Branch:
    """A top-level branch's baskets (its own and its sub-branches'), each checked against
    its record on disk: within the file, a TBasket key of the stated size, and holding
    exactly the entries the basket table gives it; the baskets cover the tree's entries."""
    baskets: list[Basket] = []
    total = 0
    stack = [top]
    while stack:
        br = stack.pop()
        total += int(br.member("fTotBytes"))
        n = int(br.member("fWriteBasket"))
        seeks, sizes, starts = (br.member("fBasketSeek"), br.member("fBasketBytes"),
                                br.member("fBasketEntry"))
        if not 0 <= n <= min(len(seeks), len(sizes), len(starts)):
            raise ValueError(f"branch {br.name!r}: {n} baskets but a table of {len(seeks)}")
        if n:
            b_entries = int(br.member("fEntries"))
            if b_entries != entries:
                raise ValueError(f"branch {br.name!r} has {b_entries} entries, its tree {entries}")
            stops = [int(x) for x in starts[1:n]] + [b_entries]
            if int(starts[0]) != 0:
                raise ValueError(f"branch {br.name!r}: first basket starts at entry {int(starts[0])}")
        for i in range(n):
            seek, size, start = int(seeks[i]), int(sizes[i]), int(starts[i])
            what = f"branch {br.name!r} basket {i}"
            nev = rf.basket_entries(seek, size, what)
            if stops[i] - start != nev:
                raise ValueError(f"{what}: the table gives it entries {start}..{stops[i]}, "
                                 f"the basket holds {nev}")
            baskets.append(Basket(top.name, seek, size, start, stops[i]))
        stack.extend(br.branches)
    baskets.sort(key=lambda b: (b.entry_start, b.seek))
    return Branch(top.name, total, tuple(baskets))


def load(path: str | Path, tree: str | None = None) -> Layout:
    """The layout of `tree` (default: `Events`, else the first TTree) in the file at `path`,
    refused in one line if the file disagrees with its own header, records or baskets.

    Read once per version of the file (its path, inode, size and mtime): a scenario's
    plan asks for the read plan of every replay client and branch fraction (17 for
    caching-modes.yaml), and each read costs a key read per basket. A file of 3,000
    baskets took 15 s to plan with a read per ask, one read now (issue 43;
    tests/test_rootfile_plan_bound.py counts the key reads)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return _read(p, tree)          # the read names what is wrong
    return _cached(str(p), tree, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _cached(path: str, tree: str | None, ino: int, size: int, mtime_ns: int) -> Layout:
    return _read(Path(path), tree)


def _read(p: Path, tree: str | None) -> Layout:
    with RootFile(p) as rf:
        hdr = rf.header()
        f = _open(p)
        try:
            return _load(f, rf, hdr, p, tree)
        except InputError:
            raise
        except ValueError as e:
            raise InputError(f"damaged ROOT file: {e}", file=str(p)) from None
        except Exception as e:  # uproot raises many types for damaged files
            raise _err(p, f"not a readable ROOT file ({_why(e)})") from None
        finally:
            f.close()


def _load(f, rf: RootFile, hdr: Header, p: Path, tree: str | None) -> Layout:
    name = _pick_tree(f, p, tree)
    key = f.key(name)
    k = rf.key(int(key.fSeekKey), f"TTree {name!r}")
    for what, n in ((f"TTree {name!r}", k.objlen), ("streamer info", rf.key(hdr.seek_info,
                                                                          "streamer info").objlen)):
        if n > MAX_METADATA_BYTES:
            raise ValueError(f"{what} claims {n} bytes of metadata (at most "
                             f"{MAX_METADATA_BYTES} read)")
    t = f[name]
    entries = int(t.num_entries)
    if entries < 0:
        raise ValueError(f"TTree {name!r} has {entries} entries")
    # every basket is a record of its own: a table listing more baskets than the file
    # has records is forged, and refusing it first bounds the per-basket checks below
    stack, listed = list(t.branches), 0
    while stack:
        br = stack.pop()
        listed += max(0, int(br.member("fWriteBasket")))
        stack.extend(br.branches)
    if listed > hdr.records:
        raise ValueError(f"its branches list {listed} baskets, the file has {hdr.records} records")
    branches = [_branch(b, rf, entries) for b in t.branches]
    if entries and not any(br.baskets for br in branches):
        raise ValueError(f"TTree {name!r} claims {entries} entries but has no basket")
    clusters, source = _clusters(t, entries, branches)
    fi, d = f.file, f
    size = hdr.size
    # what TFile::Init and the first GetEntry read: header + top directory, the key
    # list, the streamer infos, the TTree object with its branch metadata
    opens = [(0, min(size, fi.fBEGIN + fi.fNbytesName + 64)),
             (int(d.fSeekKeys), int(d.fNbytesKeys)),
             (int(fi.fSeekInfo), int(fi.fNbytesInfo)),
             (int(key.fSeekKey), int(key.fNbytes))]
    for o, n in opens:
        if o < 0 or n < 0 or o + n > size:
            raise ValueError(f"a record ({o}, {n} bytes) lies outside the file's {size} bytes")
    return Layout(str(p), size, name, entries, clusters, source,
                  tuple(branches), tuple((o, n) for o, n in opens if n > 0))
