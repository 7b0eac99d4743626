"""Several paths in one step end to end (issue 30, item 1),
tests/data/scenarios/together-small.yaml: two emulated paths with their own RTT and
rate, swept side by side; each joint step runs the download on both at once. Checked:
the two transfers of a joint step overlap in time, each stays within its own path's
rate, each path has its own checks and engine rows, the report's together table sums
them, and nothing is left."""
import csv
from pathlib import Path

import pytest

from rig.realization import netns

pytestmark = pytest.mark.e2e
SCEN = Path(__file__).resolve().parent / "data" / "scenarios" / "together-small.yaml"
RATE = {"a": 200e6, "b": 400e6}


def test_two_paths_carry_one_step_at_once_each_within_its_rate(tmp_path, require_tools,
                                                                 run_rig):
    require_tools("xrootd", "curl", "iperf3")
    out = tmp_path / "run"
    st = run_rig(SCEN, out)
    env = st.environment()
    assert env["together"] == {"paths": ["a", "b"], "sets": [[0, 1], [2, 3]]}
    rows = st.transfers()
    assert all(t.ok for t in rows), [t.error for t in rows]
    assert sorted((t.step, t.path, t.rtt_ms_configured) for t in rows) == [
        (0, "a", 10.0), (1, "b", 30.0), (2, "a", 20.0), (3, "b", 40.0)]
    for a_step, b_step in ((0, 1), (2, 3)):
        (ta,) = [t for t in rows if t.step == a_step]
        (tb,) = [t for t in rows if t.step == b_step]
        print(f"steps {a_step + 1}+{b_step + 1}: a {ta.throughput_bps / 1e6:.0f} Mbit/s "
              f"over {ta.duration_s:.2f} s, b {tb.throughput_bps / 1e6:.0f} Mbit/s over "
              f"{tb.duration_s:.2f} s, starts {abs(ta.started_at - tb.started_at):.3f} "
              "s apart")
        # at once: each started before the other ended (8 MiB takes >= 0.17 s at 400 Mbit/s)
        assert ta.started_at < tb.started_at + tb.duration_s
        assert tb.started_at < ta.started_at + ta.duration_s
        for t in (ta, tb):      # each path's own rate (goodput, 10 % over for the burst)
            assert t.throughput_bps < 1.1 * RATE[t.path], t
    # every path's own checks before its step, and the engine's rows per phase
    val = [(v.step, v.phase) for v in st.validations()]
    assert {(s, "before") for s in range(4)} <= set(val) and {(s, "after") for s in range(4)} \
        <= set(val)
    eng = {(r.step, r.phase) for r in st.engine_stats()}
    assert {(s, "transfers") for s in range(4)} <= eng
    with open(out / "together.csv") as f:
        table = list(csv.DictReader(f))
    print(f"together.csv: {table}")
    assert [r["steps"] for r in table] == ["1 2", "3 4"]
    for r in table:
        assert abs(float(r["a share"]) + float(r["b share"]) - 1.0) < 0.02
        assert abs(float(r["a gbit_s"]) + float(r["b gbit_s"]) - float(r["sum_gbit_s"])) < 0.002
        assert 0 < float(r["joint_gbit_s"]) < 1.1 * (RATE["a"] + RATE["b"]) / 1e9
    prefix = env["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
