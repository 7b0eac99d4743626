"""`rig clean`: remove what a killed run or an abandoned `rig net up` left behind.

Only the rig's own resources: namespaces named `rig<4 hex>-<n><c|r|s>` (with the
processes inside them), tmpfs mounts whose source is `rig<4 hex>-data`, processes whose
pid and argv a run recorded in its state file, cgroups named `<prefix>-...` (CPU sets,
with what still runs inside them), the run's address lease, and host
sysctls the run recorded before changing them, and on every remote host the run recorded
(before touching it) its run directory and the processes its pid files name there.

Only what belongs to a dead owner goes (rig/process/owner.py: pid + start time, so a reused pid
does not count as alive): a run whose process is gone; a `net up` path whose owner (the
shell or script that ran `rig net up`, or its `--owner-pid`) is gone; anything with no
state file at all (state is always written before anything is built). A path made by
an older rig without an owner record is kept. Every prefix left is named with the
reason, one line each. `force` removes live things too; `prefixes` restricts the whole
sweep to the given prefixes (tests use it so they never touch another user's paths).
Must not import services or reports.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Collection

from rig.realization import cgroups, gateway, netns, tuning

from rig.errors import RigError
from rig.orchestration import hosts as remote_hosts
from rig.realization import remote_router, remote_tuning
from rig.process import owner, proc
from rig.realization import data, diskdata
from rig.description import storage
from rig.results.store import RESERVE


@dataclass
class Cleaned:
    removed: int = 0
    left: list[str] = field(default_factory=list)     # prefixes kept because in use


def judge(st: dict | None) -> tuple[bool, str, str]:
    """(in use?, why, how to remove it anyway) for one state file (None: no state file)."""
    if st is None:
        return False, "no state file: left by a killed rig", ""
    kind = st.get("kind")
    if kind == "net":
        name = st.get("name", "?")
        what, hint = f"net up {name!r}", f"use rig net down --name {name}, or rig clean --force"
        live = owner.state_alive(st)
        if live is None:
            return True, f"{what}, no owner recorded (made by an older rig)", hint
        who = owner.describe(st)
        if live:
            return True, f"{what}, {who} alive", hint
        return False, f"{what}, {who} gone", hint
    if kind == "run":
        pid = st.get("pid")
        hint = "stop the run (Ctrl-C or SIGTERM), or rig clean --force"
        if owner.alive(pid, st.get("pid_start")):
            return True, f"run, pid {pid} alive", hint
        return False, f"run, pid {pid} gone", hint
    return False, f"unknown kind {kind!r}", ""


class _Sweep:
    def __init__(self, force: bool, say: Callable[[str], None],
                 prefixes: Collection[str] | None) -> None:
        self.force, self.say, self.only = force, say, prefixes
        self.states = {p: st for p, st in netns.read_states().items() if self.mine(p)}
        self.decided: dict[str, bool] = {}
        self.out = Cleaned()

    def mine(self, prefix: str) -> bool:
        return bool(netns.PREFIX_RE.match(prefix)) and (self.only is None or prefix in self.only)

    def live(self, prefix: str) -> bool:
        """Decide once per prefix and say why. A state file that appeared after the sweep
        began (a run or net up starting now) is read fresh, never taken for an orphan."""
        if prefix not in self.decided:
            st = self.states.get(prefix)
            if st is None and (netns.STATE_DIR / f"{prefix}.json").exists():
                st = netns.read_states().get(prefix)
                if st is not None:
                    self.states[prefix] = st
            in_use, why, hint = judge(st)
            if in_use and not self.force:
                self.say(f"left {prefix} ({why}): {hint}")
                self.out.left.append(prefix)
            elif in_use:
                self.say(f"removing {prefix} although in use ({why}): --force")
            elif st is not None:
                self.say(f"removing {prefix} ({why})")
            self.decided[prefix] = in_use and not self.force
        return self.decided[prefix]


def _kill_recorded(st: dict, say) -> None:
    starts = st.get("pid_starts", {})
    killed = []
    for pid, argv0 in st.get("pids", []):
        cmd = _cmdline(pid)
        same = owner.alive(pid, starts.get(str(pid)))
        if same and cmd and argv0 in cmd:   # the very process we started, not a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
            say(f"killed pid {pid} ({argv0})")
    for pid in netns.await_exit(killed):
        say(f"pid {pid} still exiting after {netns.EXIT_WAIT_S:g} s")


def _clean_hosts(prefix: str, st: dict, say) -> bool:
    """The remote hosts a dead run recorded; False when one could not be reached (its
    state file then stays, so a later `rig clean` tries again)."""
    ok = True
    for name, d in st.get("hosts", {}).items():
        h = remote_hosts.from_state(name, d)
        try:
            for path, rec in d.get("router", {}).items():   # an emulated path it routed
                for what in remote_router.undo(h, rec):
                    say(f"{what} on router host {name} (path {path})")
            if d.get("tuning"):      # recorded before the run wrote it
                for what in remote_tuning.restore(h, d["tuning"]):
                    say(f"restored {what} on host {name}")
            rep = remote_hosts.clean_host(h, d["rundir"])
        except RigError as e:
            say(f"left host {name} of {prefix}: {e}")
            ok = False
            continue
        for pg, argv0 in rep.get("killed", []):
            say(f"killed process group {pg} ({argv0}) on host {name}")
        if rep.get("removed"):
            say(f"removed {d['rundir']} on host {name}")
    return ok


def _remove_downloads(prefix: str, st: dict, say) -> None:
    """A dead run's plain-download files (`dest_dir`): `<prefix>-*` in the directories
    its state file names, nothing else; and the space it kept aside in its output folder."""
    for d in st.get("dest_dirs", []):
        with contextlib.suppress(OSError):
            for f in Path(d).iterdir():
                if f.name.startswith(f"{prefix}-") and f.is_file():
                    f.unlink()
                    say(f"removed {f}")
    if st.get("out"):      # the run's reserve in its output folder (rig.results.store)
        reserve = Path(st["out"]) / RESERVE
        with contextlib.suppress(OSError):
            reserve.unlink()
            say(f"removed {reserve}")


def _remove_disk_data(prefix: str, st: dict | None, say) -> None:
    """A dead run's `storage: disk` folder: the one its state names (only if named
    `<prefix>-data`), else one of that name in the default directory."""
    named = Path(st["disk_data"]) if st and st.get("disk_data") else None
    for d in ([named] if named else []) + [diskdata.folder(storage.DEFAULT_DIR, prefix)]:
        if d.name == f"{prefix}-data" and diskdata.remove(d):
            say(f"removed {d}")


def _clean_gateway(prefix: str, st: dict, say) -> None:
    """An external endpoint's gateway on this host (rig.realization.gateway): the
    iptables rules with the run's prefix as their comment, the forwarding sysctl put
    back (where it still holds what the run wrote), the host's end of the veth."""
    rec = st.get("endpoint")
    if not rec:
        return
    for argv in gateway.leftover_rules(prefix):
        proc.run(argv, timeout=20)
        say(f"removed iptables rule of {prefix}: {' '.join(argv[4:])}")
    if rec.get("sysctls_restore"):
        tuning.restore_global(rec["sysctls_restore"], rec.get("sysctls_wrote"))
        say(f"restored {', '.join(rec['sysctls_restore'])} recorded by {prefix}")
    for link in rec.get("links", []):
        if link.startswith(prefix) and Path("/sys/class/net", link).exists():
            proc.run(["ip", "link", "del", link], timeout=20)
            say(f"deleted link {link}")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return []
    return [x.decode(errors="replace") for x in raw.split(b"\0") if x]


def _delete_ns(ns: str, say) -> None:
    pids = netns.ns_pids(ns)
    infos = {p: owner.info(p) for p in pids}
    comms = sorted({i.comm if i else str(p) for p, i in infos.items()})
    netns.kill_ns_processes(ns)
    proc.run(["ip", "netns", "del", ns], timeout=20)
    killed = f" (killed {len(pids)} process(es) inside: {', '.join(comms)})" if pids else ""
    say(f"deleted namespace {ns}{killed}")


def clean(*, force: bool = False, say: Callable[[str], None] = print,
          prefixes: Collection[str] | None = None) -> Cleaned:
    """Remove leftovers of dead owners (all of the rig's if `force`), only among
    `prefixes` when given; say one line per prefix left or removed."""
    sw = _Sweep(force, say, prefixes)
    out = sw.out
    unreachable: set[str] = set()    # prefixes whose state stays: a host left to clean
    for p, st in list(sw.states.items()):
        if sw.live(p):
            continue
        _kill_recorded(st, say)
        if st.get("sysctls_restore"):
            tuning.restore_global(st["sysctls_restore"], st.get("sysctls_wrote"))
            say(f"restored {', '.join(st['sysctls_restore'])} recorded by {p}")
        _clean_gateway(p, st, say)
        if not _clean_hosts(p, st, say):
            unreachable.add(p)
        _remove_downloads(p, st, say)
        _remove_disk_data(p, st, say)
    for ns in netns.list_namespaces():
        m = netns.NS_RE.match(ns)
        if m is None:
            continue
        p = m.group(1)
        if not sw.mine(p) or sw.live(p):
            continue
        _delete_ns(ns, say)
        out.removed += 1
    if netns.ETC_NETNS.is_dir():
        for d in netns.ETC_NETNS.iterdir():
            m = netns.NS_RE.match(d.name)
            if m and sw.mine(m.group(1)) and not sw.live(m.group(1)) \
                    and d.name not in netns.list_namespaces():
                netns.forget_resolver(d.name)
    for p, d in cgroups.rig_cgroups():      # CPU sets: only a dead run's own
        if not sw.mine(p) or sw.live(p):
            continue
        killed = cgroups.kill_inside(d)
        if cgroups.remove(d):
            say(f"removed cgroup {d}" + (f" (killed {len(killed)} process(es) inside)"
                                         if killed else ""))
            out.removed += 1
        else:
            say(f"left cgroup {d}: still busy")
    for src, mnt in data.rig_mounts():
        if not sw.mine(src[:7]) or sw.live(src[:7]):
            continue
        proc.run(data.umount_argv(Path(mnt)), timeout=20)
        say(f"unmounted {mnt}")
        out.removed += 1
    leases = netns.STATE_DIR / "leases"
    holders = {f.read_text().strip() for f in leases.iterdir()} if leases.is_dir() else set()
    for p in sorted(set(sw.states) | {h for h in holders if sw.mine(h)}):
        if sw.live(p):
            continue
        netns.release_subnet(p)
        if p in unreachable:
            continue
        netns.drop_state(p)
        with contextlib.suppress(OSError):
            shutil.rmtree(netns.STATE_DIR / p)
    # storage: disk folders in the default directory whose run left no state file
    with contextlib.suppress(OSError):
        for d in Path(storage.DEFAULT_DIR).iterdir():
            m = diskdata.DIR_RE.fullmatch(d.name)
            if m and sw.mine(m.group(1)) and m.group(1) not in sw.states \
                    and not sw.live(m.group(1)):
                _remove_disk_data(m.group(1), None, say)
    # run directories whose run left neither a state file nor a namespace
    if netns.STATE_DIR.is_dir():
        for d in netns.STATE_DIR.iterdir():
            if d.is_dir() and sw.mine(d.name) and not sw.live(d.name) \
                    and d.name not in sw.states and not data.is_mounted_below(d):
                shutil.rmtree(d, ignore_errors=True)
                say(f"removed {d}")
    return out
