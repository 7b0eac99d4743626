"""`rig compare` on synthetic runs where the answer is known."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.report import compare as compare_mod
from rig.report.compare import Draft, decide, compare
from rig.errors import InputError
from rig.results.store import Store


def _drop(client: str, rtts: set[float], factor: float):
    return lambda c, rtt, s, n: factor if c == client and rtt in rtts else 1.0


def _flagged(result) -> set[tuple[str, float]]:
    return {(p.key.client, p.key.rtt_ms) for p in result.regressions}


@pytest.mark.slow
def test_twenty_percent_drop_with_small_noise_is_flagged(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1, noise=0.01)
    cand = make_run(tmp_path / "b", seed=2, noise=0.01,
                    factor=_drop("xrdcp-S4", {60.0, 120.0}, 0.8))
    r = compare(base, cand, tmp_path / "out")
    assert r.exit_code == 1
    assert _flagged(r) == {("xrdcp-S4", 60.0), ("xrdcp-S4", 120.0)}
    p = next(p for p in r.regressions if p.key.rtt_ms == 60.0)
    assert p.change == pytest.approx(-0.2, abs=0.03)
    assert p.high is not None and p.high < 0
    assert "REGRESSION: 2 of 16" in (tmp_path / "out" / "compare.md").read_text()


@pytest.mark.slow
def test_five_percent_drop_inside_the_noise_is_not_flagged(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=3, noise=0.06, repeats=4)
    cand = make_run(tmp_path / "b", seed=4, noise=0.06, repeats=4,
                    factor=lambda c, rtt, s, n: 0.95)
    r = compare(base, cand, tmp_path / "out")
    assert r.exit_code == 0 and r.regressions == []
    # even with a threshold below the drop, the noise keeps most points from being called
    strict = compare(base, cand, tmp_path / "out2", threshold=0.03)
    assert len(strict.regressions) < len(strict.pairs) / 2
    assert any(p.status == "undecided" and p.needed for p in strict.pairs)
    assert (strict.undecided_line() or "").startswith(
        f"{len(strict.undecided)} undecided: about ")


def test_large_drop_inside_large_noise_is_not_a_regression(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=5, noise=0.25, repeats=3, rtts=(60,))
    cand = make_run(tmp_path / "b", seed=6, noise=0.25, repeats=3, rtts=(60,),
                    factor=_drop("curl", {60.0}, 0.85))
    r = compare(base, cand, tmp_path / "out")
    curl = next(p for p in r.pairs if p.key.client == "curl")
    assert curl.low is not None and curl.low < 0 < curl.high
    assert not curl.regressed


@pytest.mark.slow
def test_identical_runs_do_not_regress(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    r = compare(base, base, tmp_path / "out")
    assert r.exit_code == 0
    assert {p.status for p in r.pairs} == {"same"}
    assert all(p.change == pytest.approx(0.0) for p in r.pairs)


@pytest.mark.slow
def test_improvement_is_reported_and_exit_zero(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, factor=_drop("curl", {20.0}, 1.3))
    r = compare(base, cand, tmp_path / "out")
    assert r.exit_code == 0
    assert [p.key.client for p in r.pairs if p.status == "improved"] == ["curl"]


@pytest.mark.slow
def test_failed_candidate_is_a_regression(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, failing=[("davix-get", 60.0)])
    r = compare(base, cand, tmp_path / "out")
    assert _flagged(r) == {("davix-get", 60.0)}
    assert r.regressions[0].status == "failed"


@pytest.mark.slow
def test_single_repeat_is_undecided_and_exits_zero(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1, repeats=1)
    cand = make_run(tmp_path / "b", seed=2, repeats=1, factor=_drop("curl", {60.0}, 0.7))
    r = compare(base, cand, tmp_path / "out")
    assert r.exit_code == 0 and r.regressions == []
    assert len(r.undecided) == 16          # one repeat: the noise is unknown everywhere
    curl = next(p for p in r.undecided if (p.key.client, p.key.rtt_ms) == ("curl", 60.0))
    assert curl.low is None and curl.change == pytest.approx(-0.3, abs=0.03)
    assert r.summary().startswith("UNDECIDED (exit 0): no regression shown, but none of 16")
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "fewer than 3 successful repeats" in md
    # what it takes (issue 41 item 2): said under the summary, as `rig compare` prints it
    assert r.undecided_line() == ("16 undecided: one repeat gives no spread to judge by: at "
                                  "least 3 successful repeats a side (sweep.repeats: 3) before "
                                  "anything can be decided")
    assert f"**{r.summary()}**\n\n{r.undecided_line()}\n" in md


@pytest.mark.slow
def test_failed_candidate_with_one_repeat_is_still_a_regression(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1, repeats=1)
    cand = make_run(tmp_path / "b", seed=2, repeats=1, failing=[("curl", 20.0)])
    r = compare(base, cand, tmp_path / "out")
    assert r.exit_code == 1 and [p.status for p in r.regressions] == ["failed"]


@pytest.mark.slow
def test_smaller_window_flags_exactly_the_window_limited_points(tmp_path: Path) -> None:
    """The issue's acceptance case: a real change (window size) between two runs."""
    base = make_run(tmp_path / "a", seed=1, window_bytes=4 * 2**20)
    cand = make_run(tmp_path / "b", seed=2, window_bytes=2 * 2**20)
    r = compare(base, cand, tmp_path / "out")
    # at 0 ms the path limits both runs; at >= 20 ms 1-stream clients halve; xrdcp-S4
    # at 20 ms goes from the 5 Gbit/s path to 4 x 2 MiB / 20 ms = 3.3 Gbit/s
    expected = {(c, rtt) for c in ("xrdcp", "xrdcp-S4", "davix-get", "curl")
                for rtt in (20.0, 60.0, 120.0)}
    assert _flagged(r) == expected
    assert any("window_bytes: 4194304 -> 2097152" in d for d in r.env_diffs)
    assert any(d.startswith("tuning.tcp_rmem_max") for d in r.env_diffs)


@pytest.mark.slow
def test_environment_differences_are_listed(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a")
    cand = make_run(tmp_path / "b", env={"kernel": "6.12.0", "backend": "netem",
                                        "scenario_text": "name: other\n"})
    r = compare(base, cand, tmp_path / "out")
    assert "kernel: 6.1.0-synthetic -> 6.12.0" in r.env_diffs
    assert "backend: userspace -> netem" in r.env_diffs
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "+name: other" in md and "scenario text differs" in md


@pytest.mark.slow
def test_outputs_written(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, factor=_drop("curl", {60.0}, 0.7))
    r = compare(base, cand)                     # default: CANDIDATE/compare
    names = {f.name for f in r.files}
    assert {"compare.md", "compare.html", "compare.csv", "compare_change.png",
            "compare_change.svg", "compare_throughput.png"} <= names
    assert all(f.parent == cand / "compare" for f in r.files)
    with open(cand / "compare" / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16
    assert [r["client"] for r in rows if r["status"] == "regressed"] == ["curl"]


@pytest.mark.slow
def test_unmatched_measurements_are_listed(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", rtts=(0, 20, 60))
    cand = make_run(tmp_path / "b", rtts=(20, 60, 120))
    r = compare(base, cand, tmp_path / "out")
    assert len(r.pairs) == 8
    assert {k.rtt_ms for k in r.only_baseline} == {0.0}
    assert {k.rtt_ms for k in r.only_candidate} == {120.0}


def test_unusable_input_raises_input_error(tmp_path: Path) -> None:
    good = make_run(tmp_path / "a")
    with pytest.raises(InputError):
        compare(tmp_path / "missing", good, tmp_path / "o")
    with pytest.raises(InputError):
        compare(good, tmp_path, tmp_path / "o")                # no results.sqlite
    Store.create(tmp_path / "empty" / "results.sqlite", "empty").close()
    with pytest.raises(InputError):
        compare(good, tmp_path / "empty", tmp_path / "o")      # no transfers
    other = make_run(tmp_path / "c", rtts=(5,))
    with pytest.raises(InputError, match="no measurement in common"):
        compare(good, other, tmp_path / "o")
    with pytest.raises(InputError):
        compare(good, good, tmp_path / "o", threshold=1.5)
    assert InputError("x").exit_status == 2


def test_decide_statuses_and_holm_family() -> None:
    """Few points (< 3 tested): Welch's t per point, no shared noise prior."""
    drop = Draft([100, 101, 99, 100], [80, 81, 79, 80])
    up = Draft([100, 101, 99], [130, 131, 129])
    d = decide([drop, up, Draft([100], [70]), Draft([100], [95]),
                Draft([100, 100, 100], [], 0, 3), Draft([100], [], 2, 3),
                Draft([], [100], 3, 0)], 0.05, 0.05)
    assert [x.status for x in d] == ["regressed", "improved", "undecided", "undecided",
                                     "failed", "undecided", "no-baseline"]
    assert d[0].change == pytest.approx(-0.2, abs=1e-3)
    assert d[0].low < -0.2 < d[0].high < 0
    assert d[0].p_holm == pytest.approx(min(1.0, 2 * d[0].p))   # 2 tested pairs
    assert d[2].p is None and d[2].low is None and "fewer than 3" in d[2].why
    # the same drop, alone, is significant; among 400 points with 6 % noise it is not:
    # its own tight spread is shrunk toward the grid's, and Holm needs p <= 0.05 / 400
    import math
    import random
    rng = random.Random(3)
    noisy = [Draft([100 * math.exp(rng.gauss(0, 0.06)) for _ in range(3)],
                   [100 * math.exp(rng.gauss(0, 0.06)) for _ in range(3)])
             for _ in range(399)]
    lone = decide([Draft([100, 102, 98], [90, 91, 89])])[0]
    crowd = decide([Draft([100, 102, 98], [90, 91, 89])] + noisy)[0]
    assert lone.status == "regressed" and lone.p < 0.05
    assert crowd.status == "undecided" and crowd.p_holm > 0.05 and crowd.needed


def test_verdicts_on_a_grid_same_undecided_floor_and_needed() -> None:
    """A grid of 12 points with 2 % noise: tight points are 'same', a 0.5 % change with
    tight noise is not a regression (magnitude floor), a wide point is undecided and
    says how many repeats would decide it."""
    import math
    import random
    rng = random.Random(7)

    def pts(level, n=5, sigma=0.02):
        return [level * math.exp(rng.gauss(0, sigma)) for _ in range(n)]
    drafts = [Draft(pts(1e9), pts(1e9)) for _ in range(9)]
    drafts.append(Draft(pts(1e9, sigma=0.3), pts(0.93e9, sigma=0.3)))    # wide
    drafts.append(Draft(pts(1e9), pts(0.8e9)))                             # -20 %
    d = decide(drafts, 0.05, 0.05)
    assert [x.status for x in d[:9]].count("same") >= 8
    assert d[9].status == "undecided" and d[9].needed and d[9].needed > 5
    assert "repeats a side would decide it" in compare_mod.needed_text(d[9].needed,
                                                                      d[9].status, d[9].why)
    assert d[10].status == "regressed" and d[10].high < -0.1
    # 0.5 % drop on a grid with 0.1 % noise: significant after Holm, under the floor: same
    tight = [Draft(pts(1e9, sigma=0.001), pts(1e9, sigma=0.001)) for _ in range(9)]
    tight.append(Draft(pts(1e9, sigma=0.001), pts(0.995e9, sigma=0.001)))
    t = decide(tight, 0.05, 0.05)[9]
    assert t.status == "same" and t.p_holm < 0.05 and t.change == pytest.approx(-0.005, abs=0.002)
    # a larger margin makes more points 'same'; floor above margin is refused
    with pytest.raises(InputError, match="must not exceed"):
        compare_mod.check_bounds(0.1, 0.05)


def test_repeats_needed_shrinks_with_effect_and_grows_with_noise() -> None:
    from rig.report.compare_decide import repeats_needed
    n1 = repeats_needed(-0.10, 0.10, floor=0.05, margin=0.05, tests=16)
    n2 = repeats_needed(-0.20, 0.10, floor=0.05, margin=0.05, tests=16)
    n3 = repeats_needed(-0.10, 0.20, floor=0.05, margin=0.05, tests=16)
    assert n1 is not None and n2 is not None and n3 is not None
    assert n2 < n1 < n3
    assert repeats_needed(0.0, 0.02, floor=0.05, margin=0.05, tests=16) == 3
    assert repeats_needed(-0.05, 0.02, floor=0.06, margin=0.05, tests=1) is None


def test_compare_works_without_matplotlib(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, factor=_drop("curl", {60.0}, 0.7))
    script = ("import sys; sys.modules['matplotlib'] = None\n"
              "from rig.report.compare import compare\n"
              f"r = compare({str(base)!r}, {str(cand)!r}, {str(tmp_path / 'o')!r})\n"
              "print(r.exit_code, sorted(f.name for f in r.files))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1 ") and ".png" not in done.stdout
    assert "matplotlib is not available" in (tmp_path / "o" / "compare.md").read_text()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_cli_prints_the_summary_line_and_exit_code(tmp_path: Path) -> None:
    """Issue #12: stdout was `<bound method CompareResult.summary ...>`."""
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, factor=_drop("curl", {60.0}, 0.7))
    done = _cli("compare", str(base), str(cand), "--out", str(tmp_path / "o"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "REGRESSION: 1 of 16 matched measurements dropped by 5% or more beyond the noise "
        "(0 improved, 15 same, 0 undecided)"], done.stdout
    same = _cli("compare", str(base), str(base), "--out", str(tmp_path / "o2"))
    assert same.returncode == 0 and same.stdout.startswith("no regression: 16 matched")
    helptext = _cli("compare", "--help").stdout
    assert "Holm" in helptext and "undecided" in helptext and "exit status: 0" in helptext


def test_out_pointing_at_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    done = _cli("compare", str(base), str(base), "--out", str(blocker))
    assert done.returncode == 2
    assert done.stderr == f"rig: {blocker}: --out: output folder is a file\n"
    assert sorted(p.name for p in base.iterdir()) == ["results.sqlite"]


@pytest.mark.slow
def test_every_candidate_repeat_failed_rule(tmp_path: Path) -> None:
    """All candidate repeats failed: a regression when most baseline repeats worked,
    undecided when the baseline itself failed as often as it worked."""
    base = make_run(tmp_path / "a", seed=1, repeats=3)
    cand = make_run(tmp_path / "b", seed=2, repeats=3, failing=[("curl", 60.0)])
    r = compare(base, cand, tmp_path / "o")
    assert [(p.key.client, p.status) for p in r.regressions] == [("curl", "failed")]
    d = decide([Draft([1e9], [], 2, 3), Draft([1e9, 1e9], [], 1, 1)], 0.1)
    assert [x.status for x in d] == ["undecided", "failed"]


def _with_samples(d: Path, cwnd_segs: int) -> Path:
    """tcp_samples for every transfer of a synthetic run: 2 s at 100 ms, cwnd fixed."""
    import sqlite3
    from rig.results.store import TcpSampleRow
    st = Store(sqlite3.connect(str(d / "results.sqlite"), isolation_level=None),
               d / "results.sqlite")
    for (tid,) in st.conn.execute("SELECT rowid FROM transfers").fetchall():
        st.add_tcp_samples([TcpSampleRow(
            transfer_id=tid, conn=0, t_s=i / 10, cwnd_segs=cwnd_segs, mss_bytes=1448,
            srtt_us=20000, bytes_acked=i * cwnd_segs * 14480, busy_us=i * 100000)
            for i in range(1, 21)])
    st.conn.close()
    return d


@pytest.mark.slow
def test_regressed_points_get_timeline_overlays(tmp_path: Path) -> None:
    base = _with_samples(make_run(tmp_path / "a", seed=1), 400)
    cand = _with_samples(make_run(tmp_path / "b", seed=2,
                                  factor=_drop("curl", {60.0, 120.0}, 0.7)), 200)
    r = compare(base, cand, tmp_path / "out")
    shots = sorted(f.name for f in r.files if f.name.startswith("compare_timeline_")
                   and f.suffix == ".png")
    assert shots == ["compare_timeline_1.png", "compare_timeline_2.png"]
    html = (tmp_path / "out" / "compare.html").read_text()
    assert 'href="compare_timeline_1.svg"' in html and 'href="compare_timeline_2.svg"' in html
    assert html.count("<figcaption>Timelines of a regressed point") == 2
    assert "<h2>Timelines of the regressed points</h2>" in html
    # without samples in one run: no chart, a note naming the points
    plain = make_run(tmp_path / "c", seed=3, factor=_drop("curl", {60.0}, 0.7))
    r2 = compare(base, plain, tmp_path / "out2")
    assert not [f for f in r2.files if f.name.startswith("compare_timeline_")]
    assert any("no timeline overlay" in n and "curl" in n for n in r2.notes)
