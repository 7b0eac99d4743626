"""End-to-end: per-thread CPU of a real xrdcp and a real xrootd through a path in
namespaces (issue 27), checked against the process-tree CPU the run measures itself."""
import json
import shutil
from pathlib import Path

import pytest

from rig.report import load_run, verdicts
from rig.report import threads as T
from rig.results.store import Store
from rigrun import rig_run

pytestmark = [pytest.mark.e2e, pytest.mark.netns]
DATA = Path(__file__).resolve().parent / "data" / "scenarios"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    missing = [n for n in ("xrootd", "xrdcp", "iperf3") if shutil.which(n) is None]
    assert not missing, f"missing tools (make install): {missing}"
    out = tmp_path_factory.mktemp("threads") / "run"
    rig_run(DATA / "threads-small.yaml", out, timeout=600)
    return out


def test_every_transfer_has_its_threads_and_the_server_its_own(run_dir):
    st = Store.open(run_dir)
    transfers = st.conn.execute("SELECT rowid, * FROM transfers").fetchall()
    rows = st.thread_cpu()
    env = st.environment()["thread_sampling"]
    st.close()
    assert len(transfers) == 3 and all(t["ok"] for t in transfers)
    by = {}
    for r in rows:
        by.setdefault((r.transfer_id, r.side), []).append(r)
    for t in transfers:
        mine = by[(t["rowid"], "client")]
        assert {r.process for r in mine} == {"xrdcp"}
        assert len(mine) >= 2                       # xrdcp runs several threads
        sampled = sum(r.cpu_s for r in mine)
        rusage = t["cpu_user_s"] + t["cpu_sys_s"]
        # schedstat counts the same threads, from the first read to the last: never more
        # than the process's own rusage (10 ms ticks), less by its start and last tick
        assert sampled <= rusage + 0.05, (sampled, rusage)
        assert sampled >= 0.5 * rusage - 0.05, (sampled, rusage)
        for r in mine:
            s = json.loads(r.series)
            assert len(s["t"]) == len(s["cpu_ms"]) == len(s["wait_ms"]) >= 1
            assert s["cpu_ms"] == sorted(s["cpu_ms"])
    servers = [k for k in by if k[1] == "server"]
    assert len(servers) == 2                        # one per group: x1 and x2
    for k in servers:
        assert {r.process for r in by[k]} == {"xrootd"}
    # the server's sampled CPU against the tree's difference over the group
    x2 = [t for t in transfers if t["concurrency"] == 2]
    tree = sum(t["server_cpu_user_s"] + t["server_cpu_sys_s"] for t in x2)
    sk = next(k for k in servers if k[0] in {t["rowid"] for t in x2})
    sampled = sum(r.cpu_s for r in by[sk])
    assert sampled <= tree + 0.1 and sampled >= 0.5 * tree - 0.1, (sampled, tree)
    assert env["version"] == 1 and env["groups"] == 2 and env["interval_s"] == 0.02
    assert env["rows"] == len(rows) and env["remote_ends"] == []
    assert 0 < env["cpu_share"] < 0.2


def test_report_reads_them_back(run_dir):
    run = load_run(run_dir)
    v = verdicts(run)
    ev = T.evidence(run)
    assert set(ev) == set(v) and all(p.client and p.server for p in ev.values())
    for p in ev.values():
        for u in p.client:
            assert u.busy_s > 0 and u.threads[0].cpu > 0.1
    from rig.report import render
    render(run_dir)
    page = (run_dir / "report.html").read_text()
    assert "Where the CPU goes (per thread)" in page and (run_dir / "threads.csv").exists()
