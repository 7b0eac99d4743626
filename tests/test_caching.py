"""Caching modes wired into the rig (issue #9), pure tier: the `root` file kind and the
replay client's keys in a scenario (bad input: one line, exit 2), the branch sweep, the
replay tool's argv and parser (captured output), the new transfers columns (an older
results.sqlite without them still reports), the latency-bound verdict and the tables."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rig import cli
from rig.description import scenario, steps
from rig.errors import InputError
from rig.services import tools
from rig.services.tools import Job

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests/data"
BASE = {"name": "c", "paths": [{"name": "wan", "rtt": ["0ms", "10ms"]}],
        "files": [{"name": "aod", "kind": "root", "size": "8MiB", "branches": 20}],
        "servers": [{"name": "xrootd", "kind": "xrootd"}, {"name": "nginx", "kind": "nginx"}],
        "clients": [{"name": "st", "tool": "replay", "mode": "storage", "library": "davix",
                     "server": "xrootd", "file": "aod"}]}


def _load(tmp_path, **change):
    d = yaml.safe_load(yaml.safe_dump(BASE))
    for k, v in change.items():
        d[k] = v
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    return scenario.load(f)


def _client(**kw):
    return dict(BASE["clients"][0], **kw)


def test_replay_client_and_root_file_load(tmp_path):
    sc = _load(tmp_path)
    c = sc.clients[0]
    assert (c.option("mode"), c.option("library"), c.protocol, c.option("branches")) == ("storage", "davix", "http", None)
    f = sc.files[0]
    assert f.kind == "root" and f.root_spec().n_branches == 20 and f.root_spec().seed == 0


@pytest.mark.parametrize("client,key,msg", [
    (_client(mode="cached"), "clients[0].mode", "must be one of"),
    (_client(mode="application", library="curl"), "clients[0].library", "curl cannot replay"),
    (_client(branches="150%"), "clients[0].branches", "between 0% and 100%"),
    (_client(branches="0%"), "clients[0].branches", "more than 0%"),
    (_client(mode=None), "clients[0].mode", "needs a mode"),
    (_client(library="xrootd", server="nginx"), "clients[0].server", "does not serve root"),
    (_client(cache_size="20MiB"), "clients[0].cache_size", "only for mode application"),
    (_client(shadow_dir="/var/tmp"), "clients[0].shadow_dir", "only for mode lazy-download"),
    (_client(mode="lazy-download", shadow_dir="/nonexistent"), "clients[0].shadow_dir",
     "not an existing absolute directory (or memory) (got '/nonexistent')"),
    (_client(mode="lazy-download", shadow_dir="tmp"), "clients[0].shadow_dir",
     "not an existing absolute directory"),
    ({"name": "x", "tool": "curl", "file": "aod", "server": "nginx", "dest_dir": "/nonexistent"},
     "clients[0].dest_dir", "not an existing absolute directory"),
    ({"name": "x", "tool": "iperf3", "dest_dir": "/var/tmp"}, "clients[0].dest_dir",
     "only for"),
    ({"name": "x", "tool": "curl", "file": "aod", "mode": "storage"}, "clients[0].mode",
     "only for replay"),
])
def test_bad_replay_clients_are_one_line(tmp_path, client, key, msg):
    if client.get("mode", "") is None:
        client = {k: v for k, v in client.items() if k != "mode"}
    with pytest.raises(InputError) as e:
        _load(tmp_path, clients=[client])
    assert key in str(e.value) and msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("files,key,msg", [
    ([{"name": "aod", "kind": "root", "path": "/nonexistent/x.root"}], "files[0].path",
     "no such file"),
    ([{"name": "aod", "kind": "root", "path": "@NOTROOT@"}], "files[0].path",
     "not a ROOT file"),
    ([{"name": "aod", "size": "1MiB", "branches": 3}], "files[0].branches", "only for kind: root"),
    ([{"name": "aod", "kind": "root"}], "files[0].size", "required key is missing"),
    # the generator's own limit, named at the scenario's key (a mutation test found it
    # reported as `rootfile.size` without the file)
    ([{"name": "aod", "kind": "root", "size": "128B"}], "files[0].size",
     "must be at least 1 KiB (got 128)"),
])
def test_bad_root_files_are_one_line(tmp_path, files, key, msg):
    junk = tmp_path / "junk.root"
    junk.write_bytes(b"not a root file at all")
    files = [dict(f, path=str(junk)) if f.get("path") == "@NOTROOT@" else f for f in files]
    with pytest.raises(InputError) as e:
        _load(tmp_path, files=files)
    assert key in str(e.value) and msg in str(e.value)


def test_cli_bad_input_exit_2_nothing_created(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "s.yaml"
    d = dict(BASE, sweep={"branches": ["30%", "150%"]})
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(SystemExit) as e:
        cli.main(["plan", str(f)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.branches[1]" in err[0] and "150%" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_branch_sweep_applies_to_replay_clients_only(tmp_path):
    sc = _load(tmp_path, sweep={"branches": ["1%", "100%"]},
               clients=[BASE["clients"][0], {"name": "curl", "tool": "curl", "file": "aod",
                                             "server": "nginx"}])
    gs = steps.groups(sc)
    assert [(g.client.name, g.client.option("branches")) for g in gs] == [
        ("st@1%", 0.01), ("st@100%", 1.0), ("curl", None)]
    assert scenario.measurements(sc) == 2 * 3


def test_a_clients_own_branches_win_over_the_sweep(tmp_path):
    sc = _load(tmp_path, sweep={"branches": ["1%", "100%"]},
               clients=[BASE["clients"][0], _client(name="lz", mode="lazy-download",
                                                    branches="100%")])
    gs = steps.groups(sc)
    assert [(g.client.name, g.client.option("branches")) for g in gs] == [
        ("st@1%", 0.01), ("st@100%", 1.0), ("lz@100%", 1.0)]
    assert scenario.measurements(sc) == 2 * 3


def test_replay_argv_and_row_fields(tmp_path):
    sc = _load(tmp_path, clients=[_client(mode="lazy-download", segment="8MiB",
                                          branches="30%")])
    c = sc.clients[0]
    t = tools.get("replay")
    job = Job(c, 1, url="http://h:1/aod", local="/d/aod", timeout_s=60)
    a = t.argv(job)
    assert a[1:3] == ["-m", "rig.services.replay"]
    for k, v in (("--url", "http://h:1/aod"), ("--file", "/d/aod"), ("--mode", "lazy-download"),
                 ("--library", "davix"), ("--branches", "0.3"), ("--segment", str(8 << 20))):
        assert a[a.index(k) + 1] == v
    assert t.row_fields(job, {}) == {"cache_mode": "lazy-download", "read_library": "davix",
                                     "branch_fraction": 0.3}


def test_shadow_file_goes_to_local_disk_unless_told(tmp_path):
    """Lazy-download writes its shadow file (CMSSW: the job's directory, a worker node's
    disk): /var/tmp unless `shadow_dir` names another directory or `memory`; the other
    modes have none."""
    t = tools.get("replay")

    def arg(**kw):
        c = _load(tmp_path, clients=[_client(**kw)]).clients[0]
        a = t.argv(Job(c, 1, url="http://h:1/aod", local="/d/aod", timeout_s=60))
        return a[a.index("--shadow-dir") + 1] if "--shadow-dir" in a else None
    assert arg(mode="lazy-download") == "/var/tmp"
    assert arg(mode="lazy-download", shadow_dir=str(tmp_path)) == str(tmp_path)
    assert arg(mode="lazy-download", shadow_dir="memory") is None
    assert arg(mode="application") is None


def test_dest_dir_names_the_runs_own_file(tmp_path):
    """A plain download with `dest_dir` writes `<dir>/<prefix>-<client>-<i>` (so `rig
    clean` can tell a dead run's files), curl and xrdcp alike; without it, curl keeps its
    copy in the run's downloads/ tmpfs (checksummed after the group, issue 40 item 6)."""
    from rig.orchestration import plan as rplan
    sc = _load(tmp_path, clients=[
        {"name": "c", "tool": "curl", "file": "aod", "server": "nginx",
         "dest_dir": str(tmp_path)},
        {"name": "x", "tool": "xrdcp", "file": "aod", "server": "xrootd",
         "dest_dir": str(tmp_path)},
        {"name": "n", "tool": "curl", "file": "aod", "server": "nginx"}])
    text = "\n".join(rplan.plan_lines(sc))
    assert f"--output {tmp_path}/rig0000-c-0 " in text
    assert f"root://198.18.0.6:1094//aod {tmp_path}/rig0000-x-0" in text
    assert "--output /run/rig/rig0000/downloads/rig0000-n-0 " in text


def test_clean_removes_a_dead_runs_downloads_only(tmp_path):
    from rig.orchestration import clean
    mine, other, keep = (tmp_path / "rigdead-c-0", tmp_path / "rigaaaa-c-0",
                         tmp_path / "rigdeadx")
    for f in (mine, other, keep):
        f.write_text("x")
    said: list[str] = []
    clean._remove_downloads("rigdead", {"dest_dirs": [str(tmp_path)]}, said.append)
    assert not mine.exists() and other.exists() and keep.exists()
    assert said == [f"removed {mine}"]


def test_replay_parse_captured_output():
    t = tools.get("replay")
    out = (DATA / "replay-ok.json").read_text()
    p = t.parse(out, "", 0, None)
    assert p.error is None and p.bytes == 10490960 and p.seconds == pytest.approx(9.8901, 1e-4)
    assert p.columns["round_trips"] == 769 and p.columns["bytes_wire"] == 10490960
    assert p.extra["transport"].startswith("rig http.client")
    bad = t.parse(out.replace('"expected_checksum": "701e2ed7"', '"expected_checksum": "0"'),
                  "", 0, None)
    assert "differ" in bad.error
    assert t.parse("", "replay: cannot open x", 1, None).error == "replay: cannot open x"


def test_replay_parse_captured_helper_output():
    """Captured from `python -m rig.services.replay --library davix` (the requests made by
    libdavix through tools/rig-replay-http) against nginx on loopback."""
    t = tools.get("replay")
    p = t.parse((DATA / "replay-helper-ok.json").read_text(), "", 0, None)
    assert p.error is None and p.bytes == 10350335 and p.seconds == pytest.approx(0.033855)
    assert p.columns["round_trips"] == 9 and p.columns["bytes_wire"] == 15638059
    assert p.extra["transport"].startswith("libdavix") and p.extra["http_requests"] == 9
    assert len(p.extra["round_s"]) == 9 and p.extra["checksum"] == '02834122'


@pytest.mark.slow
def test_old_results_without_new_columns_still_report(tmp_path):
    from fixtures_results import downgrade_to_format1, make_run
    from rig import report
    run = tmp_path / "old"
    make_run(run)
    downgrade_to_format1(run / "results.sqlite")
    files = {p.name for p in report.render(run, tmp_path / "out")}
    assert "rtt_table_mean.md" in files and "caching_table_mean.md" not in files


def test_latency_bound_verdict_and_tables(tmp_path):
    from rig.report import caching, load_run, verdicts
    from rig.results.store import Store, TransferRow
    run = tmp_path / "r"
    st = Store.create(run / "results.sqlite", "r")
    for step, rtt in enumerate((0.0, 20.0)):
        # storage: 1000 synchronous reads of 10 kB; at 20 ms they take 20 s
        wall = 0.5 if rtt == 0 else 20.5
        st.add_transfer(TransferRow(
            run_id="r", step=step, path="wan", backend="userspace", rtt_ms_configured=rtt,
            rtt_ms_measured=rtt or 0.05, client="st", tool="replay", server="xrootd",
            streams=1, concurrency=1, instance=0, repeat=0, bytes=10_000_000,
            duration_s=wall, throughput_bps=8e7 / wall, ok=True, argv="[]",
            cache_mode="storage", read_library="davix", branch_fraction=1.0,
            requests=1000, round_trips=1000, bytes_useful=10_000_000, bytes_wire=10_000_000))
    st.finish()
    r = load_run(run)
    v = verdicts(r)
    kinds = {k.rtt_ms: x.kind for k, x in v.items()}
    assert kinds[20.0] == "latency-bound" and kinds[0.0] != "latency-bound"
    assert "1000 synchronous round trips x 20 ms = 20 s" in v[next(k for k in v if k.rtt_ms == 20)].detail
    header, body = caching.table(caching.replay_points(r), caching._mbps)
    assert header == ["branches", "mode", "library", "server", "0", "20"]
    assert body == [["100%", "storage", "davix", "xrootd", "20.00", "0.49"]]


def test_slow_start_counts_what_a_fresh_connection_needs_at_least(tmp_path):
    """A fresh connection's slow start from 10 x 1448 B grows the window by what is
    acknowledged and keeps it from round to round: one 16.9 MB answer needs 11 flights;
    six synchronous answers of 2.8 MB need 8 for the first and 1 each after (13); 454
    answers of 37 kB need 2 for the first (455). Without the rounds' sizes the rig counts
    only what is sure for any split: max(rounds, 11). Without the path's MTU stored,
    slow start is not counted."""
    import json
    from rig.report import load_run, verdicts
    from rig.report.verdict import slow_start_flights, slow_start_rounds
    assert slow_start_flights(14_480, 1448) == 1 and slow_start_flights(14_481, 1448) == 2
    assert slow_start_flights(16_873_375, 1448) == 11
    assert slow_start_rounds([16_873_375], 1448) == 11
    assert slow_start_rounds([2_812_229] * 6, 1448) == 13
    assert slow_start_rounds([37_000] * 454, 1448) == 455
    assert slow_start_rounds([0, 14_480, 14_481], 1448) == 3

    def one(name, wall, requests, mtu, sizes):
        from rig.results.store import Store, TransferRow
        st = Store.create(tmp_path / name / "results.sqlite", "r")
        if mtu:
            st.set_env("tuning", {"mtu": mtu})
        st.add_transfer(TransferRow(
            run_id="r", step=0, path="wan", backend="userspace", rtt_ms_configured=2.0,
            rtt_ms_measured=2.0, client="app", tool="replay", server="apache",
            streams=1, concurrency=1, instance=0, repeat=0, bytes=16_873_375,
            duration_s=wall, throughput_bps=8 * 16_873_375 / wall, ok=True, argv="[]",
            extra=json.dumps({"round_bytes": sizes}) if sizes else None,
            cache_mode="application", read_library="davix", branch_fraction=1.0,
            requests=requests, round_trips=requests, bytes_useful=16_873_375,
            bytes_wire=16_873_375))
        st.finish()
        (v,) = verdicts(load_run(tmp_path / name)).values()
        return v

    v = one("lazy", 0.030, 1, 1500, None)      # 11 x 2 ms = 22 ms of 30 (73 %)
    assert v.kind == "latency-bound", v.text()
    assert ("1 synchronous round trips + 10 more of slow start (16.9 MB from an initial "
            "window of 10 x 1448 B) x 2 ms = 0.022 s") in v.detail, v.detail
    assert one("nomtu", 0.030, 1, None, None).kind != "latency-bound"
    # six answers: 11 flights sure (40 % of 55 ms), 13 with the sizes (47 %): neither
    assert one("six", 0.055, 6, 1500, None).kind != "latency-bound"
    assert one("six-sized", 0.055, 6, 1500, [2_812_229] * 6).kind != "latency-bound"
    v = one("six-fast", 0.045, 6, 1500, [2_812_229] * 6)      # 26 ms of 45 (58 %)
    assert v.kind == "latency-bound", v.text()
    assert "6 synchronous round trips + 7 more of slow start (16.9 MB from an initial " \
           "window of 10 x 1448 B, round by round) x 2 ms = 0.026 s" in v.detail, v.detail


@pytest.mark.parametrize("cpu,wait,server,kind", [
    (0.41, 0.18, None, "latency-bound"),    # 59 % own + 29 % round trips = 88 %
    (0.35, 0.13, None, "unexplained"),      # 48 % + 29 % = 77 %: it waited for more
    (0.35, 0.13, 0.48, "latency-bound"),    # + the server's threads' 48 %: 125 %
    (0.8499, 0.0, None, "latency-bound"),   # no CPU verdict (84.99 %): the round trips' say
    (0.60, 0.30, None, "host-CPU-bound"),   # runnable 90 %: a CPU verdict, not the round trips
    (0.90, 0.00, None, "client-CPU-bound"),
])
def test_short_round_trips_and_the_two_ends_make_the_wall(tmp_path, cpu, wait, server, kind):
    """Storage mode at 0 ms (seed 003's E31): 454 synchronous round trips of 0.032 ms are
    29 % of a 50 ms wall, below latency-bound's half; with the client's own account of
    the rest (on a CPU, waiting for one) and the server's threads' CPU over the group,
    they make up the wall: latency-bound, naming each."""
    import json
    from rig.report import load_run, verdicts
    from rig.results.store import Store, ThreadCpuRow, TransferRow
    st = Store.create(tmp_path / "results.sqlite", "r")
    wall = 454 * 0.032e-3 / 0.29
    tid = st.add_transfer(TransferRow(
        run_id="r", step=0, path="wan", backend="userspace", rtt_ms_configured=0.0,
        rtt_ms_measured=0.032, client="st", tool="replay", server="apache",
        streams=1, concurrency=1, instance=0, repeat=0, bytes=16_873_375,
        duration_s=wall, throughput_bps=8 * 16_873_375 / wall, ok=True, argv="[]",
        cpu_user_s=cpu * wall, cpu_sys_s=0.0, extra=json.dumps({"cpu_wait_s": wait * wall}),
        cache_mode="storage", read_library="davix", branch_fraction=1.0,
        requests=454, round_trips=454, bytes_useful=16_873_375, bytes_wire=16_873_375))
    if server is not None:
        st.add_thread_cpu([ThreadCpuRow(
            transfer_id=tid, side="server", pid=50, tid=50, process="apache2", comm="apache2",
            cpus_allowed="0-1", t_first_s=0.0, t_last_s=0.5, cpu_s=server * wall, wait_s=0.0,
            series=json.dumps({"t": [0.0, 0.5], "cpu_ms": [0.0, server * wall * 1e3],
                               "wait_ms": [0.0, 0.0]}))])
    st.finish()
    (v,) = verdicts(load_run(tmp_path)).values()
    assert v.kind == kind, v.text()
    if (cpu, server) == (0.41, None):
        assert ("the client's own time (on a CPU 41%, waiting for one 18%) and 454 "
                "synchronous round trips x 0.032 ms make 88% of the 0.0501 s wall: each "
                "synchronous round waits for the client's turnaround and a network round "
                "trip") in v.detail, v.detail
    if server is not None:
        assert ("the client's own time (on a CPU 35%, waiting for one 13%), the server's "
                "threads' CPU (48%, over its group) and 454 synchronous round trips x "
                "0.032 ms make 125% of the 0.0501 s wall: each synchronous round waits for "
                "the client's and the server's turnaround") in v.detail, v.detail


def test_latency_bound_wins_over_the_kernels_idle_sender():
    """A storage replay's sender idles between requests (the kernel says application-
    limited): the round trips x RTT explain the time, and the kernel's words are cited;
    lost packets still win."""
    from rig.report.tcpevidence import Evidence
    from rig.report.verdict import _from_kernel
    from types import SimpleNamespace
    lat = ("latency-bound", 1e6, "1000 synchronous round trips x 20 ms = 20 s of the 20.5 s wall (98%)")
    idle = Evidence(conns=1, busy_s=2.0, rwnd_s=0.0, sndbuf_s=0.0, life_s=20.0,
                    bytes_sent=10_000_000, bytes_retrans=0)
    v = _from_kernel(SimpleNamespace(), idle, [lat])
    assert v.kind == "latency-bound", v
    assert "1000 synchronous round trips" in v.detail and "kernel:" in v.detail
    lossy = Evidence(conns=1, busy_s=20.0, rwnd_s=0.0, sndbuf_s=0.0, life_s=20.0,
                     bytes_sent=10_000_000, bytes_retrans=500_000)
    assert lossy.classify()[0] == "loss-limited"
    assert _from_kernel(SimpleNamespace(), lossy, [lat]).kind == "loss-limited"


def test_helper_plan_json_is_every_round_in_order():
    from rig.services.replay import http_helper
    from rig.description.rootfile import plan
    r1 = plan.Round("open", (plan.Request("read", ((0, 100),)),), 100)
    r2 = plan.Round("fill", (plan.Request("readv", ((200, 10), (300, 20))),
                             plan.Request("readv", ((400, 5),))), 35, window=2)
    p = plan.Plan("application", "f.root", 1000, "Events", 10, ("a",), plan.Options(), (r1, r2))
    d = json.loads(http_helper.plan_json(p))
    assert d["version"] == 1
    assert d["rounds"] == [[0, [[0, 100]]], [2, [[200, 10], [300, 20]], [[400, 5]]]]


def test_a_missing_http_helper_is_one_line_exit_2(tmp_path, monkeypatch):
    from rig.errors import InputError
    from rig.services.tools.replay import require_helper
    sc = _load(tmp_path)
    monkeypatch.setenv("RIG_REPLAY_HTTP", str(tmp_path / "nope"))
    with pytest.raises(InputError) as e:
        require_helper(sc)
    assert e.value.exit_status == 2 and "\n" not in str(e.value)
    assert "clients[0].library" in str(e.value) and "rig-replay-http" in str(e.value)
    require_helper(_load(tmp_path, clients=[_client(library="xrootd")]))   # root:// needs none


def _server_conf(sc, name: str) -> str:
    from rig.services.servers import ServerPlan, server_files
    spec = next(s for s in sc.servers if s.name == name)
    p = ServerPlan(spec=spec, ns=None, addr="198.18.0.2", ports={"http": 8070},
                   workdir=Path("/w"), datadir=Path("/d"))
    return "".join(server_files(p).values())


def test_http_send_settings_default_to_debians_and_can_be_set(tmp_path):
    """Apache: EnableSendfile Off unless asked (httpd's default; Debian's apache2.conf
    leaves it unset); nginx: Debian's nginx.conf, sendfile on + tcp_nopush on. Debian's
    nginx answers each cache fill one RTT late, nopush off does not (tests/test_caching_e2e)."""
    sc = _load(tmp_path, servers=[
        {"name": "a", "kind": "apache"}, {"name": "a-sf", "kind": "apache", "sendfile": True},
        {"name": "n", "kind": "nginx"},
        {"name": "n-off", "kind": "nginx", "tcp_nopush": False, "sendfile": False},
        {"name": "xrootd", "kind": "xrootd"}])
    assert "\nEnableSendfile Off\n" in _server_conf(sc, "a")
    assert "\nEnableSendfile On\n" in _server_conf(sc, "a-sf")
    n, off = _server_conf(sc, "n"), _server_conf(sc, "n-off")
    assert "sendfile on;" in n and "tcp_nopush on;" in n
    assert "sendfile off;" in off and "tcp_nopush off;" in off


@pytest.mark.parametrize("server,key,msg", [
    ({"name": "xrootd", "kind": "xrootd", "sendfile": True}, "servers[0].sendfile",
     "a xrootd server has no sendfile setting (has it: apache, nginx) (got True)"),
    ({"name": "xrootd", "kind": "apache", "tcp_nopush": False}, "servers[0].tcp_nopush",
     "a apache server has no tcp_nopush setting (has it: nginx)"),
    ({"name": "xrootd", "kind": "nginx", "tcp_nopush": "sometimes"}, "servers[0].tcp_nopush",
     "sometimes"),
])
def test_bad_send_settings_are_one_line(tmp_path, server, key, msg):
    with pytest.raises(InputError) as e:
        _load(tmp_path, servers=[server, {"name": "nginx", "kind": "nginx"}])
    assert key in str(e.value) and msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("round_rtts, note", [
    ([1.0, 1.05, 1.1, 1.0, 1.02], "median round 1 RTT"),
    ([1.0, 2.0, 2.05, 2.0, 1.98], "median round 2 RTT (each answer one RTT late"),
])
def test_latency_bound_verdict_cites_the_median_round(tmp_path, round_rtts, note):
    """The verdict reads extra.round_s: a median round of 2 RTT is named as answers that
    come one RTT late (Debian's nginx, docs/caching-modes.md); 1 RTT is not."""
    from rig.report import load_run, verdicts
    from rig.results.store import Store, TransferRow
    run = tmp_path / "r"
    st = Store.create(run / "results.sqlite", "r")
    rounds = [x * 0.02 for x in round_rtts]
    st.add_transfer(TransferRow(
        run_id="r", step=0, path="wan", backend="userspace", rtt_ms_configured=20.0,
        rtt_ms_measured=20.0, client="app", tool="replay", server="nginx", streams=1,
        concurrency=1, instance=0, repeat=0, bytes=5_000_000, duration_s=sum(rounds),
        throughput_bps=4e7 / sum(rounds), ok=True, argv="[]",
        extra=json.dumps({"round_s": rounds}), cache_mode="application",
        read_library="davix", branch_fraction=0.3, requests=5, round_trips=5,
        bytes_useful=5_000_000, bytes_wire=5_000_000))
    st.finish()
    v = next(iter(verdicts(load_run(run)).values()))
    assert v.kind == "latency-bound" and note in v.detail, v.detail
    assert ("one RTT late" in v.detail) == (round_rtts[2] > 1.5)


def test_clients_sharing_mode_library_server_keep_their_own_rows():
    """Seed 003's trigger factors: three replay clients, one mode, library and server;
    the table shows each (it used to show the last one under their common row)."""
    from rig.report import caching
    from rig.report.model import Key, Point
    pts = []
    for name, mbs in (("app-tf0", 33.0), ("app-tf1", 604.0)):
        p = Point(Key("wan", 0.0, f"{name}@1%", 1, 1), "replay", samples_bps=[mbs * 8e6],
                  base_client=f"{name}@1%", bytes_ok=10**7)
        p.cache_mode, p.read_library, p.server, p.branch_fraction = \
            "application", "xrootd", "xrootd", 0.01
        pts.append(p)
    cells = caching._cells(pts, 0.01, caching._mbps)
    assert cells == {("application", "xrootd", "xrootd (app-tf0)"): {0.0: 33.0},
                     ("application", "xrootd", "xrootd (app-tf1)"): {0.0: 604.0}}
    assert list(caching._cells(pts[:1], 0.01, caching._mbps)) == [
        ("application", "xrootd", "xrootd")]
