"""`rig compare` (and `rig history`) on simulated runs whose truth is known, built from the
rows of a real run.

tests/data/compare/lfn-real/results.sqlite is a real `rig run scenarios/lfn-regression.yaml`
(bench/strip_run.py removed its tcp_samples; its environment table says where and when it
ran). The simulations take its 16 xrdcp points (RTT 0/20/60/120 ms x 1/2/4/8 streams):
each simulated run keeps their levels (geometric mean of the real repeats) and draws
every repeat with 10 % lognormal noise (sigma of log throughput 0.10). Every comparison
goes through rig.report.compare.decide(), the code `rig compare` runs; pure, seeded.
"""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from rig.report.compare import FAILED, REGRESSION, Draft, decide
from rig.report.model import Point, key_order, load_run

DATA = Path(__file__).parent / "data" / "compare" / "lfn-real"
COMPARISONS = 400
SIGMA = 0.10


def real_points() -> list[Point]:
    """The 16 xrdcp points (streams 1, 2, 4, 8) of the real run, in key order."""
    run = load_run(DATA)
    pts = [p for p in run.points if p.key.client == "xrdcp" and p.key.streams in (1, 2, 4, 8)]
    return sorted(pts, key=lambda p: key_order(p.key))


def _levels() -> list[float]:
    out = []
    for p in real_points():
        assert p.samples_bps, f"{DATA}: a point without a successful repeat: {p.key}"
        out.append(math.exp(sum(math.log(v) for v in p.samples_bps) / len(p.samples_bps)))
    return out


def _samples(rng: random.Random, level: float, n: int, sigma: float) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def _simulate(seed: int, repeats: int, factors: list[float], sigma: float = SIGMA
              ) -> tuple[float, list[float]]:
    """(share of comparisons with any regression, share of comparisons in which each
    point was called regressed)."""
    rng = random.Random(seed)
    levels = _levels()
    assert len(levels) == len(factors)
    failing, per_point = 0, [0] * len(levels)
    for _ in range(COMPARISONS):
        drafts = [Draft(_samples(rng, lv, repeats, sigma), _samples(rng, lv * f, repeats,
                                                                    sigma))
                  for lv, f in zip(levels, factors)]
        statuses = [d.status for d in decide(drafts)]
        failing += any(s in (REGRESSION, FAILED) for s in statuses)
        for i, s in enumerate(statuses):
            per_point[i] += s == REGRESSION
    return failing / COMPARISONS, [n / COMPARISONS for n in per_point]


def test_the_real_run_has_sixteen_points() -> None:
    assert len(_levels()) == 16 and min(_levels()) > 1e6


@pytest.mark.parametrize("sigma", [0.05, SIGMA, 0.15])
def test_a_against_a_rarely_fails_at_three_repeats(sigma: float) -> None:
    false_alarms, _ = _simulate(12, 3, [1.0] * 16, sigma)
    assert false_alarms <= 0.05, (f"noise {sigma:.0%}, 3 repeats, 16 points: "
                                  f"{false_alarms:.1%} of {COMPARISONS} comparisons exit 1")


def test_a_fifteen_percent_drop_everywhere_is_found() -> None:
    """Every point 15 % slower, 5 repeats: the comparison exits 1 in >= 90 %."""
    caught, per_point = _simulate(20, 5, [0.85] * 16)
    assert caught >= 0.90, (f"15 % drop at every point, 5 repeats: exit 1 in {caught:.1%} "
                            f"(per point: {min(per_point):.0%}-{max(per_point):.0%})")


def test_a_thirty_percent_drop_at_one_point_of_sixteen_is_found() -> None:
    """One point (the first at 60 ms) 30 % slower, 5 repeats: called regressed in >= 80 %,
    and the other 15 points stay clear."""
    at = next(i for i, p in enumerate(real_points()) if p.key.rtt_ms == 60.0)
    factors = [0.7 if i == at else 1.0 for i in range(16)]
    _, per_point = _simulate(21, 5, factors)
    assert per_point[at] >= 0.80, f"the dropped point was found in {per_point[at]:.1%}"
    false_calls = sum(per_point) - per_point[at]      # per comparison, over 15 points
    assert false_calls <= 0.05, per_point


def _derived_run(dst: Path, seed: int, rate_factor: float = 1.0) -> Path:
    """A copy of the real run's results.sqlite with 5 % lognormal noise on every repeat;
    rate_factor < 1: the path rate lowered, so every point's throughput becomes
    min(measured, rate_factor x the path's best measured goodput) -- rate-bound points
    drop, window-bound ones do not -- and the configured rate says so."""
    import shutil
    import sqlite3
    dst.mkdir(parents=True)
    shutil.copyfile(DATA / "results.sqlite", dst / "results.sqlite")
    rng = random.Random(seed)
    con = sqlite3.connect(dst / "results.sqlite")
    best = con.execute("SELECT max(aggregate_bps) FROM transfers WHERE ok = 1").fetchone()[0]
    cap = rate_factor * best
    rows = con.execute("SELECT rowid, aggregate_bps, throughput_bps, concurrency FROM "
                       "transfers WHERE ok = 1").fetchall()
    for rowid, agg, thr, conc in rows:
        noisy = min(agg, cap) * math.exp(rng.gauss(0.0, 0.05))
        con.execute("UPDATE transfers SET aggregate_bps = ?, throughput_bps = ? "
                    "WHERE rowid = ?", (noisy, noisy / conc, rowid))
    if rate_factor != 1.0:
        for table in ("transfers", "validations"):
            con.execute(f"UPDATE {table} SET rate_bps_configured = rate_bps_configured * ?"
                        " WHERE rate_bps_configured IS NOT NULL", (rate_factor,))
    con.commit()
    con.close()
    return dst


def test_history_finds_the_run_on_a_slower_path(tmp_path: Path) -> None:
    """Real-derived: five stored runs from the real run's rows, the fifth on a path 20 %
    slower; `rig history` names run 5 as the change point of the rate-bound points only,
    and exits 1."""
    import subprocess
    import sys
    dirs = [_derived_run(tmp_path / f"night{i}", seed=i, rate_factor=0.8 if i == 4 else 1.0)
            for i in range(5)]
    done = subprocess.run([sys.executable, "-m", "rig", "history", *map(str, dirs),
                           "--out", str(tmp_path / "h")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "at run 5 (night4)" in done.stdout, done.stdout
    from rig.report.history import history
    r = history(dirs, tmp_path / "h2")
    best = max(max(p.samples_bps) for p in load_run(DATA).points if p.samples_bps)
    for s in r.series:
        level = math.exp(sum(math.log(v) for v in s.samples[0]) / len(s.samples[0]))
        if level < 0.7 * best:                     # window-bound: well below the new rate
            assert not s.changes, (s.key.label(), s.changes)
        for c in s.changes:
            assert c.at == 4 and c.change < -0.05, (s.key.label(), c)
    assert any(s.changes for s in r.series)


def test_history_a_against_a_and_power() -> None:
    """Change points over 5 runs x 3 repeats of the real run's 16 levels, 10 % noise:
    no change in >= 95 % of 200 histories; a 20 % drop of every point at run 5 found
    there in >= 90 % of 100."""
    from rig.report.changepoint import detect
    rng = random.Random(5)
    levels = _levels()
    quiet = sum(bool(detect([[_samples(rng, lv, 3, SIGMA) for _ in range(5)]
                             for lv in levels], seed=i)) for i in range(200))
    assert quiet / 200 <= 0.05, f"{quiet} of 200 histories without a change had one"
    found = 0
    for i in range(100):
        hist = [[_samples(rng, lv * (0.8 if r == 4 else 1.0), 3, SIGMA) for r in range(5)]
                for lv in levels]
        found += any(sp.at == 4 for sp in detect(hist, seed=i))
    assert found >= 90, f"the drop at run 5 was found in {found} of 100 histories"
