"""Open a path a user named without ever blocking: regular files only.

A FIFO, a character device (/dev/zero), a socket or a directory named where a file is
expected would hang `open()` (a FIFO with no writer), or a read (a device without end).
A ROOT file and a results folder's database go through `open_regular` (scenario,
topology and tuning YAML through `safeyaml.read_text`, which does the same; a path
handed to another program, as an ssh identity, is checked with stat): O_NONBLOCK so the
open itself never waits, then S_ISREG on the descriptor (not the name, which could
change in between), then the descriptor is made blocking again for ordinary reads.

Pure description layer: imports only rig.errors.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from rig.errors import InputError

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def refusal(path: str | Path, mode: int) -> str:
    return f"is {kind(mode)}, not a regular file" if not stat.S_ISREG(mode) else ""


def open_regular(path: str | Path, *, key: str | None = None) -> int:
    """A blocking read descriptor of the regular file at `path` (symlinks followed to
    their target, which must be regular too); InputError naming the path otherwise."""
    p = str(path)
    try:
        fd = os.open(p, _FLAGS)
    except FileNotFoundError:
        raise InputError("no such file", file=p, key=key) from None
    except OSError as e:
        if e.errno == 6:      # ENXIO: a socket, or a FIFO opened for writing elsewhere
            raise InputError("is a socket or device, not a regular file", file=p,
                             key=key) from None
        raise InputError(f"cannot read it ({e.strerror})", file=p, key=key) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(refusal(p, st.st_mode), file=p, key=key)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path: str | Path, *, key: str | None = None) -> None:
    """Refuse `path` unless it opens as a regular file (for paths handed to another
    program, e.g. a certificate given to a server)."""
    os.close(open_regular(path, key=key))


def check_out_dir(directory: str | Path, *, key: str | None = None) -> None:
    """Refuse an output folder holding an entry a writer would block on or write through
    to a device: a FIFO, socket or device (or a symlink to one) where a report writes
    its files.  Regular files (overwritten) and folders are fine; stat never blocks."""
    d = Path(directory)
    try:
        entries = list(os.scandir(d))
    except FileNotFoundError:
        return
    except OSError as err:
        raise InputError(f"cannot list it ({err.strerror})", file=str(d), key=key) from None
    for entry in entries:
        try:
            mode = os.stat(entry.path).st_mode
        except OSError:
            continue                 # a dangling symlink: the writer replaces or fails
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"is {kind(mode)} in the output folder, where a report file "
                             "would be written", file=entry.path, key=key)
