"""CPU sets as cgroups: a server's or client's `cpus:` becomes a child cgroup of its own.

A cgroup named `<run prefix>-<what>` (the prefix tells the run's own from everything
else) with `cpuset.cpus` and `cpuset.mems` written, made before the process starts; the
process is moved into it right after it starts (rig.process.proc writes its pid to
`cgroup.procs`, which moves every thread), so it and its threads run only there.

Which hierarchy: cgroup v2 where its root offers the cpuset controller (enabled in the
root's `cgroup.subtree_control` if it is not yet), else a cgroup v1 cpuset hierarchy
(hybrid hosts, such as this one: v2 mounted at /sys/fs/cgroup/unified without cpuset),
else none: the caller falls back to `taskset -c`. Removed (rmdir, once empty) with the
run, and by `rig clean` after a SIGKILL: only directories carrying a dead run's prefix.
Must not import services, orchestration or reports.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from rig.errors import RigError

ROOT = Path("/sys/fs/cgroup")
REMOVE_TIMEOUT_S = 10.0
NAME_RE = re.compile(r"^(rig[0-9a-f]{4})-[A-Za-z0-9_.-]+$")    # <run prefix>-<what>


@dataclass(frozen=True)
class Hierarchy:
    method: str          # "cgroup2" | "cgroup1" (recorded with the run)
    root: Path           # where the run's cgroups are made

    def path(self, name: str) -> Path:
        return self.root / name


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, options) of every cgroup mount."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            f = line.split()
            if len(f) >= 4 and f[2] in ("cgroup", "cgroup2"):
                out.append((f[1], f[2], f[3]))
    return out


def detect() -> Hierarchy | None:
    """The hierarchy that can hold a cpuset here, v2 first; None: use taskset."""
    mounts = _mounts()
    for mnt, fstype, _ in mounts:
        if fstype == "cgroup2":
            ctl = Path(mnt) / "cgroup.controllers"
            with contextlib.suppress(OSError):
                if "cpuset" in ctl.read_text().split():
                    return Hierarchy("cgroup2", Path(mnt))
    for mnt, fstype, opts in mounts:
        if fstype == "cgroup" and "cpuset" in opts.split(",") \
                and (Path(mnt) / "cpuset.cpus").exists():
            return Hierarchy("cgroup1", Path(mnt))
    return None


def cgroup_name(prefix: str, what: str) -> str:
    """`<prefix>-<what>` with anything but [A-Za-z0-9_.-] replaced by `_`."""
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in what)
    return f"{prefix}-{safe}"


def make(h: Hierarchy, name: str, cpus: str) -> Path:
    """The cgroup `name` pinned to `cpus` (and the memory nodes its parent allows)."""
    d = h.path(name)
    if h.method == "cgroup2":
        sub = h.root / "cgroup.subtree_control"
        if "cpuset" not in sub.read_text().split():
            sub.write_text("+cpuset")
    d.mkdir()
    try:
        mems = (h.root / "cpuset.mems.effective" if h.method == "cgroup2"
                else h.root / "cpuset.mems").read_text().strip() or "0"
        (d / "cpuset.cpus").write_text(cpus)
        (d / "cpuset.mems").write_text(mems)
    except OSError as e:
        with contextlib.suppress(OSError):
            d.rmdir()
        raise RigError(f"cgroup {d}: cannot pin to CPUs {cpus}: {e.strerror}") from None
    return d


def procs_file(d: Path) -> Path:
    return d / "cgroup.procs"


def pids(d: Path) -> list[int]:
    try:
        return [int(x) for x in procs_file(d).read_text().split()]
    except OSError:
        return []


def remove(d: Path, timeout: float = REMOVE_TIMEOUT_S) -> bool:
    """rmdir once its processes are gone (they are being reaped); False if still busy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def rig_cgroups() -> list[tuple[str, Path]]:
    """(run prefix, directory) of every cgroup named by a rig run, in the hierarchy
    that holds them here."""
    h = detect()
    if h is None or not h.root.is_dir():
        return []
    return sorted((m.group(1), d) for d in h.root.iterdir()
                  if d.is_dir() and (m := NAME_RE.match(d.name)))


def drop(d: Path) -> bool:
    """A run's teardown: its processes were stopped before; anything still inside is the
    run's own (a client the shutdown has not reaped yet), killed, then the cgroup goes."""
    kill_inside(d)
    return remove(d)


def kill_inside(d: Path) -> list[int]:
    """SIGKILL what is left inside a dead run's cgroup (only its own processes live there)."""
    import signal
    left = pids(d)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left
