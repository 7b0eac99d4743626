"""The router role on an end host, pure parts: the schema (`router_host` = an end,
`router_iface`), the site, the NFQUEUE rules in OUTPUT/INPUT matched on the path's server
address only, the IFB ingress argv (netem and TBF; this kernel has no sch_netem, so the
netem backend for an end host is tested here as argv only), what `rig clean` records,
and `rig plan` naming the end host."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from rig.description import scenario
from rig.description.profile import Direction, LinkProfile
from rig.errors import InputError
from rig.orchestration import plan
from rig.process.remote import Host
from rig.realization import remote_router
from rig.realization.emul import base, netem, userspace

H = {"ssh": "root@h.example"}
BASE = {
    "name": "end", "topology": "host",
    "hosts": {"dtn1": H, "dtn2": H},
    "paths": [{"name": "wan", "kind": "emulated", "rtt": "20ms", "server_host": "dtn1",
               "client_host": "dtn2", "server_addr": "192.0.2.7", "router_host": "dtn1",
               "router_iface": "eth1"}],
    "files": [{"name": "f", "size": "1MiB"}],
    "servers": [{"name": "ng", "kind": "nginx"}],
    "clients": [{"name": "curl", "tool": "curl", "file": "f"}],
}


def _parse(d):
    return scenario.parse(d, source="s.yaml")


def _site(end="dtn1", addr="192.0.2.7"):
    d = copy.deepcopy(BASE)
    d["paths"][0].update(router_host=end, server_addr=addr)
    sc = _parse(d)
    return remote_router.make_site("rig3f2a", 0, sc.paths[0],
                                   Host(end, "root@h", rundir_base="/dev/shm"))


def test_an_end_host_router_loads_and_is_tuned_as_an_end():
    sc = _parse(BASE)
    p = sc.paths[0]
    assert (p.router_host, p.router_iface, p.router_ifaces) == ("dtn1", "eth1", None)
    assert remote_router.end_of(p) == "server"
    assert list(sc.remote_hosts()) == ["dtn1", "dtn2"]


@pytest.mark.parametrize("key, value, match", [
    ("router_iface", None, r"^s\.yaml: paths\[0\]\.router_iface: name host dtn1's interface "
                           r"on the path"),
    ("router_iface", "a-name-too-long-for-linux",
     r"^s\.yaml: paths\[0\]\.router_iface: expected an interface name"),
    ("router_ifaces", {"client": "eth1", "server": "eth2"},
     r"^s\.yaml: paths\[0\]\.router_ifaces: the router role on an end host takes"),
    ("client_host", "local", r"^s\.yaml: paths\[0\]\.client_host: an emulated path through a "
                             r"router host runs between two remote hosts"),
    ("capture", "headers", r"^s\.yaml: paths\[0\]\.capture: captures on a remote router"),
    ("backend", "none", r"^s\.yaml: paths\[0\]\.backend: a router host emulates"),
])
def test_bad_end_router_keys_are_one_line_errors(key, value, match):
    d = copy.deepcopy(BASE)
    if value is None:
        d["paths"][0].pop(key)
    else:
        d["paths"][0][key] = value
    with pytest.raises(InputError, match=match) as e:
        _parse(d)
    assert "\n" not in str(e.value)


def test_real_paths_refuse_router_iface():
    d = copy.deepcopy(BASE)
    d["paths"][0].update(kind="real")
    d["paths"][0].pop("rtt")
    d["paths"][0].pop("router_host")
    with pytest.raises(InputError, match=r"paths\[0\]\.router_iface: a real path has no router"):
        _parse(d)


def test_site_of_each_end():
    s = _site("dtn1")
    assert (s.end, s.to_client_if, s.to_server_if, s.router_ns) == ("server", "eth1", "eth1", "")
    assert s.ifb == "rig3f2a-0ifb" and len(s.ifb) <= 15
    assert base.egress_direction(s) == "reverse"
    c = _site("dtn2")
    assert c.end == "client" and base.egress_direction(c) == "forward"


def _rules(site):
    q = site.queue_base
    return [userspace.nfqueue_rule_argv(site, "-I", site.to_client_if, site.to_client_if, x)
            for x in (q, q + 1)]


def test_rules_on_the_server_end_match_the_server_address_only():
    s = _site("dtn1")
    fwd, rev = _rules(s)
    tail = ["-m", "comment", "--comment", "rig3f2a", "-j", "NFQUEUE", "--queue-num"]
    assert fwd == ["iptables", "-w", "5", "-I", "INPUT", "-i", "eth1", "-d", "192.0.2.7",
                   *tail, str(s.queue_base)]
    assert rev == ["iptables", "-w", "5", "-I", "OUTPUT", "-o", "eth1", "-s", "192.0.2.7",
                   *tail, str(s.queue_base + 1)]
    assert "FORWARD" not in fwd + rev


def test_rules_on_the_client_end():
    c = _site("dtn2")
    fwd, rev = _rules(c)
    assert fwd[4:9] == ["OUTPUT", "-o", "eth1", "-d", "192.0.2.7"]
    assert rev[4:9] == ["INPUT", "-i", "eth1", "-s", "192.0.2.7"]


def test_ipv6_rules_and_ingress_filter():
    c = _site("dtn2", addr="2001:db8::7")
    assert _rules(c)[0][0] == "ip6tables"
    filt = base.ifb_setup_argv(c)[3]
    assert filt[filt.index("protocol"):filt.index("action")] == [
        "protocol", "ipv6", "u32", "match", "ip6", "src", "2001:db8::7/128"]


def test_ifb_setup_and_teardown_argv():
    s = _site("dtn1")
    assert base.ifb_setup_argv(s) == [
        ["ip", "link", "add", "rig3f2a-0ifb", "type", "ifb"],
        ["ip", "link", "set", "dev", "rig3f2a-0ifb", "up"],
        ["tc", "qdisc", "add", "dev", "eth1", "clsact"],
        ["tc", "filter", "add", "dev", "eth1", "ingress", "pref", "49", "protocol", "ip",
         "u32", "match", "ip", "dst", "192.0.2.7/32", "action", "mirred", "egress",
         "redirect", "dev", "rig3f2a-0ifb"]]
    # the filter goes first: a redirect to a deleted device would drop the path's packets
    assert base.ifb_teardown_argv(s) == [
        ["tc", "filter", "del", "dev", "eth1", "ingress", "pref", "49"],
        ["tc", "qdisc", "del", "dev", "eth1", "clsact"],
        ["ip", "link", "del", "dev", "rig3f2a-0ifb"]]


def test_netem_on_an_end_host_egress_on_the_interface_ingress_on_the_ifb():
    d = Direction(delay_s=0.010, rate_bps=1e9)
    r = Direction(delay_s=0.010, loss=0.01, rate_bps=1e9)
    prof = LinkProfile(forward=d, reverse=r)
    s = _site("dtn1")           # server end: sends reverse (with the loss), receives forward
    cmds = netem.plan_argv(s, prof)
    assert cmds[:4] == base.ifb_setup_argv(s)
    qd = [(c[4], c[5:8]) for c in cmds[4:]]
    assert qd == [("rig3f2a-0ifb", ["root", "handle", "1:"]),
                  ("rig3f2a-0ifb", ["parent", "1:1", "handle"]),
                  ("eth1", ["root", "handle", "1:"]), ("eth1", ["parent", "1:1", "handle"])]
    assert "loss" in cmds[6] and "loss" not in cmds[4]       # data direction leaves eth1
    c = _site("dtn2")           # client end: receives the data (and its loss) on the IFB
    cmds = netem.plan_argv(c, prof)
    assert cmds[4][4] == "eth1" and "loss" not in cmds[4]
    assert cmds[6][4] == "rig3f2a-0ifb" and "loss" in cmds[6]


def test_userspace_rate_on_an_end_host():
    d = Direction(delay_s=0.010, rate_bps=1e9)
    s = _site("dtn1")
    both = userspace.rate_argv(s, LinkProfile(forward=d, reverse=d))
    assert both[:4] == base.ifb_setup_argv(s)
    assert [c[4] for c in both[4:]] == ["rig3f2a-0ifb", "eth1"]
    # only the sent direction rated: no IFB at all
    only = userspace.rate_argv(s, LinkProfile(forward=Direction(delay_s=0.01), reverse=d))
    assert [c[:5] for c in only] == [["tc", "qdisc", "replace", "dev", "eth1"]]
    assert userspace.rate_argv(s, LinkProfile(forward=Direction(), reverse=Direction())) == []


def test_clean_record_of_an_end_host():
    s = _site("dtn1")
    rec = remote_router.record(s, None)
    assert rec["forward_before"] is None and rec["devs"] == ["eth1"]
    assert [r[4] for r in rec["rules"]] == ["INPUT", "OUTPUT"]
    assert all(r[3] == "-D" and "rig3f2a" in r for r in rec["rules"])
    assert rec["ifb"] == "rig3f2a-0ifb" and rec["ifb_teardown"] == base.ifb_teardown_argv(s)
    json.dumps(rec)


def test_the_engine_on_an_end_host_puts_the_whole_rtt_on_the_forward_direction():
    j = dict(jitter_s=0.001, jitter_dist="uniform")
    prof = LinkProfile(forward=Direction(delay_s=0.010, **j),
                       reverse=Direction(delay_s=0.010, loss=0.01, **j))
    for end in ("dtn1", "dtn2"):       # what the server receives, what the client sends
        e = userspace.end_profile(_site(end), prof)
        assert (e.forward.delay_s, e.forward.jitter_s, e.forward.loss) == (0.020, 0.002, 0.0)
        assert (e.reverse.delay_s, e.reverse.jitter_s, e.reverse.loss) == (0.0, 0.0, 0.01)
        assert e.rtt_s == prof.rtt_s
    third = dataclasses.replace(_site("dtn1"), end="", ifb="")
    assert userspace.end_profile(third, prof) is prof


def test_plan_prints_the_end_hosts_commands_with_its_host():
    d = copy.deepcopy(BASE)
    d["paths"][0]["loss"] = "1%"         # on what dtn1 sends: its OUTPUT rule
    lines = plan.plan_lines(_parse(d))
    at = [ln for ln in lines if ln.startswith("@dtn1 ")]
    assert any("-I INPUT -i eth1 -d 192.0.2.7" in ln and "--comment rig0000" in ln for ln in at)
    assert any("-I OUTPUT -o eth1 -s 192.0.2.7" in ln for ln in at)
    assert any(ln == "@dtn1 ip link add rig0000-0ifb type ifb" for ln in at)     # netem
    assert any(ln.startswith("@dtn1 tc qdisc replace dev rig0000-0ifb root handle 1: netem")
               for ln in at)
    assert any("rig.realization.emul.engine" in ln for ln in at)
    assert not any("ip_forward" in ln and "set it to 1" in ln for ln in lines)
    assert not any("FORWARD" in ln for ln in lines)
    assert not any("ip netns exec" in ln for ln in lines)
