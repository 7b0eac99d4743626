"""A scenario's `sweep:` section, and the paths it builds: `sweep.ip` (a path once per
address family) and `sweep.origins` x `sweep.server_cpus` (a path once per server
configuration) copy paths at load time.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rig.description import kinds, limits as L, schema as S
from rig.description.scenario.clients import (DIRECTIONS, ClientSpec, ServerSpec, _tls_mode,
                                              branch_fraction)
from rig.description.scenario.paths import LOCAL, PathSpec, _ip_version


@dataclass(frozen=True)
class Sweep:
    repeats: int = S.spec(S.integer(1, L.MAX_REPEATS), 1)
    concurrency: list[int] = S.spec(S.list_of(S.integer(1, L.MAX_CONCURRENCY),
                                              max_len=L.MAX_SWEEP_VALUES), [1])
    # every multi-stream client without its own sweep.streams; one that states streams:
    # is refused (the sweep would replace it), a single-stream one runs one (the plan says)
    streams: list[int] | None = S.spec(S.optional(S.list_of(S.integer(1, L.MAX_STREAMS),
                                                            max_len=L.MAX_SWEEP_VALUES)), None)
    # fraction of branches read, for clients that read branches (tool replay) without
    # their own branches: (the plan says which it does not reach)
    branches: list[float] | None = S.spec(S.optional(S.list_of(branch_fraction,
                                                               max_len=L.MAX_SWEEP_VALUES)), None)
    # TLS modes swept for clients whose tool can use them (others run each mode they can)
    tls: list[str] | None = S.spec(S.optional(S.list_of(_tls_mode,
                                                        max_len=len(kinds.TLS_MODES))), None)
    # download and upload, for clients whose tool can upload (each its own configuration,
    # NAME and NAME@upload); others download
    direction: list[str] | None = S.spec(S.optional(S.list_of(S.choice(*DIRECTIONS),
                                                              max_len=2)), None)
    # address families: each emulated path that does not state its own `ip:` is built
    # once per family, as paths NAME-v4 and NAME-v6 (one family: NAME, in that family)
    ip: list[int] | None = S.spec(S.optional(S.list_of(_ip_version, max_len=2)), None)
    # origins and cores (issue 27, seed 002's "1 x 128 vs 2 x 64"): each path once per
    # server configuration, NAME-oO, NAME-cC or NAME-oOcC: every origin server (not a cache)
    # runs O instances, each on C CPUs of its own where the host has them
    origins: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_ORIGINS), max_len=L.MAX_SWEEP_VALUES)), None)
    server_cpus: list[int] | None = S.spec(S.optional(S.list_of(
        S.integer(1, L.MAX_CPUS), max_len=L.MAX_SWEEP_VALUES)), None)


def _sweep_ip(ctx: S.Ctx, paths: list[PathSpec], clients: list[ClientSpec],
              fams: list[int]) -> dict[str, Any]:
    """`sweep.ip`: each emulated path without a family of its own, once per family (named
    NAME-vF when there are two), and each client's `paths:` naming it, all of its copies."""
    cc = ctx.child("sweep").child("ip")
    if len(set(fams)) != len(fams):
        raise cc.error("a family named twice", fams)
    free = [p for p in paths if p.kind == "emulated" and not p.ip_stated]
    if not free:
        raise cc.error("no path to sweep: every path is real or states its own ip:", fams)
    return _path_copies(cc, fams, paths, clients, free,
                        [(f"-v{f}" if len(fams) > 1 else "", {"ip": f}) for f in fams])


def _path_copies(cc: S.Ctx, value: Any, paths: list[PathSpec], clients: list[ClientSpec],
                 free: list[PathSpec], variants: list[tuple[str, dict[str, Any]]]
                 ) -> dict[str, Any]:
    """Each path of `free` once per variant (its name + the variant's suffix, its fields
    replaced), and each client's `paths:` naming it, all of its copies (a sweep that
    builds paths: sweep.ip, sweep.origins / server_cpus)."""
    out: list[PathSpec] = []
    copies: dict[str, list[str]] = {}
    for p in paths:
        if all(p is not q for q in free):
            out.append(p)
            continue
        for suffix, changes in variants:
            name = p.name + suffix
            if name != p.name and any(q.name == name for q in paths):
                raise cc.error(f"would name a copy of path {p.name} {name!r}, a path of "
                               "its own: rename one", value)
            if len(name) > L.MAX_NAME_CHARS:
                raise cc.error(f"would name a copy of path {p.name} {name!r}, longer than "
                               f"{L.MAX_NAME_CHARS} characters: shorten the path's name", value)
            out.append(dataclasses.replace(p, name=name, **changes,
                                           copy_of=p.name if suffix else None))
            copies.setdefault(p.name, []).append(name)
    if len(out) > L.MAX_PATHS:
        raise cc.error(f"{len(out)} paths once swept: at most {L.MAX_PATHS}", value)
    named = [dataclasses.replace(c, paths=[n for pn in c.paths for n in copies.get(pn, [pn])])
             if c.paths is not None else c for c in clients]
    return {"paths": out, "clients": named}


def _sweep_servers(ctx: S.Ctx, paths: list[PathSpec], clients: list[ClientSpec],
                   srv: list[ServerSpec], sw: Sweep) -> dict[str, Any]:
    """`sweep.origins` x `sweep.server_cpus`: each path whose servers run here, once per
    configuration (NAME-oO, NAME-cC, NAME-oOcC); path_servers gives each copy's servers."""
    key = "origins" if sw.origins else "server_cpus"
    cc = ctx.child("sweep").child(key)
    value = sw.origins or sw.server_cpus
    for k, vals in (("origins", sw.origins), ("server_cpus", sw.server_cpus)):
        if vals and len(set(vals)) != len(vals):
            raise ctx.child("sweep").child(k).error("a value named twice", vals)
    have = len(S.host_cpus())
    if sw.server_cpus and max(sw.server_cpus) > have:
        raise ctx.child("sweep").child("server_cpus").error(
            f"{max(sw.server_cpus)} CPUs per origin: this host has {have}", sw.server_cpus)
    origin_servers = [(i, s) for i, s in enumerate(srv) if not kinds.server(s.kind).caches]
    if not origin_servers:
        raise cc.error("no origin server to sweep (caches follow their origin)", value)
    for i, s in origin_servers:
        if s.count != 1 or s.cpus is not None:
            raise ctx.child("servers").child(i).child("count" if s.count != 1 else "cpus") \
                .error(f"server {s.name}'s own instances or CPUs, and sweep.{key}: the sweep "
                       "sets them; remove one", s.count if s.count != 1 else s.cpus)
    free = [p for p in paths if p.server_host == LOCAL]
    if not free:
        raise cc.error("no path to sweep: every path's servers run on another host", value)
    variants = [("-" + (f"o{o}" if o else "") + (f"c{c}" if c else ""),
                 {"origins": o, "server_cpus": c})
                for o in _or_none(sw.origins) for c in _or_none(sw.server_cpus)]
    return _path_copies(cc, value, paths, clients, free, variants)


def _or_none(vals: list[int] | None) -> list[int | None]:
    return list(vals) if vals else [None]
