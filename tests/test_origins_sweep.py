"""Origins and cores as sweep axes (issue 27, item 5; seed 002's "1 x 128 vs 2 x 64 vs
4 x 16"): `sweep.origins` x `sweep.server_cpus` builds each path once per server
configuration (NAME-oOcC), every origin server with that many instances on that many
CPUs each; the report sets throughput against the cores the origins could use. Pure:
parsing, the plan, and the report's table and chart from a run built in memory."""
from __future__ import annotations

from pathlib import Path

import pytest

from rig.description import scenario, schema
from rig.errors import InputError
from rig.orchestration.plan import plan_lines
from rig.report.model import Key, Point, Run
from rig.report.verdict import Verdict

HEAD = """name: s
topology: multi-origin
paths:
  - {name: wan, kind: emulated, rtt: [20ms]}
files: [{name: f, size: 1MiB}]
"""


def _load(tmp_path: Path, servers: str, sweep: str, monkeypatch, cpus=(0, 1),
          clients: str = "clients: [{name: c, tool: curl, file: f, server: x}]\n",
          topology: str = "multi-origin"):
    monkeypatch.setattr(schema, "host_cpus", lambda: set(cpus))
    f = tmp_path / "s.yaml"
    f.write_text(HEAD.replace("multi-origin", topology) + servers + clients
                 + f"sweep: {sweep}\n")
    return scenario.load(f)


def test_each_path_is_built_once_per_configuration_with_its_origins_on_their_cpus(
        tmp_path, monkeypatch) -> None:
    sc = _load(tmp_path, "servers: [{name: x, kind: xrootd}]\n",
               "{origins: [1, 2], server_cpus: [1, 2]}", monkeypatch)
    assert [p.name for p in sc.paths] == ["wan-o1c1", "wan-o1c2", "wan-o2c1", "wan-o2c2"]
    assert {p.copy_of for p in sc.paths} == {"wan"}
    got = {p.name: [(s.count, s.cpus) for s in scenario.path_servers(sc, p)] for p in sc.paths}
    # origin k on CPUs k*C .. k*C+C-1 of the host's, round: 2 x 2 shares both CPUs
    assert got == {"wan-o1c1": [(1, ["0"])], "wan-o1c2": [(1, ["0,1"])],
                   "wan-o2c1": [(2, ["0", "1"])], "wan-o2c2": [(2, ["0,1", "0,1"])]}
    assert [scenario.server_count(sc, p) for p in sc.paths] == [1, 1, 2, 2]
    assert [pl.cpus for pl in scenario.placements(sc, sc.paths[2])] == ["0", "1"]
    # origins alone: no pinning; the plan starts each copy's own instances
    sc = _load(tmp_path, "servers: [{name: x, kind: xrootd}]\n", "{origins: [1, 3]}",
               monkeypatch, cpus=range(8))
    assert [p.name for p in sc.paths] == ["wan-o1", "wan-o3"]
    assert [s.cpus for s in scenario.path_servers(sc, sc.paths[1])] == [None]
    text = "\n".join(plan_lines(sc))
    assert text.count(" xrootd -R xrootd -n wan-o1-x -c ") == 1
    assert [text.count(f" xrootd -R xrootd -n wan-o3-x-{k} -c ") for k in (1, 2, 3)] == [1] * 3
    assert "cpuset" not in text and "taskset" not in text


def test_clients_naming_a_swept_path_run_on_every_copy_and_caches_follow(
        tmp_path, monkeypatch) -> None:
    sc = _load(tmp_path, "servers: [{name: x, kind: xrootd}, "
               "{name: cache, kind: xcache, origin: x, node: x}]\n",
               "{server_cpus: [1, 2]}", monkeypatch,
               clients="clients: [{name: c, tool: xrdcp, file: f, server: cache, "
               "paths: [wan]}]\n", topology="xcache")
    assert sc.clients[0].paths == ["wan-c1", "wan-c2"]
    cache = [s for s in scenario.path_servers(sc, sc.paths[0]) if s.kind == "xcache"]
    assert cache[0].count == 1 and cache[0].cpus is None      # a cache is not an origin


@pytest.mark.parametrize("servers,sweep,key,says", [
    ("[{name: x, kind: xrootd}]", "{server_cpus: [1, 4]}", "sweep.server_cpus",
     "4 CPUs per origin: this host has 2"),
    ("[{name: x, kind: xrootd}]", "{origins: [2, 2]}", "sweep.origins", "named twice"),
    ("[{name: x, kind: xrootd}]", "{origins: [0]}", "sweep.origins", ""),
    ("[{name: x, kind: xrootd, count: 2}]", "{origins: [1, 2]}", "servers[0].count",
     "the sweep sets them"),
    ("[{name: x, kind: xrootd, cpus: '0'}]", "{server_cpus: [1]}", "servers[0].cpus",
     "the sweep sets them"),
])
def test_bad_sweeps_are_one_line_errors(tmp_path, monkeypatch, servers, sweep, key,
                                        says) -> None:
    with pytest.raises(InputError) as e:
        _load(tmp_path, f"servers: {servers}\n", sweep, monkeypatch)
    msg = str(e.value)
    assert key in msg and says in msg and "\n" not in msg, msg


def _run(tmp_path: Path) -> tuple[Run, dict]:
    env = {"cpus": 2,
           "server_sweep": {f"wan-o{o}c{c}": {"path": "wan", "origins": o, "server_cpus": c}
                            for o in (1, 2) for c in (1, 2)},
           "origins": {
               "wan-o1c1": {"x": {"cpus_effective": "0"}},
               "wan-o1c2": {"x": {"cpus_effective": "0-1"}},
               "wan-o2c1": {"x-1": {"cpus_effective": "0"}, "x-2": {"cpus_effective": "1"}},
               "wan-o2c2": {"x-1": {"cpus_effective": "0-1"},
                            "x-2": {"cpus_effective": "0-1"}}}}
    gbit = {"wan-o1c1": 1.0, "wan-o1c2": 1.6, "wan-o2c1": 1.9, "wan-o2c2": 2.0}
    pts = [Point(key=Key(p, 20.0, "curl", 1, 8), tool="curl", samples_bps=[g * 1e9] * 3,
                 server_cpu_s=[0.5]) for p, g in gbit.items()]
    vmap = {p.key: Verdict("server-cpu-bound" if p.key.path == "wan-o1c1" else "path-limited",
                           "x") for p in pts}
    return Run(tmp_path, {}, env, [], [], [], pts), vmap


def test_the_report_sets_throughput_against_the_cores_the_origins_could_use(tmp_path) -> None:
    from rig.report import origins_cores
    run, vmap = _run(tmp_path)
    header, body = origins_cores.table(run, vmap)
    rows = [dict(zip(header, r)) for r in body]
    assert [(r["origins"], r["cpus_per_origin"], r["total_cores"], r["gbit_s"], r["verdict"])
            for r in rows] == [(1, 1, 1, "1.000", "server-cpu-bound"),
                               (1, 2, 2, "1.600", "path-limited"),
                               (2, 1, 2, "1.900", "path-limited"),
                               (2, 2, 2, "2.000", "path-limited")]
    assert {r["path"] for r in rows} == {"wan"}
    assert origins_cores.cpu_list("0-2,5") == {0, 1, 2, 5} and origins_cores.cpu_list(None) == set()
    from rig.report import charts
    files = charts.throughput_vs_cores(run, tmp_path, vmap)
    assert [f.name for f in files] == ["throughput_vs_cores_wan.png",
                                       "throughput_vs_cores_wan.svg"]
    assert all(f.stat().st_size > 1000 for f in files)
