"""Origins' data on a disk (`storage: disk`, rig.description.storage): files larger
than memory, read from the disk rather than the page cache.

The run's folder is `<dir>/<prefix>-data` (the prefix lets `rig clean` tell it from
anything else, and the run's state file names it before it is made). Files are written
in 1 GiB pieces, each flushed (fdatasync) and dropped from the page cache
(posix_fadvise DONTNEED) as it lands, so writing 32 GiB neither fills memory with dirty
pages nor leaves the file cached. `drop_cache` does the same for one file between
transfers: that file's pages only, never the host's global drop_caches.
Must not import services, orchestration or reports.
"""
from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

CHUNK = 8 << 20
FLUSH_EVERY = 1 << 30
DIR_RE = re.compile(r"(rig[0-9a-f]{4})-data")


def folder(base: str | Path, prefix: str) -> Path:
    return Path(base) / f"{prefix}-data"


def drop_cache(path: Path) -> None:
    """Drop this file's clean pages from the page cache (dirty ones are written first)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def write_random(path: Path, size: int, seed: int,
                 progress: Callable[[int], None] | None = None) -> float:
    """Incompressible, reproducible bytes (as rig.realization.data.write_random), flushed
    and dropped from the cache every FLUSH_EVERY bytes; not sparse: every block written.
    Returns the seconds it took (generating the bytes included)."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        done = flushed = 0
        while done < size:
            n = min(CHUNK, size - done)
            view = memoryview(rng.randbytes(n))
            while view:
                view = view[os.write(fd, view):]
            done += n
            if done - flushed >= FLUSH_EVERY or done == size:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                flushed = done
                if progress:
                    progress(done)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    return time.monotonic() - t0


def copy_file(src: Path, dest: Path) -> None:
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o644)
    drop_cache(dest)


@contextlib.contextmanager
def disk_folder(base: str | Path, prefix: str, *,
                record: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Make `<base>/<prefix>-data` (it must not exist), remove it on exit whatever
    happens. `record` is told the path before it is made (the run's state file)."""
    d = folder(base, prefix)
    if record:
        record(d)
    os.mkdir(d, 0o755)
    os.chmod(d, 0o755)          # servers run as www-data: the umask must not narrow it
    try:
        yield d
    finally:
        remove(d)


def remove(d: Path) -> bool:
    """Remove a run's data folder (only one named `rig<4 hex>-data`); True if it was there."""
    if not DIR_RE.fullmatch(d.name) or d.is_symlink() or not d.is_dir():
        return False
    shutil.rmtree(d, ignore_errors=True)
    return True


class Progress:
    """Console lines while big files are written: at most one per 5 s, with the rate."""

    def __init__(self, say: Callable[[str], None], name: str, size: int) -> None:
        self.say, self.name, self.size = say, name, size
        self.t0 = self.last = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if done < self.size and now - self.last < 5.0:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-6) / 1e6
        self.say(f"  data: {self.name} {done / 2**30:.1f}/{self.size / 2**30:.1f} GiB "
                 f"written ({rate:.0f} MB/s)")
