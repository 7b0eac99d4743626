"""The engine's queueing semantics on both data paths (issue 42 item 3): the Python core
(rig.realization.emul.engine.core) and the native engine's (tools/rig-emul-engine, driven
through its `--simulate` mode: the same core code the packet path runs, fed made-up
arrival times on stdin). Each test runs on both; the native runs are skipped where the
binary is not built. Pure: no root, no sockets, no wall clock. Tolerances are statistical
(several sigma), the seeds fixed.
"""
from __future__ import annotations

import dataclasses
import json
import random
import subprocess

import pytest

from rig.description.linkstats import LATENESS_LABELS, DirStats, rtt_tolerance_s
from rig.description.profile import Direction, GilbertElliott
from rig.realization.emul.engine import native
from rig.realization.emul.engine.core import (DROP_LOSS, DROP_QUEUE, HOLD, HOLD_DUP,
                                              DirectionQueue)

NS = 1_000_000_000


class NativeQueue:
    """DirectionQueue's interface over `rig-emul-engine --simulate` (one direction)."""

    def __init__(self, d: Direction, *, limit: int, seed: int = 1) -> None:
        exe = native.path()
        assert exe is not None
        self.p = subprocess.Popen([exe, "--simulate", "--seed", str(seed)], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.configure(d, limit=limit)

    def _ask(self, line: str) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        ans = self.p.stdout.readline()
        assert ans.endswith("\n") and not ans.startswith("error"), (line, ans)
        return ans[:-1]

    def close(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()
        self.p.wait(timeout=10)

    def configure(self, d: Direction, *, limit: int) -> None:
        fwd = dataclasses.asdict(dataclasses.replace(d, queue_pkts=limit))
        prof = {"forward": fwd, "reverse": dataclasses.asdict(Direction())}
        assert self._ask("profile " + json.dumps(prof)) == "ok"

    def arrive(self, pkt_id: int, now: float) -> int:
        return int(self._ask(f"arrive 0 {pkt_id} {round(now * NS)}"))

    def codes(self, n: int, t0: float, dt: float) -> list[int]:
        return [int(c) for c in self._ask(f"codes 0 {n} {round(t0 * NS)} {round(dt * NS)}")]

    def release(self, upto: float, *, now: float | None = None) -> tuple[list[int], list[int]]:
        sent = upto if now is None else now
        out = self._ask(f"release 0 {round(upto * NS)} {round(sent * NS)}").split()
        return [int(x.rstrip("*")) for x in out], [int(x[:-1]) for x in out if x.endswith("*")]

    def next_deadline(self) -> float | None:
        a = self._ask("next 0")
        return None if a == "none" else int(a) / NS

    def report(self) -> DirStats:
        return DirStats.from_json(json.loads(self._ask("stats"))[0])

    @property
    def held(self) -> int:
        return int(self.report().held or 0)

    @property
    def reorder(self) -> bool:
        return bool(self.report().extra["reorder"])


class PythonQueue(DirectionQueue):
    """The Python core with the adapter's extra calls (the tolerance as server.Lane sets it)."""

    def configure(self, d: Direction, *, limit: int) -> None:
        super().configure(d, limit=limit)
        self.stats.tol_s = rtt_tolerance_s(d.delay_s)

    def codes(self, n: int, t0: float, dt: float) -> list[int]:
        base = getattr(self, "_next_id", 1_000_000)
        self._next_id = base + n
        return [self.arrive(base + i, t0 + i * dt) for i in range(n)]

    def report(self) -> DirStats:
        return self.stats.report("forward", self.held)

    def close(self) -> None:
        pass


@pytest.fixture(params=["python", "native"])
def make(request):
    made: list = []

    def q(**kw):
        limit = kw.pop("limit", 10_000)
        if request.param == "native":
            if native.path() is None:
                pytest.skip(f"{native.NAME} is not built (make helpers)")
            dq = NativeQueue(Direction(**kw), limit=limit)
        else:
            dq = PythonQueue(Direction(**kw), limit=limit, rng=random.Random(1))
        made.append(dq)
        return dq
    yield q
    for dq in made:
        dq.close()


def test_fixed_delay_releases_exactly_when_due(make):
    dq = make(delay_s=0.020)
    assert dq.arrive(1, 10.000) == HOLD
    assert dq.arrive(2, 10.001) == HOLD
    assert dq.next_deadline() == pytest.approx(10.020)
    assert dq.release(10.0199) == ([], [])
    assert dq.release(10.020) == ([1], [])
    assert dq.release(10.0215) == ([2], [])
    assert dq.held == 0
    r = dq.report()
    assert r.released == 2 and r.applied_delay_mean_s == pytest.approx(0.020)


def test_nothing_leaves_before_its_deadline_and_lateness_is_binned(make):
    dq = make(delay_s=0.010)
    for i in range(5):
        dq.arrive(i, 1.0 + i * 1e-5)
    assert dq.release(1.010 + 25e-6)[0] == [0, 1, 2]   # 3, 4 not due yet
    assert dq.release(1.0113)[0] == [3, 4]             # 1.27 / 1.26 ms late
    late = dq.report().lateness
    hist = dict(zip(LATENESS_LABELS, late.hist))
    assert hist["0..50us"] == 3 and hist["1..2ms"] == 2
    assert late.share_early() == 0.0 and late.count == 5
    assert late.min_s == pytest.approx(5e-6, abs=1e-8)
    assert late.max_s == pytest.approx(0.00127, abs=1e-8)
    # counted against the tolerance of the profile's RTT (0.3 ms here)
    assert late.over_tol == 2


def test_order_preserving_jitter_never_reorders_and_reports_ratchet(make):
    dq = make(delay_s=0.010, jitter_s=0.005)
    dq.codes(2000, 0.0, 1e-5)                      # one packet every 10 us: dense
    out: list[int] = []
    t = 0.0
    while dq.held:
        t += 1e-3
        out += dq.release(t)[0]
    assert out == sorted(out) and len(out) == 2000
    assert 0.0125 < dq.report().applied_delay_mean_s <= 0.0151   # towards delay + jitter


def test_reorder_releases_in_deadline_order_not_arrival_order(make):
    dq = make(delay_s=0.010, jitter_s=0.009, reorder=True)
    for i in range(200):
        dq.arrive(i, i * 1e-4)
    assert dq.reorder
    ids, _ = dq.release(1.0)
    assert sorted(ids) == list(range(200)) and ids != list(range(200))


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_jitter_keeps_the_mean_delay(make, dist):
    dq = make(delay_s=0.050, jitter_s=0.005, jitter_dist=dist, reorder=True, limit=100_000)
    dq.codes(20_000, 0.0, 0.0)
    assert dq.report().applied_delay_mean_s == pytest.approx(0.050, abs=2e-4)
    if dist == "uniform":                          # none outside delay +- jitter
        assert dq.release(0.045 - 1e-6)[0] == []
        dq.release(0.055)
        assert dq.held == 0


def test_random_loss_rate(make):
    dq = make(delay_s=0.001, loss=0.05, limit=100_000)
    codes = dq.codes(40_000, 0.0, 0.0)
    lost = codes.count(DROP_LOSS)
    assert abs(lost / 40_000 - 0.05) <= 5 * (0.05 * 0.95 / 40_000) ** 0.5
    r = dq.report()
    assert r.dropped_loss == lost and r.seen == 40_000 and dq.held == 40_000 - lost


def test_gilbert_elliott_mean_loss_and_bursts(make):
    ge = GilbertElliott(p=0.01, r=0.2, loss_bad=0.8, loss_good=0.001)
    dq = make(delay_s=0.001, gemodel=ge, limit=300_000)
    lost = [c == DROP_LOSS for c in dq.codes(200_000, 0.0, 0.0)]
    rate = sum(lost) / len(lost)
    assert rate == pytest.approx(ge.mean_loss(), rel=0.15)
    after = [b for a, b in zip(lost, lost[1:]) if a]
    assert sum(after) / len(after) > 5 * rate       # bursty, unlike random loss


def test_queue_limit_drops_and_recovers(make):
    dq = make(delay_s=0.010, limit=3)
    assert [dq.arrive(i, 0.0) for i in range(5)] == [HOLD, HOLD, HOLD, DROP_QUEUE, DROP_QUEUE]
    assert dq.report().dropped_queue == 2
    assert dq.release(0.010)[0] == [0, 1, 2]
    assert dq.arrive(5, 0.011) == HOLD


def test_duplicate_marks_packets(make):
    dq = make(delay_s=0.001, duplicate=0.25)
    codes = dq.codes(8000, 0.0, 0.0)
    ids, dups = dq.release(1.0)
    assert len(dups) == codes.count(HOLD_DUP) and set(dups) <= set(ids)
    assert abs(len(dups) / 8000 - 0.25) <= 5 * (0.25 * 0.75 / 8000) ** 0.5
    assert dq.report().duplicated == len(dups)


def test_reconfigure_keeps_held_packets_and_switches_discipline(make):
    dq = make(delay_s=0.050)
    dq.arrive(1, 0.0)
    dq.configure(Direction(delay_s=0.010, jitter_s=0.005, reorder=True), limit=100)
    assert dq.reorder and dq.held == 1
    dq.arrive(2, 0.0)
    assert dq.release(0.016)[0] == [2]               # the new profile for new packets
    assert dq.release(0.050)[0] == [1]               # the old one kept its release time
    dq.configure(Direction(delay_s=0.0), limit=100)
    assert not dq.reorder
    assert dq.arrive(3, 1.0) == HOLD and dq.release(1.0)[0] == [3]


def test_a_bad_simulate_command_is_an_error_not_a_crash() -> None:
    exe = native.path()
    if exe is None:
        pytest.skip(f"{native.NAME} is not built")
    r = subprocess.run([exe, "--simulate"], input='bogus\nprofile {"forward": 1}\narrive 0 1 0\n',
                       capture_output=True, text=True, timeout=10)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0].startswith("error unknown command")
    assert lines[1].startswith("error profile") and lines[2] == "0"


def test_which_engine_runs_and_why(monkeypatch) -> None:
    """The native engine when asked (RIG_ENGINE=native) and built; the Python engine by
    default (opt-in for now, even when built), when not built, on a remote router host or
    when forced; a forced native engine that is not built (or remote) is refused."""
    monkeypatch.delenv("RIG_ENGINE", raising=False)
    monkeypatch.setattr(native, "path", lambda: "/x/rig-emul-engine")
    exe, why = native.choose()
    assert exe is None and why.startswith("python (auto; the native rig-emul-engine is built")
    assert native.choose("native") == ("/x/rig-emul-engine", "native (forced: RIG_ENGINE=native)")
    monkeypatch.setenv("RIG_ENGINE", "native")
    assert native.choose()[0] == "/x/rig-emul-engine"
    monkeypatch.delenv("RIG_ENGINE")
    assert native.choose("python")[0] is None
    exe, why = native.choose(remote=True)
    assert exe is None and "remote router host" in why
    with pytest.raises(native.EngineChoiceError, match="remote router host"):
        native.choose("native", remote=True)
    monkeypatch.setenv("RIG_ENGINE", "python")
    assert native.choose() == (None, "python (forced: RIG_ENGINE=python)")
    monkeypatch.setenv("RIG_ENGINE", "fast")
    with pytest.raises(native.EngineChoiceError, match="want one of auto, native, python"):
        native.choose()
    monkeypatch.delenv("RIG_ENGINE")
    monkeypatch.setattr(native, "path", lambda: None)
    exe, why = native.choose()
    assert exe is None and "not built" in why and "make install" in why
    with pytest.raises(native.EngineChoiceError, match="not built"):
        native.choose("native")
