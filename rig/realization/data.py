"""The servers' data directory: a private tmpfs filled with random files of given sizes
(or, `storage: disk`, a folder on a disk: rig.realization.diskdata).

The mount's source name carries the run prefix (`rig3f2a-data`) so `rig clean` can tell
the rig's own mounts from everything else. Must not import orchestration or reports.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import zlib
from pathlib import Path
from typing import Callable, Iterator

from rig import checksum
from rig.process import proc
from rig.description.scenario.clients import FileSpec
from rig.description.storage import Storage, room_error
from rig.errors import RigError
from rig.realization import diskdata

CHUNK = 8 << 20


def mount_argv(prefix: str, path: Path, size_bytes: int | str) -> list[str]:
    return ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755",
            f"{prefix}-data", str(path)]


def umount_argv(path: Path) -> list[str]:
    return ["umount", "-l", str(path)]


def rig_mounts() -> list[tuple[str, str]]:
    """(source, mountpoint) of every tmpfs the rig mounted and is still mounted."""
    import re
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            src, mnt, fstype = line.split()[:3]
            if fstype == "tmpfs" and re.fullmatch(r"rig[0-9a-f]{4}-data", src):
                out.append((src, mnt.replace("\\040", " ")))
    return out


def is_mounted_below(path: Path) -> bool:
    """True if any mount point lies inside `path` (never rmtree through a mount)."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as f:
        return any(line.split()[1].startswith(prefix) for line in f)


def write_random(path: Path, size: int, seed: int) -> str:
    """Incompressible content, reproducible from the seed; ~1 GB/s here. Returns its
    adler32 (rig.checksum), taken from the bytes as they are written (no second read)."""
    rng = random.Random(seed)
    a = 1
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            b = rng.randbytes(n)
            f.write(b)
            a = zlib.adler32(b, a)
            left -= n
    os.chmod(path, 0o644)
    return checksum.hexdigest(a)


def root_source(f: FileSpec, *, generate: bool = True) -> Path | None:
    """Where a `kind: root` file comes from: the user's own file (read-only), or the
    rig's generated one, made once per parameters in the cache (rootfile.generate);
    None when it is not generated yet and `generate` is false."""
    if f.path is not None:
        return Path(f.path)
    from rig.description.rootfile import generate as g
    spec = f.root_spec()
    if not generate:
        d = g.cache_dir()
        key = spec.key()
        done = (d / f"{key}.json").exists() and (d / f"{key}.root").exists()
        return d / f"{key}.root" if done else None
    return g.ensure(spec)


@contextlib.contextmanager
def data_dir(prefix: str, path: Path, files: list[FileSpec], *, incoming_bytes: int = 0,
             incoming_owner: str | None = None, upload_bytes: int = 0, upload_dir: str = "",
             storage: Storage | None = None,
             record: Callable[[Path], None] | None = None,
             say: Callable[[str], None] | None = None,
             written: dict | None = None,
             checksums: dict[str, str] | None = None) -> Iterator[Path]:
    """Mount a tmpfs sized for `files`, write them, unmount on exit whatever happens.
    ROOT files are copied from their source (a generated file's size is only near the
    asked one: the tmpfs is sized from the real files). With `incoming_bytes`, the tmpfs
    has that much more room and an `incoming/` folder owned by `incoming_owner`, where
    third-party copies land. With `upload_bytes`, that much more room and an `upload_dir`
    folder every server user may write (mode 1777: xrootd, www-data), where uploads land
    (each checked and removed by the run). With `storage` on disk, the files go to a folder on that
    disk instead (rig.realization.diskdata; `record` names it to the run's state first),
    yielded in place of `path`; `written` gets each written file's {bytes, seconds};
    `checksums` gets each file's adler32 as it was made (name -> 8 hex digits), the value
    every download of it is checked against."""
    path.mkdir(parents=True, exist_ok=True)
    sources: dict[str, Path] = {}
    for f in files:
        if f.kind == "root":
            src = root_source(f)
            assert src is not None, "root_source generates a missing file"
            sources[f.name] = src
    need = sum(sources[f.name].stat().st_size if f.name in sources else f.total
               for f in files) + (16 << 20) + incoming_bytes + upload_bytes
    if storage is not None and storage.on_disk:
        room = room_error(storage, need)
        if room:
            raise RigError(f"storage: disk: {room}")
        with diskdata.disk_folder(storage.base, prefix, record=record) as d:
            _fill(d, files, sources, incoming_bytes, incoming_owner, disk=True, say=say,
                  written=written, checksums=checksums)
            yield d
        return
    proc.run(mount_argv(prefix, path, need), timeout=30, check=True)
    try:
        _fill(path, files, sources, incoming_bytes, incoming_owner, checksums=checksums)
        if upload_bytes:
            (path / upload_dir).mkdir()
            os.chmod(path / upload_dir, 0o1777)
        yield path
    finally:
        proc.run(umount_argv(path), timeout=30)


@contextlib.contextmanager
def scratch_dir(prefix: str, path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of the run's (its source named like the data's, so `rig clean` knows it),
    unmounted on exit whatever happens: where downloads are kept to be checksummed."""
    path.mkdir(parents=True, exist_ok=True)
    proc.run(mount_argv(prefix, path, size_bytes), timeout=30, check=True)
    try:
        yield path
    finally:
        proc.run(umount_argv(path), timeout=30)


def corrupt(path: Path) -> int:
    """Change one byte in the middle of `path` (every bit flipped); returns its offset.
    A fault injection (`rig run --corrupt`), made after the file's adler32 was taken."""
    size = path.stat().st_size
    if not size:
        raise RigError(f"--corrupt: {path.name} is empty, nothing to change")
    off = size // 2
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xff]))
    return off


def _fill_set(path: Path, f: FileSpec, index: int, sums: dict[str, str], *,
              disk: bool = False) -> None:
    """A `count:` set: its folder and files, each of its own seed (the set's index and
    the member's), each one's adler32 taken as it is written."""
    (path / f.name).mkdir()
    os.chmod(path / f.name, 0o755)
    for k, rel in enumerate(f.members):
        seed = ((index + 1) << 20) + k + 1
        if disk:
            diskdata.write_random(path / rel, f.size, seed=seed)
            sums[rel] = checksum.of_file(str(path / rel))
        else:
            sums[rel] = write_random(path / rel, f.size, seed=seed)


def _fill(path: Path, files: list[FileSpec], sources: dict[str, Path], incoming_bytes: int,
          incoming_owner: str | None, *, disk: bool = False,
          say: Callable[[str], None] | None = None, written: dict | None = None,
          checksums: dict[str, str] | None = None) -> None:
    sums: dict[str, str] = {} if checksums is None else checksums
    for i, f in enumerate(files):
        if f.count is not None:         # a set of small files: NAME/00000 ..
            _fill_set(path, f, i, sums, disk=disk)
            continue
        if f.name in sources:
            if disk:
                diskdata.copy_file(sources[f.name], path / f.name)
            else:
                shutil.copyfile(sources[f.name], path / f.name)
                os.chmod(path / f.name, 0o644)
        elif disk:
            secs = diskdata.write_random(path / f.name, f.size, seed=i + 1, progress=diskdata.Progress(
                say, f.name, f.size) if say and f.size >= diskdata.FLUSH_EVERY else None)
            if written is not None:
                written[f.name] = {"bytes": f.size, "seconds": round(secs, 3)}
        else:
            sums[f.name] = write_random(path / f.name, f.size, seed=i + 1)
        if f.name not in sums:      # a copied ROOT file, a file on disk: read once
            sums[f.name] = checksum.of_file(str(path / f.name))
    if incoming_bytes:
        import pwd
        (path / "incoming").mkdir()
        if incoming_owner:
            pw = pwd.getpwnam(incoming_owner)
            os.chown(path / "incoming", pw.pw_uid, pw.pw_gid)
