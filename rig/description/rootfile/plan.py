"""Read plans: the exact byte ranges each CMSSW caching mode requests, in order.

Pure description layer: a plan is frozen data computed from a file's own basket layout
(`layout.Layout`) and a branch selection; the replay client executes it later. Each
`Round` is one synchronous wait: its requests are in flight together (at most `window`
at a time), and the next round starts when it has completed.

How each mode behaves, from the CMSSW sources (IOPool/TFileAdaptor, Utilities/
StorageFactory, Utilities/XrdAdaptor) and ROOT's TTreeCache; rig's own code, nothing
copied. Where they differ from the issue's summary, see docs/caching-modes.md.

- application: TTreeCache learns for `learn_entries` entries (each basket met is one
  plain read), then fills per cluster: the cluster's needed baskets sorted by offset,
  in fills of at most `cache_size` bytes. TStorageFactoryFile::ReadBuffersSync packs each
  fill with ReadRepacker (gaps < 32 KiB merged unless both sides are >= 256 KiB, bounded
  by ROOT's buffer plus a 256 KiB spare; every pack is one synchronous readv), and
  XrdFile::readv cuts a readv into pieces of <= 512 KiB and sub-requests of <= 1022
  pieces, all sent at once.
- storage: ROOT's prefetch goes to the storage layer, XrdFile::prefetch declines, and
  every basket becomes one synchronous read of its own size, in entry order.
- trigger factor N (CMSSW IOExerciser's triggerFactor; 0 = off): every N-th event
  (entries 0, N, 2N, ...) also reads every branch not selected. storage: each such
  basket is one more synchronous read, in entry order; application/lazy-download: the
  cache was trained on the selected branches only, so the triggered baskets of a cluster
  are one more ReadBuffers after the cluster's fill (a model of CMSSW RootTree's
  separate trigger cache: one vector read per cluster, not its per-entry warm-up).
- lazy-download: LocalCacheFile copies the 128 MiB segment a read touches (once), as
  one large read that XrdFile::read splits into 8 MiB requests with 2 in flight; the
  reads ROOT makes are then local.
"""
from __future__ import annotations

import dataclasses

from rig.errors import InputError
from rig.description.rootfile.layout import Basket, Layout

KiB, MiB = 1 << 10, 1 << 20
MODES = ("application", "storage", "lazy-download")

# ReadRepacker (IOPool/TFileAdaptor/src/ReadRepacker.h)
SPARE_BUFFER = 256 * KiB
COALESCE_GAP = 32 * KiB
BIG_READ = 256 * KiB
# XrdFile (Utilities/XrdAdaptor/src/XrdFile.cc)
XRD_MAX_PIECE = 512 * KiB
XRD_MAX_PIECES = 1024 - 2
XRD_MAX_READ = 8 * MiB
XRD_READ_WINDOW = 2


@dataclasses.dataclass(frozen=True)
class Request:
    kind: str                                   # "read" | "readv"
    ranges: tuple[tuple[int, int], ...]         # (offset, length), ascending

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.ranges)


@dataclasses.dataclass(frozen=True)
class Round:
    phase: str                                  # open | learn | fill | basket | segment
    requests: tuple[Request, ...]
    useful_bytes: int                           # what ROOT asked for, served by this round
    window: int = 0                             # max requests in flight; 0 = all at once
    cluster: int = -1                           # (first) cluster the round serves
    fill: int = -1                              # which ROOT cache fill (ReadBuffers) it is part of

    @property
    def wire_bytes(self) -> int:
        return sum(r.nbytes for r in self.requests)

    @property
    def round_trips(self) -> int:
        n = len(self.requests)
        return 1 if not self.window else -(-n // self.window)


@dataclasses.dataclass(frozen=True)
class Options:
    cache_size: int = 20 * MiB                  # CMSSW roottree::defaultCacheSize
    learn_entries: int = 20                     # CMSSW defaultLearningEntries (ROOT: 100)
    learning: str = "cmssw"                     # cmssw | root
    fill: str = "root"                          # root (multi-cluster fills) | cluster
    lazy_vector_reads_remote: bool = False
    segment_size: int = 128 * MiB               # LocalCacheFile CHUNK_SIZE
    read_chunk: int = XRD_MAX_READ
    read_window: int = XRD_READ_WINDOW
    readv_max_pieces: int = XRD_MAX_PIECES
    readv_max_piece: int = XRD_MAX_PIECE

    def __post_init__(self) -> None:
        choices = {"learning": ("cmssw", "root"), "fill": ("root", "cluster")}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise InputError(f"must be one of {', '.join(allowed)}", key=f"plan.{key}",
                                 value=getattr(self, key), has_value=True)
        if not isinstance(self.lazy_vector_reads_remote, bool):
            raise InputError("must be true or false", key="plan.lazy_vector_reads_remote",
                             value=self.lazy_vector_reads_remote, has_value=True)
        for f in dataclasses.fields(self):
            if f.name in choices or f.name == "lazy_vector_reads_remote":
                continue
            v = getattr(self, f.name)
            lo = 0 if f.name == "learn_entries" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise InputError(f"must be an integer >= {lo}", key=f"plan.{f.name}",
                                 value=v, has_value=True)


@dataclasses.dataclass(frozen=True)
class Plan:
    mode: str
    file: str
    file_bytes: int
    tree: str
    entries: int
    branches: tuple[str, ...]
    options: Options
    rounds: tuple[Round, ...]
    clusters: int = 0

    @property
    def requests(self) -> int:
        return sum(len(r.requests) for r in self.rounds)

    @property
    def round_trips(self) -> int:
        return sum(r.round_trips for r in self.rounds)

    @property
    def bytes_useful(self) -> int:
        return sum(r.useful_bytes for r in self.rounds)

    @property
    def bytes_wire(self) -> int:
        return sum(r.wire_bytes for r in self.rounds)

    def vectored_reads_per_cluster(self) -> dict[int, int]:
        """Storage-level vectored reads (one per repacked fill; a fill that merged into
        one range goes out as a plain read) for every cluster that had a cache fill."""
        out: dict[int, int] = {}
        for r in self.rounds:
            if r.phase == "fill":
                out[r.cluster] = out.get(r.cluster, 0) + 1
        return out

    def summary(self) -> str:
        by_phase: dict[str, list[Round]] = {}
        for r in self.rounds:
            by_phase.setdefault(r.phase, []).append(r)
        lines = [
            f"plan {self.mode}: {self.file} tree {self.tree}, {self.entries} entries, "
            f"{len(self.branches)} branches read",
            f"  requests {self.requests}, synchronous round trips {self.round_trips}, "
            f"bytes useful {self.bytes_useful} ({self.bytes_useful / MiB:.1f} MiB), "
            f"bytes on the wire {self.bytes_wire} ({self.bytes_wire / MiB:.1f} MiB, "
            f"{self.bytes_wire / max(1, self.file_bytes):.1%} of the file)",
        ]
        for phase, rs in by_phase.items():
            lines.append(f"  {phase:<8} rounds {len(rs)}, requests "
                         f"{sum(len(r.requests) for r in rs)}, wire bytes {sum(r.wire_bytes for r in rs)}")
        fills = {r.fill for r in self.rounds if r.fill >= 0}
        if fills:
            reads = sum(1 for r in self.rounds if r.fill >= 0)
            n = max(1, self.clusters)
            lines.append(f"  cache fills {len(fills)} for {self.clusters} clusters, {reads} storage "
                         f"vectored reads: {reads / n:.2f} per cluster")
        return "\n".join(lines)


def _read(offset: int, length: int) -> Request:
    return Request("read", ((offset, length),))


def _chunked_read(offset: int, length: int, chunk: int) -> tuple[Request, ...]:
    """XrdFile::read(pos): a large read is cut into `chunk`-sized requests."""
    return tuple(_read(o, min(chunk, offset + length - o)) for o in range(offset, offset + length, chunk))


def _pack(ranges: list[tuple[int, int]], cap: int) -> tuple[list[tuple[int, int]], int]:
    """One greedy ReadRepacker pass over ascending ranges into a buffer of `cap` bytes:
    returns the merged ranges and how many input ranges they cover."""
    out: list[tuple[int, int]] = []
    if not ranges:
        return out, 0
    cur_off, cur_len = ranges[0]
    used, i = cur_len, 1
    while i < len(ranges):
        off, n = ranges[i]
        if used + n > cap:
            break
        gap = off - (cur_off + cur_len)
        if (n < BIG_READ or cur_len < BIG_READ) and 0 <= gap < COALESCE_GAP and used + n + gap <= cap:
            cur_len = off + n - cur_off
            used += n + gap
        else:
            out.append((cur_off, cur_len))
            cur_off, cur_len = off, n
            used += n
        i += 1
    out.append((cur_off, cur_len))
    return out, i


def _repack(ranges: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """TStorageFactoryFile::ReadBuffersSync: the storage readv's of one ROOT ReadBuffers."""
    out = []
    rest = list(ranges)
    while rest:
        buf = sum(n for _, n in rest)
        cap = SPARE_BUFFER if buf < SPARE_BUFFER else buf
        iov, used = _pack(rest, cap)
        if used < len(rest) and cap != SPARE_BUFFER and rest[used][1] < SPARE_BUFFER:
            more, used2 = _pack(rest[used:], SPARE_BUFFER)
            iov += more
            used += used2
        out.append(iov)
        rest = rest[used:]
    return out


def _readv_requests(iov: list[tuple[int, int]], opt: Options) -> tuple[Request, ...]:
    """XrdFile::readv: one range is a plain (chunked) read; otherwise pieces of at most
    readv_max_piece bytes, at most readv_max_pieces per request, all sent together."""
    if len(iov) == 1:
        return _chunked_read(iov[0][0], iov[0][1], opt.read_chunk)
    pieces: list[tuple[int, int]] = []
    for off, n in iov:
        for o in range(off, off + n, opt.readv_max_piece):
            pieces.append((o, min(opt.readv_max_piece, off + n - o)))
    step = opt.readv_max_pieces
    return tuple(Request("readv", tuple(pieces[i:i + step])) for i in range(0, len(pieces), step))


def _selected(layout: Layout, branches: tuple[str, ...]) -> list[Basket]:
    order = {n: i for i, n in enumerate(branches)}
    bs = [b for br in layout.branches if br.name in order for b in br.baskets]
    bs.sort(key=lambda b: (b.entry_start, order[b.branch], b.seek))
    return bs


def _open_rounds(layout: Layout) -> list[Round]:
    return [Round("open", (_read(o, n),), n) for o, n in layout.open_reads]


def _storage(layout: Layout, baskets: list[Basket], opt: Options) -> list[Round]:
    return _open_rounds(layout) + [Round("basket", (_read(b.seek, b.nbytes),), b.nbytes)
                                   for b in baskets]


def _cluster_of(layout: Layout, entry: int) -> int:
    for i, (a, z) in enumerate(layout.clusters):
        if a <= entry < z:
            return i
    return len(layout.clusters) - 1


def _read_buffers(fill: list[Basket], useful: set[int], opt: Options, phase: str,
                  cluster: int, fill_id: int) -> list[Round]:
    """One ROOT ReadBuffers of a cache fill, sorted by offset as TFileCacheRead does."""
    ranges = sorted((b.seek, b.nbytes) for b in fill)
    use = sum(b.nbytes for b in fill if b.seek in useful)
    return [Round(phase, _readv_requests(iov, opt), use if i == 0 else 0, cluster=cluster,
                  fill=fill_id)
            for i, iov in enumerate(_repack(ranges))]


def _group_fills(layout: Layout, need: list[Basket], opt: Options) -> list[tuple[int, list[Basket]]]:
    """Which baskets each TTreeCache fill registers: (first cluster, baskets).

    "root" follows TTreeCache::FillBuffer: a fill starts at a cluster and takes further
    clusters while the running average per cluster says one more still fits in the cache;
    one cluster alone may overshoot the cache up to twice its size before it is split.
    "cluster" is the issue's summary: one fill per cluster, split when over the cache."""
    cache = opt.cache_size
    limit = cache if opt.fill == "cluster" else 2 * cache
    per: dict[int, list[Basket]] = {}
    for b in need:
        per.setdefault(_cluster_of(layout, b.entry_start), []).append(b)
    fills: list[tuple[int, list[Basket]]] = []
    cur: list[Basket] = []
    cur_first, ntot, iters = -1, 0, 0
    for ci in sorted(per):
        bs = per[ci]
        size = sum(b.nbytes for b in bs)
        if cur and (opt.fill == "cluster" or ntot + size > cache
                    or not cache > ntot * (iters + 1) / iters):
            fills.append((cur_first, cur))
            cur, ntot, iters = [], 0, 0
        if size > limit:   # one cluster bigger than the cache: several fills
            part: list[Basket] = []
            psize = 0
            for b in bs:
                if part and psize + b.nbytes > limit:
                    fills.append((ci, part))
                    part, psize = [], 0
                part.append(b)
                psize += b.nbytes
            fills.append((ci, part))
            continue
        if not cur:
            cur_first = ci
        cur += bs
        ntot += size
        iters += 1
    if cur:
        fills.append((cur_first, cur))
    return fills


def triggered(layout: Layout, branches: tuple[str, ...], factor: int) -> list[Basket]:
    """Baskets of the branches not in `branches` that hold an entry 0, N, 2N, ... (N =
    `factor`; none for 0), in entry order: what IOExerciser's trigger adds."""
    if factor <= 0:
        return []
    chosen = set(branches)
    out = [b for br in layout.branches if br.name not in chosen for b in br.baskets
           if -(-b.entry_start // factor) * factor < b.entry_stop]
    out.sort(key=lambda b: (b.entry_start, b.seek))
    return out


def _application(layout: Layout, baskets: list[Basket], opt: Options,
                 every: list[Basket], trig: tuple[Basket, ...] = ()) -> list[Round]:
    rounds = _open_rounds(layout)
    useful = {b.seek for b in baskets} | {b.seek for b in trig}
    loaded: set[int] = set()
    learn = min(opt.learn_entries, layout.entries)
    if opt.learning == "cmssw" and layout.clusters:
        # RootTree::RootTree caps learningEntries at the tree's auto-flush (cluster) size
        learn = min(learn, layout.clusters[0][1] - layout.clusters[0][0])
    if learn > 0 and opt.learning == "cmssw":
        # RootTree::startTraining: a second TTreeCache over *all* branches covers the
        # learning entries; it is filled like any cache (no learning of its own)
        raw = [b for b in every if b.entry_start < learn and b.nbytes <= opt.cache_size]
        for ci, fill in _group_fills(layout, raw, opt):
            rounds += _read_buffers(fill, useful, opt, "learn", ci, fill_id=len(rounds))
        loaded |= {b.seek for b in raw}
    elif learn > 0:
        # plain ROOT: while learning, every basket met is an ordinary read
        for b in baskets:
            if b.entry_start < learn:
                rounds.append(Round("learn", (_read(b.seek, b.nbytes),), b.nbytes,
                                    cluster=_cluster_of(layout, b.entry_start)))
                loaded.add(b.seek)
    need = [b for b in baskets if b.seek not in loaded]
    cached = [b for b in need if b.nbytes <= opt.cache_size]
    # FillBuffer never caches a basket larger than the cache: it is read alone when met
    big = [b for b in need if b.nbytes > opt.cache_size]

    def alone(upto: int) -> list[Round]:
        out = []
        while big and _cluster_of(layout, big[0].entry_start) <= upto:
            b = big.pop(0)
            out.append(Round("basket", (_read(b.seek, b.nbytes),), b.nbytes,
                             cluster=_cluster_of(layout, b.entry_start)))
        return out

    per: dict[int, list[Basket]] = {}
    for b in trig:
        if b.seek not in loaded:
            per.setdefault(_cluster_of(layout, b.entry_start), []).append(b)

    def trigger(upto: int) -> list[Round]:
        out: list[Round] = []
        for ci in sorted(c for c in per if c <= upto):
            for part in _split(per.pop(ci), opt.cache_size):
                out += _read_buffers(part, useful, opt, "trigger", ci,
                                     fill_id=len(rounds) + len(out))
        return out

    for ci, fill in _group_fills(layout, cached, opt):
        rounds += alone(ci - 1)
        rounds += trigger(ci - 1)
        rounds += _read_buffers(fill, useful, opt, "fill", ci, fill_id=len(rounds))
        last = max(_cluster_of(layout, b.entry_start) for b in fill)
        rounds += alone(last)
        rounds += trigger(last)
    rounds += alone(len(layout.clusters))
    return rounds + trigger(len(layout.clusters))


def _split(bs: list[Basket], cap: int) -> list[list[Basket]]:
    """Consecutive parts of at most `cap` bytes (a basket larger than `cap` alone)."""
    parts: list[list[Basket]] = [[]]
    size = 0
    for b in bs:
        if parts[-1] and size + b.nbytes > cap:
            parts.append([])
            size = 0
        parts[-1].append(b)
        size += b.nbytes
    return parts


def _lazy(layout: Layout, baskets: list[Basket], opt: Options,
          every: list[Basket], trig: tuple[Basket, ...] = ()) -> list[Round]:
    """The application plan's reads, in order, decide which segment is fetched when;
    ROOT's reads themselves are then local (see `lazy_vector_reads_remote`)."""
    seg = opt.segment_size
    present: set[int] = set()
    rounds: list[Round] = []
    for r in _application(layout, baskets, opt, every, trig):
        for q in r.requests:
            for off, n in q.ranges:
                for s in range(off // seg, (off + n - 1) // seg + 1):
                    if s in present:
                        continue
                    present.add(s)
                    start = s * seg
                    length = min(seg, layout.file_bytes - start)
                    rounds.append(Round("segment", _chunked_read(start, length, opt.read_chunk),
                                        0, window=opt.read_window, cluster=r.cluster))
        if opt.lazy_vector_reads_remote and any(q.kind == "readv" for q in r.requests):
            # LocalCacheFile::readv(IOPosBuffer*) fetches the segments, then hands the
            # vector read to the remote storage anyway
            rounds.append(dataclasses.replace(r, phase="readv-remote", useful_bytes=0))
    useful = sum(n for _, n in layout.open_reads) + sum(b.nbytes for b in baskets) \
        + sum(b.nbytes for b in trig)
    if rounds:   # ROOT's own bytes are served locally; count them once
        rounds[0] = dataclasses.replace(rounds[0], useful_bytes=useful)
    return rounds


def make(layout: Layout, branches: tuple[str, ...], mode: str,
         options: Options | None = None, trigger_factor: int = 0) -> Plan:
    """The plan for reading `branches` of `layout` in caching `mode`; with
    `trigger_factor` N > 0 every N-th event also reads every other branch."""
    if mode not in MODES:
        raise InputError(f"must be one of {', '.join(MODES)}", key="plan.mode", value=mode,
                         has_value=True)
    opt = options or Options()
    if isinstance(trigger_factor, bool) or not isinstance(trigger_factor, int) \
            or trigger_factor < 0:
        raise InputError("must be a whole number >= 0", key="plan.trigger_factor",
                         value=trigger_factor, has_value=True)
    baskets = _selected(layout, branches)
    trig = triggered(layout, branches, trigger_factor)
    if mode == "storage":
        both = sorted(baskets + trig, key=lambda b: (b.entry_start, b.seek))
        rounds = _storage(layout, both, opt)
    else:
        every = _selected(layout, tuple(b.name for b in layout.branches))
        build = _application if mode == "application" else _lazy
        rounds = build(layout, baskets, opt, every, tuple(trig))
    return Plan(mode, layout.path, layout.file_bytes, layout.tree, layout.entries,
                tuple(branches), opt, tuple(rounds), len(layout.clusters))
