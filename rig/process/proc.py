"""Process supervision: the one place that starts, times out and reaps children.

Rules (trio's): argv lists only, never a shell; stdin closed; every child in a new
session (its own process group); a deadline on every call; on timeout or cancel:
SIGTERM to the group, a grace period, SIGKILL, always reap. Commands run inside a
network namespace through `ip netns exec NS argv...`.

CPU accounting: the child is reaped with wait4(), whose rusage covers the child and
every descendant it reaped, i.e. the client's whole process tree.

Remote hosts (`host=`, a rig.process.remote.Host): the same calls, the same Result. The
local child is `ssh` (through the run's ControlMaster when one is open), the remote
one is the agent of rig.process.remote, which applies the same rules on that host and
reports exit code, rusage and written bytes measured there. Callers never learn more
than `Result.host`.

Must not import anything above it (realization, services, orchestration, reports).
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rig.errors import RigError
from rig.process import deadlock, remote
from rig.process.remote import Host

GRACE_S = 3.0
SERVICE_DEADLINE_S = 7 * 86400.0   # a remote service's deadline: stop() ends it sooner
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
    host: str | None = None          # the remote host it ran on (None: this one)
    deadlock: str | None = None      # why it was ended early: threads waiting on each other
    deadlock_stacks: list[str] = field(default_factory=list)   # those threads' frames (gdb)
    state_at_deadline: str | None = None   # the kernel's state letter then (T: stopped)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.deadlock is None

    def tail(self, n: int = 600) -> str:
        return self.stderr[-n:]


class CommandFailed(RigError):
    def __init__(self, res: Result) -> None:
        self.result = res
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        tail = res.stderr.strip().splitlines()[-1:] or res.stdout.strip().splitlines()[-1:]
        where = f"{res.host}: " if res.host else ""
        super().__init__(f"{where}{' '.join(res.argv)}: {why}" + (f": {tail[0]}" if tail else ""))


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


def _spawn(argv: list[str], env: dict | None, stdout, stderr,
           shown: list[str] | None = None, cgroup: Path | None = None) -> subprocess.Popen:
    """`shown`: what the command log records instead of argv (a remote command as
    `@HOST argv...`, not the ssh line with the agent's source). `cgroup`: a cgroup
    directory the child is moved into right after it starts (before `ip netns exec`
    has exec'd the program; cgroup.procs moves every thread it may have by then)."""
    if _echo:
        _echo(shown or argv, None if shown else env)
        if cgroup is not None:
            _echo(["# in cgroup", str(cgroup)], None)
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
    if cgroup is not None:
        try:
            (cgroup / "cgroup.procs").write_text(str(p.pid))
        except OSError as e:
            _terminate(p)
            _unregister(p.pid)
            raise RigError(f"{argv[0]}: cannot move into cgroup {cgroup}: {e.strerror}") from e
    return p


class IoWatch:
    """Samples /proc/PID/io while a child runs: when did it finish writing `target`
    bytes? Tools give no progress when stdout is no terminal; the kernel's write count
    does, and it works for output to /dev/null. Also tells when a process lingers
    after its data is done (seen: xrdcp 5.5 -S N sometimes exits 5 s late).

    Once nothing was written for STALL_S, it also looks (every RECHECK_S) for threads of
    the child that wait for each other's mutex (rig.process.deadlock); the same cycle
    seen twice is a deadlock, and the child is ended then rather than at its deadline
    (seen: xrdcp 5.5 -y K, XrdCl's extreme copy; docs/scenarios.md, `sources: K`)."""

    INTERVAL_S = 0.005
    STALL_S = 2.0
    RECHECK_S = 1.0

    def __init__(self, target: int) -> None:
        self.target, self.wchar = target, 0
        self.done_at: float | None = None
        self.changed_at = self.checked_at = time.monotonic()
        self.suspect: deadlock.Deadlock | None = None
        self.deadlock: deadlock.Deadlock | None = None
        self.stacks: list[str] = []

    def sample(self, pid: int) -> None:
        wrote = self.wchar
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                for line in f:
                    if line.startswith(b"wchar:"):
                        self.wchar = int(line.split()[1])
                        break
        except (OSError, ValueError):
            return
        now = time.monotonic()
        if self.wchar != wrote:
            self.changed_at, self.suspect = now, None
        if self.done_at is None and self.wchar >= self.target:
            self.done_at = now

    def deadlocked(self, pid: int) -> bool:
        """True once the same mutex cycle was seen twice, RECHECK_S apart, while the
        child wrote nothing."""
        now = time.monotonic()
        if now - self.changed_at < self.STALL_S or now - self.checked_at < self.RECHECK_S:
            return False
        self.checked_at = now
        found = deadlock.find(pid)
        if found is not None and self.suspect is not None and found.cycle == self.suspect.cycle:
            self.deadlock = found
            return True
        self.suspect = found
        return False


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
                if io.deadlocked(p.pid):
                    return None
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


def _stacks(pid: int, tids: tuple[int, ...]) -> list[str]:
    """The frames of threads `tids` of a live process, from gdb where it is installed
    (optional: without it a deadlock is still found and reported, without frames)."""
    if shutil.which("gdb") is None:
        return []
    try:
        r = run(["gdb", "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt"],
                timeout=30)
    except (OSError, RigError):
        return []
    return deadlock.frames(r.stdout, tids)


def _terminate(p: subprocess.Popen) -> tuple[int, object]:
    _kill_group(p.pid, signal.SIGTERM)
    got = _wait4(p, time.monotonic() + GRACE_S)
    if got is None:
        _kill_group(p.pid, signal.SIGKILL)
        got = _wait4(p, time.monotonic() + 30) or (-9, None)
    _kill_group(p.pid, signal.SIGKILL)   # stragglers that left the leader behind
    return got


def proc_state(pid: int) -> str | None:
    """The kernel's one-letter state of a process (R, S, D, T stopped, Z), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _supervise(p: subprocess.Popen, t0: float, deadline: float,
               io: "IoWatch | None", seen: dict | None = None
               ) -> tuple[tuple[int, Any], bool, float]:
    """Wait for the child until `deadline`; past it TERM, grace, KILL the group. Always
    reaps, and kills what is left of the group after its leader. Returns ((returncode,
    rusage), timed out, wall seconds since t0); `seen["state"]`: the child's state letter
    at the deadline (a stopped client hangs without writing: T)."""
    try:
        got = _wait4(p, deadline, io)
        timed_out = got is None and (io is None or io.deadlock is None)
        if timed_out and seen is not None:
            seen["state"] = proc_state(p.pid)
        if got is None:
            if io is not None and io.deadlock is not None:     # before it is ended
                io.stacks = _stacks(p.pid, io.deadlock.cycle)
            got = _terminate(p)
    except BaseException:
        _terminate(p)
        _unregister(p.pid)
        raise
    wall = time.monotonic() - t0
    _unregister(p.pid)
    _kill_group(p.pid, signal.SIGKILL)   # no orphan of the group survives its leader
    return got, timed_out, wall


def _drain(err: Any, out: Any, stdout_path: Path | None) -> tuple[str, str]:
    """The stderr tail and (unless it went to a file) the stdout of a finished child."""
    err.seek(0)
    stderr = err.read()[-_TAIL * 4:].decode("utf-8", "replace")
    stdout = ""
    if not stdout_path:
        out.seek(0)
        stdout = out.read().decode("utf-8", "replace")
    return stderr, stdout


def run(argv: Sequence[str], *, timeout: float, netns: str | None = None,
        env: dict | None = None, check: bool = False,
        stdout_path: Path | None = None, io_target: int | None = None,
        on_start: Callable[[int], None] | None = None, host: Host | None = None,
        rundir: str | None = None, cgroup: Path | None = None) -> Result:
    """Run to completion with a deadline; capture output; account CPU of the tree.

    stdout_path: stream stdout to a file instead of memory (large outputs).
    io_target: watch the child's written bytes; Result.io_done_s tells when it had
    written that many (the end of a download's data phase).
    on_start: called with the child's pid (its process group) once it runs.
    host: run it there (rundir: the run's directory on that host, where the remote
    child's pid file lives while it runs, so `rig clean` can find it).
    cgroup: a local cgroup directory (a CPU set) the child runs in.
    """
    if host is not None:
        return _run_remote(list(ns_argv(netns, argv)), timeout=timeout, env=env, check=check,
                           stdout_path=stdout_path, io_target=io_target, on_start=on_start,
                           host=host, rundir=rundir)
    full = ns_argv(netns, argv)
    import tempfile
    with tempfile.TemporaryFile() as err, \
            (open(stdout_path, "wb") if stdout_path else tempfile.TemporaryFile()) as out:
        t0 = time.monotonic()
        p = _spawn(full, env, out, err, cgroup=cgroup)
        if on_start:
            on_start(p.pid)
        io = IoWatch(io_target) if io_target is not None else None
        seen: dict = {}
        (rc, ru), timed_out, wall = _supervise(p, t0, t0 + timeout, io, seen)
        stderr, stdout = _drain(err, out, stdout_path)
    res = Result(full, rc, stdout, stderr, wall,
                 getattr(ru, "ru_utime", 0.0), getattr(ru, "ru_stime", 0.0), timed_out,
                 state_at_deadline=seen.get("state"))
    if io is not None:
        res.io_wchar = io.wchar
        res.io_done_s = io.done_at - t0 if io.done_at is not None else None
        if io.deadlock is not None:
            res.deadlock, res.deadlock_stacks = io.deadlock.describe(), io.stacks
    if check and not res.ok:
        raise CommandFailed(res)
    return res


# the local deadline of a remote command: the agent's own deadline and grace, plus the
# time ssh may take to connect and to say the agent's last word
REMOTE_MARGIN_S = remote.CONNECT_TIMEOUT_S + 2 * GRACE_S


def _run_remote(argv: list[str], *, timeout: float, env: dict | None, check: bool,
                stdout_path: Path | None, io_target: int | None,
                on_start: Callable[[int], None] | None, host: Host,
                rundir: str | None) -> Result:
    spec = remote.run_spec(argv, timeout=timeout, env=env, rundir=rundir,
                           io_target=io_target, grace=GRACE_S)
    ssh = host.ssh_argv(remote.agent_command(spec))
    import tempfile
    with tempfile.TemporaryFile() as err, \
            (open(stdout_path, "wb") if stdout_path else tempfile.TemporaryFile()) as out:
        t0 = time.monotonic()
        p = _spawn(ssh, None, out, err, shown=[f"@{host.name}", *_env_words(env), *argv])
        if on_start:
            on_start(p.pid)
        # ssh hung past the margin: killing it closes the channel, and the agent kills
        got, local_timeout, wall = _supervise(p, t0, t0 + timeout + REMOTE_MARGIN_S, None)
        raw_err, stdout = _drain(err, out, stdout_path)
    rep, stderr = remote.parse_agent(raw_err)
    if rep is None:      # ssh itself failed (255: unreachable, key refused) or was killed
        why = stderr.strip().splitlines()[-1:] or [f"ssh exit {got[0]}"]
        res = Result(argv, got[0] if got[0] != 0 else 255, stdout,
                     f"{stderr}\nssh to {host.name} ({host.ssh}) failed: {why[0]}",
                     wall, 0.0, 0.0, local_timeout, host=host.name)
    else:
        res = Result(argv, rep["rc"], stdout, stderr, rep["wall"], rep["user"], rep["sys"],
                     rep["timed_out"] or local_timeout, rep.get("io_wchar"),
                     rep.get("io_done_s"), host=host.name)
    if check and not res.ok:
        raise CommandFailed(res)
    return res


def _env_words(env: dict | None) -> list[str]:
    return [f"{k}={v}" for k, v in (env or {}).items()]


def remote_op(host: Host, spec: dict, *, timeout: float) -> dict:
    """One of the agent's own operations (put, gen, ports, kill, clean, info) on `host`;
    its report, or RigError naming the host."""
    what = spec["op"] + (f" {spec['path']}" if "path" in spec else "")
    ssh = host.ssh_argv(remote.agent_command(spec))
    import tempfile
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        p = _spawn(ssh, None, out, err, shown=[f"@{host.name}", f"<rig agent: {what}>"])
        try:
            got = _wait4(p, time.monotonic() + timeout) or _terminate(p)
        except BaseException:
            _terminate(p)
            raise
        finally:
            _unregister(p.pid)
        err.seek(0)
        raw = err.read()[-_TAIL * 4:].decode("utf-8", "replace")
    rep, rest = remote.parse_agent(raw)
    if rep is None or rep.get("rc") != 0:
        last = rest.strip().splitlines()[-1:] or [f"exit {got[0]}"]
        raise RigError(f"host {host.name} ({host.ssh}): {what}: {last[0][:300]}")
    return rep


def put_file(host: Host, path: str, data: bytes, *, mode: int = 0o644,
             timeout: float = 60) -> None:
    remote_op(host, remote.put_spec(path, data, mode), timeout=timeout)


def fetch_tree(host: Host, remote_dir: str, local_dir: Path, *, timeout: float = 120,
               members: list[str] | None = None) -> None:
    """Copy a remote directory's regular files (or only `members`, relative to it) into
    local_dir: tar over the channel, unpacked by `unpack_regular`."""
    import tempfile
    local_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".tar") as t:
        res = run(["tar", "-C", remote_dir, "-cf", "-", *(members or ["."])], timeout=timeout,
                  host=host, stdout_path=Path(t.name))
        if not res.ok:
            raise CommandFailed(res)
        with tarfile.open(t.name) as tf:
            unpack_regular(tf, local_dir)


def unpack_regular(tf: tarfile.TarFile, dest: Path) -> None:
    """Unpack a tar's directories and regular files under dest, nothing else: no links,
    devices or FIFOs, no absolute or `..` names, modes kept to rw-r--r-- / rwxr-xr-x, no
    owners. What tarfile's 'data' filter does, also on Python before 3.11.4 (Debian 12's
    3.11.2), which lacks the filter argument."""
    from pathlib import PurePosixPath
    for m in tf.getmembers():
        parts = PurePosixPath(m.name).parts
        if not parts or PurePosixPath(m.name).is_absolute() or ".." in parts:
            continue
        parts = tuple(p for p in parts if p != ".")
        target = dest.joinpath(*parts) if parts else dest
        if m.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif m.isreg():
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                continue
            src = tf.extractfile(m)
            if src is None:
                continue
            with src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            target.chmod(0o755 if m.mode & 0o100 else 0o644)


def open_master(host: Host, *, timeout: float = remote.CONNECT_TIMEOUT_S + 5) -> "Service":
    """The run's one connection to `host` (host.control_path); every later command on
    it is a channel of this connection. Raises RigError when the host is unreachable
    or refuses the key; nothing is left running then."""
    svc = Service(host.master_argv(), name=f"ssh-master:{host.name}",
                  log_path=Path(f"{host.control_path}.log"))
    svc.start()
    deadline = time.monotonic() + timeout
    while True:
        if run(host.check_argv(), timeout=5).ok:
            return svc
        if not svc.alive() or time.monotonic() > deadline:
            svc.stop()
            tail = svc.log_tail().strip().splitlines()[-1:] or ["no answer"]
            raise RigError(f"host {host.name} ({host.ssh} port {host.port}): "
                           f"cannot connect: {tail[0][:300]}")
        time.sleep(0.05)


@dataclass
class Service:
    """A long-running child (server, emulation engine) in its own process group; on a
    remote `host`, the agent's pid file `rundir/pids/<ident>.json` names its group
    there, and stop() kills that group before it returns."""
    argv: list[str]
    netns: str | None = None
    env: dict | None = None
    log_path: Path | None = None
    name: str = ""
    host: Host | None = None
    rundir: str | None = None
    ident: str | None = None
    cgroup: Path | None = None       # a local cgroup (CPU set) it runs in
    _p: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def full_argv(self) -> list[str]:
        return ns_argv(self.netns, self.argv)

    def _local_argv(self) -> list[str]:
        if self.host is None:
            return self.full_argv
        spec = remote.run_spec(self.full_argv, timeout=SERVICE_DEADLINE_S, env=self.env,
                               rundir=self.rundir, io_target=None, grace=GRACE_S,
                               ident=self.ident)
        return self.host.ssh_argv(remote.agent_command(spec))

    @property
    def pid(self) -> int | None:
        return self._p.pid if self._p else None

    def start(self) -> "Service":
        out = open(self.log_path, "ab") if self.log_path else None
        shown = [f"@{self.host.name}", *_env_words(self.env), *self.full_argv] if self.host else None
        try:
            self._p = _spawn(self._local_argv(), None if self.host else self.env,
                             out if out is not None else subprocess.DEVNULL,
                             subprocess.STDOUT, shown=shown,
                             cgroup=None if self.host else self.cgroup)
        finally:
            if out is not None:
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
        if self.host is not None and self.rundir and self.ident:
            try:   # the remote group first: TERM, grace, KILL, there
                remote_op(self.host, {"op": "kill", "rundir": self.rundir, "id": self.ident,
                                      "grace": GRACE_S}, timeout=2 * GRACE_S + 15)
            except RigError:
                pass   # ssh gone: closing the channel below makes the agent kill it
        rc: int | None
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
