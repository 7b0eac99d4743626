"""Several origins, CPU pinning and HTTP third-party copy as data (issue #10 parts 2
and 4): placement, round-robin jobs, argv, parsers on captured output, bad input, old
result folders without the new columns. Pure: no root."""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration import plan, transfer
from rig.orchestration.origins import server_plans
from rig.process.proc import pinned_argv
from rig.realization import netns
from rig.results import check as results_check
from rig.results.store import ADDED_AFTER_V1, Store, TransferRow
from rig.services import tools

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
TWO_CPUS = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0, 1")


def _load(tmp_path: Path, doc: dict) -> scenario.Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    return scenario.load(f)


def _doc(name: str) -> dict:
    return yaml.safe_load((DATA / "scenarios" / f"{name}.yaml").read_text())


def _paths(sc: scenario.Scenario) -> netns.RealizedPath:
    return netns.lay_out(sc.topology, "rig0000", 0, "wan", "198.18.0.0/24",
                         servers=scenario.server_count(sc))


@TWO_CPUS
def test_each_origin_gets_its_own_node_and_cpu_set():
    sc = scenario.load(DATA / "scenarios/origins-small.yaml")
    pl = scenario.placements(sc)
    assert [(p.name, p.node, p.cpus, p.index) for p in pl] == [
        ("one", "s1", "0-1", 0), ("two-1", "s2", "0", 1), ("two-2", "s3", "1", 2)]
    plans = server_plans(sc, _paths(sc), Path("/w"), Path("/d"))
    addrs = [p.addr for ps in plans.values() for p in ps]
    nss = [p.ns for ps in plans.values() for p in ps]
    assert len(set(addrs)) == 3 and nss == ["rig0000-0s1", "rig0000-0s2", "rig0000-0s3"]


@TWO_CPUS
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_a_group_is_spread_round_robin(n):
    sc = scenario.load(DATA / "scenarios/origins-small.yaml")
    plans = server_plans(sc, _paths(sc), Path("/w"), Path("/d"))
    g = steps.Group(sc.clients[1], 1, n, 0)
    jobs = transfer.build_jobs(sc, g, plans, "x", 5201)
    assert [j.origin for j in jobs] == [("two-1", "two-2")[i % 2] for i in range(n)]
    assert [j.origin_cpus for j in jobs] == [("0", "1")[i % 2] for i in range(n)]
    assert len({j.url for j in jobs}) == min(n, 2)


@TWO_CPUS
@pytest.mark.parametrize("hier", [None, "cgroup1", "cgroup2"])
def test_plan_shows_pinned_servers_and_clients(monkeypatch, hier):
    """As the run pins: a cgroup where the host has a cpuset hierarchy, else taskset."""
    from rig.realization import cgroups
    root = Path("/sys/fs/cgroup/cpuset" if hier == "cgroup1" else "/sys/fs/cgroup")
    monkeypatch.setattr(cgroups, "detect",
                        lambda: cgroups.Hierarchy(hier, root) if hier else None)
    lines = plan.plan_lines(scenario.load(DATA / "scenarios/origins-small.yaml"))
    if hier is None:
        assert any(ln.startswith("ip netns exec rig0000-0s3 taskset -c 1 xrootd")
                   for ln in lines)
        assert any("ip netns exec rig0000-0c taskset -c 1 xrdcp" in ln for ln in lines)
    else:
        assert not any("taskset" in ln for ln in lines)
        i = next(i for i, ln in enumerate(lines)
                 if ln.startswith("ip netns exec rig0000-0s3 xrootd"))
        assert lines[i - 1] == (f"# mkdir {root}/rig0000-wan-two-2; cpuset.cpus=1; the "
                                f"process below moved in as it starts ({hier})")
        assert any(ln.startswith(f"# mkdir {root}/rig0000-client-1x2core; cpuset.cpus=1")
                   for ln in lines)
    assert any("round-robin over 2 origins" in ln for ln in lines)


def test_pinned_argv():
    assert pinned_argv("0-1", ["xrootd", 1]) == ["taskset", "-c", "0-1", "xrootd", "1"]
    assert pinned_argv(None, ["xrootd"]) == ["xrootd"]


@pytest.mark.parametrize("server, match", [
    ({"count": 0}, r"servers\[0\]\.count: must be >= 1 \(got 0\)"),
    ({"count": 17}, r"servers\[0\]\.count: must be <= 16"),
    ({"cpus": "4096"}, r"servers\[0\]\.cpus\[0\]: this host has no CPU 4096 \(has "),
    ({"cpus": ["0", "4095"]}, r"servers\[0\]\.cpus\[1\]: this host has no CPU 4095"),
    ({"cpus": "1-0"}, r"runs backwards"),
    ({"cpus": "zero"}, r"expected a CPU list like"),
    ({"count": 3, "cpus": ["0", "0"]}, r"one CPU set for all 3 instances or one per"),
    ({"node": "q"}, r"servers\[0\]\.node: topology .* has server nodes"),
])
def test_bad_origins_are_one_line(tmp_path, server, match):
    doc = _doc("tpc-small")
    doc["topology"] = "client-router-server"
    doc["servers"] = [{"name": "source", "kind": "xrootd", **server},
                      {"name": "dest", "kind": "xrootd", "tpc": True}]
    with pytest.raises(InputError, match=match) as e:
        _load(tmp_path, doc)
    assert "\n" not in str(e.value)


def test_bad_client_cpus(tmp_path):
    doc = _doc("tpc-small")
    doc["clients"][0]["cpus"] = "4096"
    with pytest.raises(InputError, match=r"clients\[0\]\.cpus: this host has no CPU 4096"):
        _load(tmp_path, doc)


def test_bad_cpu_set_from_the_cli_exits_2_and_creates_nothing(tmp_path):
    doc = _doc("origins-small")
    doc["servers"][1]["cpus"] = ["0", "4096"]
    f = tmp_path / "o.yaml"
    f.write_text(yaml.safe_dump(doc))
    # a state folder of its own: the host's /run/rig changes under any other run on the host,
    # and "nothing created" means nothing of this run's, not nothing anywhere
    state = tmp_path / "state"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(f), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, RIG_STATE_DIR=str(state)))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"rig: {f}: servers[1].cpus[1]:")
    assert not (tmp_path / "out").exists()
    assert not state.exists() or not any(state.iterdir())


def test_tpc_push_asks_the_source(tmp_path):
    sc = scenario.load(DATA / "scenarios/tpc-push-small.yaml")
    plans = server_plans(sc, _paths(sc), Path("/w"), Path("/d"))
    src, dst = plans["source"][0], plans["dest"][0]
    assert "exthandler" in src.kind.files(src)["xrootd.cfg"]
    assert "exthandler" not in dst.kind.files(dst)["xrootd.cfg"]
    job = transfer.build_jobs(sc, steps.Group(sc.clients[0], 1, 2, 0), plans, "x", 0)[1]
    argv = tools.get("http-tpc").argv(job)
    assert argv[-1] == f"http://{src.addr}:8000/f16M"
    assert argv[argv.index("--request") + 1:argv.index("--request") + 4] == [
        "COPY", "--header", f"Destination: http://{dst.addr}:8010/incoming/tpc-push-1"]
    doc = _doc("tpc-push-small")
    doc["servers"][0].pop("tpc")
    with pytest.raises(InputError, match=r"clients\[0\]\.source: the source pushes"):
        _load(tmp_path, doc)


@pytest.mark.parametrize("change, match", [
    (lambda d: d["clients"][0].pop("source"), r"clients\[0\]\.source: http-tpc needs"),
    (lambda d: d["clients"][0].update(source="nope"), r"source: no server of that name"),
    (lambda d: d["clients"][0].update(source="dest"), r"source and destination are one"),
    (lambda d: d["servers"][1].pop("tpc"), r"clients\[0\]\.server: the destination cannot"),
    (lambda d: d["servers"].append({"name": "web", "kind": "nginx", "tpc": True}),
     r"servers\[2\]\.tpc: a nginx server cannot do third-party copy"),
    (lambda d: d["clients"].append({"name": "c", "tool": "curl", "server": "dest",
                                    "source": "source", "file": "f16M"}),
     r"clients\[1\]\.source: curl copies from its server itself"),
    (lambda d: d["servers"][1].update(node="s1"), r"servers\[1\]\.node: .* has server nodes d, s"),
])
def test_tpc_that_cannot_work_is_refused(tmp_path, change, match):
    doc = _doc("tpc-small")
    change(doc)
    with pytest.raises(InputError, match=match):
        _load(tmp_path, doc)


def test_tpc_places_the_destination_on_the_near_side():
    sc = scenario.load(DATA / "scenarios/tpc-small.yaml")
    path = _paths(sc)
    plans = server_plans(sc, path, Path("/w"), Path("/d"))
    src, dst = plans["source"][0], plans["dest"][0]
    assert (src.ns, dst.ns) == ("rig0000-0s", "rig0000-0d")
    assert path.server.name == "s" and dst.tls_dir == Path("/w/wan-tls")
    assert src.tls_dir is None
    cfg = dst.kind.files(dst)["xrootd.cfg"]
    assert "http.exthandler xrdtpc libXrdHttpTPC.so" in cfg and "xrd.tls /w/wan-tls/cert.pem" in cfg
    assert "exthandler" not in src.kind.files(src)["xrootd.cfg"]
    job = transfer.build_jobs(sc, steps.Group(sc.clients[0], 1, 2, 0), plans, "x", 0)[1]
    argv = tools.get("http-tpc").argv(job)
    assert argv[-1] == f"http://{dst.addr}:8010/incoming/tpc-pull-1"
    assert f"Source: http://{src.addr}:8000/f16M" in argv and "COPY" in argv


def test_tpc_over_https_verifies_both_legs_against_the_run_ca_only():
    """With TLS the COPY goes to the destination's HTTPS endpoint (its HTTP port: no
    second XrdHttp listener, XrdHttp 5.5 loads XrdHttpTPC once per process) with
    --cacert, and the Source: URL is the source's HTTPS port, which the destination
    verifies against the run's CA (xrd.tlsca); nothing disables verification."""
    from rig.services import servers
    sc = scenario.load(DATA / "scenarios/tpc-tls-small.yaml")
    assert scenario.tls_modes(sc, sc.clients[0]) == ["off", "all"] and scenario.uses_tls(sc)
    plans = server_plans(sc, _paths(sc), Path("/w"), Path("/d"),
                         lambda kind, k, ns, addr, avoid: servers.default_ports(kind, k, tls=True,
                                                                                avoid=avoid))
    tlsf = servers.TlsFiles("CERT", "KEY", "/w/tls/ca.pem", "/w/tls/certs")
    plans = {n: [dataclasses.replace(p, tls=tlsf) for p in ps] for n, ps in plans.items()}
    src, dst = plans["source"][0], plans["dest"][0]
    assert "https" in src.ports and "https" not in dst.ports
    cfg = dst.kind.files(dst)["xrootd.cfg"]
    assert "xrd.tlsca certdir /w/tls/certs" in cfg and "XrdHttps" not in cfg
    assert cfg.count("http.exthandler xrdtpc libXrdHttpTPC.so") == 1
    assert f"xrd.protocol XrdHttps:{src.ports['https']}" in src.kind.files(src)["xrootd.cfg"]
    job = transfer.build_jobs(sc, steps.Group(sc.clients[0], 1, 2, 0, tls="all"),
                              plans, "x", 0)[1]
    argv = tools.get("http-tpc").argv(job)
    assert argv[-1] == f"https://{dst.addr}:{dst.ports['http']}/incoming/tpc-pull-1"
    assert argv[argv.index("--cacert") + 1] == "/w/tls/ca.pem"
    assert f"Source: https://{src.addr}:{src.ports['https']}/f16M" in argv
    assert not {"-k", "--insecure"} & set(argv)
    off = transfer.build_jobs(sc, steps.Group(sc.clients[0], 1, 1, 0), plans, "x", 0)[0]
    assert "--cacert" not in tools.get("http-tpc").argv(off)
    assert off.source_url.startswith("http://")


def test_http_tpc_parser_on_captured_output():
    sc = scenario.load(DATA / "scenarios/tpc-small.yaml")
    t = tools.get("http-tpc")
    job = tools.Job(sc.clients[0], 1, file_bytes=16 << 20)
    ok = t.parse((DATA / "http-tpc/success.txt").read_text(), "", 0, job)
    assert ok.error is None and ok.bytes == 16 << 20
    assert ok.extra["remote"] == ["tcp:127.0.0.1:18601"] and ok.extra["perf_markers"] >= 1
    bad = t.parse((DATA / "http-tpc/missing-source.txt").read_text(), "", 0, job)
    assert bad.error.startswith("failure: Remote side failed with status code 404")
    died = t.parse("", "curl: (7) Failed to connect", 7, job)
    assert died.error == "curl: (7) Failed to connect" and died.bytes is None


def test_an_old_results_folder_reads_the_new_columns_as_null(tmp_path):
    st = Store.create(tmp_path / "results.sqlite", "r")
    st.add_transfer(TransferRow(run_id="r", step=0, path="wan", backend="none", client="x",
                                tool="xrdcp", streams=1, concurrency=1, instance=0, repeat=0,
                                ok=True, argv="[]", bytes=10, duration_s=1.0,
                                throughput_bps=80.0, origin="o-1"))
    st.finish()
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    for c in sorted(ADDED_AFTER_V1 & {"origin", "origin_cpus", "client_cpus"}):
        conn.execute(f"ALTER TABLE transfers DROP COLUMN {c}")
    conn.commit()
    conn.close()
    results_check.check(tmp_path / "results.sqlite")        # no error for the old file
    row = Store.open(tmp_path).transfers()[0]
    assert row.origin is None and row.client_cpus is None and row.bytes == 10


def test_a_missing_column_of_format_1_is_still_an_error(tmp_path):
    st = Store.create(tmp_path / "results.sqlite", "r")
    st.finish()
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    conn.execute("ALTER TABLE transfers DROP COLUMN url")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="transfers.url: missing column"):
        results_check.check(tmp_path / "results.sqlite")


def test_concurrency_verdict_names_the_leader_and_judges_the_spread():
    from rig.report import concurrency
    from rig.report.model import Key, Point

    def pt(client, conc, samples):
        return Point(Key("wan", 20.0, client, 1, conc), "xrdcp", samples_bps=samples)
    pts = [pt("1x2core", 16, [1.0e9, 1.1e9]), pt("2x1core", 16, [1.6e9, 1.7e9]),
           pt("1x2core", 1, [5e9, 5e9]), pt("2x1core", 1, [1e8, 1e8])]
    v = concurrency.verdicts(pts)
    assert v == ["- wan 20 ms, 16 concurrent: **2x1core** 1.650 Gbit/s vs 1x2core 1.050 "
                 "Gbit/s (+57%; outside the spread of 2 repeats)"]
    close = [pt("a", 4, [1.0e9, 1.3e9]), pt("b", 4, [1.2e9, 1.4e9])]
    assert "within the spread" in concurrency.verdicts(close)[0]


def test_servers_of_different_kinds_never_share_a_port():
    """caching-e2e's xrootd, nginx, apache, nginx: nginx's 2nd server (8080 + 10) and apache's
    3rd (8070 + 20) both got 8090; apache could not bind, and its readiness probe found
    nginx listening there, so "apache" rows were served by nginx until the origin check
    saw apache gone."""
    from rig.services import servers
    sc = scenario.load(REPO / "tests/data/scenarios/caching-e2e.yaml")
    plans = [p for ps in server_plans(sc, _paths(sc), Path("/w"), Path("/d")).values()
             for p in ps]
    ports = [port for p in plans for port in p.ports.values()]
    assert len(ports) == len(set(ports)) and servers.IPERF3_PORT not in ports, \
        [(p.name, p.ports) for p in plans]
    assert {p.name: p.ports["http"] for p in plans if p.spec.kind == "apache"} == {"apache": 8091}


def test_a_server_that_failed_to_listen_is_reported_with_its_own_log_line(tmp_path):
    """xrootd writes `-l DIR/xrootd.log` of instance `-n NAME` to DIR/NAME/xrootd.log: the
    failure's one line quotes that log's last line, not the (empty) stdout's."""
    from types import SimpleNamespace

    from rig.services.servers import start
    wd = tmp_path / "wan-xrootd"
    (wd / "wan-xrootd").mkdir(parents=True)
    (wd / "stdout.log").write_text("")
    (wd / "wan-xrootd" / "xrootd.log").write_text(
        "251126 16:00:00 001 Starting on Linux\nConfig warning: port 1094 already in use\n")
    p = SimpleNamespace(kind=SimpleNamespace(logs=("xrootd.log",)), workdir=wd,
                        instance=wd.name)
    assert start._log_tail(p) == "Config warning: port 1094 already in use"
    (wd / "stdout.log").write_text("xrootd: cannot open config\n")
    (wd / "wan-xrootd" / "xrootd.log").unlink()
    assert start._log_tail(p) == "xrootd: cannot open config"


@TWO_CPUS
def test_per_instance_pinning_puts_each_instance_on_a_cpu_of_its_own(tmp_path):
    """Seed 000's fig 4 (issue 27 item 4): `cpus: per-instance` on a client runs
    instance i on the host's i-th CPU (taskset each), on a server one origin per CPU."""
    doc = _doc("origins-small")
    doc["clients"] = [{"name": "ip", "tool": "iperf3", "streams": 1, "duration": "2s",
                       "cpus": "per-instance", "sweep": {"concurrency": [1, 2]}},
                      {"name": "two", "tool": "xrdcp", "server": "two", "file": doc["files"][0]["name"],
                       "cpus": ["1", "0"], "sweep": {"concurrency": [2]}}]
    doc["servers"] = [{"name": "two", "kind": "xrootd", "count": 2, "cpus": "per-instance"}]
    sc = _load(tmp_path, doc)
    cpus = sorted(str(c) for c in os.sched_getaffinity(0))[:2]
    assert sc.clients[0].cpus == tuple(sorted(str(c) for c in os.sched_getaffinity(0)))
    assert sc.servers[0].cpus == cpus
    plans = server_plans(sc, _paths(sc), Path("/w"), Path("/d"))
    assert [p.cpus for p in plans["two"]] == cpus
    g = steps.Group(sc.clients[0], 1, 2, 0)
    jobs = transfer.build_jobs(sc, g, plans, "198.18.0.6", 5201)
    assert [transfer.pinned_cpus(j) for j in jobs] == cpus
    jobs = transfer.build_jobs(sc, steps.Group(sc.clients[1], 1, 2, 0), plans, "x", 0)
    assert [transfer.pinned_cpus(j) for j in jobs] == ["1", "0"]
    assert [pinned_argv(transfer.pinned_cpus(j), ["xrdcp"])[:3] for j in jobs] == [
        ["taskset", "-c", "1"], ["taskset", "-c", "0"]]


@pytest.mark.parametrize("change, match", [
    (lambda d: d["clients"][0].update(cpus="per-instance", sweep={"concurrency": [64]}),
     r"clients\[0\]\.cpus: 64 concurrent instances, \d+ CPU set\(s\): one per instance"),
    (lambda d: d["clients"][0].update(cpus=["0"], sweep={"concurrency": [1, 2]}),
     r"clients\[0\]\.cpus: 2 concurrent instances, 1 CPU set\(s\)"),
    (lambda d: d["servers"][1].update(count=16, cpus="per-instance"),
     r"servers\[1\]\.cpus: 16 instances, \d+ CPUs on this host: per-instance needs a CPU each"),
    (lambda d: d["clients"][0].update(cpus=["0", "4096"]),
     r"clients\[0\]\.cpus\[1\]: this host has no CPU 4096"),
])
def test_bad_per_instance_pinning_is_one_line(tmp_path, change, match):
    if " 16 instances" in match and len(os.sched_getaffinity(0)) >= 16:
        pytest.skip("this host has a CPU for each of 16 origins")
    doc = _doc("origins-small")
    change(doc)
    with pytest.raises(InputError, match=match) as e:
        _load(tmp_path, doc)
    assert "\n" not in str(e.value)
