"""Where the origins' data files live: `storage:` of a scenario (issue 26, item 5).

    storage:
      kind: disk          # tmpfs (default: in memory) | disk
      dir: /var/tmp       # disk only: a directory on a disk filesystem (default /var/tmp);
                          # the run writes its files into <dir>/<prefix>-data and removes it
      check_size: 1GiB    # per step, dd reads this much of each served file (cold cache)
      drop_cache: true    # before every transfer group, posix_fadvise(DONTNEED) the file

A tmpfs holds at most L.MAX_FILE_SIZE (it lives in memory); a disk holds what its free
space allows, checked when the run starts (`room_error`), not at parse time: a scenario
written on a big machine still plans on a small one. Pure description (reads /proc/mounts
and statvfs, starts nothing). Must not import realization, process, orchestration.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.description import limits as L, schema as S

DEFAULT_DIR = "/var/tmp"
MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
ROOM_MARGIN = 1 << 30      # kept free beside the files on a disk (logs, other users)


def fs_type(path: str | Path) -> str | None:
    """The filesystem type of the mount holding `path` (longest mount point that is a
    prefix of its real path), from /proc/mounts; None when unreadable."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        return None
    return kind


def free_bytes(path: str | Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@S.describe(type="path", text="an existing directory on a disk (not a tmpfs)",
            example="/var/tmp")
def _dir(v: Any) -> str:
    """An existing directory on a disk filesystem (not a tmpfs), absolute."""
    p = S.path_text(v)
    if not os.path.isabs(p):
        raise ValueError("give an absolute path")
    if not os.path.exists(p):
        raise ValueError("no such directory")
    if not os.path.isdir(p):
        raise ValueError("not a directory")
    kind = fs_type(p)
    if kind in MEMORY_FS:
        raise ValueError(f"is on a {kind} (memory), not a disk")
    return p


@dataclass(frozen=True)
class Storage:
    # where the origins' data files live: tmpfs (in memory) or disk
    kind: str = S.spec(S.choice("tmpfs", "disk"), "tmpfs")
    # disk only: the run writes its files into <dir>/<prefix>-data (default /var/tmp)
    dir: str | None = S.spec(S.optional(_dir), None)
    # disk: per step, dd reads this much of each served file (cold cache)
    check_size: int = S.spec(S.size_in(1 << 20, L.MAX_SIZE), 1 << 30)
    # disk: before every transfer group, posix_fadvise(DONTNEED) the file
    drop_cache: bool = S.spec(S.boolean, True)

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if d["kind"] == "tmpfs" and d["dir"] is not None:
            raise ctx.child("dir").error("only for kind: disk (a tmpfs is mounted in the "
                                         "run directory)", d["dir"])
        return d

    @property
    def on_disk(self) -> bool:
        return self.kind == "disk"

    @property
    def base(self) -> str:
        """The directory the run's data folder is made in (disk only)."""
        return self.dir or DEFAULT_DIR


def room_error(storage: Storage, need_bytes: int) -> str | None:
    """Why `need_bytes` of files do not fit the disk directory now, or None."""
    if not storage.on_disk:
        return None
    try:
        free = free_bytes(storage.base)
    except OSError as e:
        return f"cannot read its free space ({e.strerror or e})"
    if need_bytes + ROOM_MARGIN > free:
        return (f"the files need {need_bytes / 2**30:.1f} GiB (+ {ROOM_MARGIN >> 30} GiB kept "
                f"free) and {storage.base} has {free / 2**30:.1f} GiB free")
    return None


def check_room(sc: Any) -> None:
    """`rig run`'s check before anything is made: the scenario's files fit its disk
    directory now (InputError naming storage.dir: one line, exit 2)."""
    from rig.errors import InputError
    storage: Storage = sc.storage
    why = room_error(storage, sum(f.size for f in sc.files))
    if why:
        raise InputError(f"not enough room: {why}", file=sc.source, key="storage.dir",
                         value=storage.base)
