"""The `tuning:` section: TCP and host sysctls a scenario asks for, and named profiles.

Keys the user writes are required: where this kernel lacks one (a qdisc it cannot load,
a sysctl it does not have) the run stops before anything is built. A profile's values
(`profile: seed-000`, seed 000's list verbatim) are applied as far as the kernel allows:
what it cannot apply is said in one line per key and recorded with the run. A key
written beside a profile overrides the profile's value and is required again.

Sysctls are C ints: buffers are accepted up to 2 GiB and written as at most 2147483647
(INT_MAX), which is how seed 000 wrote "2 GiB". Per-namespace sysctls (tcp_*, optmem_max,
tcp_fastopen, congestion control) live in the rig's namespaces; host-global ones
(net.core.rmem_max/wmem_max, default_qdisc) are recorded, written and restored
(rig.realization.tuning).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rig.description import limits as L, schema as S

CC_NAMES = ("bbr", "cubic", "reno", "htcp")
# qdiscs a default_qdisc may name (those the kernel offers as a default)
QDISCS = ("fq", "fq_codel", "pfifo_fast", "cake", "sfq", "pfifo", "bfifo", "fq_pie")
INT_MAX = 2**31 - 1

_buffer = S.size_in(L.MIN_BUFFER, L.MAX_TUNING_BUFFER)

# Seed 000 §3, "the actual settings applied", verbatim (its NIC ring sizes are an ethtool
# setting of a physical NIC: a veth has no rings, so they are not part of the profile).
PROFILES: dict[str, dict[str, Any]] = {
    "seed-000": {
        "tcp_wmem_default": 65536, "tcp_wmem_max": INT_MAX,
        "tcp_rmem_default": 87380, "tcp_rmem_max": INT_MAX,
        "core_rmem_max": INT_MAX, "core_wmem_max": INT_MAX,
        "default_qdisc": "fq", "congestion_control": "bbr",
        "tcp_mtu_probing": 1, "optmem_max": 1048576,
    },
}


@dataclass(frozen=True)
class Tuning:
    congestion_control: str | None = S.spec(S.optional(S.choice(*CC_NAMES)), None)
    tcp_rmem_max: int | None = S.spec(S.optional(_buffer), None)
    tcp_wmem_max: int | None = S.spec(S.optional(_buffer), None)
    core_rmem_max: int | None = S.spec(S.optional(_buffer), None)   # host-global: restored
    core_wmem_max: int | None = S.spec(S.optional(_buffer), None)
    mtu: int = S.spec(S.integer(L.MIN_MTU, L.MAX_MTU), 1500)
    # the middle values of tcp_rmem/tcp_wmem: a new socket's buffers, which autotuning
    # grows towards the max (docs/caching-modes.md: Linux 6.18's autotuning can stall)
    tcp_rmem_default: int | None = S.spec(S.optional(_buffer), None)
    tcp_wmem_default: int | None = S.spec(S.optional(S.size_in(4096, L.MAX_TUNING_BUFFER)),
                                          None)
    tcp_mtu_probing: int | None = S.spec(S.optional(S.integer(0, 2)), None)
    optmem_max: int | None = S.spec(S.optional(S.size_in(10 << 10, 64 << 20)), None)
    # TCP Fast Open bits (1: client, 2: server; seed 004 turns it on)
    tcp_fastopen: int | None = S.spec(S.optional(S.integer(0, 3)), None)
    default_qdisc: str | None = S.spec(S.optional(S.choice(*QDISCS)), None)   # host-global
    profile: str | None = S.spec(S.optional(S.choice(*PROFILES)), None)
    # keys whose value came from the profile (applied as far as the kernel allows)
    from_profile: tuple[str, ...] = ()

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        soft: list[str] = []
        for k, v in PROFILES.get(d["profile"] or "", {}).items():
            if d[k] is None:
                d[k], soft = v, soft + [k]
        d["from_profile"] = tuple(soft)
        bad = default_above_max(d)
        if bad is not None:
            end, dflt, _ = bad
            raise ctx.child(f"tcp_{end}_default").error(
                f"needs tcp_{end}_max, at least as large (the rig writes all three values "
                f"of tcp_{end})", dflt)
        return d

    def required(self, key: str) -> bool:
        """Must `key` be applied (the user wrote it), or only where the kernel allows?"""
        return key not in self.from_profile


def default_above_max(values: dict[str, Any]) -> tuple[str, int, int | None] | None:
    """The first buffer end ("rmem", "wmem") whose tcp_*_default is set above its
    tcp_*_max, or unset max (the rig writes all three values of tcp_*): (end, default,
    max), or None."""
    for end in ("rmem", "wmem"):
        dflt, mx = values[f"tcp_{end}_default"], values[f"tcp_{end}_max"]
        if dflt is not None and (mx is None or dflt > mx):
            return end, dflt, mx
    return None


# keys a path's own `tuning:` may set: those living in its namespaces (the rest are the
# host's, one value for every path: the scenario's `tuning:`)
NS_TUNING_KEYS = ("congestion_control", "tcp_rmem_max", "tcp_wmem_max", "tcp_rmem_default",
                  "tcp_wmem_default", "tcp_mtu_probing", "optmem_max", "tcp_fastopen")
HOST_TUNING_KEYS = ("core_rmem_max", "core_wmem_max", "default_qdisc")


def for_path(ctx: S.Ctx, t: Tuning) -> Tuning:
    """A path's own `tuning:`: namespaced keys only. A host-global key written there is
    refused (one value for the host: the scenario's `tuning:`), as is an MTU (the path's
    own `mtu:`); a profile's host-global values are left to the scenario's."""
    for k in HOST_TUNING_KEYS:
        if getattr(t, k) is not None and t.required(k):
            raise ctx.child(k).error("host-global, one value for every path: set it in the "
                                     "scenario's tuning:", getattr(t, k))
    if t.mtu != 1500:
        raise ctx.child("mtu").error("a path's MTU is its own mtu: key", t.mtu)
    return replace(t, **{k: None for k in HOST_TUNING_KEYS},   # type: ignore[arg-type]
                   from_profile=tuple(k for k in t.from_profile if k not in HOST_TUNING_KEYS))


def merged(base: Tuning, own: Tuning | None) -> Tuning:
    """`base` (the scenario's) with a path's own namespaced keys over it."""
    if own is None:
        return base
    mine = {k: getattr(own, k) for k in NS_TUNING_KEYS if getattr(own, k) is not None}
    soft = tuple(k for k in base.from_profile if k not in mine) + tuple(
        k for k in own.from_profile if k in mine)
    return replace(base, **mine, profile=own.profile or base.profile, from_profile=soft)


def sysctl_int(n: int) -> int:
    """A buffer size as a sysctl takes it (a C int: 2 GiB is written as INT_MAX)."""
    return min(n, INT_MAX)
