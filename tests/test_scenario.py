"""Schema: every shipped scenario and topology loads; bad input gives one clear line
naming the file, the key path and the value."""
from pathlib import Path

import pytest

from rig.description import scenario, steps
from rig.errors import InputError

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
TOPOLOGIES = sorted((REPO / "topologies").glob("*.yaml"))


def test_something_is_shipped():
    names = {p.stem for p in SCENARIOS}
    assert {"quick", "rtt-sweep"} <= names
    assert TOPOLOGIES


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_load(path):
    sc = scenario.load(path)
    assert sc.clients and sc.paths
    assert steps.expand(sc) and steps.groups(sc)


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.stem)
def test_shipped_topologies_load(path):
    assert scenario.parse_topology(path).name == path.stem


def test_quick_is_what_the_readme_says():
    sc = scenario.load(REPO / "scenarios/quick.yaml")
    assert [s.rtt_ms for s in steps.expand(sc)] == pytest.approx([0, 20, 60, 120])
    assert [c.name for c in sc.clients] == ["xrdcp", "xrdcp-S4", "davix-get", "curl"]
    assert sc.files[0].size == 256 << 20


def test_rtt_sweep_is_the_caltech_grid():
    sc = scenario.load(REPO / "scenarios/rtt-sweep.yaml")
    assert [s.rtt_ms for s in steps.expand(sc)] == pytest.approx(
        [0, 2, 5, 10, 20, 40, 60, 80, 100, 120])
    assert sc.sweep.repeats == 3


BASE = {"name": "t", "paths": [{"name": "wan", "rtt": ["10ms"]}],
        "files": [{"name": "f", "size": "1MiB"}], "servers": [{"name": "x", "kind": "xrootd"}],
        "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]}


def _with(path: str, value):
    import copy
    d = copy.deepcopy(BASE)
    cur = d
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    last = keys[-1]
    if last.isdigit():
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


@pytest.mark.parametrize("path,value,key,words", [
    ("paths.0.rtt", ["50 parsecs"], "paths[0].rtt[0]", "unknown time unit"),
    ("paths.0.rtt", [50], "paths[0].rtt[0]", "give a unit"),
    ("paths.0.lossy", "1%", "paths[0].lossy", "unknown key"),
    ("paths.0.loss", "150%", "paths[0].loss", "between 0% and 100%"),
    ("paths.0.jitter", "20ms", "paths[0].jitter", "exceeds the RTT"),
    ("files.0.size", "-1MiB", "files[0].size", "not a size"),
    ("clients.0.streams", 16, "clients[0].streams", "at most 15"),
    ("clients.0.tool", "aria2c", "clients[0].tool", "must be one of"),
    ("clients.0.file", "nope", "clients[0].file", "no file of that name"),
    ("clients.0.block", "1MiB", "clients[0].block", "only for fdt"),
    ("clients.0.congestion", "reno", "clients[0].congestion", "only for iperf3"),
    ("clients.0.congestion", "vegas", "clients[0].congestion", "must be one of"),
    ("servers.0.kind", "lighttpd", "servers[0].kind", "must be one of"),
    ("report", {"unit": "Mbps"}, "report.unit", "must be one of Gbit/s, Mbit/s"),
    ("report", {"units": "MB/s"}, "report.units", "unknown key"),
    ("tuning", {"tcp_rmem_default": "16MiB"}, "tuning.tcp_rmem_default", "needs tcp_rmem_max"),
    ("tuning", {"tcp_rmem_default": "32MiB", "tcp_rmem_max": "16MiB"},
     "tuning.tcp_rmem_default", "at least as large"),
])
def test_bad_input_names_file_key_and_value(path, value, key, words):
    with pytest.raises(InputError) as e:
        scenario.parse(_with(path, value), source="s.yaml")
    msg = str(e.value)
    assert msg.startswith(f"s.yaml: {key}: "), msg
    assert words in msg and "\n" not in msg


def test_report_unit_defaults_to_gbit_and_takes_a_choice():
    assert scenario.parse(BASE, source="s.yaml").report.unit == "Gbit/s"
    assert scenario.parse(_with("report", {"unit": "MB/s"}), source="s.yaml").report.unit \
        == "MB/s"


def test_missing_required_key():
    d = dict(BASE)
    del d["clients"]
    with pytest.raises(InputError, match=r"^s.yaml: clients: required key is missing$"):
        scenario.parse(d, source="s.yaml")


def test_duplicate_names_rejected():
    d = _with("clients", [{"name": "c", "tool": "curl", "file": "f"},
                          {"name": "c", "tool": "curl", "file": "f"}])
    with pytest.raises(InputError, match=r"clients\[1\]\.name: duplicate client name"):
        scenario.parse(d, source="s.yaml")


def test_real_path_refuses_emulation():
    d = _with("paths", [{"name": "loop", "kind": "real", "server_addr": "127.0.0.1",
                         "rtt": ["10ms"]}])
    with pytest.raises(InputError, match=r"paths\[0\]\.rtt: a real path is used as-is"):
        scenario.parse(d, source="s.yaml")


def test_bad_yaml_is_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(InputError) as e:
        scenario.load(p)
    assert str(e.value).startswith(f"{p}: ") and "\n" not in str(e.value)


def test_profile_puts_loss_on_the_data_direction():
    sc = scenario.parse(_with("paths.0.loss", "1%"), source="s.yaml")
    prof = sc.paths[0].profile(0.05)
    assert prof.forward.delay_s == prof.reverse.delay_s == pytest.approx(0.025)
    assert prof.reverse.loss == pytest.approx(0.01) and prof.forward.loss == 0.0


def test_sweep_streams_expand_multistream_clients_only():
    d = _with("clients", [{"name": "x", "tool": "xrdcp", "file": "f"},
                          {"name": "c", "tool": "curl", "file": "f"}])
    d["sweep"] = {"streams": [1, 4, 15], "concurrency": [1, 2], "repeats": 2}
    sc = scenario.parse(d, source="s.yaml")
    gs = steps.groups(sc)
    assert sorted({(g.client.name, g.streams) for g in gs}) == [("c", 1), ("x", 1), ("x", 4),
                                                                ("x", 15)]
    assert len(gs) == 2 * (3 * 2 + 1 * 2)


def test_sweep_streams_beyond_a_tools_limit_is_an_error():
    d = _with("clients", [{"name": "x", "tool": "xrdcp", "file": "f"}])
    d["sweep"] = {"streams": [1, 16]}
    with pytest.raises(InputError, match=r"sweep\.streams: client x \(xrdcp\) supports at most 15 "
                                         r"streams \(got 16\)"):
        scenario.parse(d, source="s.yaml")


@pytest.mark.parametrize("key, meant", [("bandwidth", "rate"), ("delay", "rtt"),
                                        ("latency", "rtt"), ("bw", "rate")])
def test_an_unknown_key_suggests_the_key_it_means(key, meant):
    """Issue 41: `bandwidth:` and `delay:` listed six known keys in alphabetical order;
    a common synonym names the key it means."""
    doc = {"name": "t", "paths": [{"name": "wan", "kind": "emulated", "rtt": ["10ms"],
                                   key: "5ms"}],
           "servers": [{"name": "x", "kind": "xrootd"}], "files": [{"name": "f", "size": "1MiB"}],
           "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]}
    with pytest.raises(InputError) as e:
        scenario.parse(doc, source="s.yaml")
    assert f"s.yaml: paths[0].{key}: unknown key (did you mean {meant}?)" in str(e.value)
