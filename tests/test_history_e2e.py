"""`rig history` over real runs (issue 28): five stored runs of one rate-limited path, the
fifth on a path 20 % slower. The only point is rate-bound (curl, 16 MiB at 10 ms through
200 Mbit/s, then 160 Mbit/s), so the drop is the path's; the history names run 5 and
exits 1. The rate is low enough that a loaded 2-core host keeps it (the kernel's limiter,
not the host, sets the pace)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCENARIO = """\
name: hist
topology: client-router-server
paths: [{{name: wan, rtt: [10ms], rate: {rate}}}]
files: [{{name: f16M, size: 16MiB}}]
servers: [{{name: nginx, kind: nginx}}]
clients: [{{name: curl, tool: curl, file: f16M}}]
sweep: {{repeats: 3}}
validation: {{ping_count: 5, iperf_duration: 1s, iperf_streams: 1}}
transfer_timeout: 60s
"""


def _rig(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_history_of_five_real_runs_names_the_one_on_a_slower_path(tmp_path: Path,
                                                                   require_tools) -> None:
    require_tools("nginx", "curl", "iperf3")
    dirs = []
    for i, rate in enumerate(["200mbit"] * 4 + ["160mbit"]):
        scen = tmp_path / f"hist{i}.yaml"
        scen.write_text(SCENARIO.format(rate=rate))
        out = tmp_path / f"hist{i}"
        r = _rig("run", str(scen), "--out", str(out))
        assert r.returncode == 0, r.stderr[-3000:]
        dirs.append(out)
    r = _rig("history", *map(str, dirs), "--out", str(tmp_path / "history"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout.startswith("REGRESSION: 1 of 1 points dropped by 5% or more at run 5 "
                               "(hist4)"), r.stdout
    from rig.report.history import history
    h = history(dirs, tmp_path / "again")
    assert [s.at for s in h.splits] == [4]
    (change,) = h.series[0].changes
    print(f"history: {r.stdout.strip()}; change {change.change:+.3f} "
          f"[{change.low:+.3f}, {change.high:+.3f}]")
    # 160/200: -20 %, give or take what slow start and the host add to a 0.7 s transfer
    assert -0.3 < change.change < -0.1, change
    assert change.low is not None and change.high is not None and change.high < 0
