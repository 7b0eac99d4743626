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


def summary() -> dict:
    u = os.uname()
    return {"kernel": u.release, "machine": u.machine, "hostname": u.nodename,
            "cpus": os.cpu_count(), "tools": tool_versions(), "sysctls": sysctls()}


def emulation() -> dict:
    """Which backends work here and which `auto` picks (probes throwaway namespaces)."""
    from rig.realization.emul.choose import auto_choice
    from rig.realization.emul.netem import kernel_has_netem
    from rig.realization.emul.userspace import kernel_has_nfqueue
    netem, nfq = kernel_has_netem(), kernel_has_nfqueue()
    auto = auto_choice(netem, nfq)
    return {"kernel_netem": netem, "userspace_nfqueue": nfq, "auto": auto}
