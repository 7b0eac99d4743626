"""`rig net up|down|list`: one client—router—server path built by hand and left running.

The state file /run/rig/<prefix>.json (kind "net") remembers it, so `rig net down`,
`rig net list` and `rig clean` find it from another process. It records the path's
owner (see rig/process/owner.py): `rig clean` removes the path only once that owner is gone.
Names are unique: the name check and the state file's creation happen under one lock,
so of two concurrent `rig net up --name X` exactly one builds anything.

Options go through the scenario path parser (rig/description/scenario/paths.py, rig/description/schema.py), so
`rig net up` accepts exactly what a scenario's `paths:` entry accepts.
Must not import reports.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import replace
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


_TUNING_OPTS = {"cc": "congestion_control", "rmem": "tcp_rmem_max", "wmem": "tcp_wmem_max",
                "mtu": "mtu"}


def parse_tuning(*, tuning_file: str | None = None, cc: str | None = None,
                 rmem: str | None = None, wmem: str | None = None, mtu: str | None = None):
    """The scenario's Tuning (rig.description.scenario.Tuning, parsed by S.load) from a
    YAML file of `tuning:` keys and the --cc/--rmem/--wmem/--mtu options (which win).
    Host-global buffer limits (core_rmem_max, core_wmem_max) are refused: a path left
    running cannot restore them. Raises InputError naming the file or the option."""
    from rig.description import safeyaml
    from rig.description.tuningspec import Tuning
    doc: dict = {}
    if tuning_file is not None:
        where = str(tuning_file)
        try:
            data = safeyaml.load(safeyaml.read_text(tuning_file), where)
        except OSError as e:
            raise InputError(f"cannot read ({e.strerror})", file=where) from None
        if isinstance(data, dict) and set(data) == {"tuning"}:
            data = data["tuning"]           # a scenario-shaped file: its tuning section
        schema.load(schema.Ctx(where), data, Tuning)       # the file's own errors name the file
        for k in ("core_rmem_max", "core_wmem_max", "default_qdisc"):
            if isinstance(data, dict) and data.get(k) is not None:
                raise InputError("host-global: a path left running cannot restore it "
                                 "(set it with sysctl)", file=where, key=k, value=data[k],
                                 has_value=True)
        doc.update(data or {})
    given = {"cc": cc, "rmem": rmem, "wmem": wmem, "mtu": mtu}
    for opt, v in given.items():
        if v is not None:
            doc[_TUNING_OPTS[opt]] = _scalar(v)
    try:
        return schema.load(schema.Ctx(WHERE), doc, Tuning)
    except InputError as e:
        bad = next((o for o, k in _TUNING_OPTS.items() if k == (e.key or "").split(".")[0]
                    and given[o] is not None), None)
        if bad is None:
            raise
        raise InputError(e.message, file=WHERE, key=f"--{bad}", value=given[bad],
                         has_value=True) from None


def window_info(window: int | None, rtt_s: float) -> dict:
    """What a person at this path is bound by: one stream's window and window / RTT."""
    return {"window_bytes": window,
            "window_bound_bps_at_rtt": (window * 8 / rtt_s) if window and rtt_s > 0 else None}


def parse_options(name: str, *, rtt: str, jitter: str = "0ms", loss: str = "0%",
                  rate: str | None = None, backend: str = "auto",
                  reverse_loss: str | None = None) -> tuple[str, LinkProfile, str]:
    """Validate every option as a scenario path; return (name, profile, backend).
    --loss is the data direction's (server -> client), as a scenario's `loss:`;
    --reverse-loss the other (client -> server: requests, ACKs).
    Pure: raises InputError `rig net up: --OPTION: message (got 'VALUE')`."""
    given = {"name": name, "rtt": rtt, "jitter": jitter, "loss": loss, "rate": rate,
             "backend": backend}
    doc = {k: _scalar(v) if k not in ("name", "backend") else v
           for k, v in given.items() if v is not None}
    doc["kind"] = "emulated"
    from rig.description.scenario.paths import parse_path
    from rig.realization.emul import registry  # noqa: F401  (the backends `backend:` names)
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
    if reverse_loss is not None:
        try:
            rl = schema.fraction(_scalar(reverse_loss))
            if rl >= 1.0:
                raise ValueError("100% loss moves nothing")
            profile = replace(profile, forward=replace(profile.forward, loss=rl))
        except ValueError as e:
            raise InputError(str(e), file=WHERE, key="--reverse-loss", value=reverse_loss,
                             has_value=True) from None
    return spec.name, profile, spec.backend


def _owner(owner_pid: int | None) -> dict:
    if owner_pid is not None:
        try:
            return dict(owner.record(owner_pid), owner_how="--owner-pid")
        except ProcessLookupError:
            raise InputError("no such process", file=WHERE, key="--owner-pid",
                             value=owner_pid) from None
    found = owner.find()
    if found.how == "none":
        print("rig: note: no shell, script or unit owns this path (the rig runs orphaned "
              "and without a terminal): it lives until rig net down", file=sys.stderr)
    return owner.record_owner(found)


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
            gone = owner.state_alive(st) is False
            hint = "its owner is gone: rig clean removes it" if gone else "rig net down first"
            raise InputError(f"a path of that name is up ({p}; {hint})", file=WHERE,
                             key="--name", value=name)
        prefix = netns.new_prefix()
        while netns.prefix_in_use(prefix):
            prefix = netns.new_prefix()
        netns.write_state(prefix, dict(state, prefix=prefix))
    return prefix


def up(name: str, *, rtt: str, jitter: str = "0ms", loss: str = "0%", rate: str | None = None,
       backend: str = "auto", owner_pid: int | None = None, reverse_loss: str | None = None,
       tuning_opts: dict | None = None, ip: int = 4) -> dict:
    name, profile, backend = parse_options(name, rtt=rtt, jitter=jitter, loss=loss, rate=rate,
                                           backend=backend, reverse_loss=reverse_loss)
    t = parse_tuning(**(tuning_opts or {}))
    from rig.realization import tuning
    from rig.realization.emul.choose import make_backend
    t, not_applied = tuning.as_far_as_kernel_allows(t, (tuning_opts or {}).get("tuning_file")
                                                    or WHERE)
    for k in ("core_rmem_max", "core_wmem_max", "default_qdisc"):      # a profile's
        if getattr(t, k) is not None:
            not_applied[k] = "host-global: a path left running cannot restore it"
    t = tuning.without(t, [k for k in not_applied if getattr(t, k) is not None])
    tuning.check_cc_available(t)
    state = {"kind": "net", "name": name, "pid": os.getpid(), **_owner(owner_pid)}
    prefix = _register(name, state)
    state["prefix"] = prefix
    path = None
    try:
        subnet = netns.lease_subnet(prefix)
        path = netns.lay_out(netns.default_topology(), prefix, 0, name, subnet,
                             workdir=netns.STATE_DIR / prefix / "net", ip=ip)
        net = netns.build(path, mtu=t.mtu)
        for node in path.nodes:
            if node.role not in ("router", "switch") and node.ns is not None:
                tuning.apply_ns(t, node.ns)
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
                rtt_ms=profile.rtt_s * 1e3 if be.name != "none" else None,
                congestion_control=tuning.effective_cc(net.client_ns),
                tcp_rmem_max=tuning.effective_rmem_max(t, net.client_ns),
                tcp_wmem_max=tuning.effective_wmem_max(t, net.server_ns), mtu=t.mtu,
                **window_info(tuning.effective_window(t, net.client_ns), profile.rtt_s))
    if not_applied:
        info["tuning_not_applied"] = not_applied
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
                            owner_alive=owner.state_alive(st)))
    return out
