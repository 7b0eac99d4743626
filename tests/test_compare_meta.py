"""`rig compare` says when a comparison is meaningless: metadata differences named first,
--strict turns environment differences into exit 2 (one line each, nothing written)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.errors import InputError
from rig.report.compare import compare
from rig.report.compare_meta import scenario_hash

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], capture_output=True,
                          text=True, timeout=120)


def _drifted(tmp_path: Path) -> tuple[Path, Path]:
    base = make_run(tmp_path / "a", seed=1, env={"hostname": "node1", "cpus": 2})
    cand = make_run(tmp_path / "b", seed=2, env={
        "hostname": "node2", "cpus": 2, "kernel": "6.12.0",
        "tools": {"xrdcp": "v5.8.0", "davix-get": "0.8.4", "curl": "7.88.1",
                  "iperf3": "3.12"},
        "backends": {"wan": "netem"}})
    return base, cand


def test_every_checked_field_is_named(tmp_path: Path) -> None:
    base, cand = _drifted(tmp_path)
    r = compare(base, cand, tmp_path / "out")
    names = {d.name: d for d in r.metadata}
    assert set(names) == {"kernel", "host.hostname", "tools.xrdcp", "backend.wan"}
    assert names["kernel"].line() == "kernel: 6.1.0-synthetic -> 6.12.0"
    assert names["backend.wan"].line() == "backend.wan: userspace -> netem"
    assert not any(d.by_scenario for d in r.metadata)
    md = (tmp_path / "out" / "compare.md").read_text()
    assert md.index("metadata differs: kernel") < md.index("no regression")


def test_scenario_and_tuning_changes_are_named_as_set_by_the_scenario(tmp_path: Path
                                                                       ) -> None:
    base = make_run(tmp_path / "a", seed=1, window_bytes=4 * 2**20)
    cand = make_run(tmp_path / "b", seed=2, window_bytes=2 * 2**20,
                    env={"scenario_text": "name: smaller-window\n"})
    r = compare(base, cand, tmp_path / "out", strict=True)     # intended: no exit 2
    lines = [d.line() for d in r.metadata]
    assert "tuning.tcp_rmem_max: 4194304 -> 2097152 (set by the scenario)" in lines
    assert any(x.startswith("scenario: ") and x.endswith("(set by the scenario)")
               for x in lines)
    assert scenario_hash({"scenario_text": "x"}) != scenario_hash({"scenario_text": "y"})


def test_strict_refuses_environment_drift_one_line_each_nothing_written(tmp_path: Path
                                                                        ) -> None:
    base, cand = _drifted(tmp_path)
    with pytest.raises(InputError) as e:
        compare(base, cand, tmp_path / "out", strict=True)
    assert len(str(e.value).splitlines()) == 4
    assert not (tmp_path / "out").exists()
    # expected differences pass; a prefix covers a family
    r = compare(base, cand, tmp_path / "out", strict=True,
                expect=("kernel", "host", "tools", "backend"))
    assert r.exit_code == 0
    done = _cli("compare", str(base), str(cand), "--out", str(tmp_path / "o2"), "--strict",
                "--expect", "kernel", "--expect", "tools.xrdcp")
    assert done.returncode == 2, done.stdout
    err = done.stderr.splitlines()
    assert len(err) == 2 and all(x.startswith(f"rig: {cand}: --strict: ") for x in err)
    assert "host.hostname differs from the baseline: node1 -> node2" in done.stderr
    assert not (tmp_path / "o2").exists()
    loose = _cli("compare", str(base), str(cand), "--out", str(tmp_path / "o3"))
    assert loose.returncode == 0
    assert loose.stdout.splitlines()[0] == "metadata differs: kernel: 6.1.0-synthetic -> 6.12.0"
    assert loose.stdout.splitlines()[-1].startswith("no regression")


def test_floor_above_margin_is_one_line_exit_2(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    done = _cli("compare", str(base), str(base), "--floor", "0.1", "--margin", "0.05",
                "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "must not exceed" in done.stderr
    assert not (tmp_path / "o").exists()


def test_pair_compares_two_clients_of_one_run(tmp_path: Path) -> None:
    """Two releases measured in one run: --pair xrdcp=curl matches xrdcp's points with
    curl's; the points where curl is slower are named, the rest are same."""
    from fixtures_results import DEFAULT_CLIENTS
    run = make_run(tmp_path / "r", seed=1, repeats=4,
                   factor=lambda c, rtt, s, n: 0.7 if c == "curl" and rtt >= 60 else 1.0)
    assert {c.name for c in DEFAULT_CLIENTS} >= {"xrdcp", "curl"}
    r = compare(run, run, tmp_path / "out", pair=("xrdcp", "curl"))
    assert {p.key.client for p in r.pairs} == {"xrdcp vs curl"}
    assert {(p.key.rtt_ms, p.status) for p in r.pairs} == {
        (0.0, "same"), (20.0, "same"), (60.0, "regressed"), (120.0, "regressed")}
    with pytest.raises(InputError, match="no client configuration 'nope'"):
        compare(run, run, tmp_path / "o2", pair=("xrdcp", "nope"))
    done = _cli("compare", str(run), str(run), "--pair", "xrdcp", "--out", str(tmp_path / "o3"))
    assert done.returncode == 2 and "expected BASE_CLIENT=CAND_CLIENT" in done.stderr
