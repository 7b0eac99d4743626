"""External endpoints, the pure side (issue 40 item 1): the URL's parser, the scenario's
rules (one line naming the file, the key and the value), the plan of the shipped example
(no server started, the endpoint's URL in every client command), the gateway's commands
and `rig clean`'s reading of leftover rules. No root, nothing created."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import endpoint as E
from rig.description import scenario as loader
from rig.errors import InputError
from rig.orchestration.plan import build_plan
from rig.realization import gateway
from rig.services.servers import external

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "scenarios/external-endpoint.example.yaml"


@pytest.mark.parametrize("url,scheme,host,port,path,first", [
    ("root://dtn.example.org:1094//store/rig", "root", "dtn.example.org", 1094, "/store/rig",
     "root://dtn.example.org:1094//store/rig/f"),
    ("roots://10.0.0.1//data", "roots", "10.0.0.1", 1094, "/data", "roots://10.0.0.1:1094//data/f"),
    ("https://se.example.org/dpm/x", "https", "se.example.org", 443, "/dpm/x",
     "https://se.example.org:443/dpm/x/f"),
    ("davs://se.example.org:8443/pnfs/", "davs", "se.example.org", 8443, "/pnfs/",
     "https://se.example.org:8443/pnfs/f"),
    ("http://192.0.2.9:8000", "http", "192.0.2.9", 8000, "/", "http://192.0.2.9:8000/f"),
])
def test_an_endpoint_url_is_parsed_once(url, scheme, host, port, path, first):
    ep = E.parse(url)
    assert (ep.scheme, ep.host, ep.port, ep.path) == (scheme, host, port, path)
    assert ep.file_url("f") == first
    # an absolute file is a path on the endpoint as it is
    assert ep.file_url("/abs/g").endswith("/abs/g") and "//abs" in ep.file_url("/abs/g") \
        if ep.protocol == "root" else ep.file_url("/abs/g").endswith(f":{port}/abs/g")


@pytest.mark.parametrize("url,says", [
    ("ftp://h/x", "scheme ftp:// is not one of"),
    ("root://", "names no host"),
    ("root://h:99999/x", "port is a number"),
    ("root://h:x/x", "port is a number"),
    ("root://[::1]/x", "IPv6 endpoint is not supported yet"),
    ("root://h/a/../b", "no '..'"),
    ("https://h/x?a=1", "no query"),
    ("root://bad_host!/x", "not a host name"),
    ("dtn.example.org:1094/x", "expected scheme://host"),
    (17, "expected a URL"),
    ("root://h/" + "a" * 600, "max 512"),
])
def test_a_bad_url_is_refused_with_why(url, says):
    with pytest.raises(ValueError, match=says.replace("?", r"\?").replace(".", r"\.")):
        E.parse(url)


BASE = {"name": "t", "paths": [{"name": "wan", "rtt": ["0ms", "20ms"]}],
        "servers": [{"name": "site", "kind": "external", "url": "root://10.9.9.9//store"}],
        "clients": [{"name": "x", "tool": "xrdcp", "file": "f1G"}]}


def _load(doc: dict):
    return loader.parse(doc, source="s.yaml")


def _with(**kw) -> dict:
    import copy
    d = copy.deepcopy(BASE)
    for k, v in kw.items():
        d[k] = v
    return d


@pytest.mark.parametrize("doc,key,says", [
    (_with(servers=[{"name": "site", "kind": "external"}]), "servers[0].url",
     "required key is missing"),
    (_with(servers=[{"name": "site", "kind": "external", "url": "gsiftp://h/x"}]),
     "servers[0].url", "scheme gsiftp://"),
    (_with(servers=[{"name": "site", "kind": "xrootd", "url": "root://h//x"}]),
     "servers[0].url", "only for kind: external"),
    (_with(servers=[{"name": "site", "kind": "external", "url": "root://h//x", "count": 2}]),
     "servers[0].count", "not for an external endpoint"),
    (_with(servers=[{"name": "site", "kind": "external", "url": "root://h//x",
                     "ports": {"root": 1}}]), "servers[0].ports", "not for an external"),
    (_with(clients=[{"name": "c", "tool": "curl", "server": "site", "file": "f"}]),
     "clients[0].tool", "curl cannot fetch from the root:// endpoint site"),
    (_with(clients=[{"name": "c", "tool": "fdt", "server": "site", "file": "f"}]),
     "clients[0].tool", "fdt cannot fetch"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "f", "direction": "upload"}]),
     "clients[0].direction", "writes nothing on endpoint site"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "f", "tls": "all"}]),
     "clients[0].tls", "URL of endpoint site says"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "f", "source": "x"}]),
     "clients[0].source", "no third-party copy"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "f", "checksum": True}]),
     "clients[0].checksum", "no checksum is known"),
    (_with(clients=[{"name": "c", "tool": "xrdcp"}]), "clients[0].file", "needs a file to fetch"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "a/../b"}]), "clients[0].file",
     "no '..'"),
    (_with(clients=[{"name": "c", "tool": "xrdcp", "file": "f"},
                    {"name": "i", "tool": "iperf3"}]), "clients[1].tool", "no iperf3"),
    (_with(servers=[{"name": "site", "kind": "external", "url": "root://h//x"},
                    {"name": "o", "kind": "xrootd"}],
           clients=[{"name": "c", "tool": "xrdcp", "server": "site", "file": "f"}]),
     "servers[1]", "one external endpoint"),
    (_with(paths=[{"name": "wan", "kind": "real", "server_addr": "10.0.0.1"}]),
     "paths[0].kind", "emulated path built on this host"),
    (_with(paths=[{"name": "wan", "rtt": "0ms", "ip": 6}]), "paths[0].ip", "over IPv4"),
    (_with(sweep={"tls": ["off", "all"]}), "sweep.tls", "URL of endpoint site"),
    (_with(background=[{"name": "bg"}]), "background[0]", "competing flows"),
])
def test_what_an_external_endpoint_cannot_do_is_one_line(doc, key, says):
    with pytest.raises(InputError) as e:
        _load(doc)
    line = str(e.value)
    assert line.startswith(f"s.yaml: {key}"), line
    assert says in line and "\n" not in line, line


def test_a_path_on_the_endpoint_is_no_file_of_the_rigs():
    """A path is a file only against an external endpoint."""
    doc = {"name": "t", "paths": [{"name": "wan", "rtt": "0ms"}],
           "files": [{"name": "f", "size": "1MiB"}], "servers": [{"name": "x", "kind": "xrootd"}],
           "clients": [{"name": "c", "tool": "xrdcp", "file": "/store/f"}]}
    with pytest.raises(InputError, match=r"clients\[0\]\.file: no file of that name"):
        _load(doc)
    sc = _load(_with(clients=[{"name": "c", "tool": "xrdcp", "file": "/store/f"}]))
    assert sc.clients[0].server == "site"      # the one server it can fetch from


def test_rig_plan_of_a_bad_url_is_one_line_exit_2(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(_with(servers=[{"name": "site", "kind": "external",
                                                "url": "root://h:0//x"}])))
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(p)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{p}: servers[0].url: the port is a number 1-65535" in lines[0], lines[0]
    assert "root://h:0//x" in lines[0]


def test_the_example_plan_starts_no_server_and_every_client_names_the_url():
    sc = loader.load(EXAMPLE)
    ep = sc.servers[0].endpoint
    assert sc.servers[0].kind == "external" and ep is not None
    plan = build_plan(sc)
    commands = [shlex.join(a) for act in plan.actions for a in act.argvs()]
    for server in ("xrootd", "nginx", "apache2", "sshd", "rig.fdt"):
        started = [c for c in commands if f" {server} " in f" {c} " and "--version" not in c
                   and " -v" not in c and " -V" not in c]
        assert not started, started
    assert not [c for c in commands if "iperf3 -s" in c or "iperf3 -c" in c]
    groups = [a for a in plan.actions if a.kind == "group"]
    assert groups
    clients = [argv for g in groups for argv in g.argvs()]
    assert len(clients) == len(groups) and clients
    for argv in clients:
        assert any(w.startswith(ep.file_url("")) for w in argv), argv
    assert ep.file_url("f1G") in shlex.join(clients[0])
    # the endpoint is checked before the first step
    kinds = [a.kind for a in plan.actions]
    assert kinds.index("endpoint") < kinds.index("emulate")


def test_the_gateway_commands_carry_the_runs_names():
    from rig.realization import netns
    n = netns.lay_out(netns.default_topology(), "rig1a2b", 1, "wan", "198.18.3.0/24")
    g = gateway.lay_out(n, "10.1.2.3")
    assert (g.host_if, g.ns_if, g.net) == ("rig1a2b1gh", "rig1a2b1gs", "198.18.3.132/30")
    assert g.host_addr == "198.18.3.133" and g.ns_addr == "198.18.3.134"
    used = {a for ln in n.links for a in ln.addrs}
    assert g.host_addr not in used and g.ns_addr not in used
    for argv in gateway.link_argv(g) + [gateway.rule_argv(r, "-I") for r in gateway.rules(g)]:
        assert all(isinstance(w, str) for w in argv)
    for r in gateway.rules(g):
        argv = gateway.rule_argv(r, "-I")
        assert argv[argv.index("--comment") + 1] == "rig1a2b"
    assert ["ip", "-n", "rig1a2b-1r", "route", "add", "10.1.2.3/32", "via",
            n.server_addr] in gateway.link_argv(g)


def test_clean_finds_only_its_prefixs_rules(monkeypatch):
    out = {"nat": "-P POSTROUTING ACCEPT\n"
                  "-A POSTROUTING -s 198.18.0.128/30 -d 10.1.2.3/32 -m comment --comment "
                  "rig1a2b -j MASQUERADE\n"
                  "-A POSTROUTING -s 10.0.0.0/8 -m comment --comment rig1a2bc -j MASQUERADE\n"
                  "-A POSTROUTING -m comment --comment \"site rule rig1a2b\" -j ACCEPT\n",
           "filter": "-A FORWARD -i rig1a2b0gh -d 10.1.2.3/32 -m comment --comment rig1a2b "
                     "-j ACCEPT\n-A FORWARD -i eth0 -j ACCEPT\n"}

    class R:
        def __init__(self, s: str) -> None:
            self.stdout, self.returncode = s, 0
    monkeypatch.setattr(gateway.proc, "run", lambda argv, **kw: R(out[argv[argv.index("-t") + 1]]))
    got = gateway.leftover_rules("rig1a2b")
    assert got == [
        ["iptables", "-w", "5", "-t", "nat", "-D", "POSTROUTING", "-s", "198.18.0.128/30", "-d",
         "10.1.2.3/32", "-m", "comment", "--comment", "rig1a2b", "-j", "MASQUERADE"],
        ["iptables", "-w", "5", "-t", "filter", "-D", "FORWARD", "-i", "rig1a2b0gh", "-d",
         "10.1.2.3/32", "-m", "comment", "--comment", "rig1a2b", "-j", "ACCEPT"]]


def test_a_stat_is_read_for_its_size():
    xrdfs = ("Path:   /store/f16M\nId:     0\nSize:   16777216\nMTime:  2026-11-28 14:00:00\n"
             "Flags:  16 (IsReadable)\n")
    assert external.parse_stat("root", xrdfs) == 16777216
    head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nContent-Type: text/plain\r\n\r\n"
    assert external.parse_stat("http", head) == 1048576
    assert external.parse_stat("http", "HTTP/1.1 200 OK\r\n\r\n") is None
    ep = E.parse("davs://se.example.org/pnfs")
    assert external.stat_argv(ep, "f")[-1] == "https://se.example.org:443/pnfs/f"
    assert external.stat_argv(E.parse("roots://h:1095//d"), "f") == [
        "xrdfs", "roots://h:1095", "stat", "/d/f"]
    assert gateway.parse_route('[{"dst":"10.1.2.3","gateway":"192.0.2.1","dev":"eth0"}]') \
        == ("unicast", "eth0")
    assert gateway.parse_route('[{"type":"local","dst":"192.0.2.2","dev":"lo"}]') == ("local", "lo")
