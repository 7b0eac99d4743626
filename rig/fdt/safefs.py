"""Files below the server's root, opened so that a name can never leave it.

Every name a client sends is checked as a plain relative path (no empty, '.', '..'
components, no leading or trailing slash, no NUL) and resolved relative to a descriptor
of the root with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
(Linux 5.6+), or, where the kernel lacks it, by walking the components with
O_NOFOLLOW | O_DIRECTORY descriptors.  A symlink anywhere on the way is refused, so a
link planted in the root cannot send a read or a write elsewhere.

Reads open with O_NONBLOCK and keep only regular files (a FIFO or device never blocks
the opener).  Uploads are written to an anonymous O_TMPFILE in the target's directory,
linked under a fresh temporary name and renamed over the target (renameat, relative to
the directory descriptor) only when committed; where O_TMPFILE is unsupported, a fresh
name created with O_CREAT | O_EXCL | O_NOFOLLOW.  An upload that is never committed
leaves nothing behind once closed.

Blocking calls on plain descriptors only: callers run them off the event loop.  Must not
import asyncio or rig modules outside rig.fdt.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat

from rig.fdt.protocol import ProtocolError

_SYS_OPENAT2 = 437                     # the same number on every Linux architecture
_RESOLVE = 0x02 | 0x04 | 0x08          # NO_MAGICLINKS | NO_SYMLINKS | BENEATH
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_FD_PRESSURE = (errno.EMFILE, errno.ENFILE)
PART_SUFFIX = ".rig-fdt-part"
_PROC_FD = os.path.isdir("/proc/self/fd")


class PathRefused(ProtocolError):
    """The peer named a file the server will not read or write (one-line reason)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def _libc_syscall():
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_syscall = _libc_syscall()
_have_openat2: bool | None = None if _syscall is not None else False


def split_name(name: str) -> list[str]:
    """The components of a plain relative file name, or PathRefused saying why not."""
    def refuse(why: str) -> PathRefused:
        return PathRefused(f"{name[:200]!r}: {why}")
    if not isinstance(name, str) or not name:
        raise refuse("empty file name")
    if "\x00" in name:
        raise refuse("NUL in file name")
    try:
        os.fsencode(name)
    except UnicodeError:
        raise refuse("file name is not valid UTF-8") from None
    if name.startswith("/"):
        raise refuse("absolute names are refused: name a file below the served directory")
    if name.endswith("/"):
        raise refuse("trailing slash: name a file, not a directory")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise refuse("empty, '.' and '..' components are refused")
    return parts


def open_root(path: str) -> int:
    """A directory descriptor of the served root (the root itself may be a symlink)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int | None:
    """openat2 beneath dir_fd; None when the kernel does not have it."""
    global _have_openat2
    if _have_openat2 is False:
        return None
    creates = flags & os.O_CREAT or flags & os.O_TMPFILE == os.O_TMPFILE
    how = _OpenHow(flags, mode if creates else 0, _RESOLVE)    # a mode otherwise: EINVAL
    fd = _syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), os.fsencode(rel),
                  ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        _have_openat2 = True
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and not _have_openat2:   # EPERM: seccomp
        _have_openat2 = False
        return None
    raise OSError(err, os.strerror(err), rel)


def _walk(dir_fd: int, parts: list[str]) -> int:
    """A new descriptor of the directory parts[...] below dir_fd, no symlink followed."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root_fd: int, parts: list[str], flags: int, mode: int = 0o644) -> int:
    """Open parts (a checked name) below root_fd; every component, the last included,
    must not be a symlink."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _openat2(root_fd, "/".join(parts), flags, mode)
    if fd is not None:
        return fd
    dfd = _walk(root_fd, parts[:-1])
    try:
        return os.open(parts[-1], flags, mode, dir_fd=dfd)
    finally:
        os.close(dfd)


def _refusal(name: str, e: OSError) -> PathRefused:
    if e.errno == errno.ELOOP:
        return PathRefused(f"{name}: a symbolic link (on the way or at the end) is refused")
    if e.errno in _FD_PRESSURE:
        return PathRefused(f"{name}: server is out of file descriptors, try again later")
    return PathRefused(f"{name}: {e.strerror or e}")


def open_read(root_fd: int, name: str) -> int:
    """A read descriptor of the regular file `name` below the root; never blocks on a
    FIFO or device (O_NONBLOCK) and refuses anything that is not a regular file."""
    parts = split_name(name)
    try:
        fd = open_beneath(root_fd, parts, _READ_FLAGS)
    except OSError as e:
        raise _refusal(name, e) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused(f"{name}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_reads(root_fd: int, names: list[str]) -> list[int]:
    """open_read of every name; all or nothing."""
    fds: list[int] = []
    try:
        for name in names:
            fds.append(open_read(root_fd, name))
    except BaseException:
        close_fds(fds)
        raise
    return fds


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


class Upload:
    """A file being received for `name` below the root; becomes `name` on commit()."""

    def __init__(self, root_fd: int, name: str) -> None:
        parts = split_name(name)
        self.name, self.final = name, parts[-1]
        self.part: str | None = None      # named temporary (only without O_TMPFILE)
        self.fd: int | None = None
        try:
            self.dir_fd = _open_dir(root_fd, parts[:-1])
        except OSError as e:
            raise _refusal(name, e) from None
        try:
            self._check_target()
            self.fd = self._create()
        except BaseException:
            os.close(self.dir_fd)
            raise

    def _check_target(self) -> None:
        try:
            st = os.stat(self.final, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{self.name}: exists and is not a regular file")

    def _create(self) -> int:
        flags = os.O_WRONLY | os.O_CLOEXEC
        if _PROC_FD:                     # commit() links it through /proc/self/fd
            try:
                return os.open(".", flags | os.O_TMPFILE, 0o644, dir_fd=self.dir_fd)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    raise _refusal(self.name, e) from None
        self.part = _part_name(self.final)
        try:
            return os.open(self.part, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                           0o644, dir_fd=self.dir_fd)
        except OSError as e:
            self.part = None
            raise _refusal(self.name, e) from None

    def commit(self) -> None:
        """Make the received data `name` (atomically replacing a regular file there)."""
        assert self.fd is not None
        if self.part is None:            # anonymous: give it a fresh name first
            part = _part_name(self.final)
            os.link(f"/proc/self/fd/{self.fd}", part, dst_dir_fd=self.dir_fd,
                    follow_symlinks=True)
            self.part = part
        os.rename(self.part, self.final, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        self.part = None

    def close(self) -> None:
        """Close; an uncommitted upload leaves nothing behind."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.part is not None:
            try:
                os.unlink(self.part, dir_fd=self.dir_fd)
            except FileNotFoundError:
                pass
            self.part = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def _open_dir(root_fd: int, parts: list[str]) -> int:
    if not parts:
        return os.dup(root_fd)
    fd = _openat2(root_fd, "/".join(parts), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0)
    return fd if fd is not None else _walk(root_fd, parts)


def _part_name(final: str) -> str:
    """A fresh hidden temporary name beside `final` (never an existing entry)."""
    return f".{final[:200]}.{os.urandom(6).hex()}{PART_SUFFIX}"
