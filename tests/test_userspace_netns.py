"""The userspace backend on a real client—router—server path (root, namespaces).

Tolerances are the loose ones of a loaded 2-core machine (RTT within 15 %, loss within
30 %); the benchmark (bench/emulation.py) measures the real targets.
"""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from rig.realization import netns

from rig.process import proc
from rig.description.profile import Direction, LinkProfile
from rig.realization.emul.engine import native
from rig.realization.emul.userspace import UserspaceBackend, control_path, kernel_has_nfqueue
from rig.errors import StepAborted
from rig.description.linkstats import load_stats
from rig.report.verdict import engine_issues

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
]


@pytest.fixture(scope="module", autouse=True)
def _nfqueue_available():
    if not kernel_has_nfqueue():
        pytest.skip("kernel has no NFQUEUE target")


@pytest.fixture
def path(tmp_path: Path):
    prefix = netns.new_prefix()
    with netns.path_net(prefix, "p0", 0, workdir=tmp_path) as net:
        yield net
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]


# The engine's semantics against both data paths (issue 42 item 3): the Python engine and
# the native one (tools/rig-emul-engine; skipped where it is not built). The capacity test
# runs on the engine `auto` picks here only (CI time).
@pytest.fixture(params=["python", "native"])
def backend(path, request):
    if request.param == "native" and native.path() is None:
        pytest.skip(f"{native.NAME} is not built")
    if request.node.get_closest_marker("default_engine_only") and \
            request.param != ("native" if native.choose()[0] else "python"):
        pytest.skip("measured on the engine auto picks only")
    be = UserspaceBackend(engine=request.param)
    yield be
    pid = be.engine_pid(path.site)
    be.remove(path.site)
    assert be.engine_pid(path.site) is None
    if pid:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert not control_path(path.site).exists()
    rules = proc.run(["iptables", "-S", "FORWARD"], netns=path.router_ns, timeout=10)
    assert "NFQUEUE" not in rules.stdout and path.site.prefix not in rules.stdout


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def ping(net, count: int, interval: float, *, wait_s: int = 2) -> dict:
    res = proc.run(["ping", "-n", "-q", "-c", str(count), "-i", str(interval),
                    "-W", str(wait_s), net.server_addr], netns=net.client_ns,
                   timeout=count * interval + wait_s + 20)
    out = res.stdout
    m = re.search(r"(\d+) packets transmitted, (\d+) received(?:, \+(\d+) duplicates)?", out)
    assert m, out
    d = {"sent": int(m[1]), "received": int(m[2]), "dups": int(m[3] or 0)}
    r = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    if r:
        d.update(min_ms=float(r[1]), avg_ms=float(r[2]), max_ms=float(r[3]))
    return d


def test_rtt_is_the_configured_one(path, backend):
    backend.apply(path.site, LinkProfile.symmetric(0.040))
    backend.check(path.site)
    p = ping(path, 60, 0.02)
    assert p["received"] == 60
    assert p["avg_ms"] == pytest.approx(40.0, rel=0.15)
    assert p["min_ms"] >= 40.0 - EARLY_RESOLUTION_MS  # never faster than configured
    st = backend.stats(path.site)
    assert st.alive is True and st.error is None
    assert st.extra["engine"] == backend.engine        # the run stores which engine ran
    assert st.direction("forward").released >= 60 and st.direction("reverse").released >= 60


# A round trip through the engine is never shorter than the path (issue 31): nothing is
# released before its deadline. What separates ping's minimum from the configured RTT is
# then only clock reads: the engine's arrival stamp (its read time, or the kernel's
# wall-clock stamp moved to the monotonic clock through an offset read beside it) and
# ping's microsecond print. Until issue 31 the engine released up to half its batching
# window early and an idle 50 ms path pinged 49.36 ms, 48.54 ms beside iperf3 -P4 -R
# (bench/early_release.py).
EARLY_RESOLUTION_MS = 0.05


def test_no_round_trip_is_shorter_than_the_path_under_load(path, backend, tmp_path):
    import shutil
    assert shutil.which("iperf3"), "iperf3 missing (make install)"
    backend.apply(path.site, LinkProfile.symmetric(0.050))
    backend.check(path.site)
    idle = ping(path, 100, 0.01)
    srv = proc.Service(["iperf3", "-s", "--forceflush", "-p", "5299"], netns=path.server_ns,
                       log_path=tmp_path / "iperf3-s.log").start()
    cli = None
    try:
        proc.wait_until(lambda: "listening" in srv.log_tail(), timeout=10,
                        what="iperf3 server", service=srv)
        cli = proc.Service(["iperf3", "-c", path.server_addr, "-p", "5299", "-R", "-P", "4",
                            "-t", "20"], netns=path.client_ns,
                           log_path=tmp_path / "iperf3-c.log").start()
        loaded = ping(path, 400, 0.01)
    finally:
        if cli is not None:
            cli.stop()
        srv.stop()
    for what, p in (("idle", idle), ("beside iperf3 -P4 -R", loaded)):
        assert p["received"] >= 0.9 * p["sent"], (what, p)
        assert p["min_ms"] >= 50.0 - EARLY_RESOLUTION_MS, (what, p)
    st = backend.stats(path.site)
    print(f"ping min/avg idle {idle['min_ms']}/{idle['avg_ms']} ms, beside iperf3 -P4 -R "
          f"{loaded['min_ms']}/{loaded['avg_ms']} ms; engine lateness min/mean/max ms: "
          + ", ".join(f"{d.direction} {d.lateness.min_s * 1e3:.3f}/{d.lateness.mean_s * 1e3:.3f}/"
                      f"{d.lateness.max_s * 1e3:.3f} ({d.released} released)"
                      for d in st.directions if d.lateness and d.lateness.min_s is not None))
    for d in st.directions:
        assert d.lateness is not None and d.lateness.min_s is not None, d
        assert d.lateness.min_s >= 0.0, (d.direction, d.lateness)     # the engine's own view
        assert d.lateness.share_early() == 0.0
    assert sum(d.released or 0 for d in st.directions) > 1000     # the load went through


def test_reconfigure_between_steps(path, backend):
    backend.apply(path.site, LinkProfile.symmetric(0.040))
    backend.update(path.site, LinkProfile.symmetric(0.010))
    p = ping(path, 40, 0.02)
    assert p["avg_ms"] == pytest.approx(10.0, rel=0.15)
    backend.update(path.site, LinkProfile.symmetric(0.0))   # passthrough: rules removed
    backend.check(path.site)
    assert ping(path, 20, 0.01)["avg_ms"] < 2.0
    backend.update(path.site, LinkProfile.symmetric(0.030))
    backend.check(path.site)
    assert ping(path, 30, 0.02)["avg_ms"] == pytest.approx(30.0, rel=0.15)


def test_random_loss_rate(path, backend):
    prof = LinkProfile(forward=Direction(delay_s=0.002, loss=0.05),
                       reverse=Direction(delay_s=0.002))
    backend.apply(path.site, prof)
    p = ping(path, 2000, 0.002)
    loss = 1 - p["received"] / p["sent"]
    # binomial, 5 sigma (was 30 % relative: 3.1 sigma at 2000 pings, a 1-in-500 flake)
    assert abs(loss - 0.05) <= 5 * (0.05 * 0.95 / p["sent"]) ** 0.5, p
    fwd = backend.stats(path.site).direction("forward")
    assert fwd.dropped_loss == p["sent"] - p["received"]
    assert fwd.extra["gso"] is False                  # loss acts per wire segment


def test_real_engine_overflow_is_the_verdicts_evidence(path, backend):
    """The stats contract on the real engine: a 10-packet queue and a burst of 100 pings
    (-l: sent without waiting); the engine's own overflow count, through to_json and
    load_stats as a stored row, is what the verdict cites."""
    backend.apply(path.site, LinkProfile(forward=Direction(delay_s=0.020, queue_pkts=10),
                                         reverse=Direction(delay_s=0.020)))
    res = proc.run(["ping", "-n", "-q", "-c", "100", "-l", "100", "-W", "2",
                    path.server_addr], netns=path.client_ns, timeout=30)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", res.stdout)
    assert m, res.stdout
    lost = int(m[1]) - int(m[2])
    st = load_stats(backend.stats(path.site).to_json(), "userspace")
    fwd = st.direction("forward")
    assert fwd.dropped_queue == lost and lost >= 50, (fwd, res.stdout)
    assert fwd.dropped_loss == 0 and fwd.seen == 100
    assert f"engine dropped_queue={lost} (forward)" in engine_issues(st, 40.0, 0.0)


def test_duplication(path, backend):
    prof = LinkProfile(forward=Direction(delay_s=0.002),
                       reverse=Direction(delay_s=0.002, duplicate=0.3))
    backend.apply(path.site, prof)
    p = ping(path, 300, 0.005)
    assert p["received"] == 300
    # binomial, 5 sigma (was 30 % relative: 3.4 sigma at 300 pings)
    assert abs(p["dups"] / 300 - 0.3) <= 5 * (0.3 * 0.7 / 300) ** 0.5, p


def test_dead_engine_stops_the_step_and_the_path(path, backend):
    backend.apply(path.site, LinkProfile.symmetric(0.040))
    backend.check(path.site)
    os.kill(backend.engine_pid(path.site), signal.SIGKILL)
    with pytest.raises(StepAborted, match="died|not responding"):
        backend.check(path.site)
    p = ping(path, 20, 0.01, wait_s=1)
    assert p["received"] == 0                         # fail-closed: nothing passes undelayed


def test_sigterm_is_a_clean_exit(path, backend):
    backend.apply(path.site, LinkProfile.symmetric(0.020))
    svc = backend._engines[(path.site.router_ns, path.site.queue_base)]
    assert svc.stop() == 0
    assert "engine: stopped" in svc.log_tail()


@pytest.mark.default_engine_only
def test_validated_capacity_is_flat_with_rtt_on_an_unlimited_path(path, backend, tmp_path):
    """Issue 11: capacity measured past slow start with buffers that do not limit it
    does not fall with RTT when nothing limits the rate. The namespaces hold 4 MiB
    buffers (8 x 2 MiB / 120 ms would cap the run at 1.1 Gbit/s, a ratio near 0.1); the
    check raises them for its own iperf3 only. 0.5: on this shared 2-core VM the ratio
    120 ms / 10 ms of this test was 0.75-1.39 over 13 runs (-P8 through the engine varies
    6-12 Gbit/s between runs minutes apart, bench/results/engine_timing-20261122.txt)."""
    from rig.description.scenario import Validation
    from rig.orchestration.pathcheck import validate_path
    from rig.realization import tuning
    from rig.services.servers.start import start_iperf3_server
    scenario = {"net.ipv4.tcp_rmem": "4096 131072 4194304",
                "net.ipv4.tcp_wmem": "4096 16384 4194304"}
    for ns in (path.client_ns, path.server_ns):
        tuning.write_ns(ns, scenario)
    v = Validation(ping_count=10, ping_interval_s=0.02, iperf_seconds=3.0, iperf_streams=8)
    srv = start_iperf3_server(path.server_ns, path.server_addr, 5301, tmp_path)
    caps = {}
    try:
        for i, rtt in enumerate((10.0, 120.0)):
            prof = LinkProfile.symmetric(rtt / 1e3)
            if i == 0:
                backend.apply(path.site, prof)
            else:
                backend.update(path.site, prof)
            r = validate_path(client_ns=path.client_ns, server_addr=path.server_addr,
                              iperf_port=5301, configured_rtt_ms=rtt, v=v,
                              own_ns=(path.client_ns, path.server_ns))
            assert "-O" in r["raw"] and r["capacity_note"] is None, r
            assert json.loads(r["raw"])["iperf3_window_bytes"] > 8 * 2**20
            caps[rtt] = r["capacity_bps"]
            for ns in (path.client_ns, path.server_ns):      # the scenario's again
                assert tuning.read(list(scenario), ns) == scenario
    finally:
        srv.stop()
    print(f"validated capacity: {caps}")
    assert caps[120.0] >= 0.5 * caps[10.0], caps
