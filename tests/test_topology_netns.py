"""Namespace tier: every shipped topology is built from its file, carries packets between
every node and the client, routes through the router's emulated egresses, applies the
emulation to every origin, and leaves nothing of its own behind."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rig.realization import netns

from rig.process import proc

from rig.description import scenario
from rig.description.profile import LinkProfile

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parent.parent
BUILT = [p.stem for p in sorted((REPO / "topologies").glob("*.yaml"))
         if scenario.parse_topology(p).layout == "netns"]


def _leftovers(prefix: str) -> list[str]:
    return ([n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
            + [d.name for d in netns.ETC_NETNS.glob(f"{prefix}-*")]
            + [str(p) for p in netns.STATE_DIR.glob(f"{prefix}*")])


def _ping(ns: str, addr: str, count: int = 3, interval: float = 0.05) -> dict:
    r = proc.run(["ping", "-n", "-q", "-c", str(count), "-i", str(interval), "-W", "2", addr],
                 netns=ns, timeout=count * interval + 20)
    m = re.search(r"(\d+) received", r.stdout)
    out = {"received": int(m[1]) if m else 0}
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", r.stdout)
    if rtt:
        out.update(min_ms=float(rtt[1]), avg_ms=float(rtt[2]))
    return out


def _dev_towards(ns: str, addr: str) -> str:
    r = proc.run(["ip", "-j", "route", "get", addr], netns=ns, timeout=5)
    return json.loads(r.stdout)[0]["dev"]


@pytest.mark.parametrize("name", BUILT)
def test_shipped_topology_is_built_pings_across_and_is_removed(name, tmp_path):
    assert {"client-router-server", "multi-origin", "tpc"} <= set(BUILT)
    topo = scenario.parse_topology(REPO / "topologies" / f"{name}.yaml")
    prefix = netns.new_prefix()
    with netns.path_net(prefix, "p", 0, workdir=tmp_path, mtu=9000, topology=topo,
                        servers=3) as path:
        assert set(path.namespaces) <= set(netns.list_namespaces())
        assert len(path.by_role("server")) == (3 if name == "multi-origin" else
                                               2 if name in ("tpc", "xcache") else 1)
        for n in path.nodes:        # every node reaches the client, every server each other
            if n.role == "router":
                continue
            targets = [path.client_addr] + [s.addr for s in path.by_role("server")]
            for addr in targets:
                if addr != n.addr:
                    assert _ping(n.ns, addr)["received"] == 3, (n.name, addr)
        # the router reaches every origin through the site's server-side egress (or, for a
        # server on the client's side, the client-side one): emulation covers them all
        site = path.site
        assert _dev_towards(path.router_ns, path.client_addr) == site.to_client_if
        for s in path.by_role("server"):
            # a server on the client's side (d; xcache's cache x on the client's LAN)
            want = site.to_client_if if s.name in ("d", "x") else site.to_server_if
            assert _dev_towards(path.router_ns, s.addr) == want
        r = proc.run(["ip", "-j", "link", "show", site.to_server_if], netns=path.router_ns,
                     timeout=5)
        assert json.loads(r.stdout)[0]["mtu"] == 9000       # the tuning's MTU
    assert _leftovers(prefix) == []


@pytest.mark.parametrize("name", ["multi-origin", "tpc"])
def test_emulation_applies_to_every_origin(name, tmp_path):
    from rig.realization.emul.choose import make_backend
    from rig.realization.emul.userspace import kernel_has_nfqueue
    from rig.realization.emul.netem import kernel_has_netem
    if not (kernel_has_netem() or kernel_has_nfqueue()):
        pytest.skip("no link emulation on this kernel")
    topo = scenario.parse_topology(REPO / "topologies" / f"{name}.yaml")
    prefix = netns.new_prefix()
    with netns.path_net(prefix, "p", 0, workdir=tmp_path, topology=topo, servers=2) as path:
        be = make_backend("auto")
        be.apply(path.site, LinkProfile.symmetric(0.020))
        try:
            far = [s for s in path.by_role("server") if s.name != "d"]
            assert len(far) == (2 if name == "multi-origin" else 1)
            for s in far:            # client -> every far origin: the configured 20 ms
                p = _ping(path.client_ns, s.addr, count=20, interval=0.02)
                assert p["received"] == 20
                assert p["avg_ms"] == pytest.approx(20.0, rel=0.15), (s.name, p)
                assert p["min_ms"] >= 20.0 * 0.97
            if name == "tpc":        # near server: same LAN as the client, not delayed;
                near = path.node("d")   # near -> far crosses the WAN: delayed
                assert _ping(path.client_ns, near.addr, count=10, interval=0.02)["avg_ms"] < 2.0
                p = _ping(near.ns, path.server_addr, count=20, interval=0.02)
                assert p["avg_ms"] == pytest.approx(20.0, rel=0.15), p
        finally:
            be.remove(path.site)
    assert _leftovers(prefix) == []


def test_a_branched_mininet_topology_routes_every_host_through_its_links(tmp_path):
    """A Mininet Topo with a third host behind its own emulated link and a second
    switch segment (rig.description.mininet): every host reaches every other through
    the links between them, each link's engine adding its delay both ways, and the
    whole is removed."""
    from rig.description import mininet as MN
    from rig.description.schema import Ctx
    from rig.realization.emul import chain
    from rig.realization.emul.choose import make_backend
    doc = {"hosts": [["h1", {}], ["h2", {}], ["h3", {}]],
           "switches": [["s1", {}], ["s2", {}], ["s3", {}]],
           "links": [[a, b, 1, info] for a, b, info in (
               ("h1", "s1", {}), ("s1", "s2", {"delay": "4ms"}), ("s2", "s3", {}),
               ("s3", "h2", {"delay": "6ms", "bw": 200}), ("h3", "s2", {"delay": "1ms"}))]}
    mt = MN.from_export(doc, Ctx("t"), file="t.py", cls="T", client="h1", server="h2")
    topo = scenario.T.Topology("mininet-T", "mininet", "", (), mininet=mt)
    prefix = netns.new_prefix()
    backend = None
    with netns.path_net(prefix, "p", 0, workdir=tmp_path, topology=topo) as path:
        backend = chain.over(make_backend("auto"), path.site)
        backend.apply(path.site, LinkProfile())
        try:
            backend.check(path.site)
            hosts = {n.name: n for n in path.nodes if n.name.startswith("h")}
            want = {("h1", "h2"): 20.0, ("h1", "h3"): 10.0, ("h3", "h2"): 14.0}
            for (a, b), ms in want.items():
                got = _ping(hosts[a].ns, hosts[b].addr, count=5)
                assert got["received"] == 5, (a, b, got)
                assert ms - 0.2 <= got["min_ms"] <= ms + 5.0, (a, b, got)
        finally:
            backend.remove(path.site)
    assert _leftovers(prefix) == []
