"""Mininet topologies (issue 30 item 3): a Topo read as data and laid out by the rig.

Pure: the translation from the exporter's JSON (no Mininet needed), the layout (segments,
link routers, addresses, routes), the netem and userspace commands for every link, the
stats of several links merged; and, through Debian's mininet (/usr/bin/python3, as CI
installs it), the shipped Topo and bad user files: one line, exit 2, nothing created.
No root.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from rig import cli
from rig.description import mininet as MN, scenario
from rig.description.linkstats import LATENESS_LABELS, DirStats, EmulStats, Lateness
from rig.description.schema import Ctx
from rig.errors import InputError
from rig.realization import mininet as reader, netns
from rig.realization.emul import chain
from rig.realization.emul.netem import NetemBackend
from rig.realization.emul.userspace import UserspaceBackend

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "scenarios" / "mininet-two-bottlenecks.yaml"
HAVE_MININET = Path("/usr/lib/python3/dist-packages/mininet/topo.py").is_file()
needs_mininet = pytest.mark.skipif(not HAVE_MININET, reason="Debian's mininet (make deps)")


def _doc(links, hosts=("h1", "h2"), switches=("s1", "s2")):
    return {"hosts": [[h, {}] for h in hosts],
            "switches": [[s, {"isSwitch": True}] for s in switches],
            "links": [[a, b, 1, dict(info, node1=a, node2=b)] for a, b, info in links]}


TWO = _doc([("h1", "s1", {}), ("s1", "s2", {"cls": "TCLink", "delay": "10ms", "bw": 1000}),
            ("s2", "h2", {"delay": "20ms", "bw": 500})])


def _topo(doc=TWO, client=None, server=None):
    return MN.from_export(doc, Ctx("s.yaml").child("topology"), file="t.py", cls="T",
                          client=client, server=server)


def _err(doc, **kw) -> str:
    with pytest.raises(InputError) as e:
        _topo(doc, **kw)
    return str(e.value)


def test_two_bottlenecks_add_up_delay_and_take_the_smaller_rate():
    t = _topo()
    assert (t.client, t.server) == ("h1", "h2")          # first and last host by default
    v = MN.path_values(t)
    assert v["rtt_s"] == pytest.approx(0.060)             # 2 x (10 + 20) ms
    assert v["rate_bps"] == 500e6 and v["loss"] == 0 and v["jitter_s"] == 0
    lay = MN.lay_out(t)
    assert [h.router for h in lay.hops] == ["l1", "l2"] and lay.route == (0, 1)
    # h1 + s1 + l1 | l1 + s2 + l2 | l2 + h2: three segments, two with a bridge
    assert [(s.switches, s.members) for s in lay.segments] == [
        (("s1",), ("h1", "l1")), ((), ("h2", "l2")), (("s2",), ("l1", "l2"))]
    assert lay.roles == {"h1": "client", "h2": "server", "l1": "router", "l2": "router",
                         "s1": "switch", "s2": "switch"}
    assert set(lay.routes) == {("h1", 1, "l1"), ("h1", 2, "l1"), ("h2", 0, "l2"),
                               ("h2", 2, "l2"), ("l1", 1, "l2"), ("l2", 0, "l1")}


def test_link_options_become_both_directions_of_the_hop():
    t = _topo(_doc([("h1", "s1", {"delay": "5ms", "jitter": "1ms", "loss": 1.5,
                                  "max_queue_size": 500}), ("s1", "h2", {})],
                   switches=("s1",)))
    p = t.links[0].profile()
    for d in (p.forward, p.reverse):
        assert (d.delay_s, d.jitter_s, d.loss, d.queue_pkts, d.rate_bps) == \
            (0.005, 0.001, 0.015, 500, None)
    v = MN.path_values(t)
    assert v["rtt_s"] == pytest.approx(0.010) and v["jitter_s"] == pytest.approx(0.002)
    assert v["loss"] == pytest.approx(0.015)


def test_host_to_host_links_and_a_third_host_off_the_route():
    t = _topo(_doc([("h1", "s1", {}), ("h3", "s1", {"delay": "1ms"}),
                    ("s1", "h2", {"delay": "7ms", "bw": 100})], hosts=("h1", "h2", "h3"),
                   switches=("s1",)), server="h2")
    lay = MN.lay_out(t)
    assert [lay.hops[k].router for k in lay.route] == ["l2"]
    assert MN.path_values(t)["rtt_s"] == pytest.approx(0.014)
    assert lay.roles["h3"] == "host"
    direct = _topo(_doc([("h1", "h2", {"delay": "3ms"})], switches=()))
    assert [(s.switches, s.members) for s in MN.lay_out(direct).segments] == [
        ((), ("h1", "l1")), ((), ("h2", "l1"))]


@pytest.mark.parametrize("doc,kw,expect", [
    (_doc([], hosts=(), switches=("s1",)), {}, "topology.class: T names no hosts"),
    (_doc([("h1", "s1", {"use_htb": True}), ("s1", "h2", {"delay": "1ms"})],
          switches=("s1",)), {}, "link option the rig does not apply"),
    (_doc([("h1", "s1", {"delay": 10}), ("s1", "h2", {})], switches=("s1",)), {},
     "give a unit"),
    (_doc([("h1", "s1", {"bw": "1g"}), ("s1", "h2", {})], switches=("s1",)), {},
     "expected a number (Mbit/s)"),
    (_doc([("h1", "s1", {"loss": 100}), ("s1", "h2", {})], switches=("s1",)), {},
     "must be within 0..99.999 (percent)"),
    (_doc([("h1", "s1", {}), ("s1", "h2", {})], switches=("s1",)), {}, "nothing to emulate"),
    (_doc([("h1", "s1", {"delay": "1ms"}), ("s1", "h2", {})], hosts=("h1", "server"),
          switches=("s1",)), {}, "1-2 lowercase letters"),
    (_doc([("h1", "l1", {"delay": "1ms"}), ("l1", "h2", {})], switches=("l1",)), {},
     "name the rig's link routers"),
    (_doc([("h1", "s1", {"delay": "1ms"}), ("s1", "h2", {}), ("h1", "s2", {}),
           ("s2", "s1", {})]), {}, "host h1 is on 2 links"),
    (_doc([("h1", "s1", {}), ("s1", "s2", {}), ("s2", "s1", {"delay": "1ms"}),
           ("s2", "h2", {})]), {}, "closes a loop"),
    (_doc([("h1", "s1", {"delay": "1ms"}), ("s2", "h2", {})]), {}, "cannot reach the client"),
    (TWO, {"client": "h9"}, "topology.client: not a host of T"),
    (TWO, {"client": "h2"}, "the client and the server are one host"),
])
def test_bad_topologies_are_one_line_naming_the_key(doc, kw, expect):
    msg = _err(doc, **kw)
    assert msg.startswith("s.yaml: topology.") and expect in msg and "\n" not in msg, msg


def test_reader_slot_unfilled_is_an_error_not_a_crash(monkeypatch):
    monkeypatch.setattr(MN, "_reader", [])
    with pytest.raises(InputError, match="rig.realization.mininet"):
        MN.read(Path("x.py"), "T", Ctx("s.yaml").child("topology"), "x.py")


def _path(t=None):
    sc_topo = scenario.T.Topology("mininet-T", "mininet", "", (), mininet=t or _topo())
    return netns.lay_out(sc_topo, "rig00aa", 0, "wan", "198.18.4.0/24")


def test_realized_names_addresses_routes_and_one_site_per_link():
    p = _path()
    assert p.client_ns == "rig00aa-0h1" and p.server_ns == "rig00aa-0h2"
    assert p.server_addr == "198.18.4.5" and p.client_addr == "198.18.4.1"
    assert sorted(p.namespaces) == ["rig00aa-0h1", "rig00aa-0h2", "rig00aa-0l1",
                                    "rig00aa-0l2", "rig00aa-0s1", "rig00aa-0s2"]
    assert all(netns.NS_RE.match(ns) for ns in p.namespaces)   # what `rig clean` removes
    argv = netns.build_argv(p)
    devs = {a[a.index("add") + 1] for a in argv if a[:2] == ["ip", "link"] or
            (len(a) > 4 and a[3:5] == ["link", "add"])}
    assert all(d.startswith("rig00aa0") and len(d) <= 15 for d in devs), devs
    assert ["ip", "-n", "rig00aa-0s1", "link", "add", "rig00aa0b0", "type", "bridge"] in argv
    assert not [a for a in argv if "addr" in a and "rig00aa0b0" in a]   # a bridge: no address
    assert ["ip", "-n", "rig00aa-0h1", "route", "add", "198.18.4.4/30", "via",
            "198.18.4.2"] in argv
    assert ["ip", "-n", "rig00aa-0l1", "route", "add", "198.18.4.4/30", "via",
            "198.18.4.10"] in argv
    fwd = [a[1 + a.index("exec")] for a in argv if "net.ipv4.ip_forward=1" in a]
    assert fwd == ["rig00aa-0l1", "rig00aa-0l2"]
    hops = p.site.hops
    assert [(h.router_ns, h.client_net, h.server_net) for h, _ in hops] == [
        ("rig00aa-0l1", "198.18.4.0/30", "198.18.4.8/30"),
        ("rig00aa-0l2", "198.18.4.8/30", "198.18.4.4/30")]
    assert len({h.workdir for h, _ in hops}) == 2 and p.site.router_ns == "rig00aa-0l1"


def test_netem_and_engine_commands_cover_every_link():
    """The lab's backend: netem + TBF on both egresses of each link router, the link's
    own delay and rate; the engine here: one per link router, its rules and TBFs."""
    p = _path()
    prof = scenario.LinkProfile.symmetric(0.06, rate_bps=500e6)    # the step's: not applied
    net = chain.over(NetemBackend(), p.site).plan(p.site, prof)
    netem = [(a[3], a[a.index("dev") + 1], a[a.index("delay") + 1]) for a in net if "netem" in a]
    assert netem == [("rig00aa-0l1", "rig00aa0e4", "10000us"), ("rig00aa-0l1", "rig00aa0e1",
                                                                "10000us"),
                     ("rig00aa-0l2", "rig00aa0e3", "20000us"), ("rig00aa-0l2", "rig00aa0e5",
                                                                "20000us")]
    rates = [(a[3], a[a.index("rate") + 1]) for a in net if "tbf" in a]
    assert rates == [("rig00aa-0l1", "1000000000bit")] * 2 + [("rig00aa-0l2", "500000000bit")] * 2
    us = chain.over(UserspaceBackend(), p.site).plan(p.site, prof)
    engines = [a[3] for a in us if "rig.realization.emul.engine" in a]
    assert engines == ["rig00aa-0l1", "rig00aa-0l2"]
    rules = [a for a in us if "NFQUEUE" in a]
    assert len(rules) == 4 and all("rig00aa" in a for a in rules)
    assert chain.over(NetemBackend(), None).__class__ is NetemBackend   # one site: itself


def test_stats_of_the_links_are_merged_per_direction():
    def st(pid, seen, late_hist, delay):
        lat = Lateness(count=sum(late_hist), mean_s=0.0001, max_s=0.0002 * pid,
                       hist=late_hist)
        return EmulStats("userspace", (DirStats("forward", seen=seen, released=seen,
                                                dropped_loss=1, applied_delay_mean_s=delay,
                                                lateness=lat),), alive=True, instance=pid,
                         cpu_user_s=1.0)
    width = len(LATENESS_LABELS)
    a = st(10, 100, (4,) + (0,) * (width - 1), 0.010)
    b = st(20, 90, (2,) + (0,) * (width - 1), 0.020)
    m = chain.merge("userspace", ["wan.l1", "wan.l2"], [a, b])
    d = m.direction("forward")
    assert d is not None and d.seen == 190 and d.dropped_loss == 2
    assert d.applied_delay_mean_s == pytest.approx(0.030)    # the path's delay
    assert d.lateness is not None and d.lateness.count == 6 and d.lateness.hist[0] == 6
    assert m.alive and m.instance == 30 and m.cpu_user_s == 2.0
    assert set(m.extra["hops"]) == {"wan.l1", "wan.l2"}
    dead = chain.merge("userspace", ["x", "y"], [a, EmulStats("userspace", alive=False,
                                                              error="gone")])
    assert dead.alive is False and dead.error == "y: gone" and dead.instance is None


# --- through Debian's mininet: the shipped Topo and bad user files --------------------

@needs_mininet
def test_the_shipped_scenario_reads_the_topo():
    sc = scenario.load(SHIPPED)
    assert sc.topology.layout == "mininet" and sc.topology.mininet.cls == "TwoBottlenecks"
    p = sc.paths[0]
    assert p.rtts_s == [pytest.approx(0.060)] and p.rate_bps == 500e6


def _plan(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(["plan", str(path)])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


BAD_FILES = {
    "import": ("from mininet.topo import Topo\nclass T(Topo):\n    def build(self)\n",
               "topology.mininet: t.py: cannot import: SyntaxError"),
    "module": ("import no_such_module_here\n", "cannot import: ModuleNotFoundError"),
    "no-hosts": ("from mininet.topo import Topo\nclass T(Topo):\n    def build(self):\n"
                 "        self.addSwitch('s1')\n", "topology.class: T names no hosts"),
    "not-topo": ("class T:\n    pass\n", "topology.class: t.py: T is not a subclass"),
    "raises": ("from mininet.topo import Topo\nclass T(Topo):\n    def build(self):\n"
               "        raise RuntimeError('boom')\n", "T() failed: RuntimeError: boom"),
    "no-class": ("from mininet.topo import Topo\nclass U(Topo):\n    pass\n",
                 "no class T (Topo subclasses there: U)"),
    "missing": (None, "topology.mininet: t.py: no such file"),
    "exits": ("import sys\nsys.exit(0)\n", "cannot import: SystemExit: 0"),
    "prints": ("from mininet.topo import Topo\nprint('hello')\nclass T(Topo):\n"
               "    def build(self):\n        print('{}')\n", "T names no hosts"),
    "htb": ("from mininet.topo import Topo\nclass T(Topo):\n    def build(self):\n"
            "        self.addLink(self.addHost('h1'), self.addHost('h2'), use_htb=True)\n",
            "use_htb: link option the rig does not apply"),
}


@needs_mininet
@pytest.mark.parametrize("label", sorted(BAD_FILES))
def test_bad_user_files_are_one_line_exit_2_nothing_created(tmp_path, monkeypatch, label):
    text, expect = BAD_FILES[label]
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path / "state")
    if text is not None:
        (tmp_path / "t.py").write_text(text)
    sc = SHIPPED.read_text().replace("../topologies/two-bottlenecks.py", "t.py") \
        .replace("class: TwoBottlenecks", "class: T")
    p = tmp_path / "s.yaml"
    p.write_text(sc)
    before = sorted(tmp_path.rglob("*"))
    code, out, err = _plan(p)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"rig: {p}: ") and expect in err, err
    assert sorted(tmp_path.rglob("*")) == before        # not even a __pycache__


@needs_mininet
def test_the_exporter_imports_nothing_of_the_rig_and_runs_no_mininet_runtime(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("import sys\nfrom mininet.topo import Topo\nclass T(Topo):\n"
                 "    def build(self):\n        self.addLink(self.addHost('h1'), "
                 "self.addHost('h2'), delay='1ms')\n"
                 "        assert not [m for m in sys.modules if m.startswith('rig')]\n"
                 "        assert 'mininet.net' not in sys.modules\n")
    doc = reader.export(f, "T")
    assert [h for h, _ in doc["hosts"]] == ["h1", "h2"] and len(doc["links"]) == 1


def test_without_debian_s_mininet_the_error_says_what_to_install(monkeypatch):
    """A fresh machine before `make deps`: one line naming the package (exit 1: the host
    lacks it, the scenario is not wrong). The rig's own venv python has no mininet."""
    import sys

    from rig.errors import RigError
    monkeypatch.setattr(reader, "PYTHON", sys.executable)
    with pytest.raises(RigError, match="apt-get install mininet") as e:
        reader.export(REPO / "topologies" / "two-bottlenecks.py", "TwoBottlenecks")
    assert not isinstance(e.value, InputError) and "\n" not in str(e.value)
