"""Servers: a path's origin servers (rig.orchestration.origins), each with its config
files, ports and CPU set, then its iperf3 servers (the path check's, one per extra
concurrent iperf3 client, one per competing flow)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL, PathSpec
from rig.description.scenario.queries import background_on, client_concurrency, runs_on, uses_tls
from rig.orchestration import origins, storagecheck
from rig.description.scenario.clients import EXTERNAL
from rig.orchestration.actions import PREFIX, Action, Item, cmd, comment, text
from rig.orchestration.acts.pinning import pinned
from rig.orchestration.context import Context, Live
from rig.process.proc import ns_argv
from rig.realization import certs, netns, tls
from rig.services import servers, tools
from rig.services.servers.start import start_iperf3_server, start_server


@dataclass(frozen=True)
class Servers(Action):
    kind: str = "servers"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        ctx.make_ca()
        assert self.path is not None
        _start_servers(ctx, stack, ctx.live(self.path), ctx.datadir)


def plans(sc: Scenario, n: netns.RealizedPath,
          wd: Path) -> dict[str, list[servers.ServerPlan]]:
    """The run's server plans (rig.orchestration.origins), with the TLS files a run that
    uses TLS gives each server (placeholders here: the CA is made at run time)."""
    on = uses_tls(sc)
    remote = remote_server(sc, n)

    def ports(kind: str, k: int, ns: str | None, addr: str,
              avoid: frozenset[int]) -> dict[str, int]:
        return servers.default_ports(kind, k, tls=on, avoid=avoid, remote=remote)
    out = origins.server_plans(sc, n, wd, storagecheck.data_folder(sc, wd, PREFIX), ports)
    if not on:
        return out

    def with_tls(p: servers.ServerPlan) -> servers.ServerPlan:
        if not servers.get(p.spec.kind).tls_ports:
            return p
        return dataclasses.replace(p, tls=servers.TlsFiles(
            "<certificate signed by the run's CA>", "<its key>",
            str(wd / "tls" / "ca.pem"), str(wd / "tls" / "certs"),
            f"{sc.paths[n.index].name}-{p.origin}"))
    return {name: [with_tls(p) for p in ps] for name, ps in out.items()}


def remote_server(sc: Scenario, n: netns.RealizedPath) -> bool:
    """Do this path's servers run on another host (`hosts:`)?"""
    return sc.paths[n.index].server_host != LOCAL


def iperf3_port(sc: Scenario, n: netns.RealizedPath) -> int:
    """The path check's iperf3 port as planned (this host: 5201; another: 25201)."""
    return servers.default_ports("iperf3", 0, remote=remote_server(sc, n))["iperf3"]


def iperf3_servers(sc: Scenario, spec: PathSpec) -> int:
    """iperf3 servers on a path (besides competing flows'): one serves one test at a
    time, so as many as iperf3 clients run at once there (the path check's is the first)."""
    iperfs = [c for c in sc.clients
              if tools.get(c.tool).caps.uses_iperf_servers and runs_on(c, spec)]
    return max((n for c in iperfs for n in client_concurrency(sc, c)), default=1)


def items(sc: Scenario, n: netns.RealizedPath, wd: Path, host: str = LOCAL) -> list[Item]:
    at = "" if host == LOCAL else f"@{host} "
    out: list[Item] = []
    for ps in plans(sc, n, wd).values():
        for plan in ps:
            if plan.spec.kind == EXTERNAL:
                out.append(text(comment(f"server {plan.origin}: external endpoint "
                                        f"{plan.spec.url}, not started; no iperf3 server "
                                        "(the path check pings the endpoint)")))
                continue
            out += [cmd(a, host) for a in plan.kind.prepare_argv(plan)]
            for name, body in servers.server_files(plan).items():
                out.append(text(f"{at}# {plan.workdir / name}:"))
                out += [text(f"#   {ln}") for ln in body.strip().splitlines()]
            pre, argv = pinned(wd.name, plan.workdir.name, plan.cpus,
                               servers.server_argv(plan), local=not at)
            out += [text(x) for x in pre]
            out.append(cmd(ns_argv(plan.ns, argv), host))
    if any(s.kind == EXTERNAL for s in sc.servers):
        return out
    iperf = iperf3_port(sc, n)
    out.append(cmd(ns_argv(n.server_ns, servers.iperf3_server_argv(n.server_addr, iperf)),
                   host))
    for i, b in enumerate(background_on(sc, sc.paths[n.index])):   # one per competing flow
        out.append(cmd(ns_argv(n.server_ns, servers.iperf3_server_argv(
            n.server_addr, iperf - servers.IPERF3_PORT + servers.BACKGROUND_PORT + i)), host,
            note=f"   # for {b.name}"))
    for extra in range(1, iperf3_servers(sc, sc.paths[n.index])):
        out.append(cmd(ns_argv(n.server_ns, servers.iperf3_server_argv(
            n.server_addr, iperf + extra)), host,
            note=f"   # iperf3 client instance {extra + 1}"))
    return out


def _ports(ctx: Context, live: Live, kind: str, k: int, ns: str | None,
           addr: str, avoid: frozenset[int] = frozenset()) -> dict[str, int]:
    want = servers.default_ports(kind, k, tls=ctx.ca is not None, avoid=avoid,
                                 remote=not live.server.local)
    return live.server.ports(want, ns, addr, avoid)


def _server_tls(ctx: Context, live: Live, p: servers.ServerPlan) -> servers.TlsFiles | None:
    """Certificate for the server's address and a name of its own, from the run's CA."""
    if ctx.ca is None or not servers.get(p.spec.kind).tls_ports:
        return None
    name = f"{live.spec.name}-{p.origin}"
    cert, key = tls.server_cert(ctx.ca, name, p.addr, rsa=p.spec.auth == "x509")
    return servers.TlsFiles(cert, key, str(ctx.ca.cert), str(ctx.ca.hashed_dir), name)


def _start_servers(ctx: Context, stack: contextlib.ExitStack, live: Live, datadir: Path) -> None:
    side = live.server
    live.servers = origins.server_plans(
        ctx.sc, live.path, ctx.workdir, datadir,
        lambda kind, k, ns, addr, avoid: _ports(ctx, live, kind, k, ns, addr, avoid))
    # where the server side keeps its files (a remote host: its run directory and data)
    live.servers = {name: [dataclasses.replace(side.place(p), tls=_server_tls(ctx, live, p))
                           for p in ps] for name, ps in live.servers.items()}
    _tls_identity(ctx, live)
    if live.endpoint is not None:     # nothing of the rig's runs at the far end
        ctx.origins_env[live.spec.name] = {
            p.origin: {"server": p.spec.name, "external": p.spec.url}
            for ps in live.servers.values() for p in ps}
        ctx.store.set_env("origins", ctx.origins_env)
        return
    effective = {}
    for ps in live.servers.values():
        for plan in ps:
            cg = side.cgroup(functools.partial(ctx.cgroup, stack, plan.workdir.name,
                                               plan.cpus))
            rs = start_server(plan, ctx.workdir / plan.workdir.name, cgroup=cg)
            stack.callback(rs.stop)
            ctx.state.record_pid(rs.service)
            side.track(plan.origin, rs.service, live.server_pids, live.server_ids,
                       live.server_svcs)
            effective[plan.origin] = side.cpus_allowed(rs.service)
            pin = f", cpus {effective[plan.origin]}" if plan.cpus else ""
            ctx.say(f"server {plan.origin} ({plan.spec.kind}) ready on {plan.addr} ports "
                    + ", ".join(f"{k}={v}" for k, v in plan.ports.items()) + pin)
    ctx.origins_env[live.spec.name] = {
        p.origin: {"server": p.spec.name, "ns": p.ns, "addr": p.addr, "cpus": p.cpus,
                   "cpus_effective": effective[p.origin], "ports": p.ports,
                   "pinned_by": side.pinned_by if p.cpus else None}
        for ps in live.servers.values() for p in ps}
    ctx.store.set_env("origins", ctx.origins_env)   # where each instance ran, pinned
    iperf_port = _ports(ctx, live, "iperf3", 0, live.server_ns, live.server_addr)["iperf3"]
    live.iperf_port = iperf_port
    svc = start_iperf3_server(live.server_ns, live.server_addr, iperf_port,
                              ctx.workdir / live.spec.name, **side.run_kw())
    stack.callback(svc.stop)
    ctx.state.record_pid(svc)
    for k, b in enumerate(background_on(ctx.sc, live.spec)):   # local paths only
        port = iperf_port - servers.IPERF3_PORT + servers.BACKGROUND_PORT + k
        s3 = start_iperf3_server(live.server_ns, live.server_addr, port,
                                 ctx.workdir / live.spec.name)
        stack.callback(s3.stop)
        ctx.state.record_pid(s3)
        live.bg_ports[b.name] = port
    for extra in range(1, iperf3_servers(ctx.sc, live.spec)):
        s2 = start_iperf3_server(live.server_ns, live.server_addr, iperf_port + extra,
                                 ctx.workdir / live.spec.name, **side.run_kw())
        stack.callback(s2.stop)
        ctx.state.record_pid(s2)


def _tls_identity(ctx: Context, live: Live) -> None:
    """The throw-away certificate a TPC server needs (rig.realization.certs)."""
    tpc = [p for ps in live.servers.values() for p in ps if p.tls_dir and p.tls is None]
    if tpc and tpc[0].tls_dir is not None:
        certs.make_identity(tpc[0].tls_dir, [p.addr for p in tpc],
                            owner=tpc[0].kind.run_as)

