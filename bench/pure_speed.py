"""Speed of pure paths that used to carry time limits inside their tests (issues 25, 43:
speed goals live here, not in tests): generating the 8 MiB test ROOT file and finding it
cached again (tests/test_rootfile.py), `rig plan` over every bad-input mutation of
tests/test_bad_input.py (each case a `rig plan` in-process, as the test runs it), and the
structured walk of tests/test_scenario_walk.py (every distinct mutated scenario through
scenario.parse and plan.plan_lines, as the test runs it).
Usage: flock /tmp/rig-bench.lock .venv/bin/python bench/pure_speed.py [rootfile] [bad_input]
       [walk]     (none: all three)
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rig.description.rootfile import generate  # noqa: E402
from test_bad_input import _run_plan, mutations  # noqa: E402
from test_rootfile import SPEC  # noqa: E402
import test_scenario_walk as walk_test  # noqa: E402


def rootfile(repeats: int = 3) -> None:
    made, found = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            generate.ensure(SPEC, Path(d))
            made.append(time.monotonic() - t0)
            t0 = time.monotonic()
            generate.ensure(SPEC, Path(d))
            found.append(time.monotonic() - t0)
    print(f"rootfile 8 MiB: generated in median {statistics.median(made):.2f} s "
          f"({', '.join(f'{x:.2f}' for x in made)}); found cached in median "
          f"{statistics.median(found) * 1e3:.0f} ms ({repeats} repeats)")


def bad_input() -> None:
    cases = mutations()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        worst = 0.0
        for label, data in cases:
            p = Path(d) / f"{label}.yaml"
            p.write_bytes(data)
            t = time.monotonic()
            _run_plan(str(p))
            worst = max(worst, time.monotonic() - t)
            p.unlink()
        took = time.monotonic() - t0
    print(f"bad input: {len(cases)} mutations through `rig plan` in {took:.1f} s "
          f"(slowest case {worst:.2f} s)")


def walk() -> None:
    """The walk as the test runs it: distinct documents, shipped sections parsed once,
    equal scenarios planned once."""
    import os
    from rig.realization import netns
    with tempfile.TemporaryDirectory() as d:
        netns.STATE_DIR = Path(d) / "state"
        os.chdir(d)
        t0 = time.monotonic()
        docs = walk_test._docs()
        cases = list(walk_test.unique_cases(docs=docs))
        made = time.monotonic() - t0
        with walk_test.reusing_parsed_parts(docs):
            n, failures = walk_test.walk(iter(cases))
        took = time.monotonic() - t0
    print(f"scenario walk: {len(cases)} distinct cases (made in {made:.1f} s), {n['plan']} "
          f"planned, {n['refused']} refused, {len(failures)} failure(s), in {took:.1f} s "
          "all told")


if __name__ == "__main__":
    which = sys.argv[1:] or ["rootfile", "bad_input", "walk"]
    for name in which:
        {"rootfile": rootfile, "bad_input": bad_input, "walk": walk}[name]()
