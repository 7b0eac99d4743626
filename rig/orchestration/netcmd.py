"""`rig net up|down|list`: one client—router—server path built by hand and left running.

The state file /run/rig/<prefix>.json (kind "net") remembers it, so `rig net down`,
`rig net list` and `rig clean` find it from another process. It records the path's
owner (see rig/process/owner.py): `rig clean` removes the path only once that owner is gone.
Names are unique: the name check and the state file's creation happen under one lock,
so of two concurrent `rig net up --name X` exactly one builds anything.

Options go through the scenario path parser (rig/description/scenario.py, rig/description/schema.py), so
`rig net up` accepts exactly what a scenario's `paths:` entry accepts.
Must not import reports.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Any

from rig.realization import netns

from rig.process import owner

from rig.description import schema
from rig.description.profile import LinkProfile
from rig.errors import InputError, RigError

WHERE = "rig net up"
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _scalar(text: str | None) -> Any:
    """A command-line value read as the same YAML scalar a scenario would hold: a bare
    number is a number (so `--rtt 60` is refused for lacking a unit, as `rtt: 60` is)."""
    if text is None or not _NUMBER.fullmatch(text):
        return text
    return float(text) if any(c in text for c in ".eE") else int(text)


def parse_options(name: str, *, rtt: str, jitter: str = "0ms", loss: str = "0%",
                  rate: str | None = None, backend: str = "auto") -> tuple[str, LinkProfile, str]:
    """Validate every option as a scenario path; return (name, profile, backend).
    Pure: raises InputError `rig net up: --OPTION: message (got 'VALUE')`."""
    given = {"name": name, "rtt": rtt, "jitter": jitter, "loss": loss, "rate": rate,
             "backend": backend}
    doc = {k: _scalar(v) if k not in ("name", "backend") else v
           for k, v in given.items() if v is not None}
    doc["kind"] = "emulated"
    from rig.description.scenario import parse_path
    try:
        spec = parse_path(schema.Ctx(WHERE), doc)
        profile = spec.profile(spec.rtts_s[0])
    except InputError as e:
        opt = re.split(r"[.\[]", e.key or "")[0]
        if opt not in given:
            raise InputError(e.message, file=WHERE) from None
        raise InputError(e.message, file=WHERE, key=f"--{opt}", value=given[opt],
                         has_value=True) from None
    except ValueError as e:     # the profile's own checks
        raise InputError(str(e), file=WHERE) from None
    return spec.name, profile, spec.backend


def _owner(owner_pid: int | None) -> dict:
    if owner_pid is not None:
        try:
            return owner.record(owner_pid)
        except ProcessLookupError:
            raise InputError("no such process", file=WHERE, key="--owner-pid",
                             value=owner_pid) from None
    inv = owner.invoker()
    if inv is None:       # invoked by a process that is gone already: nobody keeps it
        raise RigError("cannot tell which process invoked rig net up; give --owner-pid")
    return owner.record(inv.pid)


def _named(name: str, states: dict[str, dict] | None = None) -> list[tuple[str, dict]]:
    states = netns.read_states() if states is None else states
    return sorted((p, st) for p, st in states.items()
                  if st.get("kind") == "net" and st.get("name") == name)


def _register(name: str, state: dict) -> str:
    """Atomically claim `name` and a fresh prefix by writing the state file; return the
    prefix. Nothing is built before this succeeds."""
    with netns.registry_lock():
        taken = _named(name)
        if taken:
            p, st = taken[0]
            gone = "owner_pid" in st and not owner.alive(st["owner_pid"], st.get("owner_start"))
            hint = "its owner is gone: rig clean removes it" if gone else "rig net down first"
            raise InputError(f"a path of that name is up ({p}; {hint})", file=WHERE,
                             key="--name", value=name)
        prefix = netns.new_prefix()
        while netns.prefix_in_use(prefix):
            prefix = netns.new_prefix()
        netns.write_state(prefix, dict(state, prefix=prefix))
    return prefix


def up(name: str, *, rtt: str, jitter: str = "0ms", loss: str = "0%", rate: str | None = None,
       backend: str = "auto", owner_pid: int | None = None) -> dict:
    name, profile, backend = parse_options(name, rtt=rtt, jitter=jitter, loss=loss, rate=rate,
                                           backend=backend)
    from rig.realization.emul.choose import make_backend
    state = {"kind": "net", "name": name, "pid": os.getpid(), **_owner(owner_pid)}
    prefix = _register(name, state)
    state["prefix"] = prefix
    path = None
    try:
        subnet = netns.lease_subnet(prefix)
        path = netns.lay_out(netns.default_topology(), prefix, 0, name, subnet,
                             workdir=netns.STATE_DIR / prefix / "net")
        net = netns.build(path)
        assert net.site is not None
        be = make_backend(backend)
        be.apply(net.site, profile)
    except BaseException:
        if path is not None:
            netns.destroy(path)
        netns.release_subnet(prefix)
        shutil.rmtree(netns.STATE_DIR / prefix, ignore_errors=True)
        netns.drop_state(prefix)
        raise
    info = dict(net.describe(), backend=be.name, prefix=prefix,
                rtt_ms=profile.rtt_s * 1e3 if be.name != "none" else None)
    state.update(info)
    netns.write_state(prefix, state)
    return info


def down(name: str) -> None:
    try:
        schema.name(name)
    except ValueError as e:
        raise InputError(str(e), file="rig net down", key="--name", value=name) from None
    found = _named(name)
    if not found:
        raise RigError(f"no path named {name!r} is up (see `rig net list`)")
    if len(found) > 1:      # only paths made by an older rig, without the lock, can clash
        raise RigError(f"{len(found)} paths are named {name!r} "
                       f"({', '.join(p for p, _ in found)}): remove them with rig clean --force")
    prefix, st = found[0]
    teardown(prefix, name)


def teardown(prefix: str, name: str = "net") -> None:
    netns.destroy(netns.lay_out(netns.default_topology(), prefix, 0, name, "198.18.0.0/24"))
    netns.release_subnet(prefix)
    shutil.rmtree(netns.STATE_DIR / prefix, ignore_errors=True)
    netns.drop_state(prefix)


def list_paths() -> list[dict]:
    live = set(netns.list_namespaces())
    out = []
    for _p, st in netns.read_states().items():
        if st.get("kind") == "net":
            out.append(dict(st, alive=st.get("router_ns") in live,
                            owner_alive=owner.alive(st.get("owner_pid"), st.get("owner_start"))
                            if "owner_pid" in st else None))
    return out
