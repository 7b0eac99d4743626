"""CPU time of a running process tree, read from /proc (no process is started).

A server's CPU during a transfer group is the difference of two samples of its tree
(the process, every thread — counted in the process's own utime/stime — and every
descendant, e.g. nginx's workers). Children that exit between the samples are counted
only if their parent reaped them (then they are in the parent's cutime/cstime, which
is added too); servers here keep their workers for the whole run.

Must not import anything above rig.process.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSample:
    user_s: float
    sys_s: float

    def __sub__(self, other: "CpuSample") -> "CpuSample":
        return CpuSample(max(0.0, self.user_s - other.user_s),
                         max(0.0, self.sys_s - other.sys_s))


def parse_stat(text: str) -> tuple[int, float, float]:
    """(ppid, user_s, sys_s) of one /proc/PID/stat line, reaped children included.
    The command name (field 2) may hold spaces and parentheses: fields are counted from
    the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return ppid, (utime + cutime) / _TICK, (stime + cstime) / _TICK


def _stats(proc_root: Path) -> dict[int, tuple[int, float, float]]:
    out = {}
    for d in proc_root.iterdir():
        if not d.name.isdigit():
            continue
        try:
            out[int(d.name)] = parse_stat((d / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue       # exited while we looked
    return out


def tree_cpu(pid: int, proc_root: Path = Path("/proc")) -> CpuSample | None:
    """User and system seconds of `pid` and all its descendants; None if it is gone."""
    stats = _stats(proc_root)
    if pid not in stats:
        return None
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(p)
    user = sys_ = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        _, u, s = stats[p]
        user, sys_ = user + u, sys_ + s
        todo.extend(children.get(p, ()))
    return CpuSample(user, sys_)


@dataclass(frozen=True)
class HostCpu:
    """The whole host's CPU time so far (/proc/stat's `cpu` line), in seconds summed over
    its CPUs: `busy_s` everything but idle and iowait (steal counts as busy: CPU the VM
    wanted and did not get), `total_s` all of it, `cpus` the number of CPUs listed."""
    busy_s: float
    total_s: float
    cpus: int
    irq_s: float = 0.0       # of busy_s: interrupts and softirqs (the network stack's work)
    steal_s: float = 0.0     # of busy_s: taken by the hypervisor

    def share_since(self, before: "HostCpu", what: str = "busy_s") -> float | None:
        """Share of the host's CPUs between `before` and this snapshot (0..1) that was
        busy (or, `what`, went to interrupts: irq_s, or to the hypervisor: steal_s)."""
        total = self.total_s - before.total_s
        if total <= 0:
            return None
        return min(1.0, max(0.0, (getattr(self, what) - getattr(before, what)) / total))


def parse_proc_stat(text: str) -> HostCpu:
    """/proc/stat -> HostCpu. The `cpu` line's fields are user nice system idle iowait
    irq softirq steal guest guest_nice in ticks; guest time is inside user already."""
    cpus, agg = 0, None
    for line in text.splitlines():
        if line.startswith("cpu "):
            agg = [int(x) for x in line.split()[1:]]
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
    if agg is None or len(agg) < 4:
        raise ValueError("no cpu line in /proc/stat")
    agg = (agg + [0] * 8)[:8]
    total = sum(agg)
    idle = agg[3] + agg[4]
    return HostCpu((total - idle) / _TICK, total / _TICK, cpus, (agg[5] + agg[6]) / _TICK,
                   agg[7] / _TICK)


def host_cpu(proc_root: Path = Path("/proc")) -> HostCpu | None:
    """This host's HostCpu now; None when /proc/stat cannot be read."""
    try:
        return parse_proc_stat((proc_root / "stat").read_text())
    except (OSError, ValueError):
        return None
