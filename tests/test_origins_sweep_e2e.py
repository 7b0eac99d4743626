"""sweep.origins x sweep.server_cpus end to end (issue 27, item 5),
tests/data/scenarios/origins-sweep-small.yaml: each path copy starts its own origins,
each pinned where the sweep says (read back from the running servers), the downloads
of a copy are spread over its origins, the report's origins_cores table sets each
configuration beside the cores its origins could use, and nothing is left."""
import csv
import os
from pathlib import Path

import pytest

from rig.realization import cgroups, netns

pytestmark = pytest.mark.e2e
SCEN = Path(__file__).resolve().parent / "data" / "scenarios" / "origins-sweep-small.yaml"


def test_each_configuration_runs_its_own_pinned_origins(tmp_path, require_tools, run_rig):
    require_tools("xrootd", "curl", "iperf3")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    out = tmp_path / "run"
    st = run_rig(SCEN, out)
    env = st.environment()
    # what the kernel reports for the running servers, not what was asked
    got = {path: {k: o["cpus_effective"] for k, o in insts.items()}
           for path, insts in env["origins"].items()}
    assert got == {"wan-o1c1": {"xrootd": "0"},
                   "wan-o2c1": {"xrootd-1": "0", "xrootd-2": "1"}}
    assert env["server_sweep"] == {
        "wan-o1c1": {"path": "wan", "origins": 1, "server_cpus": 1},
        "wan-o2c1": {"path": "wan", "origins": 2, "server_cpus": 1}}
    rows = st.transfers()
    assert all(t.ok for t in rows), [t.error for t in rows]
    by_path: dict = {}
    for t in rows:
        by_path.setdefault(t.path, []).append((t.origin, t.origin_cpus))
    assert sorted(by_path["wan-o1c1"]) == [("xrootd", "0")] * 2
    assert sorted(by_path["wan-o2c1"]) == [("xrootd-1", "0"), ("xrootd-2", "1")]
    with open(out / "origins_cores.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["path"], r["origins"], r["cpus_per_origin"], r["total_cores"])
            for r in table] == [("wan", "1", "1", "1"), ("wan", "2", "1", "2")]
    print(f"origins_cores.csv: {table}")
    assert (out / "throughput_vs_cores_wan.png").stat().st_size > 1000
    prefix = env["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
    assert not [d for p, d in cgroups.rig_cgroups() if p == prefix]
