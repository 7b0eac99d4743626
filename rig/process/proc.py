"""Process supervision: the one place that starts, times out and reaps children.

Rules (trio's): argv lists only, never a shell; stdin closed; every child in a new
session (its own process group); a deadline on every call; on timeout or cancel:
SIGTERM to the group, a grace period, SIGKILL, always reap. Commands run inside a
network namespace through `ip netns exec NS argv...`.

CPU accounting: the child is reaped with wait4(), whose rusage covers the child and
every descendant it reaped, i.e. the client's whole process tree.

Must not import anything above it (realization, services, orchestration, reports).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rig.errors import RigError

GRACE_S = 3.0
_TAIL = 4000

# Every live child, so a signal-driven shutdown can kill the groups of all of them.
_LIVE: dict[int, list[str]] = {}
_LIVE_LOCK = threading.Lock()
_echo: Callable[[list[str], dict | None], None] | None = None


def set_echo(fn: Callable[[list[str], dict | None], None] | None) -> None:
    """Install a callback that sees every argv (and the environment it sets) before it
    runs: the run's commands.log."""
    global _echo
    _echo = fn


def ns_argv(netns: str | None, argv: Sequence[str]) -> list[str]:
    argv = [str(a) for a in argv]
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def pinned_argv(cpus: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` bound to a CPU set (`taskset -c CPUS`, inherited by its children), or as is."""
    argv = [str(a) for a in argv]
    return ["taskset", "-c", cpus, *argv] if cpus else argv


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    timed_out: bool = False
    io_wchar: int | None = None      # bytes the process wrote (write/pwrite, incl. /dev/null)
    io_done_s: float | None = None   # seconds from start until io_wchar reached io_target

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, n: int = 600) -> str:
        return self.stderr[-n:]


class CommandFailed(RigError):
    def __init__(self, res: Result) -> None:
        self.result = res
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        tail = res.stderr.strip().splitlines()[-1:] or res.stdout.strip().splitlines()[-1:]
        super().__init__(f"{' '.join(res.argv)}: {why}" + (f": {tail[0]}" if tail else ""))


def _register(pid: int, argv: list[str]) -> None:
    with _LIVE_LOCK:
        _LIVE[pid] = argv


def _unregister(pid: int) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(pid, None)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL one child's process group (a watchdog's emergency stop); run() reaps it."""
    _kill_group(pid, signal.SIGKILL)


def kill_all_live() -> None:
    """TERM every live child group, then KILL what is left (signal shutdown path)."""
    with _LIVE_LOCK:
        pids = list(_LIVE)
    for pid in pids:
        _kill_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_exists(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        _kill_group(pid, signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _spawn(argv: list[str], env: dict | None, stdout, stderr) -> subprocess.Popen:
    if _echo:
        _echo(argv, env)
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update({k: str(v) for k, v in env.items()})
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                             env=full_env, start_new_session=True, close_fds=True)
    except FileNotFoundError as e:
        raise RigError(f"{argv[0]}: command not found (is it installed? see `rig doctor`)") from e
    _register(p.pid, argv)
    return p


class IoWatch:
    """Samples /proc/PID/io while a child runs: when did it finish writing `target`
    bytes? Tools give no progress when stdout is no terminal; the kernel's write count
    does, and it works for output to /dev/null. Also tells when a process lingers
    after its data is done (seen: xrdcp 5.5 -S N sometimes exits 5 s late)."""

    INTERVAL_S = 0.005

    def __init__(self, target: int) -> None:
        self.target, self.wchar, self.done_at = target, 0, None

    def sample(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                for line in f:
                    if line.startswith(b"wchar:"):
                        self.wchar = int(line.split()[1])
                        break
        except (OSError, ValueError):
            return
        if self.done_at is None and self.wchar >= self.target:
            self.done_at = time.monotonic()


def _wait4(p: subprocess.Popen, deadline: float,
           io: IoWatch | None = None) -> tuple[int, object] | None:
    """Wait for exit until deadline using a pidfd (exact wake-up); None on timeout."""
    fd = os.pidfd_open(p.pid)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if io is not None:
                io.sample(p.pid)
                left = min(left, io.INTERVAL_S)
            r, _, _ = select.select([fd], [], [], left)
            if r:
                if io is not None:   # a zombie's /proc/PID/io is complete and readable
                    io.sample(p.pid)
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                return p.returncode, ru
    finally:
        os.close(fd)


def _terminate(p: subprocess.Popen) -> tuple[int, object]:
    _kill_group(p.pid, signal.SIGTERM)
    got = _wait4(p, time.monotonic() + GRACE_S)
    if got is None:
        _kill_group(p.pid, signal.SIGKILL)
        got = _wait4(p, time.monotonic() + 30) or (-9, None)
    _kill_group(p.pid, signal.SIGKILL)   # stragglers that left the leader behind
    return got


def run(argv: Sequence[str], *, timeout: float, netns: str | None = None,
        env: dict | None = None, check: bool = False,
        stdout_path: Path | None = None, io_target: int | None = None,
        on_start: Callable[[int], None] | None = None) -> Result:
    """Run to completion with a deadline; capture output; account CPU of the tree.

    stdout_path: stream stdout to a file instead of memory (large outputs).
    io_target: watch the child's written bytes; Result.io_done_s tells when it had
    written that many (the end of a download's data phase).
    on_start: called with the child's pid (its process group) once it runs.
    """
    full = ns_argv(netns, argv)
    import tempfile
    with tempfile.TemporaryFile() as err, \
            (open(stdout_path, "wb") if stdout_path else tempfile.TemporaryFile()) as out:
        t0 = time.monotonic()
        p = _spawn(full, env, out, err)
        if on_start:
            on_start(p.pid)
        timed_out = False
        io = IoWatch(io_target) if io_target is not None else None
        try:
            got = _wait4(p, t0 + timeout, io)
            if got is None:
                timed_out = True
                got = _terminate(p)
        except BaseException:
            _terminate(p)
            _unregister(p.pid)
            raise
        wall = time.monotonic() - t0
        _unregister(p.pid)
        rc, ru = got
        _kill_group(p.pid, signal.SIGKILL)   # no orphan of the group survives its leader
        err.seek(0)
        stderr = err.read()[-_TAIL * 4:].decode("utf-8", "replace")
        stdout = ""
        if not stdout_path:
            out.seek(0)
            stdout = out.read().decode("utf-8", "replace")
    res = Result(full, rc, stdout, stderr, wall,
                 getattr(ru, "ru_utime", 0.0), getattr(ru, "ru_stime", 0.0), timed_out)
    if io is not None:
        res.io_wchar = io.wchar
        res.io_done_s = io.done_at - t0 if io.done_at is not None else None
    if check and not res.ok:
        raise CommandFailed(res)
    return res


@dataclass
class Service:
    """A long-running child (server, emulation engine) in its own process group."""
    argv: list[str]
    netns: str | None = None
    env: dict | None = None
    log_path: Path | None = None
    name: str = ""
    _p: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def full_argv(self) -> list[str]:
        return ns_argv(self.netns, self.argv)

    @property
    def pid(self) -> int | None:
        return self._p.pid if self._p else None

    def start(self) -> "Service":
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._p = _spawn(self.full_argv, self.env, out, subprocess.STDOUT)
        finally:
            if self.log_path:
                out.close()
        return self

    def alive(self) -> bool:
        if not self._p or self._p.returncode is not None:
            return False
        try:
            pid, status = os.waitpid(self._p.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid:
            self._p.returncode = os.waitstatus_to_exitcode(status)
            _unregister(self._p.pid)
            return False
        return True

    def log_tail(self, n: int = 400) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self) -> int | None:
        if not self._p:
            return None
        if self._p.returncode is None:
            try:
                rc, _ = _terminate(self._p)
            except ChildProcessError:
                rc = self._p.returncode
        else:
            rc = self._p.returncode
            _kill_group(self._p.pid, signal.SIGKILL)
        _unregister(self._p.pid)
        return rc

    def __enter__(self) -> "Service":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_until(probe: Callable[[], bool], *, timeout: float, what: str,
               interval: float = 0.05, service: Service | None = None) -> None:
    """Poll `probe` until true or the deadline; fail early if `service` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        if service is not None and not service.alive():
            raise RigError(f"{what}: process exited early: {service.log_tail().strip()[-300:]}")
        time.sleep(interval)
    raise RigError(f"{what}: not ready within {timeout:g}s")
