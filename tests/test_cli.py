"""The CLI contract: exit codes, one-line errors, nothing created on bad input."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RIG = [sys.executable, "-m", "rig"]


def rig(*args, cwd=None, timeout=120, env=None):
    return subprocess.run([*RIG, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO, env=env)


def test_invalid_scenario_is_one_line_exit_2_and_creates_nothing(tmp_path):
    from rig.realization import netns
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "scenarios/quick.yaml").read_text().replace("rtt: [0ms", "rtt: [0parsec"))
    before = set(netns.list_namespaces())
    state = tmp_path / "state"          # a run records itself here before it builds anything
    r = rig("run", str(bad), "--out", str(tmp_path / "out"),
            env=dict(os.environ, RIG_STATE_DIR=str(state)))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"rig: {bad}: paths[0].rtt[0]: ") and "(got '0parsec')" in lines[0]
    assert not (tmp_path / "out").exists()
    assert not state.exists() or not any(state.iterdir())
    # other people's runs may come and go on a shared host: only a namespace with a
    # prefix no state file explains could be ours
    states = netns.read_states()
    assert not [n for n in set(netns.list_namespaces()) - before
                if netns.NS_RE.match(n).group(1) not in states]
    assert "Traceback" not in r.stderr


def test_missing_scenario_file():
    r = rig("plan", "/nonexistent.yaml")
    assert r.returncode == 2 and r.stderr.startswith("rig: /nonexistent.yaml: cannot read")


def test_plan_runs_nothing_and_prints_commands():
    r = rig("plan", "scenarios/quick.yaml")
    assert r.returncode == 0, r.stderr
    assert "ip netns add rig0000-0c" in r.stdout and "xrdcp" in r.stdout


def test_report_of_a_folder_without_results_is_bad_input(tmp_path):
    r = rig("report", str(tmp_path))
    assert r.returncode == 2 and "results.sqlite" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_report_out_draws_elsewhere_and_only_reads_the_run(tmp_path):
    """`rig report DIR --out OUT`: the report in OUT, DIR untouched; an OUT that is a
    file or cannot be made is one line, exit 2."""
    from fixtures_results import make_run
    run = tmp_path / "run"
    make_run(run)
    before = sorted(p.name for p in run.iterdir())
    r = rig("report", str(run), "--out", str(tmp_path / "elsewhere"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "elsewhere" / "report.html").is_file()
    assert (tmp_path / "elsewhere" / "summary.csv").is_file()
    assert sorted(p.name for p in run.iterdir()) == before
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, why in ((afile, "is not a folder"), (afile / "sub", "cannot create")):
        r = rig("report", str(run), "--out", str(out))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"rig: {out}: {why}"), r.stderr
    assert afile.read_text() == "x"


def test_net_up_bad_rtt_is_bad_input():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    r = rig("net", "up", "--name", "x", "--rtt", "fast")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def test_version_one_prefix_percent_options_and_no_doubled_percent() -> None:
    """Issue 41 item 4: `rig --version`; a usage error starts with the parser's own name
    once; --floor takes 5% as scenarios do; no literal %% in a description."""
    import subprocess
    import sys

    def rig(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rig", *args], capture_output=True,
                              text=True, timeout=120)
    from rig import __version__
    assert rig("--version").stdout.strip() == f"rig {__version__}"
    r = rig()
    assert r.returncode == 2 and r.stderr.startswith("rig: the following") and \
        "rig: rig:" not in r.stderr
    r = rig("compare", "nope-a", "nope-b", "--floor", "5%")
    assert r.returncode == 2 and "--floor" not in r.stderr and "nope-a" in r.stderr
    r = rig("compare", "nope-a", "nope-b", "--floor", "5x")
    assert r.returncode == 2 and r.stderr.startswith("rig: compare: argument --floor")
    for cmd in ("compare", "history", "net"):
        assert "%%" not in rig(cmd, "--help").stdout
    from rig.cli import _share
    assert _share("5%") == 0.05 and _share("0.05") == 0.05


def test_run_refuses_an_out_folder_that_holds_a_run(tmp_path) -> None:
    """Two runs into one --out folder read back as one (the same run id): a killed run's
    fault rows landed on the next run's points. Refused in one line, nothing started."""
    import subprocess
    import sys
    (tmp_path / "results.sqlite").write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "rig", "run", "scenarios/quick.yaml", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 2 and "--out" in r.stderr and "already holds a run" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and sorted(p.name for p in tmp_path.iterdir()) \
        == ["results.sqlite"]
