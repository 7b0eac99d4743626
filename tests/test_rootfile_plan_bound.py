"""A scenario's read plans of a user's ROOT file: the stated bound on their work (issue 43).

The bound: `rig plan` of a scenario reads each ROOT file's layout once, whatever the
number of replay clients and branch fractions that ask for its read plan (each ask
is then pure arithmetic on the layout), and that read checks one TKey per basket
(plus the tree's, the streamer info's and the directory's). The probe's file of
3,000 small baskets in caching-modes.yaml (17 read plans) took 15 s when every ask
read the file again. Counted here, not timed; a generous hang guard (HANG_S) stops a
plan that runs away and names it.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rig.description import scenario
from rig.description.rootfile import check, generate, layout
from rig.orchestration import plan
from rig.realization import netns

from hangguard import hang_guard

pytestmark = pytest.mark.slow     # a ROOT file is written: seconds

REPO = Path(__file__).resolve().parent.parent
BRANCHES, CLUSTERS = 30, 10       # 300 small baskets (a cluster of 64 KiB: one entry each)
HANG_S = 120.0                    # idle: ~1 s for this file (the layout read)
KEYS_BESIDES_BASKETS = 16         # the tree's, the streamer info's, directories'


@pytest.fixture(scope="module")
def small_baskets(tmp_path_factory) -> Path:
    spec = generate.FileSpec(size_bytes=CLUSTERS * generate.FileSpec.event_bytes,
                             n_branches=BRANCHES, cluster_bytes=64 << 10, seed=3)
    p = tmp_path_factory.mktemp("rootbound") / "baskets.root"
    generate.write(spec, p)
    return p


def _scenario(path: Path) -> scenario.Scenario:
    """caching-modes.yaml reading the user's file: 8 replay clients x 4 branch
    fractions, 17 read plans (the 100 % clients once)."""
    doc = yaml.safe_load((REPO / "scenarios/caching-modes.yaml").read_text())
    doc["files"] = [{"name": "aod", "kind": "root", "path": str(path)}]
    return scenario.parse(doc, source="bound.yaml")


def test_a_scenarios_read_plans_read_the_file_once_one_key_per_basket(
        small_baskets, monkeypatch, tmp_path):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path / "state")
    layout._cached.cache_clear()
    reads, keys, plans = [], [0], []
    real_read, real_key = layout._read, check.RootFile.key

    def read(p, tree):
        reads.append(p)
        return real_read(p, tree)

    def key(self, at, what):
        keys[0] += 1
        return real_key(self, at, what)
    from rig.services.tools import replay
    real_plan_for = replay.plan_for

    def plan_for(c, file_path, seed=0):
        plans.append(c.name)
        return real_plan_for(c, file_path, seed)
    monkeypatch.setattr(layout, "_read", read)
    monkeypatch.setattr(check.RootFile, "key", key)
    monkeypatch.setattr(replay, "plan_for", plan_for)
    sc = _scenario(small_baskets)
    with hang_guard(HANG_S, f"rig plan of caching-modes.yaml on {small_baskets.name}"):
        lines = plan.plan_lines(sc)
    baskets = BRANCHES * CLUSTERS
    assert sum(len(b.baskets) for b in layout.load(small_baskets).branches) == baskets
    assert len(plans) >= 8, plans            # every replay client asked for its plan ...
    assert reads == [small_baskets], reads   # ... and the file was read once
    assert baskets <= keys[0] <= baskets + KEYS_BESIDES_BASKETS, keys[0]
    assert any("read plan" in ln or "replay" in ln for ln in lines)


def test_a_changed_file_is_read_again(small_baskets, tmp_path):
    """The layout is kept per version of the file: a file rewritten in place (another
    size or mtime) is read anew, never answered from the old one."""
    p = tmp_path / "f.root"
    p.write_bytes(small_baskets.read_bytes())
    first = layout.load(p)
    spec = generate.FileSpec(size_bytes=2 * CLUSTERS * generate.FileSpec.event_bytes,
                             n_branches=BRANCHES, cluster_bytes=64 << 10, seed=3)
    generate.write(spec, p)
    second = layout.load(p)
    assert second.entries == 2 * first.entries
