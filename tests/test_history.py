"""`rig history`: change points over a series of stored runs (synthetic runs whose
answer is known; the real-derived case is in test_compare_sim.py)."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.errors import InputError
from rig.report.history import history

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], capture_output=True,
                          text=True, timeout=180)


def _series(tmp_path: Path, rates: list[float], noise: float = 0.03) -> list[Path]:
    return [make_run(tmp_path / f"run{i}", seed=10 + i, noise=noise, rate_bps=r,
                     capacity_bps=r) for i, r in enumerate(rates)]


def test_a_lower_path_rate_in_the_last_run_is_the_change_point(tmp_path: Path) -> None:
    """Five runs, the fifth on a 20 % slower path: the rate-bound points (0 ms; 20 ms with
    4 streams) drop at run 5, the window-bound points do not move; exit 1."""
    dirs = _series(tmp_path, [5e9] * 4 + [4e9])
    r = history(dirs, tmp_path / "out")
    assert r.exit_code == 1
    assert [s.at for s in r.splits] == [4]
    changed = {(s.key.client, s.key.rtt_ms) for s in r.series if s.changes}
    assert changed == {(c, 0.0) for c in ("xrdcp", "xrdcp-S4", "davix-get", "curl")} | {
        ("xrdcp-S4", 20.0)}
    for s in r.series:
        for c in s.changes:
            assert c.at == 4 and c.change == pytest.approx(-0.2, abs=0.04)
            assert c.low is not None and c.high is not None and c.low < c.change < c.high < 0
    assert r.summary().startswith("REGRESSION: 5 of 16 points dropped by 5% or more at "
                                  "run 5 (run4)")
    names = {f.name for f in r.files}
    assert {"history.csv", "history.md", "history.html", "history.png",
            "history.svg"} <= names
    with open(tmp_path / "out" / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16 * 5
    assert sum(1 for x in rows if x["change_point"] == "yes") == 5


def test_a_change_in_the_middle_then_back(tmp_path: Path) -> None:
    """Runs 3-4 slower, 5 back: two change points, a drop then a rise."""
    r = history(_series(tmp_path, [5e9, 5e9, 4e9, 4e9, 5e9]), tmp_path / "out")
    assert [s.at for s in r.splits] == [2, 4]
    curl0 = next(s for s in r.series if (s.key.client, s.key.rtt_ms) == ("curl", 0.0))
    assert [(c.at, c.change < 0) for c in curl0.changes] == [(2, True), (4, False)]
    assert r.exit_code == 1
    # a nightly job asks only about the last run: it recovered there
    last = history(_series(tmp_path / "b", [5e9, 5e9, 4e9, 4e9, 5e9]), tmp_path / "o2",
                   last_only=True)
    assert last.exit_code == 0


def test_no_change_exits_zero(tmp_path: Path) -> None:
    r = history(_series(tmp_path, [5e9] * 5, noise=0.05), tmp_path / "out")
    assert r.exit_code == 0 and r.splits == []
    assert r.summary().startswith("no regression: 16 points over 5 runs")


def test_bad_inputs_one_line_exit_2(tmp_path: Path) -> None:
    one = make_run(tmp_path / "one", seed=1)
    done = _cli("history", str(one), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert done.stderr == f"rig: {one}: RUN: a history needs at least 2 runs, got 1\n"
    other = make_run(tmp_path / "other", seed=2, env={"scenario_text": "name: other\n"})
    done = _cli("history", str(one), str(other), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"rig: {other}: scenario 'other' differs from the first")
    done = _cli("history", str(one), str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()
    with pytest.raises(InputError, match="no measurement in every run"):
        history([one, make_run(tmp_path / "c", rtts=(5,))], tmp_path / "o")


def test_cli_exit_codes_and_summary(tmp_path: Path) -> None:
    dirs = _series(tmp_path, [5e9] * 4 + [4e9])
    done = _cli("history", *map(str, dirs), "--out", str(tmp_path / "o"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "REGRESSION: 5 of 16 points dropped by 5% or more at run 5 (run4) (5 runs)"]
    flat = _cli("history", *map(str, dirs[:4]), "--out", str(tmp_path / "o2"))
    assert flat.returncode == 0 and flat.stdout.startswith("no regression")
