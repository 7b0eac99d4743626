"""Who owns a run or a hand-built path, and whether that owner still lives.

An owner is a process identified by its pid *and* its start time (field 22 of
/proc/PID/stat, clock ticks since boot): a pid alone can be reused by an unrelated
process after the owner died, the pair cannot. `rig clean` removes only what belongs to
dead owners.

For `rig net up` the owner is, unless `--owner-pid` names one (`--owner-pid 1`: until
`rig net down`), found by `find()`:

1. Walk up from the rig's parent, skipping every process that lives only as long as the
   rig command itself:
   - wrappers that exec or wait for the rig (`WRAPPERS`: sudo, setsid, nohup, timeout,
     flock, ...);
   - subshells: a process forked from its parent without an exec (same executable, same
     command line, same load address as its parent), such as the `$( )` of
     `j=$(rig net up ... 2>/dev/null)`, a `( )` or a pipeline's element. A subshell dies
     as soon as the output is captured; the script it belongs to is its parent.
   The first other process is the owner: the interactive shell, or the script.
2. If the walk reaches PID 1 or a service manager (`systemd`), the rig was orphaned (a
   `setsid` that forked, `setsid -f`) or started by a service manager (`systemd-run`).
   Then the owner is, in this order: the process reading the rig's stdout pipe (the
   script of `j=$(setsid -f rig net up ...)`), walked up as in 1; the session leader of
   the terminal on the rig's stdin/stdout/stderr (the interactive shell); the systemd
   service unit whose cgroup the rig runs in (alive while that cgroup holds a process).
3. Nothing found: PID 1, i.e. the path lives until `rig net down`.

While someone works in that terminal or script the path is theirs, and `rig clean` must
not pull it from under a running ping or iperf3; once the terminal or script is gone (ssh
dropped, CI job killed) nobody will ever run `rig net down`, so `rig clean` may reclaim it.

Reads /proc (and /sys/fs/cgroup) only; must not import anything else from rig. Every
reader takes the /proc root as an argument so the logic is testable on a fake tree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")

# Programs that exec or wait for the rig and exit with it: never a useful owner.
WRAPPERS = frozenset({"sudo", "su", "doas", "runuser", "pkexec", "setpriv", "setsid", "nohup",
                      "timeout", "flock", "env", "nice", "ionice", "chrt", "taskset", "stdbuf",
                      "time", "systemd-run"})
# Processes that adopt orphans or start services: reaching one ends the walk up.
MANAGERS = frozenset({"systemd", "init"})


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    state: str
    ppid: int
    start: int          # clock ticks after boot (/proc/PID/stat field 22)
    session: int = 0    # field 6
    tty: int = 0        # field 7: the controlling terminal's device number, 0 if none


@dataclass(frozen=True)
class Owner:
    """Who owns a path: a process (pid + start), or a systemd unit's cgroup directory."""
    how: str                        # parent / stdout reader / terminal / unit / none / given
    proc: ProcInfo | None = None
    cgroup: str | None = None


def parse_stat(text: str) -> ProcInfo:
    """Parse one /proc/PID/stat line (pure). The command name may hold spaces and ')'."""
    head, _, rest = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    fields = rest.split()
    # fields[0] is field 3 (state); field N is fields[N - 3]
    return ProcInfo(int(pid_s), comm, fields[0], int(fields[1]), int(fields[19]),
                    int(fields[3]), int(fields[4]))


def info(pid: int, proc: Path = PROC) -> ProcInfo | None:
    if pid <= 0:
        return None
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    i = info(pid)
    return i.start if i else None


def alive(pid: int | None, start: int | None, proc: Path = PROC) -> bool:
    """True if `pid` runs and, when `start` is known, is the very process recorded."""
    if not pid:
        return False
    i = info(int(pid), proc)
    if i is None or i.state in ("Z", "X"):      # a zombie has exited already
        return False
    return start is None or i.start == start


def _read(p: Path) -> bytes | None:
    try:
        return p.read_bytes()
    except OSError:
        return None


def _link(p: Path) -> str | None:
    try:
        return os.readlink(p)
    except OSError:
        return None


def _base(pid: int, proc: Path) -> str | None:
    """The address of the first mapping (the executable's): equal in a parent and a child
    it forked, different after an exec (address-space randomisation)."""
    maps = _read(proc / str(pid) / "maps")
    return maps.split(b"-", 1)[0].decode() if maps else None


def is_fork(child: ProcInfo, parent: ProcInfo, proc: Path = PROC) -> bool:
    """True if `child` is `parent` forked without an exec (a shell's subshell)."""
    if child.comm != parent.comm:
        return False
    pairs = [(_link(proc / str(p) / "exe"), _read(proc / str(p) / "cmdline"), _base(p, proc))
             for p in (child.pid, parent.pid)]
    return None not in pairs[0] and pairs[0] == pairs[1]


def climb(start: ProcInfo | None, proc: Path = PROC) -> ProcInfo | None:
    """From `start` up: the first process that is neither a wrapper nor a subshell; None
    when the walk reaches PID 1 or a service manager first."""
    cur = start
    while cur is not None and cur.pid > 1 and cur.comm not in MANAGERS:
        par = info(cur.ppid, proc)
        if cur.comm in WRAPPERS or (par is not None and is_fork(cur, par, proc)):
            cur = par
            continue
        return cur
    return None


def _pids(proc: Path) -> list[int]:
    try:
        return [int(d.name) for d in proc.iterdir() if d.name.isdigit()]
    except OSError:
        return []


def stdout_reader(pid: int, proc: Path = PROC) -> ProcInfo | None:
    """Another process holding the read end of `pid`'s stdout pipe (`$( )`'s shell)."""
    target = _link(proc / str(pid) / "fd" / "1")
    if not target or not target.startswith("pipe:"):
        return None
    for p in sorted(_pids(proc)):
        if p == pid:
            continue
        try:
            fds = list((proc / str(p) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            if _link(fd) != target:
                continue
            fdinfo = _read(proc / str(p) / "fdinfo" / fd.name) or b""
            flags = next((ln.split()[1] for ln in fdinfo.splitlines()
                          if ln.startswith(b"flags:")), b"1")
            if int(flags, 8) & os.O_ACCMODE == os.O_RDONLY:
                return info(p, proc)
    return None


def _tty_dev(pid: int, proc: Path) -> int | None:
    """The device number of a terminal on `pid`'s stdin, stdout or stderr."""
    for fd in ("0", "1", "2"):
        t = _link(proc / str(pid) / "fd" / fd)
        if t and (t.startswith("/dev/pts/") or t.startswith("/dev/tty")):
            try:
                return os.stat(proc / str(pid) / "fd" / fd).st_rdev
            except OSError:
                continue
    return None


def terminal_leader(pid: int, proc: Path = PROC) -> ProcInfo | None:
    """The session leader of the terminal `pid` writes to (the interactive shell)."""
    dev = _tty_dev(pid, proc)
    if not dev:
        return None
    for p in sorted(_pids(proc)):
        i = info(p, proc)
        if i is not None and i.tty == dev and i.session == i.pid and i.pid != pid:
            return i
    return None


def service_cgroup(pid: int, proc: Path = PROC, cgroot: Path = CGROUP) -> str | None:
    """The cgroup directory of the systemd service unit `pid` runs in, if any."""
    raw = _read(proc / str(pid) / "cgroup") or b""
    for line in raw.decode(errors="replace").splitlines():
        hier, _, path = line.partition(":")[2].partition(":")
        if hier not in ("", "name=systemd") or not path.endswith(".service"):
            continue
        d = cgroot / path.lstrip("/") if hier == "" else cgroot / "systemd" / path.lstrip("/")
        if d.is_dir():
            return str(d)
    return None


def cgroup_alive(cgroup: str) -> bool:
    """A unit lives while its cgroup exists and holds a process."""
    procs = _read(Path(cgroup) / "cgroup.procs")
    return bool(procs and procs.strip())


def find(pid: int | None = None, proc: Path = PROC, cgroot: Path = CGROUP) -> Owner:
    """Who owns what `pid` (default: this process) builds; see the module's docstring."""
    pid = pid or os.getpid()
    me = info(pid, proc)
    if me is None:
        return Owner("none")
    found = climb(info(me.ppid, proc), proc)
    if found is not None:
        return Owner("parent", found)
    reader = stdout_reader(pid, proc)
    found = climb(reader, proc) if reader else None
    if found is not None:
        return Owner("stdout reader", found)
    found = terminal_leader(pid, proc)
    if found is not None:
        return Owner("terminal", found)
    unit = service_cgroup(pid, proc, cgroot)
    if unit is not None:
        return Owner("unit", cgroup=unit)
    return Owner("none")


def record(pid: int) -> dict:
    """What a state file stores about an owner: pid, start time, name (for messages)."""
    i = info(pid)
    if i is None:
        raise ProcessLookupError(pid)
    return {"owner_pid": i.pid, "owner_start": i.start, "owner_comm": i.comm}


def record_owner(o: Owner) -> dict:
    """What a state file stores about `o` (a unit: its cgroup; nothing found: PID 1)."""
    if o.cgroup is not None:
        return {"owner_cgroup": o.cgroup, "owner_how": o.how}
    return dict(record(o.proc.pid if o.proc else 1), owner_how=o.how)


def state_alive(st: dict) -> bool | None:
    """Whether the owner a state file names lives (None: no owner recorded)."""
    if "owner_cgroup" in st:
        return cgroup_alive(st["owner_cgroup"])
    if "owner_pid" not in st:
        return None
    return alive(st["owner_pid"], st.get("owner_start"))


def describe(st: dict) -> str:
    """The owner a state file names, for messages: `owner pid 1234 (bash)`."""
    if "owner_cgroup" in st:
        return f"owner unit {Path(st['owner_cgroup']).name}"
    return f"owner pid {st.get('owner_pid')} ({st.get('owner_comm', '?')})"
