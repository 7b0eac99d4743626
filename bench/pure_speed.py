"""Speed of two pure paths that used to carry time limits inside their tests (issue 25:
speed goals live here, not in tests): generating the 8 MiB test ROOT file and finding it
cached again (tests/test_rootfile.py), and `rig plan` over every bad-input mutation of
tests/test_bad_input.py (each case a `rig plan` in-process, as the test runs it).
Usage: flock /tmp/rig-bench.lock .venv/bin/python bench/pure_speed.py
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


if __name__ == "__main__":
    rootfile()
    bad_input()
