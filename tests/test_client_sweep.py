"""A client's own sweep axes and paths, and a path's own MTU (seed 000 in one run: iperf3
over 1-16 processes, xrdcp over streams 1-15 at one concurrency, MTU 9000 beside 1500)."""
import copy

import pytest

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration.plan import plan_lines

BASE = {
    "name": "t",
    "paths": [{"name": "std", "rtt": ["0ms"]},
              {"name": "jumbo", "rtt": ["0ms"], "mtu": 9000}],
    "files": [{"name": "f", "size": "1MiB"}],
    "servers": [{"name": "x", "kind": "xrootd"}],
    "clients": [{"name": "ip", "tool": "iperf3", "duration": "2s",
                 "sweep": {"concurrency": [1, 4, 16]}},
                {"name": "xs", "tool": "xrdcp", "file": "f", "paths": ["std"],
                 "sweep": {"streams": [1, 2, 8, 15], "repeats": 3}},
                {"name": "c", "tool": "curl", "file": "f", "paths": ["std"]}],
    "sweep": {"concurrency": [1, 2], "tls": ["off", "all"]},
}


def _parse(d: dict) -> scenario.Scenario:
    return scenario.parse(d, source="s.yaml")


def test_own_axes_replace_the_scenarios_for_that_client_only():
    sc = _parse(BASE)
    std, jumbo = sc.paths
    got = {(g.client.name, g.streams, g.concurrency, g.tls) for g in steps.groups(sc, std)}
    assert {(n, s, k) for n, s, k, _ in got if n == "ip"} == {("ip", 1, 1), ("ip", 1, 4),
                                                              ("ip", 1, 16)}
    assert {(s, k) for n, s, k, _ in got if n == "xs"} == {(s, k) for s in (1, 2, 8, 15)
                                                           for k in (1, 2)}
    assert {(s, k, t) for n, s, k, t in got if n == "c"} == {(1, 1, "off"), (1, 2, "off"),
                                                             (1, 1, "all"), (1, 2, "all")}
    # iperf3 has no TLS mode: off only; xrdcp and curl run off and all
    assert {t for n, _, _, t in got if n == "ip"} == {"off"}


def test_a_client_runs_only_on_its_paths():
    sc = _parse(BASE)
    std, jumbo = sc.paths
    assert {g.client.name for g in steps.groups(sc, jumbo)} == {"ip"}
    assert {g.client.name for g in steps.groups(sc, std)} == {"ip", "xs", "c"}
    n = sum(len(steps.groups(sc, p)) for p in sc.paths)
    assert scenario.measurements(sc) == n == 3 + (3 + 3 * 4 * 2 * 2 + 2 * 2)


def test_own_repeats_interleave_with_the_others():
    sc = _parse(BASE)
    gs = steps.groups(sc, sc.paths[0])
    assert {g.repeat for g in gs if g.client.name == "xs"} == {0, 1, 2}
    assert {g.repeat for g in gs if g.client.name != "xs"} == {0}
    # repeats outermost: xs's second repeat comes after every client's first
    first_rep1 = next(i for i, g in enumerate(gs) if g.repeat == 1)
    assert all(g.repeat == 0 for g in gs[:first_rep1])
    assert gs[-1].client.name == "xs" and gs[-1].repeat == 2


def test_path_mtu_falls_back_to_tuning():
    d = copy.deepcopy(BASE)
    d["tuning"] = {"mtu": 4000}
    sc = _parse(d)
    assert [scenario.path_mtu(sc, p) for p in sc.paths] == [4000, 9000]


def test_plan_sets_each_paths_own_mtu():
    lines = plan_lines(_parse(BASE))
    mtus = {ln.split(" mtu ")[1].split()[0] for ln in lines if " mtu " in ln and "ip " in ln}
    assert mtus == {"1500", "9000"}
    # the plan lists the iperf3 client 16 at once and no xrdcp on the jumbo path
    jumbo = "\n".join(lines[next(i for i, ln in enumerate(lines) if ln.startswith("# step 2")):])
    assert "xrdcp" not in jumbo and "iperf3" in jumbo


@pytest.mark.parametrize("path,value,key,words", [
    ("clients.1.sweep", {"streams": [1, 16]}, "clients[1].sweep.streams[1]", "at most 15"),
    ("clients.1.sweep", {"concurrency": [0]}, "clients[1].sweep.concurrency[0]", ""),
    ("clients.1.sweep", {"tls": ["off"]}, "clients[1].sweep.tls", "unknown key"),
    ("clients.1.sweep", {"repeats": 0}, "clients[1].sweep.repeats", ""),
    ("clients.1.paths", ["nope"], "clients[1].paths[0]", "no such path"),
    ("paths.1.mtu", 100, "paths[1].mtu", ""),
    ("paths.1.mtu", "9000B", "paths[1].mtu", ""),
])
def test_bad_own_axes_are_one_line(path, value, key, words):
    d = copy.deepcopy(BASE)
    cur = d
    ks = path.split(".")
    for k in ks[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    cur[ks[-1]] = value
    with pytest.raises(InputError) as e:
        _parse(d)
    msg = str(e.value)
    assert msg.startswith(f"s.yaml: {key}: "), msg
    assert words in msg and "\n" not in msg


def test_a_real_path_refuses_its_own_mtu():
    d = copy.deepcopy(BASE)
    d["paths"] = [{"name": "std", "kind": "real", "server_addr": "127.0.0.1", "mtu": 9000}]
    d["clients"] = [{"name": "c", "tool": "curl", "file": "f"}]
    with pytest.raises(InputError, match=r"^s.yaml: paths\[0\]\.mtu: .*\(got 9000\)$"):
        _parse(d)
