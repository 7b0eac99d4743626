"""PathUp: one path of the scenario made ready: an emulated path's namespaces, links,
addresses, routes and per-namespace tuning (rig.realization.netns); a real path used as
it is; a path through a router host, the emulation placed on that host's interfaces
(rig.realization.remote_router), its state recorded first, undone at the end."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rig.description.kinds import AUTO
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL, PathSpec
from rig.description.scenario.queries import path_mtu, path_tuning, server_count
from rig.errors import RigError
from rig.orchestration import hosts
from rig.orchestration.actions import PREFIX, Action, Item, cmd, comment, text
from rig.orchestration.context import Context, Live
from rig.process.remote import Host
from rig.realization import netns, remote_router, tuning
from rig.realization.emul import chain, netem
from rig.realization.emul.choose import make_backend
from rig.realization.emul.none import NoneBackend


# what rig.realization.emul.choose.auto_backend_name runs, netem's then the userspace
# engine's (userspace.kernel_has_nfqueue's argv, which it does not name)
AUTO_PROBES = (netem.netem_probe_argv(),
               ["unshare", "--net", "--", "iptables", "-w", "5", "-A", "FORWARD", "-j",
                "NFQUEUE", "--queue-num", "0"])


@dataclass(frozen=True)
class PathUp(Action):
    kind: str = "path"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        i = next(j for j, p in enumerate(ctx.sc.paths) if p.name == self.path)
        ctx.lives.append(_build_path(ctx, stack, i, ctx.sc.paths[i]))


def host_wd(sc: Scenario, host: str, wd: Path) -> Path:
    """The run's directory on `host` (as the plan names it)."""
    return wd if host == LOCAL else Path(sc.hosts[host].rundir, PREFIX)


def items(sc: Scenario, i: int, p: PathSpec, wd: Path) -> tuple[netns.RealizedPath, list[Item]]:
    """The path's names and addresses as the plan shows them, and its lines."""
    out = [text(f"# path {p.name} ({p.kind})")]
    if p.tuning is not None:
        own = tuning.ns_wanted(p.tuning)
        out.append(text("# its own tuning over the scenario's: " + (", ".join(
            f"{k}={v}" for k, v in own.items()) or "nothing") + (
            f" (profile {p.tuning.profile}: as far as this kernel allows; its host-global "
            "keys are the scenario's tuning:)" if p.tuning.profile else "")))
    if p.router_host is not None:
        return _router_items(sc, i, p, wd, out)
    if p.kind == "real":
        assert p.server_addr is not None      # the schema requires it on real paths
        n = netns.real_path(i, p.name, client_ns=p.client_ns, server_ns=p.server_ns,
                            server_addr=p.server_addr)
        swd = host_wd(sc, p.server_host, wd)
        if p.server_host != LOCAL:
            out += [text(f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} "
                         "random bytes") for f in sc.files]
        return n, out
    n = netns.lay_out(sc.topology, PREFIX, i, p.name, "198.18.0.0/24", workdir=wd / p.name,
                      servers=server_count(sc, p), ip=p.ip or 4)
    out += [cmd(a) for a in netns.build_argv(n, mtu=path_mtu(sc, p))]
    if p.backend == AUTO:
        out.append(text(comment("backend auto: the kernel probed in rank order (throwaway "
                                "namespaces), up to the first backend that works:")))
        out += [cmd(a) for a in AUTO_PROBES]
    out += [text(f"# write {netns.ETC_NETNS / ns / 'resolv.conf'} (no resolver in the "
                 "namespace)") for ns in n.namespaces]
    for node in n.nodes:
        if node.role not in ("router", "switch") and node.ns is not None:
            out += [cmd(a) for a in tuning.ns_argv(path_tuning(sc, p), node.ns)]
    return n, out


def _router_items(sc: Scenario, i: int, p: PathSpec, wd: Path,
                  out: list[Item]) -> tuple[netns.RealizedPath, list[Item]]:
    assert p.router_host is not None and p.server_addr is not None
    rsite = remote_router.make_site(PREFIX, i, p, hosts.make_host(p.router_host,
                                                                  sc.hosts[p.router_host]))
    n = dataclasses.replace(netns.real_path(i, p.name, client_ns=None, server_ns=None,
                                            server_addr=p.server_addr), site=rsite)
    if rsite.end:
        out.append(text(f"@{p.router_host} " + comment(
            f"the router role on the {rsite.end} end: check {rsite.to_client_if} "
            "exists and does not carry the SSH connection; record the NFQUEUE rules "
            f"and {rsite.ifb} in the run's state; {remote_router.FORWARD} untouched")))
    else:
        out.append(text(f"@{p.router_host} " + comment(
            f"check {rsite.to_client_if} and {rsite.to_server_if} exist and do not "
            f"carry the SSH connection; record {remote_router.FORWARD} in the run's "
            "state, then set it to 1 (restored at the end)")))
    swd = host_wd(sc, p.server_host, wd)
    out += [text(f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} random bytes")
            for f in sc.files]
    return n, out


def preflight_routers(ctx: Context) -> None:
    """Router hosts checked before anything is created on any host (interfaces,
    the SSH connection's interface, the engine installed): one line, nothing left."""
    for i, p in enumerate(ctx.sc.paths):
        if p.router_host is not None:
            h = hosts.make_host(p.router_host, ctx.sc.hosts[p.router_host])
            ctx.router_backends[p.name] = remote_router.check(h, p, i, ctx.sc.source,
                                                              p.backend)


def _router_path(ctx: Context, stack: contextlib.ExitStack, i: int, p: PathSpec) -> Live:
    """An emulated path between two remote hosts through a router host: the ends are
    used as a real path's, the emulation lives on the router host's interfaces."""
    assert p.router_host is not None and p.server_addr is not None
    h = ctx.hosts[p.router_host]
    site = remote_router.make_site(ctx.prefix, i, p, h)
    name = ctx.router_backends[p.name]
    backend = make_backend(name, **({"local_logs": ctx.workdir / "router"}
                                    if name == "userspace" else {}))
    live = Live(p, dataclasses.replace(netns.real_path(
        i, p.name, client_ns=None, server_ns=None, server_addr=p.server_addr), site=site),
        backend, client=ctx.side(p.client_host), server=ctx.side(p.server_host))
    # an end host does not forward: its ip_forward is never read or written
    before = None if site.end else remote_router.read_forwarding(h)
    # recorded before anything is made there: `rig clean` undoes it after a SIGKILL
    ctx.state.data["hosts"][h.name].setdefault("router", {})[p.name] = \
        remote_router.record(site, before)
    ctx.state.save()
    stack.callback(_unroute, ctx, h, p.name, before)
    if site.end:
        ctx.say(f"host {h.name}: emulates path {p.name} on its {site.end} end "
                f"({site.to_client_if}, ingress through {site.ifb})")
    else:
        remote_router.set_forwarding(h, "1")
    stack.callback(_remove_backend, live)
    if not site.end:
        ctx.say(f"host {h.name}: routes path {p.name} ({site.to_client_if} <-> "
                f"{site.to_server_if}), {remote_router.FORWARD}=1 (was {before})")
    return live


def _unroute(ctx: Context, h: Host, path: str, before: str | None) -> None:
    try:
        if before is not None:
            remote_router.set_forwarding(h, before)
    except RigError as e:
        ctx.say(f"host {h.name}: {remote_router.FORWARD} not restored ({e}); "
                "`rig clean` retries")
        return
    ctx.state.data["hosts"].get(h.name, {}).get("router", {}).pop(path, None)
    ctx.state.save()


def _build_path(ctx: Context, stack: contextlib.ExitStack, i: int, p: PathSpec) -> Live:
    if p.router_host is not None:
        live = _router_path(ctx, stack, i, p)
    elif p.kind == "real":
        assert p.server_addr is not None      # the schema requires it on real paths
        live = Live(p, netns.real_path(i, p.name, client_ns=p.client_ns,
                                       server_ns=p.server_ns, server_addr=p.server_addr),
                    NoneBackend(), client=ctx.side(p.client_host),
                    server=ctx.side(p.server_host))
    else:
        path = stack.enter_context(netns.path_net(
            ctx.prefix, p.name, i, workdir=ctx.workdir / p.name,
            mtu=path_mtu(ctx.sc, p), subnet=ctx.subnet, topology=ctx.sc.topology,
            servers=server_count(ctx.sc, p), ip=p.ip or 4))
        for node in path.nodes:
            if node.role not in ("router", "switch") and node.ns is not None:
                tuning.apply_ns(path_tuning(ctx.sc, p), node.ns)
        live = Live(p, path, chain.over(make_backend(p.backend), path.site),
                    client=ctx.here, server=ctx.here)
        stack.callback(_remove_backend, live)
    ctx.say(f"path {p.name}: client {live.client_ns or 'host'} on {p.client_host} -> "
            f"server {live.server_addr} ({live.server_ns or 'host'}) on {p.server_host}, "
            f"backend {live.backend.name}")
    return live


def _remove_backend(live: Live) -> None:
    if live.site is not None and live.applied:
        live.backend.remove(live.site)
