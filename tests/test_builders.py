"""Pure command builders and parsers: argv lists, configs, captured tool output."""
import json
from pathlib import Path

import pytest

from rig.realization import netns, tuning

from rig.orchestration import pathcheck as validate, plan

from rig.description import scenario
from rig.description.scenario import ClientSpec, ServerSpec, Tuning
from rig.services import servers, tools
from rig.services.tools import Job
from rig.services.tools.iperf3 import parse_iperf3
from rig.services.tools.xrdcp import Xrdcp

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parent.parent


def _names(prefix: str, index: int, subnet: str = "198.18.0.0/24") -> netns.RealizedPath:
    return netns.lay_out(netns.default_topology(), prefix, index, "p", subnet)


def test_names_fit_linux_limits_and_carry_the_prefix():
    n = _names("rig3f2a", 31, "198.18.7.0/24")
    for ln in n.links:
        for name in ln.devs:
            assert len(name) <= 15 and name.startswith("rig3f2a")
    assert n.client_ns == "rig3f2a-31c" and netns.NS_RE.match(n.router_ns)
    assert (n.client_addr, n.server_addr) == ("198.18.7.249", "198.18.7.254")


def test_addresses_of_paths_do_not_overlap():
    addrs = set()
    for i in range(netns.MAX_PATHS):
        n = _names("rig0001", i)
        got = {n.client_addr, n.router_client_addr, n.router_server_addr, n.server_addr}
        assert len(got) == 4 and not (got & addrs)
        addrs |= got
    with pytest.raises(ValueError):
        _names("rig0001", netns.MAX_PATHS)


def test_bad_prefix_refused():
    with pytest.raises(ValueError):
        _names("eth0", 0)


def test_build_argv_is_argv_only():
    cmds = netns.build_argv(_names("rig0001", 0), mtu=9000)
    assert all(isinstance(c, list) and all(isinstance(x, str) for x in c) for c in cmds)
    assert ["ip", "-n", "rig0001-0c", "link", "set", "rig00010cr", "mtu", "9000", "up"] in cmds
    assert cmds[-1][-1] == "net.ipv4.ip_forward=1"


def test_tuning_argv():
    t = Tuning(congestion_control="reno", tcp_rmem_max=64 << 20, core_rmem_max=64 << 20)
    cmds = tuning.ns_argv(t, "rig0001-0c")
    assert cmds[0] == ["ip", "netns", "exec", "rig0001-0c", "sysctl", "-q", "-w",
                       f"net.ipv4.tcp_rmem=4096 131072 {64 << 20}"]
    assert cmds[-1][-1] == "net.ipv4.tcp_congestion_control=reno"
    assert tuning.global_argv(t) == [["sysctl", "-q", "-w", f"net.core.rmem_max={64 << 20}"]]


def test_tuning_rmem_default_is_tcp_rmem_middle_value():
    t = Tuning(tcp_rmem_max=16 << 20, tcp_rmem_default=16 << 20)
    assert tuning.ns_wanted(t) == {"net.ipv4.tcp_rmem": f"4096 {16 << 20} {16 << 20}"}


def _plan(kind: str) -> servers.ServerPlan:
    return servers.ServerPlan(ServerSpec("s", kind), "rig0001-0s", "198.18.0.6",
                              servers.default_ports(kind, 0), Path("/run/rig/rig0001/s"),
                              Path("/run/rig/rig0001/data"))


def test_xrootd_config_and_argv():
    p = _plan("xrootd")
    cfg = servers.server_files(p)["xrootd.cfg"]
    assert "oss.localroot /run/rig/rig0001/data" in cfg
    assert "xrd.protocol XrdHttp:8000 libXrdHttp.so" in cfg and "xrd.network nodnr" in cfg
    argv = servers.server_argv(p)
    assert argv[:3] == ["xrootd", "-R", "xrootd"] and "-n" in argv
    assert p.url("root", "f") == "root://198.18.0.6:1094//f"
    assert p.url("http", "f") == "http://198.18.0.6:8000/f"


def test_nginx_config_listens_on_the_plan():
    p = _plan("nginx")
    assert "listen 198.18.0.6:8080;" in servers.server_files(p)["nginx.conf"]
    assert "daemon off;" in servers.server_files(p)["nginx.conf"]


def _job(tool, **kw):
    c = ClientSpec.of(name="c", tool=tool, server="s", file="f", **kw)
    return Job(c, kw.get("streams", 1), url="root://a:1//f", addr="a", port=5201, file_bytes=10)


def test_xrdcp_argv_env():
    a = tools.get("xrdcp")
    j = _job("xrdcp", streams=4, page_checksum=False)
    assert a.argv(j) == ["xrdcp", "--force", "--nopbar", "-S", "4", "root://a:1//f", "/dev/null"]
    env = a.env(j)
    assert env["XRD_CONNECTIONRETRY"] == "1" and env["XRD_CPUSEPGWRTRD"] == "0"
    assert Xrdcp.page_checksum(env) == 0
    assert Xrdcp.page_checksum(a.env(_job("xrdcp"))) == 1
    assert "-S" not in a.argv(_job("xrdcp"))


def test_xrdcp_parse_error():
    err = "[0B/0B][100%][==][0B/s]\nRun: [FATAL] Connection error: (destination)\n"
    p = tools.get("xrdcp").parse("", err, 51, _job("xrdcp"))
    assert p.error.startswith("[FATAL] Connection error")


def test_curl_parse_captured():
    out = (DATA / "curl-json-ok.txt").read_text()
    p = tools.get("curl").parse(out, "", 0, _job("curl"))
    assert p.error is None and p.bytes == 268435456 and p.seconds > 0
    assert p.extra["http_code"] == 200


def test_curl_parse_http_error():
    p = tools.get("curl").parse('{"http_code":403,"size_download":0,"errormsg":null}',
                                      "", 22, _job("curl"))
    assert p.error == "HTTP 403"


def test_iperf3_parse_captured_reverse_has_server_srtt():
    p = parse_iperf3((DATA / "iperf3-reverse-P2.json").read_text())
    assert p.error is None and p.bytes > 0
    assert 10.0 < p.extra["srtt_ms"] < 20.0     # captured through a 10 ms path
    assert p.extra["receiver_bps"] > 1e8


def test_iperf3_congestion_per_client():
    a = tools.get("iperf3")
    argv = a.argv(_job("iperf3", congestion="reno"))
    assert argv[argv.index("-C") + 1] == "reno"
    assert "-C" not in a.argv(_job("iperf3"))
    p = parse_iperf3((DATA / "iperf3-reverse-P2.json").read_text())
    assert p.extra["sender_cc"] == "bbr"                  # what the sending server used
    assert p.extra["srtt_max_ms"] == pytest.approx(12.340)   # largest stream max_rtt (us)
    assert p.extra["srtt_max_ms"] >= p.extra["srtt_ms"]


def test_iperf3_parse_error():
    p = parse_iperf3(json.dumps({"error": "unable to connect to server"}), 1)
    assert p.bytes is None and "unable to connect" in p.error


def test_ping_parse_captured():
    s = validate.parse_ping((DATA / "ping-ok.txt").read_text())
    assert s.count == 5 and s.received == 5 and s.loss == 0.0
    assert 0 < s.min_ms <= s.mean_ms <= s.max_ms


def test_ping_parse_all_lost():
    s = validate.parse_ping((DATA / "ping-all-lost.txt").read_text())
    assert s.received == 0 and s.loss == 1.0 and s.mean_ms is None


@pytest.mark.parametrize("conf,meas,flagged", [(60.0, 60.5, False), (60.0, 60.7, True),
                                               (0.0, 0.25, False), (0.0, 0.35, True),
                                               (120.0, 121.1, False), (120.0, 121.3, True),
                                               (20.0, None, True), (None, 5.0, False)])
def test_rtt_flag_tolerance_is_max_of_abs_and_relative(conf, meas, flagged):
    got = validate.rtt_flag(conf, meas, abs_ms=0.3, rel=0.01)
    assert (got is not None) == flagged


def test_plan_prints_every_kind_of_command():
    lines = plan.plan_lines(scenario.load(REPO / "scenarios/quick.yaml"))
    text = "\n".join(lines)
    for needle in ("ip netns add rig0000-0c", "tc qdisc replace", "-j NFQUEUE",
                   "sysctl -q -w net.core.rmem_max", "xrootd -R xrootd", "ping -n -q",
                   "iperf3 -c", "xrdcp --force --nopbar -S 4", "davix-get", "curl --silent"):
        assert needle in text, needle
    assert text.count("# step ") == 4


@pytest.mark.parametrize("rmem,scale,want", [(16 << 20, 1, 8 << 20), (16 << 20, 2, 12 << 20),
                                             (16 << 20, -1, 8 << 20), (16 << 20, None, 8 << 20),
                                             (None, 1, None)])
def test_window_bound_follows_adv_win_scale(rmem, scale, want):
    assert tuning.window_bytes(rmem, scale) == want


def test_congestion_control_not_allowed_by_the_host_is_added_to_the_global_list():
    t = Tuning(congestion_control="cubic")
    assert tuning.global_wanted(t, "reno bbr") == {
        "net.ipv4.tcp_allowed_congestion_control": "reno bbr cubic"}
    assert tuning.global_wanted(Tuning(congestion_control="bbr"), "reno bbr") == {}


def test_rtt_flag_allows_the_standard_error_of_a_jittered_mean():
    # 10 pings, 1.25 ms stddev (2 ms configured jitter): 3 SE = 1.19 ms
    assert validate.rtt_flag(80.0, 80.9, abs_ms=0.3, rel=0.01, stddev_ms=1.25, count=10) is None
    assert validate.rtt_flag(80.0, 81.3, abs_ms=0.3, rel=0.01, stddev_ms=1.25, count=10)
    # without jitter the tight tolerance holds
    assert validate.rtt_flag(80.0, 80.9, abs_ms=0.3, rel=0.01, stddev_ms=0.1, count=20)


def test_rtt_flag_without_jitter_does_not_let_one_slow_echo_widen_the_tolerance():
    # seen on an idle make run: 120 ms step, mean 122.174 with one slow echo (stddev
    # 5.2 ms over 20): 3 SE = 3.5 ms would pass it; without configured jitter it is flagged
    assert validate.rtt_flag(120.0, 122.174, abs_ms=0.3, rel=0.01, stddev_ms=5.2, count=20,
                             jittered=False)
    assert validate.rtt_flag(120.0, 122.174, abs_ms=0.3, rel=0.01, stddev_ms=5.2,
                             count=20) is None
    assert validate.rtt_flag(120.0, 121.1, abs_ms=0.3, rel=0.01, stddev_ms=5.2, count=20,
                             jittered=False) is None          # 1 % of 120 ms
