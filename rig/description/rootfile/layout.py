"""A ROOT file's own basket layout, read with uproot: what a reader would request.

Pure description layer (reads the file's metadata, starts no process). Works on the
rig's generated files and on a user's own ROOT file (opened read-only); bad input is a
one-line `InputError`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

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
    import uproot
    if not path.exists():
        raise _err(path, "no such file")
    if not path.is_file():
        raise _err(path, "not a regular file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise _err(path, f"cannot read ({e.strerror})") from None
    if magic != b"root":
        raise InputError("not a ROOT file", file=str(path), value=magic, has_value=True)
    try:
        return uproot.open(path)
    except Exception as e:  # uproot raises many types for damaged files
        raise _err(path, f"not a readable ROOT file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


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


def _clusters(t, entries: int, branches: list[Branch]) -> tuple[tuple[tuple[int, int], ...], str]:
    n_ranges = int(t.member("fNClusterRange"))
    flush = int(t.member("fAutoFlush"))
    bounds: list[int] = []
    if n_ranges > 0:
        # ROOT's TClusterIterator: range i covers entries up to fClusterRangeEnd[i] (inclusive)
        ends, sizes = t.member("fClusterRangeEnd"), t.member("fClusterSize")
        start = 0
        for end, size in zip(ends[:n_ranges], sizes[:n_ranges]):
            size = int(size) if size > 0 else (flush if flush > 0 else int(end) + 1 - start)
            while start <= int(end):
                bounds.append(start)
                start += size
        size = flush if flush > 0 else entries - start
        while start < entries:
            bounds.append(start)
            start += max(1, size)
        source = "fClusterRangeEnd"
    elif flush > 0:
        bounds = list(range(0, entries, flush))
        source = "fAutoFlush"
    else:
        # ROOT would estimate from fAutoFlush bytes; the baskets' common boundaries are exact
        common = set(range(entries + 1)) if not branches else None
        for br in branches:
            starts = {b.entry_start for b in br.baskets} | {entries}
            common = starts if common is None else common & starts
        bounds = sorted(x for x in (common or {0}) if x < entries) or [0]
        source = "baskets"
    bounds = sorted(set(b for b in bounds if b < entries))
    if not bounds or bounds[0] != 0:
        bounds.insert(0, 0)
    return tuple(zip(bounds, bounds[1:] + [entries])), source


def _branch(top) -> Branch:
    baskets: list[Basket] = []
    total = 0
    stack = [top]
    while stack:
        br = stack.pop()
        total += int(br.member("fTotBytes"))
        n = int(br.member("fWriteBasket"))
        seeks, sizes, starts = (br.member("fBasketSeek"), br.member("fBasketBytes"),
                                br.member("fBasketEntry"))
        stops = list(starts[1:n + 1]) if len(starts) > n else []
        for i in range(n):
            stop = int(stops[i]) if i < len(stops) and int(stops[i]) > int(starts[i]) \
                else int(br.member("fEntries"))
            baskets.append(Basket(top.name, int(seeks[i]), int(sizes[i]), int(starts[i]), stop))
        stack.extend(br.branches)
    baskets.sort(key=lambda b: (b.entry_start, b.seek))
    return Branch(top.name, total, tuple(baskets))


def load(path: str | Path, tree: str | None = None) -> Layout:
    """The layout of `tree` (default: `Events`, else the first TTree) in the file at `path`."""
    p = Path(path)
    f = _open(p)
    try:
        name = _pick_tree(f, p, tree)
        key = f.key(name)
        t = f[name]
        entries = int(t.num_entries)
        branches = [_branch(b) for b in t.branches]
        clusters, source = _clusters(t, entries, branches)
        fi, d = f.file, f
        size = p.stat().st_size
        # what TFile::Init and the first GetEntry read: header + top directory, the key
        # list, the streamer infos, the TTree object with its branch metadata
        opens = [(0, min(size, fi.fBEGIN + fi.fNbytesName + 64)),
                 (int(d.fSeekKeys), int(d.fNbytesKeys)),
                 (int(fi.fSeekInfo), int(fi.fNbytesInfo)),
                 (int(key.fSeekKey), int(key.fNbytes))]
        return Layout(str(p), size, name, entries, clusters, source,
                      tuple(branches), tuple((o, n) for o, n in opens if n > 0))
    finally:
        f.close()
