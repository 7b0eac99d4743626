"""The emulation backend contract and the kernel rate-limit commands every backend shares.

A backend turns a LinkProfile into state on a router namespace (`LinkSite`). All
command builders are pure (argv lists); `apply`/`update`/`remove` run them through
rig.process.proc. Must not import services, orchestration or reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rig.description.linkstats import EmulStats
from rig.description.profile import Direction, LinkProfile, MTU_WIRE_BYTES
from rig.process import proc
from rig.process.remote import Host


@dataclass(frozen=True)
class LinkSite:
    """Where one path's emulation lives: the router namespace and its two legs.

    forward (client -> server) packets leave through `to_server_if`;
    reverse (server -> client) packets leave through `to_client_if`.

    `host`: a remote router host (rig.realization.remote_router); its commands run there
    through the agent, in that host's own network (`router_ns` is then empty), and
    `workdir` is a directory of the run on that host.

    `end`: the router role on an end host ("client" or "server": that end of the path
    emulates on its one interface, `to_client_if` == `to_server_if`). Its own direction
    leaves by that interface (egress); the other arrives on it (ingress), and a qdisc
    for that direction sits on `ifb`, an IFB device the ingress is redirected to.
    """
    path: str                 # path name in the scenario
    prefix: str               # run prefix, e.g. "rig3f2a"; everything created carries it
    router_ns: str
    to_client_if: str
    to_server_if: str
    client_net: str           # CIDR of the client leg, e.g. "10.201.4.0/30"
    server_net: str           # CIDR of the server leg
    queue_base: int           # first NFQUEUE number this site may use (two are used)
    workdir: Path             # run-private directory for sockets, logs, stats
    host: Host | None = None  # the router host (None: this one)
    end: str = ""             # "client" | "server": the router role on that end host
    ifb: str = ""             # the end host's IFB device for the ingress direction
    # the ends the rig built, as (namespace, device) of each sender on either side: what
    # sends the forward direction (clients) and the reverse (servers); empty when the ends
    # are a lab's own hosts, whose interfaces the rig does not change
    client_ends: tuple[tuple[str, str], ...] = ()
    server_ends: tuple[tuple[str, str], ...] = ()
    # a path with several emulated links (a Mininet topology's): each link's own site
    # and fixed profile, client side first; the fields above are then the first hop's
    # on the way to the server (rig.realization.emul.chain applies them all)
    hops: tuple[tuple["LinkSite", LinkProfile], ...] = ()

    def senders(self, direction: str) -> tuple[tuple[str, str], ...]:
        """Who puts `direction`'s packets on the path: forward, the client side."""
        return self.client_ends if direction == "forward" else self.server_ends


class Backend(Protocol):
    name: str

    def plan(self, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
        """Every command `apply` would run, in order (for `rig plan`)."""

    def apply(self, site: LinkSite, profile: LinkProfile) -> None:
        """Install the profile on a freshly built site."""

    def update(self, site: LinkSite, profile: LinkProfile) -> None:
        """Change the profile between sweep steps without rebuilding the topology."""

    def check(self, site: LinkSite) -> None:
        """Raise rig.errors.StepAborted when the emulation is not in force."""

    def stats(self, site: LinkSite) -> EmulStats:
        """Live counters as the typed contract rig.description.linkstats.EmulStats (packets
        seen/released, drops by cause, lateness, engine alive/error); never raises for
        a backend that stopped answering: the error goes in EmulStats.error."""

    def remove(self, site: LinkSite) -> None:
        """Undo apply; never raises for already-missing state."""

    def engine_pids(self, site: LinkSite) -> list[int]:
        """The pids of the processes that emulate the site on this host, whose CPU the run
        records per transfer group; none: the kernel emulates it (netem), nothing does, or
        they run on another host."""


def where(site: LinkSite) -> str:
    """How messages name a site: its router namespace, or the remote router host."""
    return site.router_ns or f"router host {site.host.name if site.host else '?'}"


def tbf_burst_bytes(rate_bps: float) -> int:
    """Token bucket depth: >= 256 KB (measured need at 1 Gbit/s), ~1 ms of rate above."""
    return max(256 * 1024, int(rate_bps / 8 * 0.001))


def bottleneck_queue_bytes(d: Direction, rtt_s: float) -> int:
    """Queue at the rate limiter: the profile's queue, else one bandwidth-delay product
    (the classic router buffer), never less than 256 KB."""
    assert d.rate_bps
    if d.queue_pkts is not None:
        return d.queue_pkts * MTU_WIRE_BYTES
    return max(256 * 1024, int(d.rate_bps / 8 * max(rtt_s, 0.001)))


def tbf_argv(ns: str, dev: str, d: Direction, rtt_s: float, *, parent: str = "root",
             handle: str = "1:") -> list[str]:
    """`tc qdisc replace` of a TBF rate limiter on dev, run inside namespace ns."""
    assert d.rate_bps
    return proc.ns_argv(ns, ["tc", "qdisc", "replace", "dev", dev,
                      *(["root"] if parent == "root" else ["parent", parent]), "handle", handle,
                      "tbf", "rate", f"{int(d.rate_bps)}bit",
                      "burst", str(tbf_burst_bytes(d.rate_bps)),
                      "limit", str(bottleneck_queue_bytes(d, rtt_s))])


def qdisc_del_argv(ns: str, dev: str) -> list[str]:
    return proc.ns_argv(ns, ["tc", "qdisc", "del", "dev", dev, "root"])


# --- the router role on an end host: one interface, ingress through an IFB -----------------

def egress_direction(site: LinkSite) -> str:
    """The direction that leaves an end host's interface: the client sends `forward`
    (client -> server), the server `reverse`."""
    assert site.end in ("client", "server"), site.end
    return "forward" if site.end == "client" else "reverse"


def _peer_match(site: LinkSite) -> list[str]:
    """u32 words matching the ingress direction's packets: from the server's address on
    the client end, to it on the server end (only the path's traffic; not the SSH's)."""
    v6 = ":" in site.server_net
    addr = site.server_net.split("/")[0] + ("/128" if v6 else "/32")
    which = "src" if site.end == "client" else "dst"
    return ["protocol", "ipv6" if v6 else "ip", "u32", "match", "ip6" if v6 else "ip",
            which, addr]


INGRESS_PREF = "49"       # the rig's ingress filter's priority on the end host's interface


def ifb_setup_argv(site: LinkSite) -> list[list[str]]:
    """The end host's ingress for the path's packets, redirected to the run's IFB device
    (named with the prefix), where the ingress direction's qdisc (netem, TBF) sits."""
    dev, ifb = site.to_client_if, site.ifb
    assert site.end and ifb, site
    return [proc.ns_argv(site.router_ns, a) for a in (
        ["ip", "link", "add", ifb, "type", "ifb"],
        ["ip", "link", "set", "dev", ifb, "up"],
        ["tc", "qdisc", "add", "dev", dev, "clsact"],
        ["tc", "filter", "add", "dev", dev, "ingress", "pref", INGRESS_PREF, *_peer_match(site),
         "action", "mirred", "egress", "redirect", "dev", ifb])]


def ifb_teardown_argv(site: LinkSite) -> list[list[str]]:
    """Undo ifb_setup_argv, filter first (a redirect to a missing device drops)."""
    dev, ifb = site.to_client_if, site.ifb
    return [proc.ns_argv(site.router_ns, a) for a in (
        ["tc", "filter", "del", "dev", dev, "ingress", "pref", INGRESS_PREF],
        ["tc", "qdisc", "del", "dev", dev, "clsact"],
        ["ip", "link", "del", "dev", ifb])]
