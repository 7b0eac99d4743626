"""Several paths in one step (issue 30, item 1), pure: `together:` parsing and its
one-line errors, the joint steps' order, the plan's joint groups, and the report's
together table from a run built in memory."""
from __future__ import annotations

from pathlib import Path

import pytest

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration.plan import build_plan
from rig.report.model import Run
from rig.results.store import TransferRow

BASE = """name: s
paths:
  - {name: a, kind: emulated, rtt: [10ms, 20ms], rate: 1gbit}
  - {name: b, kind: emulated, rtt: [30ms, 40ms], rate: 2gbit}
  - {name: c, kind: emulated, rtt: [5ms]}
files: [{name: f, size: 1MiB}]
servers: [{name: x, kind: xrootd}]
clients: [{name: k, tool: curl, file: f}]
"""


def _load(tmp_path: Path, extra: str, base: str = BASE) -> scenario.Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(base + extra)
    return scenario.load(f)


def test_paths_run_together_make_joint_steps_in_the_first_ones_place(tmp_path) -> None:
    sc = _load(tmp_path, "together: [a, b]\n")
    st = steps.expand(sc)
    assert [(s.index, s.path.name, s.rtt_ms, s.joint) for s in st] == [
        (0, "a", 10.0, 0), (1, "b", 30.0, 0), (2, "a", 20.0, 2), (3, "b", 40.0, 2),
        (4, "c", 5.0, None)]
    assert [m.index for m in steps.members(st, st[3])] == [2, 3]
    assert steps.members(st, st[4]) == [st[4]]
    plan = build_plan(sc)
    groups = [a for a in plan.actions if a.kind == "group"]
    # one action per joint group (on both paths), then path c's own
    assert [(a.id, a.path) for a in groups] == [("step:0:group:0", "a"), ("step:2:group:0", "a"),
                                                ("step:4:group:0", "c")]
    assert sum(1 for i in groups[0].items if i.argv) == 2        # a curl on each path
    ids = [a.id for a in plan.actions]
    # each path checked before the joint group and after it
    assert ids.index("step:1:check-before") < ids.index("step:0:group:0") < \
        ids.index("step:0:check-after") < ids.index("step:1:check-after")


@pytest.mark.parametrize("extra,key,says", [
    ("together: [a]\n", "together", "two or more"),
    ("together: [a, a]\n", "together", "named twice"),
    ("together: [a, z]\n", "together[1]", "no such path"),
    ("together: [a, c]\n", "together", "same number of RTTs"),
    ("together: [a, b]\nbackground: [{name: bg, path: b}]\n", "together[1]", "background"),
])
def test_bad_together_is_a_one_line_error(tmp_path, extra, key, says) -> None:
    with pytest.raises(InputError) as e:
        _load(tmp_path, extra)
    msg = str(e.value)
    assert key in msg and says in msg and "\n" not in msg, msg


def test_a_path_without_a_client_cannot_run_together(tmp_path) -> None:
    base = BASE.replace("clients: [{name: k, tool: curl, file: f}]",
                        "clients: [{name: k, tool: curl, file: f, paths: [a, c]}]")
    with pytest.raises(InputError) as e:
        _load(tmp_path, "together: [a, b]\n", base)
    assert "together[1]" in str(e.value) and "no client runs on this path" in str(e.value)


def _t(step: int, path: str, rtt: float, bps: float, start: float, dur: float,
       ok: bool = True) -> TransferRow:
    return TransferRow(step=step, path=path, rtt_ms_configured=rtt, client="k", streams=1,
                       concurrency=1, repeat=0, ok=ok, throughput_bps=bps,
                       aggregate_bps=bps, started_at=start, duration_s=dur,
                       bytes=int(bps * dur / 8))


def test_the_together_table_sums_the_paths_and_says_their_shares(tmp_path) -> None:
    from rig.report import together
    env = {"together": {"paths": ["a", "b"], "sets": [[0, 1]]}}
    run = Run(tmp_path, {}, env, [_t(0, "a", 10.0, 1e9, 100.0, 2.0),
                                 _t(1, "b", 30.0, 3e9, 100.05, 2.0)], [], [], [])
    header, body = together.table(run)
    row = dict(zip(header, body[0]))
    assert row["steps"] == "1 2" and row["repeat"] == 1
    assert (row["a rtt_ms"], row["a gbit_s"], row["a share"]) == ("10", "1.000", "0.25")
    assert (row["b rtt_ms"], row["b gbit_s"], row["b share"]) == ("30", "3.000", "0.75")
    assert row["sum_gbit_s"] == "4.000" and row["start_skew_ms"] == "50"
    # all bytes (0.25 + 0.75 GB) over 100.0 .. 102.05 s
    assert row["joint_gbit_s"] == f"{(1e9 * 2 + 3e9 * 2) / 2.05 / 1e9:.3f}"
    assert row["failed"] == 0
