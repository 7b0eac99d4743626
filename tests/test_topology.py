"""Topologies are data: every shipped file loads, the builder turns each into the expected
argv (no root), the default stays what the rig always built, bad files are one line."""
import ipaddress
import shlex
from pathlib import Path

import pytest
import yaml

from rig.realization import netns

from rig.description import scenario, topology
from rig.errors import InputError

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "topologies").glob("*.yaml"))


def _topo(name: str) -> topology.Topology:
    return scenario.parse_topology(REPO / "topologies" / f"{name}.yaml")


def _argv(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.strip().splitlines()]


def test_the_shipped_topologies_are_there():
    assert {p.stem for p in SHIPPED} >= {"client-router-server", "multi-origin", "tpc", "host"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_topology_loads_and_lays_out(path):
    t = scenario.parse_topology(path)
    assert t.name == path.stem
    if t.layout == "host":
        assert not t.nodes and not t.links
        return
    for servers in (1, 3):
        p = netns.lay_out(t, "rig3f2a", 0, "wan", "198.18.7.0/24", servers=servers)
        devs = [d for ln in p.links for d in ln.devs + ln.ports]
        assert len(devs) == len(set(devs))
        assert all(len(d) <= 15 and d.startswith("rig3f2a0") for d in devs)
        assert all(netns.NS_RE.match(ns) for ns in p.namespaces)
        addrs = [a for ln in p.links for a in ln.addrs]
        assert len(addrs) == len(set(addrs))
        assert all(ipaddress.ip_address(a) in ipaddress.ip_network("198.18.7.0/24") for a in addrs)
        for ln in p.links:   # every address inside its link's subnet, not its edges
            net = ipaddress.ip_network(ln.net)
            assert all(ipaddress.ip_address(a) in list(net.hosts()) for a in ln.addrs)
        assert p.site.router_ns == p.router_ns
        assert ipaddress.ip_address(p.client_addr) in ipaddress.ip_network(p.site.client_net)
        for s in p.by_role("server"):   # every origin behind one of the two emulated egresses
            assert any(ipaddress.ip_address(s.addr) in ipaddress.ip_network(n)
                       for n in (p.site.client_net, p.site.server_net))


CRS_TODAY = """
ip netns add rig0001-0c
ip netns add rig0001-0r
ip netns add rig0001-0s
ip link add rig00010cr netns rig0001-0c type veth peer name rig00010rc netns rig0001-0r
ip link add rig00010rs netns rig0001-0r type veth peer name rig00010sr netns rig0001-0s
ip -n rig0001-0c addr add 198.18.3.1/30 dev rig00010cr
ip -n rig0001-0c link set rig00010cr mtu 9000 up
ip -n rig0001-0r addr add 198.18.3.2/30 dev rig00010rc
ip -n rig0001-0r link set rig00010rc mtu 9000 up
ip -n rig0001-0r addr add 198.18.3.5/30 dev rig00010rs
ip -n rig0001-0r link set rig00010rs mtu 9000 up
ip -n rig0001-0s addr add 198.18.3.6/30 dev rig00010sr
ip -n rig0001-0s link set rig00010sr mtu 9000 up
ip -n rig0001-0c link set lo up
ip -n rig0001-0r link set lo up
ip -n rig0001-0s link set lo up
ip -n rig0001-0c route add default via 198.18.3.2
ip -n rig0001-0s route add default via 198.18.3.5
ip netns exec rig0001-0r sysctl -q -w net.ipv4.ip_forward=1
"""


def test_client_router_server_builds_what_the_rig_always_built():
    """Copied from the hard-coded builder this file replaced (commit eab074f)."""
    p = netns.lay_out(_topo("client-router-server"), "rig0001", 0, "p", "198.18.3.0/24")
    assert netns.build_argv(p, mtu=9000) == _argv(CRS_TODAY)
    last = netns.lay_out(_topo("client-router-server"), "rig0001", 31, "p", "198.18.3.0/24",
                         workdir=Path("/w"))
    assert (last.client_addr, last.router_client_addr, last.router_server_addr,
            last.server_addr) == ("198.18.3.249", "198.18.3.250", "198.18.3.253", "198.18.3.254")
    assert last.site == netns.LinkSite(
        path="p", prefix="rig0001", router_ns="rig0001-31r", to_client_if="rig000131rc",
        to_server_if="rig000131rs", client_net="198.18.3.248/30",
        server_net="198.18.3.252/30", queue_base=62, workdir=Path("/w"),
        client_ends=(("rig0001-31c", "rig000131cr"),),
        server_ends=(("rig0001-31s", "rig000131sr"),))
    assert netns.default_topology() == _topo("client-router-server")


MULTI_ORIGIN_K2 = """
ip netns add rig0001-1c
ip netns add rig0001-1r
ip netns add rig0001-1s1
ip netns add rig0001-1s2
ip link add rig00011cr netns rig0001-1c type veth peer name rig00011rc netns rig0001-1r
ip -n rig0001-1r link add rig00011rs type bridge
ip link add rig00011s1r netns rig0001-1s1 type veth peer name rig00011ps1 netns rig0001-1r
ip -n rig0001-1r link set rig00011ps1 master rig00011rs
ip -n rig0001-1r link set rig00011ps1 mtu 9000 up
ip link add rig00011s2r netns rig0001-1s2 type veth peer name rig00011ps2 netns rig0001-1r
ip -n rig0001-1r link set rig00011ps2 master rig00011rs
ip -n rig0001-1r link set rig00011ps2 mtu 9000 up
ip -n rig0001-1c addr add 198.18.0.17/30 dev rig00011cr
ip -n rig0001-1c link set rig00011cr mtu 9000 up
ip -n rig0001-1r addr add 198.18.0.18/30 dev rig00011rc
ip -n rig0001-1r link set rig00011rc mtu 9000 up
ip -n rig0001-1r addr add 198.18.0.25/29 dev rig00011rs
ip -n rig0001-1r link set rig00011rs mtu 9000 up
ip -n rig0001-1s1 addr add 198.18.0.26/29 dev rig00011s1r
ip -n rig0001-1s1 link set rig00011s1r mtu 9000 up
ip -n rig0001-1s2 addr add 198.18.0.27/29 dev rig00011s2r
ip -n rig0001-1s2 link set rig00011s2r mtu 9000 up
ip -n rig0001-1c link set lo up
ip -n rig0001-1r link set lo up
ip -n rig0001-1s1 link set lo up
ip -n rig0001-1s2 link set lo up
ip -n rig0001-1c route add default via 198.18.0.18
ip -n rig0001-1s1 route add default via 198.18.0.25
ip -n rig0001-1s2 route add default via 198.18.0.25
ip netns exec rig0001-1r sysctl -q -w net.ipv4.ip_forward=1
"""


def test_multi_origin_puts_every_server_behind_the_emulated_bridge():
    t = _topo("multi-origin")
    p = netns.lay_out(t, "rig0001", 1, "p", "198.18.0.0/24", servers=2)
    assert netns.build_argv(p, mtu=9000) == _argv(MULTI_ORIGIN_K2)
    # the server-side egress is the bridge: one qdisc / one iptables -o for all origins
    assert (p.site.to_client_if, p.site.to_server_if) == ("rig00011rc", "rig00011rs")
    assert (p.site.client_net, p.site.server_net) == ("198.18.0.16/30", "198.18.0.24/29")
    assert [s.addr for s in p.by_role("server")] == ["198.18.0.26", "198.18.0.27"]
    assert (p.server_ns, p.server_addr) == ("rig0001-1s1", "198.18.0.26")
    # K from the file, when it gives a number; K beyond what fits is refused
    fixed = topology.Topology(**{**t.__dict__, "nodes": (
        t.nodes[0], t.nodes[1], topology.NodeSpec("s", "server", 5))})
    assert [n.name for n in netns.lay_out(fixed, "rig0001", 0, "p", "198.18.0.0/24").nodes
            ][-1] == "s5"
    with pytest.raises(ValueError, match="count: servers"):
        netns.lay_out(t, "rig0001", 0, "p", "198.18.0.0/24")
    with pytest.raises(ValueError, match="at most 16 paths"):   # 16 addresses per path
        netns.lay_out(t, "rig0001", 16, "p", "198.18.0.0/24", servers=3)


TPC = """
ip netns add rig0001-1c
ip netns add rig0001-1d
ip netns add rig0001-1r
ip netns add rig0001-1s
ip -n rig0001-1r link add rig00011rc type bridge
ip link add rig00011cr netns rig0001-1c type veth peer name rig00011pc netns rig0001-1r
ip -n rig0001-1r link set rig00011pc master rig00011rc
ip -n rig0001-1r link set rig00011pc mtu 1500 up
ip link add rig00011dr netns rig0001-1d type veth peer name rig00011pd netns rig0001-1r
ip -n rig0001-1r link set rig00011pd master rig00011rc
ip -n rig0001-1r link set rig00011pd mtu 1500 up
ip link add rig00011rs netns rig0001-1r type veth peer name rig00011sr netns rig0001-1s
ip -n rig0001-1r addr add 198.18.0.17/29 dev rig00011rc
ip -n rig0001-1r link set rig00011rc mtu 1500 up
ip -n rig0001-1c addr add 198.18.0.18/29 dev rig00011cr
ip -n rig0001-1c link set rig00011cr mtu 1500 up
ip -n rig0001-1d addr add 198.18.0.19/29 dev rig00011dr
ip -n rig0001-1d link set rig00011dr mtu 1500 up
ip -n rig0001-1r addr add 198.18.0.25/30 dev rig00011rs
ip -n rig0001-1r link set rig00011rs mtu 1500 up
ip -n rig0001-1s addr add 198.18.0.26/30 dev rig00011sr
ip -n rig0001-1s link set rig00011sr mtu 1500 up
ip -n rig0001-1c link set lo up
ip -n rig0001-1d link set lo up
ip -n rig0001-1r link set lo up
ip -n rig0001-1s link set lo up
ip -n rig0001-1c route add default via 198.18.0.17
ip -n rig0001-1d route add default via 198.18.0.17
ip -n rig0001-1s route add default via 198.18.0.25
ip netns exec rig0001-1r sysctl -q -w net.ipv4.ip_forward=1
"""


def test_tpc_has_a_server_on_each_side_of_the_router():
    p = netns.lay_out(_topo("tpc"), "rig0001", 1, "p", "198.18.0.0/24")
    assert netns.build_argv(p) == _argv(TPC)
    assert (p.site.to_client_if, p.site.to_server_if) == ("rig00011rc", "rig00011rs")
    assert (p.site.client_net, p.site.server_net) == ("198.18.0.16/29", "198.18.0.24/30")
    near, far = p.node("d"), p.node("s")
    assert ipaddress.ip_address(near.addr) in ipaddress.ip_network(p.client_net)
    assert (p.server_ns, p.server_addr) == (far.ns, far.addr) == ("rig0001-1s", "198.18.0.26")


def test_a_real_path_is_the_same_type_with_nothing_built():
    p = netns.real_path(2, "lo", client_ns=None, server_ns=None, server_addr="127.0.0.1")
    assert (p.client_ns, p.server_ns, p.server_addr, p.site, p.namespaces) == \
        (None, None, "127.0.0.1", None, [])


GOOD = {"name": "t", "nodes": [{"name": "c", "role": "client"}, {"name": "r", "role": "router"},
                               {"name": "s", "role": "server"}],
        "links": [{"ends": ["c", "r"], "emulated": True}, {"ends": ["r", "s"], "emulated": True}]}


def _bad(change) -> str:
    import copy
    d = copy.deepcopy(GOOD)
    change(d)
    with pytest.raises(InputError) as e:
        topology.parse(d, source="t.yaml")
    msg = f"rig: {e.value}"
    assert "\n" not in msg and msg.startswith("rig: t.yaml: ")
    return msg


def test_good_document_parses():
    t = topology.parse(GOOD, source="t.yaml")
    assert (t.layout, [n.name for n in t.nodes], t.links[1].ends) == ("netns", ["c", "r", "s"],
                                                                       ("r", "s"))


@pytest.mark.parametrize("change,expect", [
    (lambda d: d.update(mtu=9000), "t.yaml: mtu: unknown key"),
    (lambda d: d["nodes"][0].update(colour="red"), "nodes[0].colour: unknown key"),
    (lambda d: d["nodes"][1].update(role="switch"), "nodes[1].role: must be one of"),
    (lambda d: d["nodes"][2].update(name="srv"), "nodes[2].name: expected 1-2 lowercase"),
    (lambda d: d["nodes"][0].update(count=2), "nodes[0].count: only servers"),
    (lambda d: d["nodes"][2].update(count=0), "nodes[2].count: must be >= 1 (got 0)"),
    (lambda d: d["nodes"].pop(1), "nodes: needs exactly 1 router"),
    (lambda d: d["nodes"].append({"name": "s", "role": "server"}), "duplicate node name"),
    (lambda d: d["links"][1].update(ends=["r", "x"]), "links[1].ends: no node of that name (got 'x')"),
    (lambda d: d["links"][1].update(ends=["r", "s", "c"]), "links[1].ends: a veth pair has two ends"),
    (lambda d: d["links"][1].update(kind="bridge", ends=["s", "r"]), "links[1].ends: a bridge lives in the router"),
    (lambda d: d["nodes"][2].update(count=3), "links[1].kind: counted nodes need a bridge"),
    (lambda d: d["links"][1].update(emulated=False), "links: mark exactly two links emulated"),
    (lambda d: d["links"].append({"ends": ["r", "s"]}), "node s must sit on exactly one link"),
    (lambda d: d.update(addressing={"block": 4}), "the links need 8"),
    (lambda d: d.update(addressing={"block": 12}), "addressing.block: must be a power of two"),
    (lambda d: d.update(layout="host"), "nodes: layout host builds nothing"),
    (lambda d: d.pop("links"), "links: required key is missing"),
])
def test_bad_topology_is_one_line(change, expect):
    assert expect in _bad(change)


def test_names_that_would_clash_are_refused():
    def clash(d):   # router `p` holding a bridge to c: bridge `pc` and c's port `pc`
        d["nodes"][1]["name"] = "p"
        d["links"] = [{"kind": "bridge", "ends": ["p", "c"], "emulated": True},
                      {"ends": ["p", "s"], "emulated": True}]
    assert "two interfaces would be named" in _bad(clash)


def test_a_scenario_runs_on_every_shipped_netns_topology(tmp_path):
    base = yaml.safe_load((REPO / "scenarios/quick.yaml").read_text())
    for name in ("multi-origin", "tpc"):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump({**base, "topology": name}))
        sc = scenario.load(f)
        assert [p.node for p in scenario.placements(sc)] == (["s1"] if name == "multi-origin"
                                                             else [None])
    f.write_text(yaml.safe_dump({**base, "topology": "client-router-server"}))
    assert scenario.load(f).topology.nodes[2].name == "s"
