"""The typed stats contract (rig.description.linkstats) from the engine's real counters to the verdict.

The userspace engine's real sans-IO core (fake clock) and the engine process's real
stats() assembly produce the stats; they go through to_json -> SQLite -> load_stats ->
verdict exactly as in a run. A counter renamed or dropped anywhere on that way makes
these tests fail instead of silently turning emulator detection off. Pure: no root.
"""
from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures_results import Client, make_run
from rig.realization.emul.engine import server
from rig.realization.emul.engine.core import DROP_QUEUE, HOLD, DirectionQueue
from rig.realization.emul.netem import netem_stats
from rig.realization.emul.none import NoneBackend
from rig.description import linkstats
from rig.description.profile import Direction, LinkProfile
from rig.description.linkstats import (STATS_VERSION, EmulStats, StatsFormatError, UnreadableStats,
                           load_stats, qdisc_dir_stats)
from rig.report import load_run, verdicts
from rig.report.verdict import engine_issues

DATA = Path(__file__).parent / "data"
RTT_MS = 60.0
ONE_WAY_S = RTT_MS / 2e3


def _lane(name: str, queue: int, core: DirectionQueue) -> server.Lane:
    """A real engine Lane around a real core; only the netlink socket is a stand-in."""
    lane = server.Lane.__new__(server.Lane)
    lane.name, lane.core, lane.tstamp_used, lane.wakeups = name, core, 0, 7
    lane.nfq = SimpleNamespace(queue=queue, gso=True, copy_packet=False, errors=0,
                               recvs=3, msgs=90, sends=4)
    return lane


def _engine(fwd: DirectionQueue, rev: DirectionQueue) -> server.Engine:
    eng = server.Engine.__new__(server.Engine)
    eng.profile = LinkProfile.symmetric(RTT_MS / 1e3)
    eng.lanes = [_lane("forward", 40, fwd), _lane("reverse", 41, rev)]
    eng.comp = SimpleNamespace(value_s=50e-6)
    eng.timer_wakeups, eng.started = 5, 0.0
    return eng


def _kernel(queue_dropped: int = 0, user_dropped: int = 0):
    return lambda: [{"queue": 40, "queue_dropped": 0, "user_dropped": 0},
                    {"queue": 41, "queue_dropped": queue_dropped,
                     "user_dropped": user_dropped}]


def _overloaded() -> tuple[DirectionQueue, DirectionQueue, int]:
    """forward: 80 packets into a queue of 50 (30 overflow), released 4 ms late."""
    fwd = DirectionQueue(Direction(delay_s=ONE_WAY_S), limit=50, rng=random.Random(1))
    codes = [fwd.arrive(i, 1.0) for i in range(80)]
    assert codes.count(HOLD) == 50 and codes.count(DROP_QUEUE) == 30
    ids, _ = fwd.release(1.0 + ONE_WAY_S + 0.004)
    assert len(ids) == 50
    rev = DirectionQueue(Direction(delay_s=ONE_WAY_S), limit=1000, rng=random.Random(2))
    return fwd, rev, 30


def _clean() -> tuple[DirectionQueue, DirectionQueue]:
    """Both directions: 500 packets each, every one released when due."""
    out = []
    for seed in (1, 2):
        dq = DirectionQueue(Direction(delay_s=ONE_WAY_S), limit=10_000,
                            rng=random.Random(seed))
        for i in range(500):
            assert dq.arrive(i, 1.0 + i * 1e-4) == HOLD
        for i in range(500):
            dq.release(1.0 + i * 1e-4 + ONE_WAY_S)
        out.append(dq)
    return out[0], out[1]


def _stored_verdict(tmp_path: Path, stats: EmulStats):
    """Store the stats as the orchestrator does (to_json in engine_stats) in a run of one
    60 ms step, then read the run back and judge it as `rig report` does."""
    text = stats.to_json()
    run_dir = make_run(tmp_path / "run", rtts=(RTT_MS,), repeats=2,
                       clients=(Client("curl", "curl", 1),), engine_stats=text)
    run = load_run(run_dir)
    (point,) = run.points
    return verdicts(run)[point.key]


def test_real_engine_overflow_and_lateness_make_the_verdict_emulator_limited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fwd, rev, overflow = _overloaded()
    monkeypatch.setattr(server, "kernel_queue_stats", _kernel(user_dropped=5))
    stats = _engine(fwd, rev).stats()
    # the control channel carries to_dict(); the rig side reads it strictly
    wire = json.loads(json.dumps({"ok": True, "stats": stats.to_dict()}))["stats"]
    assert EmulStats.from_json(wire) == stats
    back = load_stats(stats.to_json(), "userspace")
    assert back == stats
    f = back.direction("forward")
    assert (f.seen, f.released, f.dropped_queue) == (80, 50, overflow)
    assert f.lateness.mean_s == pytest.approx(0.004, abs=1e-9)
    assert f.lateness.share_late(1e-3) == 1.0 and f.lateness.p99_s == pytest.approx(0.004)
    assert back.direction("reverse").nfq_user_dropped == 5
    v = _stored_verdict(tmp_path, stats)
    assert v.kind == "emulator-limited"
    assert v.detail == ("engine dropped_queue=30 (forward); engine user_dropped=5 (reverse); "
                        "engine adds 4 ms mean release lateness per round trip, > 3 ms")


def test_real_engine_clean_stats_leave_the_verdict_to_the_measurement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fwd, rev = _clean()
    monkeypatch.setattr(server, "kernel_queue_stats", _kernel())
    stats = _engine(fwd, rev).stats()
    assert [(d.seen, d.released, d.dropped_queue, d.nfq_queue_dropped)
            for d in stats.directions] == [(500, 500, 0, 0), (500, 500, 0, 0)]
    assert stats.direction("forward").lateness.p99_s == 0.0
    assert engine_issues(load_stats(stats.to_json()), RTT_MS, 0.0) == []
    v = _stored_verdict(tmp_path, stats)
    assert v.kind == "window-limited" and "engine" not in v.text()


def test_kernel_queue_drops_alone_make_the_verdict_emulator_limited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fwd, rev = _clean()
    monkeypatch.setattr(server, "kernel_queue_stats", _kernel(queue_dropped=11))
    v = _stored_verdict(tmp_path, _engine(fwd, rev).stats())
    assert (v.kind, v.detail) == ("emulator-limited", "engine queue_dropped=11 (reverse)")


def test_round_trip_of_every_backend_and_of_a_dead_engine() -> None:
    for st in (NoneBackend().stats(None),
               EmulStats("userspace", alive=False, extra={"queued": [4, 5]}),
               EmulStats("userspace", alive=True, error="engine control /s: timed out"),
               netem_stats({"forward": json.loads((DATA / "tc-qdisc-htb-tbf.json")
                                                  .read_text()),
                            "reverse": "cannot read qdiscs of r-c: gone"})):
        text = st.to_json()
        assert json.loads(text)["stats_version"] == STATS_VERSION
        assert EmulStats.from_json(text) == st == load_stats(text)
    assert engine_issues(load_stats(EmulStats("userspace", alive=False).to_json()),
                         RTT_MS, 0) == ["engine not alive"]


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ("[1, 2]", "want a JSON object"),
    ("null", "want a JSON object"),
    ('{"stats_version": 2, "backend": "netem", "bogus": 1}', "unknown keys ['bogus']"),
    ('{"stats_version": 9, "backend": "netem"}', "stats_version 9 is newer"),
    ('{"stats_version": 2, "backend": "userspace", "directions": '
     '[{"direction": "forward", "seen": -1}]}', "directions['forward'].seen"),
    ('{"stats_version": 2, "backend": "userspace", "directions": '
     '[{"direction": "forward", "lateness": {"count": 1, "mean_s": 0, "max_s": 0, '
     '"hist": [1]}}]}', "want 18 bins"),
    ('{"forward": {"seen": "many"}}', "forward.seen"),
    ('{"forward": {"released": 3, "late_hist": {"3..4ms": 3}}}', "forward.late_hist"),
    ('{"kernel_queues": {"queue": 1}}', "kernel_queues"),
])
def test_garbage_is_unreadable_with_a_reason_never_a_crash(text: str, why: str) -> None:
    st = load_stats(text, "userspace")
    assert isinstance(st, UnreadableStats) and why in st.reason, st
    assert st.raw == text[:200] and st.backend == "userspace"
    assert engine_issues(st, RTT_MS, 0.0) == []
    with pytest.raises(StatsFormatError):
        EmulStats.from_json(text)


def test_old_userspace_row_is_adapted_field_by_field() -> None:
    """A row as rig stored it before stats_version (the engine's own dict)."""
    lane = {"seen": 1200, "released": 1150, "held": 10, "dropped_loss": 12,
            "dropped_queue": 28, "duplicated": 0, "loss_ratio": 0.01,
            "applied_delay_mean_s": 0.0301, "late_mean_s": 2e-5, "late_max_s": 3e-3,
            "late_hist": {"0..50us": 1100, "50..100us": 40, "2..5ms": 10},
            "queue": 40, "gso": True, "wakeups": 99}
    old = {"backend": "userspace", "alive": True, "queued": [40, 41], "pid": 4242,
           "uptime_s": 12.5, "cpu_user_s": 1.5, "cpu_sys_s": 0.5, "timer_wakeups": 77,
           "profile": {}, "forward": lane, "reverse": {**lane, "queue": 41},
           "kernel_queues": [{"queue": 40, "queue_dropped": 2, "user_dropped": 1},
                             {"queue": 41, "queue_dropped": 0, "user_dropped": 0}]}
    st = load_stats(json.dumps(old), "userspace")
    assert isinstance(st, EmulStats) and st.source_version == 1
    assert (st.instance, st.alive, st.cpu_user_s, st.cpu_sys_s) == (4242, True, 1.5, 0.5)
    f = st.direction("forward")
    assert (f.seen, f.released, f.held, f.dropped_loss, f.dropped_queue) == (
        1200, 1150, 10, 12, 28)
    assert (f.nfq_queue_dropped, f.nfq_user_dropped) == (2, 1)
    assert f.lateness.count == 1150 and f.lateness.share_late(2e-3) == pytest.approx(10 / 1150)
    assert f.lateness.p50_s == 50e-6 and f.lateness.p99_s == 100e-6   # 1140 of 1150
    assert f.lateness.quantile_s(0.995) == 3e-3      # bin 2..5ms, capped by the max
    assert f.extra == {"loss_ratio": 0.01, "queue": 40, "gso": True, "wakeups": 99}
    assert st.extra["queued"] == [40, 41] and st.extra["uptime_s"] == 12.5
    # re-stored in the typed form, it reads back the same
    assert load_stats(st.to_json()) == st.__class__(**{**st.__dict__, "source_version": 2})


def test_netem_qdiscs_drops_by_cause() -> None:
    # captured here (htb + tbf child in a throwaway namespace): the parent counts its
    # child's 297 drops too; counted once, as the rate limiter's
    real = json.loads((DATA / "tc-qdisc-htb-tbf.json").read_text())
    assert [(q["kind"], q["drops"]) for q in real] == [("htb", 297), ("tbf", 297)]
    d = qdisc_dir_stats("forward", real)
    assert d.dropped_rate_limiter == 297 and d.seen is None and d.dropped_unattributed is None
    # netem root with the backend's TBF child (shape of `tc -s -j`, counts made up):
    # netem's drops = its loss/limit drops + the child's
    shaped = [{"kind": "netem", "handle": "1:", "root": True, "packets": 9000,
               "drops": 150, "qlen": 30},
              {"kind": "tbf", "handle": "10:", "parent": "1:1", "packets": 9000,
               "drops": 100, "qlen": 20}]
    d = qdisc_dir_stats("forward", shaped)
    assert (d.seen, d.released, d.held) == (9000 + 150 + 50, 9000, 50)
    assert (d.dropped_unattributed, d.dropped_rate_limiter) == (50, 100)
    st = netem_stats({"forward": shaped, "reverse": "qdiscs of r-c unreadable"})
    assert st.error == "reverse: qdiscs of r-c unreadable"
    assert engine_issues(st, RTT_MS, 0.01) == [
        "engine error: reverse: qdiscs of r-c unreadable"]
    assert engine_issues(st, RTT_MS, 0.0) == [
        "engine error: reverse: qdiscs of r-c unreadable",
        "engine netem drops=50 is 0.54% of packets (configured loss 0.00%) (forward)"]
    assert isinstance(netem_stats({"forward": [{"kind": "netem", "drops": "x"}]}).error, str)


def test_contract_module_imports_nothing_that_runs() -> None:
    tree = ast.parse(Path(linkstats.__file__).read_text())
    names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert names <= {"__future__", "bisect", "json", "math", "dataclasses", "typing"}, names


def test_netem_phases_are_differenced_unless_the_qdisc_was_rebuilt() -> None:
    """netem's counters run from the qdisc's creation and survive `tc qdisc replace`: a
    phase's row is the snapshot minus the one before; a counter that went down is a new
    qdisc (the rate child removed: delete, then add), counted from its own 0."""
    def snap(packets: int, drops: int) -> EmulStats:
        return netem_stats({"reverse": [{"kind": "netem", "handle": "1:", "root": True,
                                         "packets": packets, "drops": drops, "qlen": 0}]})
    a, b, c = snap(10000, 50), snap(30000, 150), snap(4000, 20)
    d = b.since(a).direction("reverse")
    assert (d.seen, d.released, d.dropped_unattributed) == (20100, 20000, 100)
    assert c.since(b) == c                             # rebuilt: its own totals
    assert b.since(None) == b
    other = EmulStats("userspace", a.directions, instance=7)
    assert b.since(other) == b and other.since(a) == other
