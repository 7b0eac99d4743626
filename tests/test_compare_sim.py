"""`rig compare` (and `rig history`) on simulated runs whose truth is known, built from the
rows of a real run.

tests/data/compare/real-run/results.sqlite holds 16 points of a real `rig run` (cut by
bench/strip_run.py, which also removed its tcp_samples; its environment table says which
scenario, where and when; tests/data/compare/README.md how it was cut). Each simulated
run keeps their levels (geometric mean of the real repeats) and draws
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

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

DATA = Path(__file__).parent / "data" / "compare" / "real-run"
COMPARISONS = 400
SIGMA = 0.10


def real_points() -> list[Point]:
    """The 16 points of the real run, in key order."""
    return sorted(load_run(DATA).points, key=lambda p: key_order(p.key))


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
    """One point of 16 (the 11th) 30 % slower, 5 repeats: called regressed in >= 80 %,
    and the other 15 points stay clear."""
    at = 10
    factors = [0.7 if i == at else 1.0 for i in range(16)]
    _, per_point = _simulate(21, 5, factors)
    assert per_point[at] >= 0.80, f"the dropped point was found in {per_point[at]:.1%}"
    false_calls = sum(per_point) - per_point[at]      # per comparison, over 15 points
    assert false_calls <= 0.05, per_point


def _derived_run(dst: Path, seed: int, slowdown: float = 1.0, repeats: int = 3) -> Path:
    """A copy of the real run's results.sqlite whose every transfer row is repeated
    `repeats` times with 5 % lognormal noise on its throughput, times `slowdown`."""
    import shutil
    import sqlite3
    dst.mkdir(parents=True)
    shutil.copyfile(DATA / "results.sqlite", dst / "results.sqlite")
    rng = random.Random(seed)
    con = sqlite3.connect(dst / "results.sqlite")
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("SELECT * FROM transfers")]
    con.execute("DELETE FROM transfers")
    for row in rows:
        for rep in range(repeats):
            new = dict(row, repeat=rep)
            if row["ok"]:
                f = slowdown * math.exp(rng.gauss(0.0, 0.05))
                for col in ("aggregate_bps", "throughput_bps"):
                    if row[col] is not None:
                        new[col] = row[col] * f
                if row["duration_s"]:
                    new["duration_s"] = row["duration_s"] / f
            cols = ", ".join(new)
            con.execute(f"INSERT INTO transfers ({cols}) VALUES "
                        f"({', '.join('?' * len(new))})", list(new.values()))
    con.commit()
    con.close()
    return dst


def test_history_finds_the_slower_run(tmp_path: Path) -> None:
    """Real-derived: five stored runs from the real run's rows (3 repeats each, 5 %
    noise), the fifth 20 % slower at every point; `rig history` names run 5 as the
    change point and exits 1. (The real run's path had no rate limit, so the slowdown
    is applied to the rows; tests/test_history.py lowers a path rate on synthetic rows.)"""
    import subprocess
    import sys
    dirs = [_derived_run(tmp_path / f"night{i}", seed=i, slowdown=0.8 if i == 4 else 1.0)
            for i in range(5)]
    done = subprocess.run([sys.executable, "-m", "rig", "history", *map(str, dirs),
                           "--out", str(tmp_path / "h")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "at run 5 (night4)" in done.stdout, done.stdout
    from rig.report.history import history
    r = history(dirs, tmp_path / "h2")
    assert [sp.at for sp in r.splits] == [4]
    changed = [s for s in r.series if s.changes]
    assert len(changed) >= 14, [s.key.label() for s in r.series if not s.changes]
    for s in changed:
        assert [c.at for c in s.changes] == [4]
        assert s.changes[0].change == pytest.approx(-0.2, abs=0.08)
    quiet = history(dirs[:4], tmp_path / "h3")
    assert quiet.exit_code == 0


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
