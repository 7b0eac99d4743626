"""Where one end of a path runs its processes: this host (`Here`) or a remote host over
SSH (`There`). The runner asks a side, never which kind it is (DESIGN: nothing above
process supervision knows whether a process is local): the proc.run arguments that put
a process there, the ports its servers take, where a server's files live, CPU pinning,
the CPU its servers used, the TCP settings in force, and whether its sockets and threads
can be sampled from here.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

from rig.errors import RigError
from rig.process import cputree, proc
from rig.process.remote import Host
from rig.realization import remote_tuning, tuning
from rig.services import servers

TCP_KEYS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
            "net.ipv4.tcp_adv_win_scale")


class Side:
    """One end of a path. `host`: the remote host, None here."""
    host: Host | None = None
    local = True            # its /proc is this host's: sockets and threads sampled here
    pinned_by = "cgroup"    # how a CPU set is applied (the runner's own method here)

    def run_kw(self) -> dict:
        """proc.run's arguments that run a process on this side."""
        return {}

    def ports(self, want: dict[str, int], ns: str | None, addr: str,
              avoid: frozenset[int]) -> dict[str, int]:
        """Ports for a server there: `want`'s, moved past any taken on the host."""
        raise NotImplementedError

    def place(self, plan: servers.ServerPlan) -> servers.ServerPlan:
        """A server's plan with its files where this side keeps them."""
        return plan

    def cgroup(self, make: Callable[[], Path | None]) -> Path | None:
        """A CPU set as a cgroup (`make` builds it here), or None (taskset pins)."""
        return None

    def track(self, origin: str, svc: proc.Service, pids: dict[str, int],
              ids: dict[str, str], svcs: dict[str, proc.Service]) -> None:
        """Remember a started server: for its CPU accounting (`pids` here, agent `ids`
        there) and, here, to see it die (`svcs`, rig.orchestration.faults)."""
        raise NotImplementedError

    def cpus_allowed(self, svc: proc.Service) -> str | None:
        """The CPU list the kernel lets a started server run on (None: not read)."""
        return None

    def server_cpu(self, pids: list[int], ids: list[str]) -> tuple[float, float] | None:
        """User and system seconds of these servers' trees so far (None: not known)."""
        raise NotImplementedError

    def tcp(self, ns: str | None) -> dict[str, str | None]:
        """The TCP settings in force there (TCP_KEYS)."""
        raise NotImplementedError

    def host_cpu(self) -> cputree.HostCpu | None:
        """That host's whole CPU time so far (/proc/stat), None: not known."""
        raise NotImplementedError


class Here(Side):
    """This host (or a namespace of it). `pin_method`: how the run pins here (cgroup where
    a cpuset hierarchy exists, else taskset), known once the run's pinning is set up."""

    def __init__(self, pin_method: Callable[[], str]) -> None:
        self._pin_method = pin_method

    @property
    def pinned_by(self) -> str:       # type: ignore[override]
        return self._pin_method()

    def ports(self, want: dict[str, int], ns: str | None, addr: str,
              avoid: frozenset[int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for proto, port in want.items():
            if ns is None:  # the host: find a free port, never steal one
                from rig.process.nsprobe import port_free
                while port in avoid or port in out.values() or not port_free(None, addr, port):
                    port += 1
            out[proto] = port
        return out

    def cgroup(self, make: Callable[[], Path | None]) -> Path | None:
        return make()

    def track(self, origin: str, svc: proc.Service, pids: dict[str, int],
              ids: dict[str, str], svcs: dict[str, proc.Service]) -> None:
        if svc.pid:
            pids[origin], svcs[origin] = svc.pid, svc

    def cpus_allowed(self, svc: proc.Service) -> str | None:
        return cpus_allowed(svc.pid)

    def server_cpu(self, pids: list[int], ids: list[str]) -> tuple[float, float] | None:
        return tree_cpu(pids)

    def tcp(self, ns: str | None) -> dict[str, str | None]:
        return tuning.read(list(TCP_KEYS), ns)

    def host_cpu(self) -> cputree.HostCpu | None:
        return cputree.host_cpu()


class There(Side):
    """A remote host: processes through its agent over the run's SSH connection."""
    local = False
    pinned_by = "taskset"

    def __init__(self, host: Host, prefix: str, datadir: Callable[[], str]) -> None:
        self.host: Host = host
        self.prefix, self._datadir = prefix, datadir

    def run_kw(self) -> dict:
        return {"host": self.host, "rundir": self.host.rundir(self.prefix)}

    def ports(self, want: dict[str, int], ns: str | None, addr: str,
              avoid: frozenset[int]) -> dict[str, int]:
        # searched on that host, never bound here
        got = proc.remote_op(self.host, {"op": "ports", "addr": addr,
                                         "ports": list(want.values())}, timeout=30)
        return dict(zip(want, got["ports"]))

    def place(self, plan: servers.ServerPlan) -> servers.ServerPlan:
        rd = self.host.rundir(self.prefix)
        return dataclasses.replace(plan, workdir=Path(rd, plan.workdir.name),
                                   datadir=Path(self._datadir()), host=self.host, rundir=rd)

    def track(self, origin: str, svc: proc.Service, pids: dict[str, int],
              ids: dict[str, str], svcs: dict[str, proc.Service]) -> None:
        if svc.ident:
            ids[origin] = svc.ident

    def server_cpu(self, pids: list[int], ids: list[str]) -> tuple[float, float] | None:
        """Every origin's tree, read by the agent from /proc there."""
        if not ids:
            return None
        try:
            got = proc.remote_op(self.host, {"op": "cpu", "rundir": self.host.rundir(self.prefix),
                                             "ids": ids}, timeout=30)["cpu"]
        except RigError:
            return None
        if any(got.get(i) is None for i in ids):
            return None
        return sum(got[i][0] for i in ids), sum(got[i][1] for i in ids)

    def tcp(self, ns: str | None) -> dict[str, str | None]:
        return remote_tuning.effective(self.host)

    def host_cpu(self) -> cputree.HostCpu | None:
        """Read by the agent from /proc/stat there."""
        try:
            got = proc.remote_op(self.host, {"op": "cpu", "rundir": self.host.rundir(self.prefix),
                                             "ids": []}, timeout=30).get("host")
        except RigError:
            return None
        if not isinstance(got, list) or len(got) != 5:
            return None
        return cputree.HostCpu(float(got[0]), float(got[1]), int(got[2]), float(got[3]),
                               float(got[4]))


def cpus_allowed(pid: int | None) -> str | None:
    """The CPU list the kernel lets `pid` run on (what the cgroup or taskset really did),
    read for every thread: one list when all agree, else each distinct one, `|`-joined."""
    seen = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        seen.append(line.split(":", 1)[1].strip())
        except OSError:
            continue        # a thread that ended meanwhile
    return "|".join(dict.fromkeys(seen)) or None


def tree_cpu(pids: list[int]) -> tuple[float, float] | None:
    """User and system seconds of these processes' trees, summed; None if one is gone."""
    if not pids:
        return None
    user = sys_ = 0.0
    for pid in pids:
        c = cputree.tree_cpu(pid)
        if c is None:
            return None
        user, sys_ = user + c.user_s, sys_ + c.sys_s
    return user, sys_
