"""EndpointUp: a path whose server is an external endpoint (issue 40 item 1), made ready
before the first step: the path's server namespace becomes the gateway to the endpoint's
address (rig.realization.gateway), then the endpoint is checked from the client's side:
a TCP connection to its port, a stat of every file a client will read (xrdfs stat, an
HTTP HEAD), and the base RTT beyond the emulation (ping from the gateway to the
endpoint), which each step's path check adds to its configured RTT. An endpoint that
does not answer stops the run in one line naming its URL, with everything undone."""
from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field
from typing import Any

from rig.description.endpoint import Endpoint
from rig.description.scenario.clients import EXTERNAL, ServerSpec
from rig.description.scenario.document import Scenario
from rig.errors import RigError
from rig.orchestration.actions import PREFIX, Action, Item, cmd, comment, text
from rig.orchestration.context import Context, Live
from rig.orchestration.pathcheck import parse_ping, ping_argv
from rig.process import nsprobe, proc
from rig.process.proc import ns_argv
from rig.realization import gateway, netns, tuning
from rig.services.servers import external

CONNECT_TIMEOUT_S = 5.0
PING_COUNT = 10


@dataclass
class EndpointState:
    """An endpoint as the run found it: its address, route, base RTT and files' sizes."""
    spec: ServerSpec
    ep: Endpoint
    addr: str
    gw: gateway.Gateway
    route_if: str = ""
    base_rtt_ms: float | None = None
    sizes: dict[str, int] = field(default_factory=dict)    # client file -> bytes

    def env(self) -> dict[str, Any]:
        return {"url": self.ep.url, "scheme": self.ep.scheme, "host": self.ep.host,
                "address": self.addr, "port": self.ep.port, "route_if": self.route_if,
                "base_rtt_ms": self.base_rtt_ms, "gateway_if": self.gw.host_if,
                "files": {self.ep.file_url(k): v for k, v in self.sizes.items()}}


@dataclass(frozen=True)
class EndpointUp(Action):
    kind: str = "endpoint"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        assert self.path is not None
        live = ctx.live(self.path)
        live.endpoint = _up(ctx, stack, live, endpoint_of(ctx.sc))


def endpoint_of(sc: Scenario) -> ServerSpec:
    return next(s for s in sc.servers if s.kind == EXTERNAL)


def has_endpoint(sc: Scenario) -> bool:
    return any(s.kind == EXTERNAL for s in sc.servers)


def files_of(sc: Scenario, s: ServerSpec) -> list[str]:
    """The paths the clients of endpoint `s` read, in client order."""
    return list(dict.fromkeys(c.file for c in sc.clients if c.server == s.name and c.file))


def proxy_of(sc: Scenario, s: ServerSpec) -> str:
    """The X.509 proxy the stat presents: the first one a client of `s` names ("": none)."""
    return next((c.credential["proxy"] for c in sc.clients if c.server == s.name
                 and isinstance(c.credential, dict) and "proxy" in c.credential), "")


def items(sc: Scenario, n: netns.RealizedPath) -> list[Item]:
    s = endpoint_of(sc)
    ep = s.endpoint
    assert ep is not None
    addr = ep.host if ep.is_address else f"<address of {ep.host}>"
    g = gateway.lay_out(n, addr)
    out = [text(comment(f"endpoint {s.name} ({ep.url}): not started by the rig; path "
                        f"{n.name}'s server namespace routes on to it"))]
    if not ep.is_address:
        out.append(text(comment(f"resolve {ep.host} on this host (IPv4); write "
                                f"{netns.ETC_NETNS / n.client_ns / 'hosts'}: {addr} {ep.host}")))
    out.append(cmd(gateway.route_get_argv(addr), note="   # the interface this host "
                   "reaches the endpoint by"))
    out += [cmd(a) for a in gateway.link_argv(g)]
    key = gateway.forwarding_key("<endpoint interface>")
    out.append(text(comment(f"record {key} in the run's state (restored at the end, or "
                            "by `rig clean`)")))
    out += [cmd(gateway.sysctl_argv(gateway.forwarding_key(g.host_if), "1")),
            cmd(gateway.sysctl_argv(key, "1"))]
    out += [cmd(gateway.rule_argv(r, "-I")) for r in gateway.rules(g)]
    out.append(text(comment(f"TCP connect to {addr}:{ep.port} from {n.client_ns} "
                            f"(within {CONNECT_TIMEOUT_S:g} s; no process)")))
    proxy = proxy_of(sc, s)
    out += [cmd(ns_argv(n.client_ns, external.stat_argv(ep, f, proxy)),
                env=external.stat_env(ep, proxy))
            for f in files_of(sc, s)]
    out.append(cmd(ns_argv(n.server_ns, ping_argv(addr, PING_COUNT, 0.2)),
                   note="   # the base RTT beyond the emulation"))
    return out


def teardown_items(sc: Scenario, n: netns.RealizedPath) -> list[Item]:
    """The host's part undone (the namespace's goes with it)."""
    ep = endpoint_of(sc).endpoint
    assert ep is not None
    g = gateway.lay_out(n, ep.host if ep.is_address else f"<address of {ep.host}>")
    return ([cmd(gateway.rule_argv(r, "-D")) for r in gateway.rules(g)]
            + [cmd(gateway.sysctl_argv(gateway.forwarding_key("<endpoint interface>"),
                                       "<before>"), note="   # where it still holds 1"),
               cmd(["ip", "link", "del", g.host_if], note="   # if still there")])


def resolve(ep: Endpoint) -> str:
    if ep.is_address:
        return ep.host
    try:
        infos = socket.getaddrinfo(ep.host, ep.port, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise RigError(f"endpoint {ep.url}: {ep.host} does not resolve on this host "
                       f"({e})") from None
    return str(infos[0][4][0])


def _up(ctx: Context, stack: contextlib.ExitStack, live: Live, s: ServerSpec) -> EndpointState:
    ep = s.endpoint
    assert ep is not None
    addr = resolve(ep)
    st = EndpointState(s, ep, addr, gateway.lay_out(live.path, addr))
    kind, dev = _route(ep, addr)
    st.route_if = dev
    g = st.gw
    # recorded before anything is made: `rig clean` undoes it after a SIGKILL
    keys = [gateway.forwarding_key(dev)] if kind != "local" else []
    before = tuning.read(keys)
    rec = ctx.state.data.setdefault("endpoint", {"sysctls_restore": {}, "sysctls_wrote": {},
                                                 "links": []})
    for k, v in before.items():      # a second path's "before" is the first's 1
        rec["sysctls_restore"].setdefault(k, v)
    rec["sysctls_wrote"].update({k: "1" for k in keys})
    rec["links"].append(g.host_if)
    ctx.state.save()
    stack.callback(_down, ctx, g, before, keys)
    for argv in gateway.link_argv(g):
        proc.run(argv, timeout=gateway.CMD_TIMEOUT, check=True)
    for k in [gateway.forwarding_key(g.host_if), *keys]:
        proc.run(gateway.sysctl_argv(k, "1"), timeout=gateway.CMD_TIMEOUT, check=True)
    for r in gateway.rules(g):
        proc.run(gateway.rule_argv(r, "-I"), timeout=gateway.CMD_TIMEOUT, check=True)
    if not ep.is_address:
        _hosts_file(live, ep.host, addr)
    ctx.say(f"endpoint {s.name}: {ep.url} at {addr}, through {live.spec.name}'s server "
            f"namespace ({g.ns_if} -> {g.host_if}) and this host's {dev}")
    _answers(ctx, live, st)
    ctx.store.set_env("endpoints", {s.name: st.env()})
    return st


def _route(ep: Endpoint, addr: str) -> tuple[str, str]:
    try:
        return gateway.endpoint_route(addr)
    except RigError as e:
        raise RigError(f"endpoint {ep.url}: {e}") from None


def _hosts_file(live: Live, name: str, addr: str) -> None:
    """The endpoint's name in the client's namespace (which has no resolver:
    netns.isolate_resolver); `ip netns exec` binds it over /etc/hosts there."""
    for ns in (live.client_ns, live.server_ns):
        (netns.ETC_NETNS / ns / "hosts").write_text(
            f"127.0.0.1 localhost\n::1 localhost\n{addr} {name}\n")


def _answers(ctx: Context, live: Live, st: EndpointState) -> None:
    """Does the endpoint answer from the client's side? One line naming its URL if not."""
    ep = st.ep
    if not nsprobe.tcp_open(live.client_ns, st.addr, ep.port, timeout=CONNECT_TIMEOUT_S):
        raise RigError(f"endpoint {ep.url} does not answer: no TCP connection to "
                       f"{st.addr}:{ep.port} from the client's side within "
                       f"{CONNECT_TIMEOUT_S:g} s")
    proxy = proxy_of(ctx.sc, st.spec)
    for f in files_of(ctx.sc, st.spec):
        r = proc.run(ns_argv(live.client_ns, external.stat_argv(ep, f, proxy)),
                     env=external.stat_env(ep, proxy), timeout=external.STAT_TIMEOUT_S)
        size = external.parse_stat(ep.protocol, r.stdout) if r.returncode == 0 else None
        if size is None:
            why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:120] \
                if r.returncode != 0 else "no size in its answer"
            raise RigError(f"endpoint {ep.url}: {ep.file_url(f)} cannot be read ({why})")
        st.sizes[f] = size
    r = proc.run(ns_argv(live.server_ns, ping_argv(st.addr, PING_COUNT, 0.2)),
                 timeout=PING_COUNT * 2.2 + 10)
    try:
        ping = parse_ping(r.stdout)
    except ValueError:
        ping = None
    if ping is None or ping.mean_ms is None:
        raise RigError(f"endpoint {ep.url}: no ping answer from {st.addr} (the path "
                       "check needs ICMP echo to the endpoint)")
    st.base_rtt_ms = ping.mean_ms
    ctx.say(f"endpoint {st.spec.name}: answers; base RTT {ping.mean_ms:.3f} ms "
            f"(min {ping.min_ms:.3f}) beyond the emulation; "
            + ", ".join(f"{f} {n} B" for f, n in st.sizes.items()))


def _down(ctx: Context, g: gateway.Gateway, before: dict, keys: list[str]) -> None:
    """Undo the host's part (the namespace's goes with it): the rules, the forwarding
    sysctl (if it still holds the run's value), the veth."""
    errors = []
    for r in gateway.rules(g):
        res = proc.run(gateway.rule_argv(r, "-D"), timeout=gateway.CMD_TIMEOUT)
        if res.returncode != 0 and "does a matching rule exist" not in res.stderr \
                and "Bad rule" not in res.stderr:
            errors.append(res.stderr.strip()[:100])
    if keys:
        tuning.restore_global(before, {k: "1" for k in keys})
    if g.host_if in _links():
        proc.run(["ip", "link", "del", g.host_if], timeout=gateway.CMD_TIMEOUT)
    if errors:
        ctx.say(f"endpoint gateway: not every rule removed ({errors[0]}); `rig clean` retries")
        return
    ctx.state.data.pop("endpoint", None)
    ctx.state.save()


def _links() -> set[str]:
    import os
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return set()


__all__ = ["EndpointUp", "EndpointState", "PREFIX", "has_endpoint", "items"]
