"""Generate a real ROOT TTree file (uproot) that looks like a CMS AOD/MiniAOD events tree.

Pure description layer: writes files, starts no process. One `WritableTree.extend` call
per cluster writes one basket per branch, so baskets of all branches are interleaved
through the file cluster by cluster, as ROOT's auto-flush does.

Determinism: uproot stamps the current time (TKey/TFile fDatime) and a random UUID into
every file. Both are pinned here (fixed clock, UUID from the seed) so the same
(parameters, seed) gives the same bytes, which `tests/test_rootfile.py` checks by hash.
The tree's fAutoFlush is set to the cluster's entry count, because uproot otherwise
leaves ROOT's default (-30000000, "30 MB") and writes no fClusterRangeEnd; a ROOT
reader would then estimate cluster boundaries instead of using the baskets' own.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import os
import tempfile
import types
import uuid
from pathlib import Path

from rig.description import limits as L
from rig.errors import InputError

GENERATOR_VERSION = 1
TREE_NAME = "Events"
MiB = 1 << 20
_FIXED_TIME = _dt.datetime(2016, 7, 1, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """What to generate. `entry_bytes`, when given, fixes every branch's bytes per entry
    (and the branch count); otherwise `n_branches` sizes are drawn from the seed."""

    size_bytes: int = 512 * MiB
    n_branches: int = 300
    event_bytes: int = 40 * 1024          # MiniAOD-like; AOD is ~10x larger
    cluster_bytes: int = 20 * MiB         # CMSSW PoolOutputModule: ~20 MiB per cluster
    cluster_entries: int | None = None    # overrides cluster_bytes
    entry_bytes: tuple[int, ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        def bad(key: str, msg: str, val: object) -> InputError:
            return InputError(msg, key=f"rootfile.{key}", value=val, has_value=True)
        if not isinstance(self.size_bytes, int) or self.size_bytes < 1024:
            raise bad("size", "must be at least 1 KiB", self.size_bytes)
        if self.entry_bytes is not None:
            if not self.entry_bytes or any(not isinstance(b, int) or b < 1 for b in self.entry_bytes):
                raise bad("entry_bytes", "must be a non-empty list of positive integers",
                          self.entry_bytes)
        elif not isinstance(self.n_branches, int) \
                or not 1 <= self.n_branches <= L.MAX_ROOT_BRANCHES:
            raise bad("branches", f"must be an integer from 1 to {L.MAX_ROOT_BRANCHES}",
                      self.n_branches)
        if self.entry_bytes is None and (not isinstance(self.event_bytes, int)
                                         or self.event_bytes < self.n_branches):
            raise bad("event_bytes", "must be at least one byte per branch", self.event_bytes)
        if self.cluster_entries is not None and (not isinstance(self.cluster_entries, int)
                                                 or self.cluster_entries < 1):
            raise bad("cluster_entries", "must be a positive integer", self.cluster_entries)
        if not isinstance(self.cluster_bytes, int) or self.cluster_bytes < 1:
            raise bad("cluster_bytes", "must be a positive integer", self.cluster_bytes)
        entries, per = self.layout_numbers()
        baskets = -(-entries // per) * len(self.branch_sizes())
        if baskets > L.MAX_ROOT_BASKETS:
            raise bad("cluster", f"{baskets} baskets (clusters x branches): at most "
                      f"{L.MAX_ROOT_BASKETS} (larger clusters, or fewer branches)",
                      self.cluster_bytes)

    def branch_sizes(self) -> tuple[int, ...]:
        """Bytes per entry of every branch: a heavy-tailed spread (a few big collections,
        many small flags and scalars), as in a CMS events tree."""
        if self.entry_bytes is not None:
            return tuple(self.entry_bytes)
        return _branch_sizes(self.seed, self.n_branches, self.event_bytes)

    def layout_numbers(self) -> tuple[int, int]:
        """(entries, entries per cluster)."""
        ev = sum(self.branch_sizes())
        entries = max(1, -(-self.size_bytes // ev))
        per = self.cluster_entries or max(1, self.cluster_bytes // ev)
        return entries, min(per, entries)

    def key(self) -> str:
        from rig import extras
        uproot = extras.require("rootfile")
        d = dataclasses.asdict(self)
        d["entry_bytes"] = list(self.entry_bytes) if self.entry_bytes else None
        d["generator"] = GENERATOR_VERSION
        d["uproot"] = uproot.__version__
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _branch_sizes(seed: int, n_branches: int, event_bytes: int) -> tuple[int, ...]:
    """FileSpec.branch_sizes, computed once per (seed, branches, event size): a scenario's
    checks and its plan ask for it many times."""
    import numpy as np
    rng = np.random.default_rng([seed, 0x5EED])
    w = rng.lognormal(mean=0.0, sigma=2.0, size=n_branches)
    sizes = np.maximum(1, np.floor(w / w.sum() * event_bytes)).astype(int)
    sizes[int(np.argmax(sizes))] += max(0, event_bytes - int(sizes.sum()))
    return tuple(int(s) for s in sizes)


@contextlib.contextmanager
def _pinned_clock():
    """uproot calls datetime.datetime.now() in its writer modules; pin it for the write."""
    import uproot.writing._cascade as c
    import uproot.writing._cascadetree as ct
    import uproot.writing.writable as w

    class _Fixed(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: D102 - same signature as datetime.now
            return _FIXED_TIME

    shim = types.SimpleNamespace(datetime=_Fixed, timezone=_dt.timezone, timedelta=_dt.timedelta)
    mods = (c, ct, w)
    saved = [m.datetime for m in mods]
    try:
        for m in mods:
            m.datetime = shim
        yield
    finally:
        for m, s in zip(mods, saved):
            m.datetime = s


def write(spec: FileSpec, path: Path) -> None:
    """Write the file described by `spec` to `path` (overwrites)."""
    import numpy as np
    import uproot

    sizes = spec.branch_sizes()
    entries, per = spec.layout_numbers()
    names = [f"br{i:04d}" for i in range(len(sizes))]
    rng = np.random.default_rng([spec.seed, 0xDA7A])
    uid = uuid.UUID(bytes=hashlib.sha256(f"{spec.key()}".encode()).digest()[:16])
    # a file object, not a path: uproot would store the (temporary) path as the TFile's
    # name; with a file object it stores a constant name.
    with open(path, "w+b") as fh, _pinned_clock(), \
            uproot.recreate(fh, compression=None, uuid_function=lambda: uid) as f:
        tree = f.mktree(TREE_NAME, {n: np.dtype((np.uint8, (s,))) for n, s in zip(names, sizes)})
        # private uproot attribute: a positive fAutoFlush is ROOT's "entries per cluster"
        tree._cascading._metadata["fAutoFlush"] = per
        done = 0
        while done < entries:
            n = min(per, entries - done)
            tree.extend({name: rng.integers(0, 256, size=(n, s), dtype=np.uint8)
                         for name, s in zip(names, sizes)})
            done += n


def cache_dir() -> Path:
    env = os.environ.get("RIG_CACHE_DIR")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rig"
    return base / "rootfiles"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(dest: Path, fill) -> None:
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    try:
        fill(Path(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def ensure(spec: FileSpec, directory: Path | None = None) -> Path:
    """The cached file for `spec`, generated once. The manifest (`<key>.json`) is written
    after the file, both by temp + rename, so a present manifest means a complete file."""
    from rig import extras
    uproot = extras.require("rootfile")
    d = Path(directory) if directory else cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    key = spec.key()
    root, manifest = d / f"{key}.root", d / f"{key}.json"
    if manifest.exists() and root.exists():
        try:
            m = json.loads(manifest.read_text())
            if m.get("size_bytes") == root.stat().st_size:
                return root
        except (OSError, ValueError):
            pass
    _atomic_write(root, lambda p: write(spec, p))
    entries, per = spec.layout_numbers()
    info = {"key": key, "file": root.name, "size_bytes": root.stat().st_size,
            "sha256": _sha256(root), "tree": TREE_NAME, "entries": entries,
            "cluster_entries": per, "generator": GENERATOR_VERSION,
            "uproot": uproot.__version__,
            "spec": {**dataclasses.asdict(spec),
                     "entry_bytes": list(spec.entry_bytes) if spec.entry_bytes else None}}
    _atomic_write(manifest, lambda p: p.write_text(json.dumps(info, indent=1, sort_keys=True)))
    return root
