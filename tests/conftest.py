"""Shared fixtures: tiers are marked `netns` (root, builds namespaces) and `e2e` (root,
real servers and clients). Tests that build anything assert afterwards that none of
their namespaces, mounts or processes remain."""
from __future__ import annotations

import os
import shutil

import pytest

ROOT = os.geteuid() == 0


# Pure tests that take seconds each (a browser, chart drawing, fuzzing, real loopback
# copies): marked `slow` here, in one place, so `make test-fast` stays under 30 s.
SLOW_FILES = {"test_fdt_security.py", "test_fdt_loopback.py", "test_results_fuzz.py",
              "test_report_html_browser.py", "test_bad_input.py", "test_fdt_fuzz.py",
              "test_compare_sim.py", "test_closed_stdout.py", "test_history.py",
              "test_compare_meta.py"}
# one `rig`/`rig-fdt` subprocess per case (special files, damaged ROOT files, fd budget)
SLOW_FILES |= {"test_special_paths.py", "test_rootfile_damage.py", "test_fdt_fdbudget.py"}
SLOW_TESTS = {  # each draws every chart of a run or a comparison (> 1 s here)
    "test_cli_prints_the_summary_line_and_exit_code", "test_render_writes_charts_tables_and_html",
    "test_summary_numbers_come_from_the_database", "test_report_html_is_self_contained",
    "test_validation_csv_lists_every_check", "test_every_candidate_repeat_failed_rule",
    "test_outputs_written", "test_streams_sweep_draws_streams_chart",
    "test_five_percent_drop_inside_the_noise_is_not_flagged",
    "test_twenty_percent_drop_with_small_noise_is_flagged",
    "test_caltech_table_has_a_row_per_client_and_a_column_per_rtt",
    "test_render_into_other_dir_leaves_run_dir_alone", "test_single_repeat_is_undecided_and_exits_zero",
    "test_unmatched_measurements_are_listed", "test_failed_candidate_with_one_repeat_is_still_a_regression",
    "test_verdict_unexplained_and_failed", "test_environment_differences_are_listed",
    "test_improvement_is_reported_and_exit_zero",
    "test_smaller_window_flags_exactly_the_window_limited_points",
    "test_engine_table_in_report_reads_typed_and_old_rows", "test_identical_runs_do_not_regress",
    "test_failed_candidate_is_a_regression",
    "test_no_scenario_mutation_reaches_an_assert"}  # ~24k scenario cases, ~25 s


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: network namespaces, tc, iptables")
    for it in items:
        if not ROOT and ("netns" in it.keywords or "e2e" in it.keywords):
            it.add_marker(skip)
        if it.path.name in SLOW_FILES or it.originalname in SLOW_TESTS:
            it.add_marker(pytest.mark.slow)


@pytest.fixture
def run_rig():
    """`rig run SCENARIO --out OUT` as a user runs it, in a subprocess with a deadline;
    asserts it exited 0 (its stderr's tail otherwise) and returns the run's Store."""
    import subprocess
    import sys

    def run(scenario, out, *, timeout: float = 900):
        r = subprocess.run([sys.executable, "-m", "rig", "run", str(scenario), "--out",
                            str(out)], capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, r.stderr[-3000:]
        from rig.results.store import Store
        return Store.open(out)
    return run


@pytest.fixture
def require_tools():
    def need(*names: str) -> None:
        missing = [n for n in names if shutil.which(n) is None]
        assert not missing, f"missing tools (make install): {missing}"
    return need


def rig_namespaces_with(prefix: str) -> list[str]:
    from rig.realization import netns
    return [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
