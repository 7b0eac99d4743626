"""Who owns a run or a hand-built path, and whether that owner still lives.

An owner is a process identified by its pid *and* its start time (field 22 of
/proc/PID/stat, clock ticks since boot): a pid alone can be reused by an unrelated
process after the owner died, the pair cannot. `rig clean` removes only what belongs to
dead owners.

For `rig net up` the owner is, by default, the process that invoked the rig (the user's
shell or script), skipping privilege wrappers such as sudo that live only as long as the
rig command itself: a path built by hand lasts as long as the terminal or script that
built it, or until `rig net down`. `--owner-pid` names another process (`--owner-pid 1`:
until `rig net down`, since pid 1 never exits). Why this default: while someone works in
that terminal or script the path is theirs, and `rig clean` must not pull it from under
a running ping or iperf3; once the terminal or script is gone (ssh dropped, CI job
killed) nobody will ever run `rig net down`, so `rig clean` may reclaim it. A caller
that exits right after the rig (a Makefile's `sh -c` line, `timeout rig ...`) should
pass --owner-pid, or the path is reclaimable at once.

Reads /proc only; must not import anything else from rig.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

# Programs that exec or wait for the rig and exit with it: never a useful owner.
WRAPPERS = frozenset({"sudo", "su", "doas", "runuser", "pkexec", "setpriv"})


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    state: str
    ppid: int
    start: int          # clock ticks after boot (/proc/PID/stat field 22)


def parse_stat(text: str) -> ProcInfo:
    """Parse one /proc/PID/stat line (pure). The command name may hold spaces and ')'."""
    head, _, rest = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    fields = rest.split()
    # fields[0] is field 3 (state); field N is fields[N - 3]
    return ProcInfo(int(pid_s), comm, fields[0], int(fields[1]), int(fields[19]))


def info(pid: int) -> ProcInfo | None:
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return parse_stat(f.read())
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    i = info(pid)
    return i.start if i else None


def alive(pid: int | None, start: int | None) -> bool:
    """True if `pid` runs and, when `start` is known, is the very process recorded."""
    if not pid:
        return False
    i = info(int(pid))
    if i is None or i.state in ("Z", "X"):      # a zombie has exited already
        return False
    return start is None or i.start == start


def invoker(pid: int | None = None) -> ProcInfo | None:
    """The process that invoked `pid` (default: this one), past sudo & co."""
    me = info(pid or os.getpid())
    cur = info(me.ppid) if me else None
    while cur is not None and cur.comm in WRAPPERS and cur.ppid > 0:
        cur = info(cur.ppid)
    return cur


def record(pid: int) -> dict:
    """What a state file stores about an owner: pid, start time, name (for messages)."""
    i = info(pid)
    if i is None:
        raise ProcessLookupError(pid)
    return {"owner_pid": i.pid, "owner_start": i.start, "owner_comm": i.comm}
