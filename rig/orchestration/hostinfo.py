"""What this host is and can do: kernel, tool versions, sysctls, emulation backends.

Used by `rig doctor` and stored with every run. Must not import orchestration or reports.
"""
from __future__ import annotations

import os
import re
import shutil

from rig.process import proc
from rig.services import servers, tools
from rig.services.replay import http_helper

# name -> argv printing its version: every server kind and client tool declares its
# own; these are the system tools the rig itself runs.
SYSTEM_TOOLS = {"ping": ["ping", "-V"], "iptables": ["iptables", "--version"],
                "tc": ["tc", "-V"], "ip": ["ip", "-V"]}


def version_argvs() -> dict[str, list[str]]:
    return {**{k.kind: k.version_argv for k in servers.all_kinds() if k.version_argv},
            **{t.name: t.version_argv for t in tools.all_tools() if t.version_argv},
            **SYSTEM_TOOLS}
SYSCTLS = ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
           "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_allowed_congestion_control",
           "net.ipv4.tcp_available_congestion_control", "net.ipv4.tcp_mtu_probing",
           "net.core.default_qdisc")


def probe_argvs() -> list[list[str]]:
    """What `summary` runs for the tool versions, each where installed (`rig plan`)."""
    out: list[list[str]] = []
    for argv in version_argvs().values():
        if argv not in out:
            out.append(argv)
    return out + [["<rig-replay-http>", "--version"]]


def tool_version(name: str) -> str | None:
    argv = version_argvs()[name]
    if not shutil.which(argv[0]):
        return None
    r = proc.run(argv, timeout=10)
    text = (r.stdout + "\n" + r.stderr).strip()
    m = re.search(r"v?(\d+\.\d+(?:\.\d+)?(?:[-.\w]*)?)", text)
    return m.group(0) if m else (text.splitlines()[0][:80] if text else "unknown")


def tool_versions() -> dict[str, str | None]:
    return {n: tool_version(n) for n in version_argvs()} | {http_helper.NAME: helper_version()}


def helper_version() -> str | None:
    """The caching replay's HTTP helper (tools/rig-replay-http): the libdavix and libcurl
    it was built with, or None when it is not built."""
    exe = http_helper.path()
    if exe is None:
        return None
    r = proc.run([exe, "--version"], timeout=10)
    return r.stdout.strip().splitlines()[0] if r.ok and r.stdout.strip() else None


def sysctls() -> dict[str, str | None]:
    from rig.realization.tuning import read
    return read(SYSCTLS)


def distribution() -> dict:
    """The OS, its package family (rig.packages) and the packages of its map not installed."""
    from pathlib import Path
    from rig import packages
    try:
        rel = packages.os_release(Path("/etc/os-release").read_text())
    except OSError:
        rel = {}
    fam = packages.family(rel)
    out: dict = {"os": rel.get("PRETTY_NAME") or rel.get("ID") or "unknown", "family": fam,
                 "missing": None}
    if fam is not None:
        r = proc.run(packages.query_argv(fam), timeout=30)
        have = packages.installed_from(fam, r.stdout).__contains__
        out["missing"] = packages.missing(fam, have)
        out["missing_by_feature"] = packages.missing_by_feature(fam, have)
    return out


def summary() -> dict:
    u = os.uname()
    return {"kernel": u.release, "machine": u.machine, "hostname": u.nodename,
            "cpus": os.cpu_count(), "tools": tool_versions(), "sysctls": sysctls(),
            "scheduling": scheduling()}


_PREEMPT_CONFIG = (("CONFIG_PREEMPT_RT", "rt"), ("CONFIG_PREEMPT_LAZY", "lazy"),
                   ("CONFIG_PREEMPT", "full"), ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"),
                   ("CONFIG_PREEMPT_NONE", "none"))


def preemption(debugfs: str = "/sys/kernel/debug/sched/preempt",
               cmdline: str = "/proc/cmdline", configs: tuple[str, ...] = ()) -> str | None:
    """The kernel's preemption model: what sched/preempt says is in force (the mode in
    parentheses), else the boot parameter `preempt=`, else the build's default from the
    kernel config. It decides how long a SCHED_FIFO engine's wake-up can wait for a task
    inside a syscall on its CPU (none/voluntary: until it returns; full/lazy/rt: at once).
    None when nothing says."""
    if m := re.search(r"\((\w+)\)", _read(debugfs) or ""):
        return m.group(1)
    if m := re.search(r"(?:^|\s)preempt=(\w+)", _read(cmdline) or ""):
        return f"{m.group(1)} (boot parameter)"
    for path in configs or (f"/boot/config-{os.uname().release}", "/proc/config.gz"):
        text = _read(path)
        if text is None:
            continue
        dynamic = "CONFIG_PREEMPT_DYNAMIC=y" in text
        for key, name in _PREEMPT_CONFIG:
            if f"\n{key}=y" in "\n" + text:
                return f"{name} (build default{', dynamic' if dynamic else ''})"
    return None


def scheduling() -> dict:
    """What shapes a userspace emulator's timing on this host: the preemption model and
    the cpuidle driver (haltpoll: a VM's idle vCPUs halt unless polled; the engine holds
    a PM QoS request against it)."""
    def value(path: str) -> str | None:
        text = _read(path)
        return None if text is None else text.strip()
    return {"preemption": preemption(),
            "cpuidle_driver": value("/sys/devices/system/cpu/cpuidle/current_driver"),
            "guest_halt_poll_ns": value("/sys/module/haltpoll/parameters/guest_halt_poll_ns")}


def _read(path: str) -> str | None:
    """A text file (gzip-compressed when it ends in .gz), or None when unreadable."""
    try:
        if path.endswith(".gz"):
            import gzip
            with gzip.open(path, "rt") as f:
                return f.read()
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def emulation() -> dict:
    """Which backends work here and which `auto` picks (probes throwaway namespaces)."""
    from rig.realization.emul import registry
    usable = {b.name: b.usable() for b in registry.ranked()}
    out: dict = {b.doctor_key: usable[b.name] for b in registry.ranked()}
    if usable.get("userspace"):
        from rig.realization.emul.userspace import arrival_stamp_probe
        out["userspace_stamps"] = arrival_stamp_probe()
        from rig.realization.emul.engine import native
        try:
            out["userspace_engine"] = native.choose()[1]
        except native.EngineChoiceError as e:
            out["userspace_engine"] = f"refused: {e}"
    return {**out, "auto": registry.auto_choice(usable)}
