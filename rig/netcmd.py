"""`rig net up|down|list`: one client—router—server path built by hand and left running.

The state file /run/rig/<prefix>.json (kind "net") remembers it, so `rig net down`,
`rig net list` and `rig clean` find it from another process. Must not import reports.
"""
from __future__ import annotations

import os
import shutil

from . import netns, units
from .emul.profile import LinkProfile
from .errors import InputError, RigError


def _profile(rtt: str, jitter: str, loss: str, rate: str | None) -> LinkProfile:
    try:
        rtt_s = units.parse_duration(rtt, default_unit="ms")
        jit_s = units.parse_duration(jitter, default_unit="ms")
        loss_f = units.parse_fraction(loss)
        rate_bps = units.parse_rate(rate) if rate else None
    except ValueError as e:
        raise InputError(str(e), key="rig net up", value=f"{rtt} {jitter} {loss} {rate}") from None
    if jit_s > rtt_s:
        raise InputError("jitter exceeds the RTT", key="--jitter", value=jitter)
    try:
        return LinkProfile.symmetric(rtt_s, jitter_s=jit_s, loss=loss_f, rate_bps=rate_bps)
    except ValueError as e:
        raise InputError(str(e), key="rig net up", value=f"{rtt} {jitter} {loss} {rate}") from None


def _find(name: str) -> tuple[str, dict] | None:
    for p, st in netns.read_states().items():
        if st.get("kind") == "net" and st.get("name") == name:
            return p, st
    return None


def up(name: str, *, rtt: str, jitter: str = "0ms", loss: str = "0%", rate: str | None = None,
       backend: str = "auto") -> dict:
    if not name or len(name) > 40:
        raise InputError("name must be 1-40 characters", key="--name", value=name)
    if _find(name):
        raise InputError("a path of that name is up (rig net down first)", key="--name", value=name)
    profile = _profile(rtt, jitter, loss, rate)
    from .emul.choose import make_backend
    prefix = netns.new_prefix()
    subnet = netns.lease_subnet(prefix)
    names = netns.PathNames(prefix, 0, name, subnet)
    state = {"kind": "net", "name": name, "prefix": prefix, "pid": os.getpid()}
    netns.write_state(prefix, state)
    try:
        net = netns.build(names, workdir=netns.STATE_DIR / prefix / "net")
        be = make_backend(backend)
        be.apply(net.site, profile)
    except BaseException:
        netns.destroy(names)
        netns.release_subnet(prefix)
        netns.drop_state(prefix)
        raise
    info = dict(net.describe(), backend=be.name, prefix=prefix,
                rtt_ms=profile.rtt_s * 1e3 if be.name != "none" else None)
    state.update(info)
    netns.write_state(prefix, state)
    return info


def down(name: str) -> None:
    found = _find(name)
    if not found:
        raise RigError(f"no path named {name!r} is up (see `rig net list`)")
    prefix, st = found
    netns.destroy(netns.PathNames(prefix, 0, name, "198.18.0.0/24"))
    netns.release_subnet(prefix)
    netns.drop_state(prefix)
    shutil.rmtree(netns.STATE_DIR / prefix, ignore_errors=True)


def list_paths() -> list[dict]:
    live = set(netns.list_namespaces())
    out = []
    for p, st in netns.read_states().items():
        if st.get("kind") == "net":
            out.append(dict(st, alive=st.get("router_ns") in live))
    return out
