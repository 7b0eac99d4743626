"""Competing flows (`background:`, issue 30): schema, plan and the parse of a stopped
iperf3 (pure)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.description import scenario
from rig.errors import InputError
from rig.orchestration import plan as rplan
from rig.services.tools import iperf3

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests/data/scenarios/background-small.yaml"


def test_a_flow_gets_its_own_server_and_runs_between_the_check_and_the_next():
    sc = scenario.load(SMALL)
    assert [(b.name, b.congestion, b.streams) for b in sc.background] == [("bg-cubic", "cubic", 1)]
    p = rplan.build_plan(sc)
    ids = [a.id for a in p.actions]
    i = ids.index("step:0:background:start")
    assert ids[i - 1] == "step:0:check-before" and ids[i + 1] == "step:0:group:0"
    assert ids[ids.index("step:0:background:stop") + 1] == "step:0:check-after"
    lines = rplan.plan_lines(sc)
    assert "ip netns exec rig0000-0s iperf3 -s -J -B 198.18.0.6 -p 5501   # for bg-cubic" in lines
    assert any(x.startswith("ip netns exec rig0000-0c iperf3 -c 198.18.0.6 -p 5501 -J -R -P 1 "
                            "-t 86400") and "-C cubic" in x for x in lines)


def _doc(tmp_path, background, paths=None) -> Path:
    f = tmp_path / "b.yaml"
    f.write_text(json.dumps({
        "name": "b", "paths": paths or [{"name": "wan", "rtt": ["20ms"]}],
        "clients": [{"name": "ip", "tool": "iperf3"}], "background": background}))
    return f


@pytest.mark.parametrize("bg, paths, key, msg", [
    ([{"name": "x", "path": "nope"}], None, "background[0].path", "no such path (have: wan)"),
    ([{"name": "x"}, {"name": "x"}], None, "background[1].name", "duplicate flow name"),
    ([{"name": "x", "congestion": "vegas"}], None, "background[0].congestion", "must be one of"),
    ([{"name": "x", "rate": "100"}], None, "background[0].rate", "unit"),
    ([{"name": "x", "tool": "curl"}], None, "background[0].tool", "must be one of iperf3"),
    ([{"name": "x"}], [{"name": "lo", "kind": "real", "server_addr": "127.0.0.1"}],
     "background[0].path", "an emulated path this host builds"),
])
def test_bad_flows_are_one_line(tmp_path, bg, paths, key, msg):
    f = _doc(tmp_path, bg, paths)
    with pytest.raises(InputError) as e:
        scenario.load(f)
    assert (e.value.key, e.value.file) == (key, str(f)) and msg in str(e.value), str(e.value)


def test_a_stopped_flow_s_summary():
    doc = {"start": {}, "end": {"sum_received": {"bytes": 25_000_000, "seconds": 2.0},
                                "sender_tcp_congestion": "cubic"}}
    text = json.dumps(doc) + "\niperf3: interrupt - the client has terminated\n"
    assert iperf3.parse_background(text) == {"bytes": 25_000_000, "seconds": 2.0,
                                             "congestion_used": "cubic"}
    assert iperf3.parse_background('{"error": "unable to connect"}') == {
        "error": "unable to connect"}
    assert iperf3.parse_background("")["error"] == "no output"
    assert iperf3.background_argv("a", 1, 4, None, 400e6)[-2:] == ["-b", "100000000"]
