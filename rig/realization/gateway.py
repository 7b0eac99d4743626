"""The far end of an emulated path as a gateway to an external endpoint (issue 40 item 1):
the path's server namespace gets a veth to the host and a route to the endpoint's
address, the router a route to it through the server namespace, and the host forwards
between that veth and the interface its own route to the endpoint leaves by.

Why this shape: the client's packets cross the emulation in the router exactly as they
do to the rig's own servers (its rules are on the router's interfaces), and leave the
host as the host's own traffic would. Two masquerades keep every address of the rig
inside the rig: the server namespace's (the endpoint's side sees the gateway link's
address only) and the host's (the endpoint sees this host's address on its route, so
the site needs no route back to 198.18.0.0/15).

On the host:
- `net.ipv4.conf.<if>.forwarding=1` on the gateway veth and on the endpoint's route
  interface: per interface, so `net.ipv4.ip_forward` is never written. The endpoint
  interface's value before is recorded in the run's state first and put back at the end
  (only if it still holds what the run wrote) and by `rig clean` after a SIGKILL; the
  veth goes with the server namespace.
- iptables rules (nat POSTROUTING masquerade, FORWARD accept both ways, limited to the
  gateway link and the endpoint's address), each with the comment `<prefix>` so
  `rig clean` finds a killed run's (`leftover_rules`).

Names: the host's veth end `<prefix><i>gh`, the namespace's `<prefix><i>gs`; addresses:
a /30 in the upper half of the run's /24 (path i: 128 + 4i), which the default topology
(8 addresses a path, at most 16 paths with an endpoint) leaves free.

Argv builders are pure; `up`/`down` run them. Must not import services, orchestration or
reports.
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

from rig.errors import RigError
from rig.process import proc
from rig.realization.netns import RealizedPath

CMD_TIMEOUT = 20.0
GATEWAY_BASE = 128       # the gateway links' first address in the run's /24


@dataclass(frozen=True)
class Gateway:
    """One path's gateway to one endpoint address (pure data)."""
    prefix: str
    index: int
    server_ns: str
    router_ns: str
    router_gw: str          # the server namespace's address on the router's link
    host_if: str            # the veth's end on the host
    ns_if: str              # its end in the server namespace
    net: str                # the gateway link's /30
    host_addr: str
    ns_addr: str
    endpoint: str           # the endpoint's IPv4 address

    @property
    def comment(self) -> str:
        return self.prefix


def lay_out(path: RealizedPath, endpoint_addr: str) -> Gateway:
    """The gateway of a built (or planned) path of the default topology."""
    assert path.prefix and path.subnet and path.router_ns and path.server_ns
    base = ipaddress.ip_network(path.subnet).network_address + GATEWAY_BASE + 4 * path.index
    if path.index >= 32:
        raise ValueError("at most 32 gateway links in a run's /24")
    tag = f"{path.prefix}{path.index}"
    return Gateway(path.prefix, path.index, path.server_ns, path.router_ns,
                   path.server_addr, tag + "gh", tag + "gs", f"{base}/30", str(base + 1),
                   str(base + 2), endpoint_addr)


def link_argv(g: Gateway) -> list[list[str]]:
    """The veth, its addresses, the routes and the server namespace's forwarding and
    masquerade (everything inside the rig's namespaces, and the veth)."""
    ns = ["ip", "-n", g.server_ns]
    return [
        ["ip", "link", "add", g.host_if, "type", "veth", "peer", "name", g.ns_if,
         "netns", g.server_ns],
        ["ip", "addr", "add", f"{g.host_addr}/30", "dev", g.host_if],
        ["ip", "link", "set", g.host_if, "up"],
        [*ns, "addr", "add", f"{g.ns_addr}/30", "dev", g.ns_if],
        [*ns, "link", "set", g.ns_if, "up"],
        [*ns, "route", "add", f"{g.endpoint}/32", "via", g.host_addr],
        ["ip", "-n", g.router_ns, "route", "add", f"{g.endpoint}/32", "via", g.router_gw],
        ["ip", "netns", "exec", g.server_ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        ["ip", "netns", "exec", g.server_ns, "iptables", "-w", "5", "-t", "nat", "-A",
         "POSTROUTING", "-o", g.ns_if, "-j", "MASQUERADE"],
    ]


def rules(g: Gateway) -> list[list[str]]:
    """The host's iptables rules (without the -A/-I/-D verb): (table, chain, match...)."""
    c = ["-m", "comment", "--comment", g.comment]
    return [
        ["-t", "nat", "POSTROUTING", "-s", g.net, "-d", f"{g.endpoint}/32", *c,
         "-j", "MASQUERADE"],
        ["-t", "filter", "FORWARD", "-i", g.host_if, "-d", f"{g.endpoint}/32", *c,
         "-j", "ACCEPT"],
        ["-t", "filter", "FORWARD", "-o", g.host_if, "-s", f"{g.endpoint}/32", *c,
         "-j", "ACCEPT"],
    ]


def rule_argv(rule: list[str], verb: str) -> list[str]:
    """iptables -I (insert: ahead of a site's own DROP rules) or -D of one rule."""
    table, chain, rest = rule[:2], rule[2], rule[3:]
    return ["iptables", "-w", "5", *table, verb, chain, *rest]


def forwarding_key(ifname: str) -> str:
    return f"net.ipv4.conf.{ifname}.forwarding"


def sysctl_argv(key: str, value: str) -> list[str]:
    return ["sysctl", "-q", "-w", f"{key}={value}"]


def route_get_argv(addr: str, ns: str | None = None) -> list[str]:
    return proc.ns_argv(ns, ["ip", "-j", "route", "get", addr])


def parse_route(stdout: str) -> tuple[str, str]:
    """(type, device) of `ip -j route get`'s first route: ("local", "lo") for an address
    of this host, ("unicast", "eth0") for one it routes to."""
    try:
        r = json.loads(stdout)[0]
        return str(r.get("type", "unicast")), str(r["dev"])
    except (ValueError, LookupError, TypeError):
        raise RigError(f"ip route get: unexpected output {stdout[:100]!r}") from None


def endpoint_route(addr: str) -> tuple[str, str]:
    """How this host reaches the endpoint: (type, device); RigError if it has no route."""
    r = proc.run(route_get_argv(addr), timeout=CMD_TIMEOUT)
    if r.returncode != 0:
        raise RigError(f"this host has no route to {addr}: {r.stderr.strip()[:120]}")
    return parse_route(r.stdout)


def read_sysctl(key: str) -> str | None:
    try:
        with open("/proc/sys/" + key.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def leftover_rules(prefix: str) -> list[list[str]]:
    """The -D argv of every host iptables rule (filter and nat) whose comment is the
    run's prefix exactly (`iptables -S` prints `-m comment --comment rig3f2a`)."""
    out = []
    for table in ("nat", "filter"):
        r = proc.run(["iptables", "-w", "5", "-t", table, "-S"], timeout=CMD_TIMEOUT)
        for line in r.stdout.splitlines():
            words = line.split()
            if len(words) > 2 and words[0] == "-A" and _commented(words, prefix):
                out.append(["iptables", "-w", "5", "-t", table, "-D", *words[1:]])
    return out


def _commented(words: list[str], prefix: str) -> bool:
    for i, w in enumerate(words[:-1]):
        if w == "--comment" and words[i + 1].strip('"') == prefix:
            return True
    return False
