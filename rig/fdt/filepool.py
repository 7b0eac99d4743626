"""A session's files, at most SESSION_FILES descriptors open at once.

Why: a get may name up to protocol.MAX_FILES (4096) files, and a hello may name one file
a thousand times.  Opening every name up front made one session hold a descriptor per
name, so one client could take the server's whole RLIMIT_NOFILE and the next session
was reset.  Here the names are opened one at a time at the start only to learn each
file's identity and size, then lazily, least recently used first out, when a block of
the file is sent or checksummed.  A name repeated is the same entry (one descriptor).
A file reopened must be the very file first seen (device and inode), or the session
fails: the sizes were already promised to the client.

Threads: the sender thread and the checksum thread use the pool together; `use` pins a
descriptor for the duration of one syscall, and only unpinned ones are closed, so a
descriptor is never closed (or its number reused) under a thread still reading it.
With two users at most two are pinned, so a bound of 2 or more never waits.

Must not import rig modules outside rig.fdt and must not print.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from typing import Callable, Iterator

from rig.fdt.transport import TransferError

# Per session: enough for the sender and the checksum thread to work on neighbouring
# files of a multi-file get without reopening, small against RLIMIT_NOFILE (1024 by
# default), which also holds every session's control and data sockets (up to 257).
SESSION_FILES = 16


class FilePool:
    def __init__(self, opener: Callable[[str], int], names: list[str],
                 limit: int = SESSION_FILES) -> None:
        if limit < 2:
            raise ValueError("a file pool needs at least 2 descriptors")
        self.opener, self.limit = opener, limit
        self.names = list(names)
        self._unique = list(dict.fromkeys(self.names))       # first-seen order
        self._slot = {n: i for i, n in enumerate(self._unique)}
        self._ident: list[tuple[int, int]] = []
        self.sizes: list[int] = []                              # per name, as given
        self._open: OrderedDict[int, list[int]] = OrderedDict()  # slot -> [fd, pins]
        self._lock = threading.Lock()
        self.peak = 0                                           # most descriptors held

    def stat_all(self) -> list[int]:
        """Open each distinct name once (one descriptor at a time), note its identity
        and size; the sizes of `names` in order.  Raises what the opener raises."""
        sizes = []
        for n in self._unique:
            fd = self.opener(n)
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            self._ident.append((st.st_dev, st.st_ino))
            sizes.append(st.st_size)
        self.peak = max(self.peak, 1)
        self.sizes = [sizes[self._slot[n]] for n in self.names]
        return self.sizes

    @contextlib.contextmanager
    def use(self, index: int) -> Iterator[int]:
        """The descriptor of the index-th name (0-based), pinned while in the block."""
        slot = self._slot[self.names[index]]
        entry = self._acquire(slot)
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1

    def _acquire(self, slot: int) -> list[int]:
        with self._lock:
            entry = self._open.get(slot)
            if entry is not None:
                self._open.move_to_end(slot)
                entry[1] += 1
                return entry
            self._evict()
        fd = self.opener(self._unique[slot])        # outside the lock: may be slow
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._ident[slot]:
                raise TransferError(f"{self._unique[slot]}: replaced during the session")
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            entry = self._open.get(slot)
            if entry is not None:                   # another thread opened it meanwhile
                os.close(fd)
            else:
                self._evict()
                entry = self._open[slot] = [fd, 0]
                self.peak = max(self.peak, len(self._open))
            self._open.move_to_end(slot)
            entry[1] += 1
            return entry

    def _evict(self) -> None:
        """Close least recently used unpinned descriptors until one more fits."""
        while len(self._open) >= self.limit:
            victim = next((s for s, e in self._open.items() if e[1] == 0), None)
            if victim is None:
                return                  # every one pinned (more users than the bound)
            os.close(self._open.pop(victim)[0])

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._open.values():
                os.close(fd)
            self._open.clear()
