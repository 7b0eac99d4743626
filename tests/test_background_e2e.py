"""Competing flows end to end (issue 30), tests/data/scenarios/background-small.yaml: a
cubic iperf3 flow through a 200 Mbit/s bottleneck while a BBR iperf3 transfer runs. The
flow's row holds what it received; the two together do not exceed the bottleneck; the
report's background table has its share and the queueing delay; nothing is left."""
from pathlib import Path

import pytest

from rig.realization import netns

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/background-small.yaml"
RATE = 200e6


def test_a_competing_flow_shares_the_bottleneck_with_the_transfers(tmp_path, require_tools,
                                                                   run_rig):
    require_tools("iperf3")
    st = run_rig(SCEN, tmp_path / "run")
    (t,) = st.transfers()
    (b,) = st.background()
    assert t.ok and b.error is None, (t.error, b)
    assert b.flow == "bg-cubic" and b.congestion == "cubic"
    print(f"transfer {t.throughput_bps / 1e6:.1f} Mbit/s over {t.duration_s:.2f} s, "
          f"flow {b.throughput_bps / 1e6:.1f} Mbit/s over {b.seconds:.2f} s")
    # it ran over the transfer (4 s) and its settle time (1 s at 20 ms): more than 4 s
    assert b.seconds > 4.0 and b.bytes > 0
    # each got some of the bottleneck; together, within the flow's lifetime (the transfer
    # ran inside it), no more than the bottleneck carries (goodput, 10 % margin)
    assert 0.02 * RATE < b.throughput_bps < 1.1 * RATE
    assert 0.02 * RATE < t.throughput_bps < 1.1 * RATE
    assert (t.bytes + b.bytes) * 8 < 1.1 * RATE * b.seconds, (t.bytes, b)
    import csv
    with open(tmp_path / "run" / "background.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["step"], row["path"], row["rtt_ms"], row["flow"]) == ("1", "wan", "20.0",
                                                                      "bg-cubic")
    assert 0.0 < float(row["flow_share"]) < 1.0
    print(f"background.csv: {row}")
    assert (tmp_path / "run" / "background.md").exists()
    prefix = st.environment()["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
