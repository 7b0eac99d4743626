"""The servers' data directory: a private tmpfs filled with random files of given sizes.

The mount's source name carries the run prefix (`rig3f2a-data`) so `rig clean` can tell
the rig's own mounts from everything else. Must not import orchestration or reports.
"""
from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import Iterator

from rig.process import proc
from rig.description.scenario import FileSpec

CHUNK = 8 << 20


def mount_argv(prefix: str, path: Path, size_bytes: int) -> list[str]:
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


def write_random(path: Path, size: int, seed: int) -> None:
    """Incompressible content, reproducible from the seed; ~1 GB/s here."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            f.write(rng.randbytes(n))
            left -= n
    os.chmod(path, 0o644)


@contextlib.contextmanager
def data_dir(prefix: str, path: Path, files: list[FileSpec], *, incoming_bytes: int = 0,
             incoming_owner: str | None = None) -> Iterator[Path]:
    """Mount a tmpfs sized for `files`, write them, unmount on exit whatever happens.
    With `incoming_bytes`, the tmpfs has that much more room and an `incoming/` folder
    owned by `incoming_owner`, where third-party copies land."""
    path.mkdir(parents=True, exist_ok=True)
    need = sum(f.size for f in files) + (16 << 20) + incoming_bytes
    proc.run(mount_argv(prefix, path, need), timeout=30, check=True)
    try:
        for i, f in enumerate(files):
            write_random(path / f.name, f.size, seed=i + 1)
        if incoming_bytes:
            import pwd
            (path / "incoming").mkdir()
            if incoming_owner:
                pw = pwd.getpwnam(incoming_owner)
                os.chown(path / "incoming", pw.pw_uid, pw.pw_gid)
        yield path
    finally:
        proc.run(umount_argv(path), timeout=30)
