"""Tuning on a remote host (reached over SSH, rig.process.remote): the host's own
network, since no namespace is built there. The sysctls of a tuning (tcp_rmem/wmem,
congestion control, and the host-global buffer limits), and the MTU of the interface
each path uses on that host, which is the one holding the path's address (server host)
or the one the route to it leaves by (client host).

Three steps, so the caller can record before anything is touched: `plan` reads what is
there now and what would change (a plain dict, saved in the run's state file), `apply`
writes it, `restore` puts back every value that still holds what the run wrote (another
run may have changed it since: that one is left alone). `rig clean` calls `restore`
with the recorded dict after a SIGKILL. The MTU is changed only when the tuning asks for
one other than the default 1500 (a host's jumbo frames are not lowered by a scenario
that never named an MTU).

Must not import services, orchestration or reports.
"""
from __future__ import annotations

import json

from rig.description.tuningspec import Tuning
from rig.errors import RigError
from rig.process import proc
from rig.process.remote import Host
from rig.realization import tuning

DEFAULT_MTU = 1500
AVAILABLE_CC = "net.ipv4.tcp_available_congestion_control"


def _sysctl(h: Host, read: list[str], write: dict[str, str] | None = None) -> dict:
    return proc.remote_op(h, {"op": "sysctl", "read": read, "write": write or {}},
                          timeout=30)["values"]


def iface(h: Host, addr: str, *, holds: bool) -> tuple[str, int]:
    """(interface, its MTU) on h for a path to/at `addr`: the interface holding it
    (holds=True: the server host), or the one the route to it leaves by."""
    if holds:
        r = proc.run(["ip", "-j", "addr", "show"], timeout=15, host=h, check=True)
        for link in json.loads(r.stdout or "[]"):
            if any(a.get("local") == addr for a in link.get("addr_info", [])):
                return link["ifname"], int(link["mtu"])
        raise RigError(f"host {h.name}: no interface holds the path's address {addr}")
    r = proc.run(["ip", "-j", "route", "get", addr], timeout=15, host=h, check=True)
    dev = json.loads(r.stdout)[0]["dev"]
    r = proc.run(["ip", "-j", "link", "show", "dev", dev], timeout=15, host=h, check=True)
    return dev, int(json.loads(r.stdout)[0]["mtu"])


def plan(h: Host, t: Tuning, ends: list[tuple[str, bool]]) -> dict:
    """What tuning `t` changes on h (`ends`: (address, holds) of every path there):
    {"sysctls_before", "sysctls_wrote", "mtu_before", "mtu_wrote"}; nothing written."""
    want = tuning.ns_wanted(t)
    now = _sysctl(h, [tuning.ALLOWED_CC, AVAILABLE_CC])
    cc = t.congestion_control
    if cc and cc not in (now[AVAILABLE_CC] or "").split():
        raise RigError(f"host {h.name}: congestion control {cc} is not available there "
                       f"(available: {now[AVAILABLE_CC] or 'unknown'}; modprobe tcp_{cc})")
    # host-global limits and the allowed list first: the per-host values depend on them
    want = {**tuning.global_wanted(t, now[tuning.ALLOWED_CC]), **want}
    before = _sysctl(h, list(want))
    wrote = {k: v for k, v in want.items() if before.get(k) != v}
    mtu_before: dict[str, int] = {}
    if t.mtu != DEFAULT_MTU:
        for addr, holds in ends:
            dev, mtu = iface(h, addr, holds=holds)
            if dev != "lo" and mtu != t.mtu:
                mtu_before[dev] = mtu
    return {"sysctls_before": {k: before[k] for k in wrote}, "sysctls_wrote": wrote,
            "mtu_before": mtu_before, "mtu_wrote": {d: t.mtu for d in mtu_before}}


def mtu_argv(dev: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", dev, "mtu", str(mtu)]


def apply(h: Host, rec: dict) -> None:
    if rec["sysctls_wrote"]:
        _sysctl(h, [], rec["sysctls_wrote"])
    for dev, mtu in rec["mtu_wrote"].items():
        proc.run(mtu_argv(dev, mtu), timeout=15, host=h, check=True)


def restore(h: Host, rec: dict) -> list[str]:
    """Put back what `apply` changed and still holds the run's value; what was restored."""
    done = []
    back = {k: v for k, v in rec.get("sysctls_before", {}).items() if v is not None}
    if back:
        now = _sysctl(h, list(back))
        back = {k: v for k, v in back.items() if now.get(k) == rec["sysctls_wrote"].get(k)}
        if back:
            _sysctl(h, [], back)
            done += [f"{k}={v}" for k, v in back.items()]
    for dev, mtu in rec.get("mtu_before", {}).items():
        r = proc.run(["ip", "-j", "link", "show", "dev", dev], timeout=15, host=h)
        if r.ok and int(json.loads(r.stdout)[0]["mtu"]) == int(rec["mtu_wrote"][dev]):
            proc.run(mtu_argv(dev, mtu), timeout=15, host=h, check=True)
            done.append(f"{dev} mtu {mtu}")
    return done


def effective(h: Host) -> dict[str, str | None]:
    """What a transfers row records of a remote client/server host's TCP settings."""
    return _sysctl(h, ["net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem",
                       "net.ipv4.tcp_wmem", "net.ipv4.tcp_adv_win_scale"])
