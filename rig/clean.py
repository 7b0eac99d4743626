"""`rig clean`: remove what a killed run or a forgotten `rig net up` left behind.

Only the rig's own resources: namespaces named `rig<4 hex>-<n><c|r|s>` (with the
processes inside them), tmpfs mounts whose source is `rig<4 hex>-data`, processes whose
pid and argv a run recorded in its state file, the run's address lease, and host
sysctls the run recorded before changing them. Runs whose owner process is alive are
left alone unless `force`. Must not import services or reports.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal

from . import netns, proc, tuning
from .services import data


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return []
    return [x.decode(errors="replace") for x in raw.split(b"\0") if x]


def _kill_recorded(st: dict, say) -> None:
    for pid, argv0 in st.get("pids", []):
        cmd = _cmdline(pid)
        if cmd and argv0 in cmd:       # the very process we started, not a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            say(f"killed pid {pid} ({argv0})")


def clean(*, force: bool = False, say=print) -> int:
    """Remove leftovers; return how many resources were removed."""
    states = netns.read_states()
    live = {p for p, st in states.items()
            if not force and st.get("kind") == "run" and _alive(st.get("pid"))}
    n = 0
    for p, st in states.items():
        if p in live:
            continue
        _kill_recorded(st, say)
        if st.get("sysctls_restore"):
            tuning.restore_global(st["sysctls_restore"], st.get("sysctls_wrote"))
            say(f"restored {', '.join(st['sysctls_restore'])} recorded by {p}")
    for ns in netns.list_namespaces():
        owner = netns.NS_RE.match(ns).group(1)
        if owner in live:
            continue
        netns.kill_ns_processes(ns)
        proc.run(["ip", "netns", "del", ns], timeout=20)
        say(f"deleted namespace {ns}")
        n += 1
    if netns.ETC_NETNS.is_dir():
        for d in netns.ETC_NETNS.iterdir():
            m = netns.NS_RE.match(d.name)
            if m and m.group(1) not in live and d.name not in netns.list_namespaces():
                netns.forget_resolver(d.name)
    for src, mnt in data.rig_mounts():
        if src[:7] in live:
            continue
        proc.run(data.umount_argv(mnt), timeout=20)
        say(f"unmounted {mnt}")
        n += 1
    leases = netns.STATE_DIR / "leases"
    owners = {f.read_text().strip() for f in leases.iterdir()} if leases.is_dir() else set()
    for p in set(states) | owners:
        if p in live:
            continue
        netns.release_subnet(p)
        netns.drop_state(p)
        with contextlib.suppress(OSError):
            shutil.rmtree(netns.STATE_DIR / p)
    # run directories whose run left neither a state file nor a namespace
    if netns.STATE_DIR.is_dir():
        for d in netns.STATE_DIR.iterdir():
            if d.is_dir() and netns.PREFIX_RE.match(d.name) and d.name not in live \
                    and d.name not in states and not data.is_mounted_below(d):
                shutil.rmtree(d, ignore_errors=True)
                say(f"removed {d}")
    return n
