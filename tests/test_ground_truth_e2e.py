"""Ground truth end to end (issue 38, bench/ground_truth.py): two of its cases through
the real rig, each of four identical transfers; the verdicts must name the cause the case
made, for most of them (a loaded 2-core VM may spoil one). The whole matrix is the bench's
(docs/ground-truth.md)."""
from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("ground_truth",
                                                  REPO / "bench/ground_truth.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ground_truth"] = mod       # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["window", "path-not-claimed"])
def test_the_verdict_names_the_cause_made_on_purpose(name, tmp_path, require_tools):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    require_tools("xrootd", "xrdcp")
    gt = _bench()
    case = next(c for c in gt.CASES if c.name == name)
    rec = gt.run_case(case, tmp_path / "run")
    kinds = Counter(p["kind"] for p in rec["points"])
    print(name, rec["rc"], dict(kinds), rec["inject"])
    assert rec["rc"] == 0 and sum(kinds.values()) == 4, rec["tail"]
    assert sum(kinds[k] for k in case.want) >= 3, [p["text"] for p in rec["points"]]
    if case.rig_fault:      # the rig's own fault is never called a physical bound
        assert not any(k in gt.PHYSICAL for k in kinds), dict(kinds)
