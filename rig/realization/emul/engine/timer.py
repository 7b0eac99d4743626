"""A CLOCK_MONOTONIC timerfd armed at absolute deadlines, through ctypes (no C to build).

asyncio's own timers sleep in epoll_wait, whose timeout has millisecond granularity
(rounded up), which alone adds ~0.5 ms to every emulated delay. A timerfd is an hrtimer:
registered as a reader it wakes the loop at the exact nanosecond requested (plus the
timer slack, which `tighten_timer_slack` lowers to 1 ns for this process).

Must not import anything from rig.
"""
from __future__ import annotations

import ctypes
import os

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1
PR_SET_TIMERSLACK = 29

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                  ctypes.c_void_p]


def tighten_timer_slack(ns: int = 1) -> None:
    """Ask the kernel not to coalesce this process's timers (default slack is 50 us)."""
    _libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)


def hold_cpu_latency(us: int = 0, path: str = "/dev/cpu_dma_latency") -> tuple[int | None, str]:
    """Ask the kernel's PM QoS to keep every CPU's idle exit latency <= `us` while the
    returned file descriptor stays open (the kernel drops the request when it is closed,
    also when the process dies by SIGKILL: nothing is left behind). With 0 an idle CPU
    polls instead of halting, so a timer wake-up does not first wait for the CPU to leave
    a C-state (bare metal) or for the hypervisor to resume a halted vCPU (a VM).
    Returns (fd or None, a note for the engine's stats)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        return None, f"not held ({path}: {e.strerror})"
    try:
        os.write(fd, int(us).to_bytes(4, "little", signed=True))
    except OSError as e:
        os.close(fd)
        return None, f"not held ({path}: {e.strerror})"
    return fd, f"cpu latency <= {us} us held"


_libc.sched_getcpu.restype = ctypes.c_int


def current_cpu() -> int:
    """The CPU the calling thread runs on (-1 if unknown); glibc reads it without a syscall."""
    return int(_libc.sched_getcpu())


class DeadlineTimer:
    """One-shot absolute timer on time.monotonic()'s clock; readable when it fires."""

    def __init__(self) -> None:
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"timerfd_create: {os.strerror(e)}")
        self.fd = fd
        self.armed_at: float | None = None
        self._spec = _Itimerspec()
        self._ref = ctypes.byref(self._spec)

    def fileno(self) -> int:
        return self.fd

    def arm(self, when: float) -> None:
        """Fire at monotonic time `when` (a time already past fires at once)."""
        when = max(when, 1e-9)      # 0 would disarm
        sec = int(when)
        v = self._spec.it_value
        v.tv_sec = sec
        v.tv_nsec = int((when - sec) * 1e9)
        if _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, self._ref, None) < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"timerfd_settime: {os.strerror(e)}")
        self.armed_at = when

    def disarm(self) -> None:
        v = self._spec.it_value
        v.tv_sec = v.tv_nsec = 0
        _libc.timerfd_settime(self.fd, 0, self._ref, None)
        self.armed_at = None

    def consume(self) -> bool:
        """Clear the readable state; False when the timer had not actually expired (an
        event collected before the timer was re-armed)."""
        try:
            return len(os.read(self.fd, 8)) == 8
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)
