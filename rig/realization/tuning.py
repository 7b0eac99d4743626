"""TCP tuning of the rig's namespaces, and the few host-global sysctls a tuning needs.

Per-namespace sysctls (tcp_rmem, tcp_wmem, congestion control, tcp_mtu_probing,
optmem_max, tcp_fastopen) live and die with the rig's namespaces. Host-global ones
(net.core.rmem_max/wmem_max, net.core.default_qdisc) are recorded before,
written, and restored afterwards; the originals are also kept in the run's state file so
`rig clean` can restore them after a killed run. Command builders are pure.
Must not import services, orchestration or reports.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from rig.description.tuningspec import Tuning, sysctl_int
from rig.errors import InputError, RigError
from rig.process import proc

GLOBAL_KEYS = ("net.core.rmem_max", "net.core.wmem_max")
DEFAULT_QDISC = "net.core.default_qdisc"        # host-global (no per-namespace copy)
# tuning key -> per-namespace sysctl written as the key's value
NS_KEYS = {"tcp_mtu_probing": "net.ipv4.tcp_mtu_probing", "optmem_max": "net.core.optmem_max",
           "tcp_fastopen": "net.ipv4.tcp_fastopen"}
PROBE_TIMEOUT = 10.0


def _sysctl_w(ns: str | None, key: str, value: str) -> list[str]:
    return proc.ns_argv(ns, ["sysctl", "-q", "-w", f"{key}={value}"])


write_argv = _sysctl_w      # a sysctl written (in a namespace, or on the host: None)


def read_argv(ns: str, key: str) -> list[str]:
    """A sysctl read in a namespace (the host's are read from /proc/sys: no command)."""
    return proc.ns_argv(ns, ["sysctl", "-n", key])


def ns_wanted(t: Tuning) -> dict[str, str]:
    """The per-namespace sysctls of a tuning (a namespace here, or a remote host's own)."""
    out = {}
    if t.tcp_rmem_max:
        out["net.ipv4.tcp_rmem"] = (f"4096 {sysctl_int(t.tcp_rmem_default or 131072)} "
                                    f"{sysctl_int(t.tcp_rmem_max)}")
    if t.tcp_wmem_max:
        out["net.ipv4.tcp_wmem"] = (f"4096 {sysctl_int(t.tcp_wmem_default or 16384)} "
                                    f"{sysctl_int(t.tcp_wmem_max)}")
    if t.congestion_control:
        out["net.ipv4.tcp_congestion_control"] = t.congestion_control
    for key, sysctl in NS_KEYS.items():
        if getattr(t, key) is not None:
            out[sysctl] = str(getattr(t, key))
    return out


def ns_argv(t: Tuning, ns: str) -> list[list[str]]:
    """Commands tuning one of the rig's namespaces (client or server side)."""
    return [_sysctl_w(ns, k, v) for k, v in ns_wanted(t).items()]


ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"


def global_wanted(t: Tuning, allowed_cc: str | None = None,
                  also_cc: tuple[str, ...] = ()) -> dict[str, str]:
    """Host-global values the tuning needs. A namespace may only select a congestion
    control the host allows (tcp_allowed_congestion_control is global; seen here:
    "reno bbr", so cubic in a namespace failed with EPERM): add it to that list, and
    `also_cc` (paths' own) too."""
    want = {}
    if t.core_rmem_max:
        want["net.core.rmem_max"] = str(sysctl_int(t.core_rmem_max))
    if t.core_wmem_max:
        want["net.core.wmem_max"] = str(sysctl_int(t.core_wmem_max))
    if t.default_qdisc:
        want[DEFAULT_QDISC] = t.default_qdisc
    if allowed_cc is not None:
        add = [c for c in dict.fromkeys((t.congestion_control, *also_cc))
               if c and c not in allowed_cc.split()]
        if add:
            want[ALLOWED_CC] = " ".join([allowed_cc, *add]).strip()
    return want


def host_allowed_cc() -> str | None:
    return read([ALLOWED_CC])[ALLOWED_CC]


def check_cc_available(t: Tuning) -> None:
    """Fail before anything is built when the kernel lacks the congestion control."""
    if not t.congestion_control:
        return
    avail = read(["net.ipv4.tcp_available_congestion_control"]).get(
        "net.ipv4.tcp_available_congestion_control") or ""
    if t.congestion_control not in avail.split():
        raise RigError(f"congestion control {t.congestion_control} is not available on this "
                       f"kernel (available: {avail or 'unknown'}; try modprobe tcp_"
                       f"{t.congestion_control})")


def global_argv(t: Tuning, allowed_cc: str | None = None,
                also_cc: tuple[str, ...] = ()) -> list[list[str]]:
    return [_sysctl_w(None, k, v) for k, v in global_wanted(t, allowed_cc, also_cc).items()]


def read(keys, ns: str | None = None) -> dict[str, str | None]:
    """Current values; in a namespace through `ip netns exec`, else from /proc/sys."""
    out: dict[str, str | None] = {}
    for k in keys:
        if ns is None:
            try:
                out[k] = " ".join(Path("/proc/sys", *k.split(".")).read_text().split())
            except OSError:
                out[k] = None
        else:
            r = proc.run(read_argv(ns, k), timeout=10)
            out[k] = " ".join(r.stdout.split()) if r.ok else None
    return out


def apply_global(want: dict[str, str]) -> None:
    """Write host-global values (the caller recorded the originals first)."""
    for k, v in want.items():
        proc.run(_sysctl_w(None, k, v), timeout=10, check=True)


def restore_global(before: dict[str, str | None], wrote: dict[str, str] | None = None) -> None:
    """Put back the originals; where `wrote` is given, only keys that still hold what
    this run wrote (another run may have changed them since: leave those alone)."""
    now = read(before) if wrote else {}
    for k, v in before.items():
        if v is None or (wrote and now.get(k) != wrote.get(k)):
            continue
        proc.run(_sysctl_w(None, k, v), timeout=10)


def write_ns(ns: str, values: dict[str, str]) -> None:
    """Write per-namespace sysctls in one of the rig's own namespaces."""
    for k, v in values.items():
        proc.run(_sysctl_w(ns, k, v), timeout=10, check=True)


def apply_ns(t: Tuning, ns: str) -> None:
    for argv in ns_argv(t, ns):
        proc.run(argv, timeout=10, check=True)


def effective_rmem_max(t: Tuning, ns: str | None) -> int | None:
    v = read(["net.ipv4.tcp_rmem"], ns).get("net.ipv4.tcp_rmem")
    return int(v.split()[2]) if v else t.tcp_rmem_max


def effective_wmem_max(t: Tuning, ns: str | None) -> int | None:
    v = read(["net.ipv4.tcp_wmem"], ns).get("net.ipv4.tcp_wmem")
    return int(v.split()[2]) if v else t.tcp_wmem_max


def window_bytes(rmem_max: int | None, adv_win_scale: int | None) -> int | None:
    """Largest receive window one TCP stream can advertise: Linux keeps part of the
    receive buffer for overhead, tcp_adv_win_scale (default 1: half of it). Measured
    here with 16 MiB rmem: 0.44-0.45 x rmem in flight at 60 and 120 ms (slow start
    included), next to the 0.5 this bound gives. Linux >= 6.6 no longer reads
    tcp_adv_win_scale: it scales the buffer by the payload/truesize of what it receives
    (scaling_ratio, from 0.5 until data arrives): this host's veth at MTU 1500 advertised
    0.75 x a 1 MiB rmem (docs/ground-truth.md). This stays the run-time estimate; the
    report prefers the advertised window the sender's tcp_info saw (Point.window)."""
    if rmem_max is None:
        return None
    s = 1 if adv_win_scale is None else adv_win_scale
    if s > 0:
        return int(rmem_max - (rmem_max >> s))
    return int(rmem_max >> -s)


def effective_window(t: Tuning, ns: str | None) -> int | None:
    v = read(["net.ipv4.tcp_adv_win_scale"], ns).get("net.ipv4.tcp_adv_win_scale")
    return window_bytes(effective_rmem_max(t, ns), int(v) if v else None)


def effective_cc(ns: str | None) -> str | None:
    return read(["net.ipv4.tcp_congestion_control"], ns).get("net.ipv4.tcp_congestion_control")


def _lacks(t: Tuning) -> dict[str, str]:
    """Keys of `t` this kernel cannot apply, with why (probed without changing the host:
    a sysctl's file, a qdisc added to lo in a throwaway namespace)."""
    out = {}
    for key, sysctl in NS_KEYS.items():
        if getattr(t, key) is not None and not Path("/proc/sys", *sysctl.split(".")).exists():
            out[key] = f"no {sysctl} on this kernel"
    if t.default_qdisc:
        r = proc.run(["unshare", "--net", "--", "tc", "qdisc", "add", "dev", "lo", "root",
                      t.default_qdisc], timeout=PROBE_TIMEOUT)
        if not r.ok:
            out["default_qdisc"] = (f"this kernel has no {t.default_qdisc} qdisc "
                                    f"({(r.stderr.strip().splitlines() or ['?'])[-1][:80]})")
    return out


def as_far_as_kernel_allows(t: Tuning, source: str,
                            at: str = "tuning") -> tuple[Tuning, dict[str, str]]:
    """The tuning this kernel can apply, and what was left out (key -> why). A key the
    scenario wrote itself and the kernel lacks stops the run (exit 2, nothing built);
    a profile's key is left out and said."""
    lacking = _lacks(t)
    for key, why in lacking.items():
        if t.required(key):
            raise InputError(f"{why}: the scenario requires it (a `profile:` value would be "
                             "left out instead)", file=source, key=f"{at}.{key}",
                             value=getattr(t, key), has_value=True)
    return without(t, lacking), lacking


def without(t: Tuning, keys) -> Tuning:
    """`t` with `keys` unset (optional keys: None means "leave the kernel's value")."""
    return dataclasses.replace(t, **{k: None for k in keys})  # type: ignore[arg-type]
