"""The rules that span a scenario's sections (a client's server, file and paths; uploads,
storage, TLS, third-party copy, placement, paths run together), checked once every
section is loaded. Each refusal is one line naming the key.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rig.description import caches, kinds, limits as L, schema as S, topology as T, tuningspec
from rig.description.scenario import auth, external
from rig.description.scenario.clients import EXTERNAL, ClientSpec, ServerSpec
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.description.scenario.queries import (_can_tls, background_on, client_concurrency,
                                              client_directions, measurements, path_tuning,
                                              runs_on, server_count)


def _cross_check(ctx: S.Ctx, sc: Scenario) -> Scenario:
    """What spans sections; returns the scenario with each client's server filled in."""
    for key, items in (("paths", sc.paths), ("files", sc.files), ("servers", sc.servers),
                       ("clients", sc.clients), ("background", sc.background)):
        S.unique_names(ctx.child(key), items, key[:-1] if key != "background" else "flow")
    names = [p.name for p in sc.paths]
    for i, b in enumerate(sc.background):
        at = ctx.child("background").child(i)
        if b.path is not None and b.path not in names:
            raise at.child("path").error(f"no such path (have: {', '.join(names)})", b.path)
        for p in sc.paths:
            if (b.path in (None, p.name)) and (p.client_host != LOCAL or p.server_host != LOCAL
                                               or p.kind == "real"):
                raise at.child("path").error(f"path {p.name}: background flows run on an "
                                             "emulated path this host builds", b.path or p.name)
    _check_together(ctx.child("together"), sc)
    servers = {s.name: s for s in sc.servers}
    files = {f.name for f in sc.files}
    file_kinds = {f.name: f.kind for f in sc.files}
    clients = []
    for i, c in enumerate(sc.clients):
        cc = ctx.child("clients").child(i)
        caps = kinds.client(c.tool).caps
        if caps.uses_iperf_servers:
            clients.append(c)
            continue
        if c.server is None:
            want = [s for s in sc.servers if s.kind in caps.servers
                    or (s.kind == EXTERNAL and external.speaks(c, s))]
            if len(want) != 1:
                raise cc.child("server").error(f"name the server {c.tool} talks to")
            c = dataclasses.replace(c, server=want[0].name)
        clients.append(c)
        if c.server not in servers:
            raise cc.child("server").error("no server of that name", c.server)
        if servers[c.server].kind == EXTERNAL:     # no file of the rig's, no port of its own
            external.check_client(cc, c, servers[c.server])
            auth.check_client(cc, c, servers[c.server])
            continue
        if servers[c.server].kind not in caps.servers:
            raise cc.child("server").error(
                f"{c.tool} cannot talk to a {servers[c.server].kind} server", c.server)
        if c.protocol and c.protocol not in kinds.server(servers[c.server].kind).ports:
            raise cc.child("server").error(
                f"a {servers[c.server].kind} server does not serve {c.protocol}", c.server)
        if c.file not in files:
            raise cc.child("file").error("no file of that name", c.file)
        if caps.reads_root and file_kinds[c.file] != "root":
            raise cc.child("file").error("a caching-mode replay reads a ROOT file: give the file "
                                         "kind: root (generated) or a path", c.file)
        if c.tls not in (None, "off") and not kinds.server(servers[c.server].kind).tls_ports:
            have = [k for k in kinds.SERVERS.names() if kinds.server(k).tls_ports]
            raise cc.child("tls").error(f"a {servers[c.server].kind} server does not serve TLS "
                                        f"({', '.join(have)} do)", c.tls)
        _check_tpc(cc, c, caps, servers)
        auth.check_client(cc, c, servers[c.server])
    sc = dataclasses.replace(sc, clients=clients)
    external.check(ctx, sc)        # before the rules below, whose words fit servers it runs
    names = [p.name for p in sc.paths]
    for i, c in enumerate(sc.clients):
        for j, pn in enumerate(c.paths or []):
            if pn not in names:
                raise ctx.child("clients").child(i).child("paths").child(j).error(
                    f"no such path (have: {', '.join(names)})", pn)
    _check_streams_sweep(ctx, sc)
    _check_tls_sweep(ctx, sc)
    _check_branches_sweep(ctx, sc)
    _check_storage(ctx, sc)
    _check_uploads(ctx, sc)
    _check_sets(ctx, sc)
    for i, c in enumerate(sc.clients):
        need = max(client_concurrency(sc, c))
        if isinstance(c.cpus, tuple) and len(c.cpus) < need:
            raise ctx.child("clients").child(i).child("cpus").error(
                f"{need} concurrent instances, {len(c.cpus)} CPU set(s): one per instance "
                "(per-instance: the host's CPUs, one each)", list(c.cpus))
    for i, p in enumerate(sc.paths):
        bad = (tuningspec.default_above_max(dataclasses.asdict(path_tuning(sc, p)))
               if p.tuning is not None else None)
        if bad is not None:
            end, dflt, mx = bad
            raise ctx.child("paths").child(i).child("tuning").error(
                f"tcp_{end}_default {S.fmt_size(dflt)} above tcp_{end}_max "
                f"{S.fmt_size(mx) if mx else '(unset)'} once over the scenario's tuning")
    n = measurements(sc)
    if n > L.MAX_MEASUREMENTS:
        raise ctx.child("sweep").error(f"{n} transfer groups (RTTs x clients x streams x "
                                       f"concurrency x repeats): at most {L.MAX_MEASUREMENTS}")
    for i, p in enumerate(sc.paths):
        for key in ("client_host", "server_host", "router_host"):
            h = getattr(p, key)
            if h is not None and h != LOCAL and h not in sc.hosts:
                known = ", ".join([LOCAL, *sc.hosts])
                raise ctx.child("paths").child(i).child(key).error(
                    f"no such host (declared: {known})", h)
    real = [p for p in sc.paths if p.kind == "real" or p.router_host]
    if sc.topology.layout == "host" and len(real) != len(sc.paths):
        raise ctx.child("topology").error("layout 'host' carries real paths (or paths "
                                          "through a router host) only", sc.topology.name)
    _check_placement(ctx, sc)
    auth.check(ctx, sc)
    caches.check(ctx, sc)
    return sc


def _check_streams_sweep(ctx: S.Ctx, sc: Scenario) -> None:
    """`sweep.streams` runs every multi-stream client without its own sweep.streams at
    each count: within its tool's limit, never over a `streams:` the client states (the
    sweep would replace it without a word), and on one client at least. A single-stream
    client runs its one stream (the plan says so: queries.sweep_notes)."""
    vals = sc.sweep.streams
    if not vals:
        return
    cs = ctx.child("sweep").child("streams")
    takers = 0
    for i, c in enumerate(sc.clients):
        limit = kinds.client(c.tool).caps.max_streams
        if (c.sweep is not None and c.sweep.streams) or limit == 1:
            continue        # its own streams (checked with the client), or one stream
        takers += 1
        if c.streams is not None:
            raise ctx.child("clients").child(i).child("streams").error(
                f"client {c.name}'s own streams and sweep.streams {S.fmt_list(vals)} conflict "
                f"(the sweep would replace it): remove streams to sweep it, or keep it with "
                f"the client's own sweep: {{streams: [{c.streams}]}}", c.streams)
        for s in vals:
            if s > limit:
                raise cs.error(f"client {c.name} ({c.tool}) supports at most {limit} streams",
                               s)
    if not takers:
        multi = sorted(t.name for t in kinds.CLIENTS.all() if t.caps.max_streams > 1)
        raise cs.error("no client takes it: each has one stream or its own sweep.streams "
                       f"(several streams: {', '.join(multi)})", vals)


def _check_branches_sweep(ctx: S.Ctx, sc: Scenario) -> None:
    """`sweep.branches` is for clients that read branches (tool replay) without their own
    `branches:`; one at least."""
    vals = sc.sweep.branches
    if vals and not any("branches" in kinds.option_keys(c.tool) and c.option("branches") is None
                        for c in sc.clients):
        users = sorted(t.name for t in kinds.CLIENTS.all()
                       if "branches" in kinds.option_keys(t.name))
        raise ctx.child("sweep").child("branches").error(
            f"no client takes it: only {', '.join(users)} reads branches, and a client's own "
            "branches: keeps it", [S.fmt_pct(v) for v in vals])


def _check_sets(ctx: S.Ctx, sc: Scenario) -> None:
    """A `count:` set of small files is downloaded by a tool that fetches several files
    (xrdcp, curl, davix-get, rig-fdt), on this host, into the run's downloads folder."""
    sets = {f.name for f in sc.files if f.count is not None}
    for i, c in enumerate(sc.clients):
        if c.option("reuse") is not None and c.file not in sets:
            raise ctx.child("clients").child(i).child("reuse").error(
                "only for a client of a set of files (a files: entry with count:)",
                c.option("reuse"))
        if c.file not in sets or c.server is None:
            continue
        at = ctx.child("clients").child(i)
        caps = kinds.client(c.tool).caps
        if not caps.many_files:
            can = sorted(t.name for t in kinds.CLIENTS.all() if t.caps.many_files)
            raise at.child("file").error(f"{c.tool} does not fetch a set of files (count:); "
                                         f"{', '.join(can)} do", c.file)
        n = sc.file(c.file).count or 0
        if caps.max_files and n > caps.max_files:
            raise at.child("file").error(f"{c.tool} takes at most {caps.max_files} files at "
                                         f"once; the set has {n}", c.file)
        if c.source:
            raise at.child("source").error("a set of files (count:) is fetched by the "
                                           "client, not copied by a third party", c.source)
        if "upload" in client_directions(sc, c):
            raise at.child("file").error("a set of files (count:) is downloaded only",
                                         c.file)
        if c.option("checksum") is False:
            raise at.child("checksum").error("every file of a set (count:) is checked "
                                             "against its adler32", False)
        for key in ("dest_dir", "sources"):
            if c.option(key) is not None:
                raise at.child(key).error("not with a set of files (count:): they go to "
                                          "the run's downloads folder", c.option(key))
        remote = [p.name for p in sc.paths if runs_on(c, p) and p.client_host != LOCAL]
        if remote:
            raise at.child("file").error(f"a set of files (count:) is fetched on this host "
                                         f"(path {remote[0]} has its client elsewhere)",
                                         c.file)


def _check_uploads(ctx: S.Ctx, sc: Scenario) -> None:
    """An upload goes to a server kind that accepts writes, on this host, from tmpfs."""
    cd = ctx.child("sweep").child("direction")
    fams = sc.sweep.direction or []
    if len(set(fams)) != len(fams):
        raise cd.error("a direction named twice", fams)
    if "upload" in fams and not any(kinds.client(c.tool).caps.upload for c in sc.clients):
        raise cd.error("no client can upload (" + ", ".join(sorted(
            t.name for t in kinds.CLIENTS.all() if t.caps.upload)) + " can)", fams)
    servers = {s.name: s for s in sc.servers}
    for i, c in enumerate(sc.clients):
        if "upload" not in client_directions(sc, c) or c.server not in servers:
            continue
        at = ctx.child("clients").child(i)
        at = at.child("direction") if c.direction else cd
        kind = servers[c.server].kind
        if kind not in kinds.client(c.tool).caps.upload or not kinds.server(kind).writes:
            raise at.error(f"client {c.name}: a {kind} server does not accept {c.tool}'s "
                           "writes", "upload")
        if sc.storage.on_disk:
            raise at.error(f"client {c.name}: uploads go to the run's tmpfs (storage: disk "
                           "serves downloads only)", "upload")
        remote = [p.name for p in sc.paths if runs_on(c, p)
                  and (p.client_host != LOCAL or p.server_host != LOCAL)]
        if remote:
            raise at.error(f"client {c.name}: uploads run with both ends on this host (path "
                           f"{remote[0]} has a remote end)", "upload")


def _check_storage(ctx: S.Ctx, sc: Scenario) -> None:
    """A tmpfs holds L.MAX_FILE_SIZE in all (memory); a disk what its room allows (checked
    when the run starts: rig.description.storage.room_error); a disk is this host's."""
    total = sum(f.size for f in sc.files)
    if sc.storage.on_disk:
        if total > L.MAX_DISK_BYTES:
            raise ctx.child("files").error(f"files above {S.fmt_size(L.MAX_DISK_BYTES)} in all",
                                           S.fmt_size(total))
        remote = [p.name for p in sc.paths if p.server_host not in (None, LOCAL)]
        if remote:
            raise ctx.child("storage").child("kind").error(
                f"a disk of this host only (path {remote[0]} serves from a remote host)", "disk")
        return
    for i, f in enumerate(sc.files):
        if f.size > L.MAX_FILE_SIZE:
            raise ctx.child("files").child(i).child("size").error(
                f"files above {S.fmt_size(L.MAX_FILE_SIZE)} do not fit a tmpfs here (storage: "
                "disk holds more)", S.fmt_size(f.size))
    if total > L.MAX_FILE_SIZE:
        raise ctx.child("files").error(f"files above {S.fmt_size(L.MAX_FILE_SIZE)} in all do not "
                                       "fit a tmpfs here (storage: disk holds more)",
                                       S.fmt_size(total))


def _check_tls_sweep(ctx: S.Ctx, sc: Scenario) -> None:
    modes = sc.sweep.tls or []
    cc = ctx.child("sweep").child("tls")
    if len(set(modes)) != len(modes):
        raise cc.error("a TLS mode is listed twice", modes)
    for m in modes:
        if m != "off" and not any(_can_tls(sc, c, m) for c in sc.clients):
            users = sorted(t.name for t in kinds.CLIENTS.all() if m in t.caps.tls)
            raise cc.error(f"no client can use TLS mode {m} (only {', '.join(users)}, "
                           "against an xrootd or nginx server)", m)


def _check_tpc(cc: S.Ctx, c: ClientSpec, caps: Any, servers: dict[str, ServerSpec]) -> None:
    """A third-party-copy client names a source; its server (the destination) pulls."""
    if not caps.third_party:
        if c.source is not None:
            raise cc.child("source").error(f"{c.tool} copies from its server itself; "
                                           "only third-party-copy tools take a source", c.source)
        return
    if c.source is None:
        raise cc.child("source").error(f"{c.tool} needs the server the copy pulls from")
    if c.source not in servers:
        raise cc.child("source").error("no server of that name", c.source)
    if c.source == c.server:
        raise cc.child("source").error("source and destination are one server", c.source)
    if servers[c.source].kind not in caps.servers:
        raise cc.child("source").error(f"{c.tool} cannot pull from a "
                                       f"{servers[c.source].kind} server", c.source)
    if c.option("tpc_mode") == "push":          # the source's XrdHttpTPC sends to the destination
        if not servers[c.source].tpc:
            raise cc.child("source").error("the source pushes: it needs third-party copy "
                                           "(give it tpc: true)", c.source)
        if c.server is None or not kinds.server(servers[c.server].kind).writes:
            raise cc.child("server").error("the destination takes the pushed file: a kind "
                                           "that accepts writes", c.server)
        return
    if c.server is None or not servers[c.server].tpc:
        raise cc.child("server").error("the destination cannot do third-party copy "
                                       "(give it tpc: true)", c.server)


def _check_placement(ctx: S.Ctx, sc: Scenario) -> None:
    t = sc.topology
    if t.layout == "mininet":
        hosts = {n.name for n in t.by_role("server")}
        for i, s in enumerate(sc.servers):
            if s.node is not None and s.node not in hosts:
                raise ctx.child("servers").child(i).child("node").error(
                    f"not a host of {t.name} but the client ({', '.join(sorted(hosts))})",
                    s.node)
        return
    if t.layout != "netns":
        return
    n = max(server_count(sc, p) for p in sc.paths)
    if t.counted and not 1 <= n <= T.MAX_COUNT:
        raise ctx.child("servers").error(f"topology {t.name} holds 1..{T.MAX_COUNT} server "
                                         "instances", n)
    names = {n.name for n in t.by_role("server")}
    for i, s in enumerate(sc.servers):
        if s.node is None:
            continue
        if t.counted:
            raise ctx.child("servers").child(i).child("node").error(
                f"topology {t.name} gives each instance its own node", s.node)
        if s.node not in names:
            raise ctx.child("servers").child(i).child("node").error(
                f"topology {t.name} has server nodes {', '.join(sorted(names))}", s.node)


def _check_together(cc: S.Ctx, sc: Scenario) -> None:
    if not sc.together:
        return
    by = {p.name: p for p in sc.paths}
    if len(sc.together) < 2:
        raise cc.error("name two or more paths to run together", sc.together)
    if len(set(sc.together)) != len(sc.together):
        raise cc.error("a path named twice", sc.together)
    for i, n in enumerate(sc.together):
        if n not in by:
            raise cc.child(i).error(f"no such path (have: {', '.join(by)})", n)
        p = by[n]
        if p.kind != "emulated" or LOCAL not in (p.client_host, p.server_host) \
                or p.router_host is not None:
            raise cc.child(i).error("paths run together are emulated paths this host builds",
                                    n)
        if background_on(sc, p):
            raise cc.child(i).error("a path run together carries no background flows (yet)",
                                    n)
    lens = {n: len(by[n].rtts_s) for n in sc.together}
    if len(set(lens.values())) > 1:
        raise cc.error("paths run together sweep their RTTs side by side: give each the same "
                       "number of RTTs (" + ", ".join(f"{n}: {k}" for n, k in lens.items())
                       + ")", sc.together)
    for i, n in enumerate(sc.together):
        if not any(runs_on(c, by[n]) for c in sc.clients):
            raise cc.child(i).error("no client runs on this path (clients[].paths)", n)
