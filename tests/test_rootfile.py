"""Pure tier: real ROOT files written with uproot, their basket layout, and the read plans
of the three CMSSW caching modes. No network, no root; small files in a tmp dir."""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest
import uproot

from rig.errors import InputError
from rig.description.rootfile import generate, layout, plan, select

MiB = 1 << 20
SPEC = generate.FileSpec(size_bytes=8 * MiB, n_branches=50, cluster_bytes=1 * MiB, seed=7)


def sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("rootcache")
    t0 = time.monotonic()
    path = generate.ensure(SPEC, d)
    return path, time.monotonic() - t0


@pytest.fixture(scope="module")
def lay(small):
    return layout.load(small[0])


def test_generation_gives_a_size_close_to_the_target(small):
    path, took = small       # how long: bench/pure_speed.py (a speed goal is no test)
    print(f"generating 8 MiB took {took:.2f} s")
    assert abs(path.stat().st_size - SPEC.size_bytes) < 0.05 * SPEC.size_bytes


def test_same_parameters_and_seed_give_the_same_bytes(tmp_path, small):
    a, b = tmp_path / "a.root", tmp_path / "b.root"
    generate.write(SPEC, a)
    generate.write(SPEC, b)
    assert sha(a) == sha(b) == sha(small[0])
    other = tmp_path / "c.root"
    generate.write(generate.FileSpec(size_bytes=8 * MiB, n_branches=50, cluster_bytes=1 * MiB,
                                     seed=8), other)
    assert sha(other) != sha(a)


def test_cache_is_reused_and_the_manifest_describes_the_file(small):
    import json
    path, _ = small
    before = path.stat().st_mtime_ns
    again = generate.ensure(SPEC, path.parent)
    assert again == path and path.stat().st_mtime_ns == before    # not written again
    m = json.loads((path.parent / f"{SPEC.key()}.json").read_text())
    assert m["sha256"] == sha(path) and m["size_bytes"] == path.stat().st_size
    assert m["spec"]["seed"] == 7 and m["uproot"] == uproot.__version__
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


def test_uproot_reads_a_real_tree_with_interleaved_baskets(small, lay):
    entries, per = SPEC.layout_numbers()
    with uproot.open(small[0]) as f:
        t = f["Events"]
        assert t.num_entries == entries and len(t.branches) == 50
        assert int(t.member("fAutoFlush")) == per
        first = t["br0003"].array(entry_stop=2, library="np")
        assert first.shape == (2, SPEC.branch_sizes()[3])
    assert lay.cluster_source == "fAutoFlush"
    assert len(lay.clusters) == -(-entries // per) and len(lay.clusters) >= 8
    # one basket per branch per cluster, and cluster k's baskets all lie between
    # cluster k-1's and cluster k+1's: interleaved through the file as ROOT writes them
    spans = []
    for a, z in lay.clusters:
        bs = [b for br in lay.branches for b in br.baskets if b.entry_start == a]
        assert len(bs) == 50 and all(b.entry_stop == z for b in bs)
        spans.append((min(b.seek for b in bs), max(b.seek + b.nbytes for b in bs)))
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))


def test_branch_sizes_are_spread_like_a_cms_events_tree():
    s = sorted(generate.FileSpec().branch_sizes())
    assert len(s) == 300 and abs(sum(s) - 40 * 1024) <= 300
    assert s[-1] > 50 * s[len(s) // 2]          # a few big collections, many small ones


def test_storage_is_one_read_per_selected_basket(lay):
    sel = select.by_percent(lay, 30, seed=1)
    p = plan.make(lay, sel, "storage")
    baskets = [b for br in lay.branches if br.name in sel for b in br.baskets]
    assert p.round_trips == p.requests == len(lay.open_reads) + len(baskets)
    assert p.bytes_wire == p.bytes_useful == sum(b.nbytes for b in baskets) + sum(
        n for _, n in lay.open_reads)
    starts = [r.requests[0].ranges[0][0] for r in p.rounds if r.phase == "basket"]
    by_seek = {b.seek: b for b in baskets}
    assert [by_seek[s].entry_start for s in starts] == sorted(b.entry_start for b in baskets)


def test_application_round_trips_are_the_cache_fills(lay):
    sel = select.by_percent(lay, 30, seed=1)
    p = plan.make(lay, sel, "application", plan.Options(learn_entries=0, fill="cluster"))
    fills = [r for r in p.rounds if r.phase == "fill"]
    assert p.round_trips == len(lay.open_reads) + len(fills)
    assert set(p.vectored_reads_per_cluster()) == set(range(len(lay.clusters)))
    # every selected basket lies inside what the fills fetched
    got = [rg for r in fills for q in r.requests for rg in q.ranges]
    for br in lay.branches:
        if br.name in sel:
            for b in br.baskets:
                assert any(o <= b.seek and b.seek + b.nbytes <= o + n for o, n in got)
    assert p.bytes_wire >= p.bytes_useful
    for r in fills:
        for q in r.requests:
            assert len(q.ranges) <= plan.XRD_MAX_PIECES
            assert all(n <= plan.XRD_MAX_PIECE for _, n in q.ranges) or q.kind == "read"


def test_a_small_cache_splits_each_cluster_into_several_fills(lay):
    sel = tuple(b.name for b in lay.branches)
    cache = 256 * 1024
    for fill, limit in (("cluster", cache), ("root", 2 * cache)):
        p = plan.make(lay, sel, "application",
                      plan.Options(cache_size=cache, learn_entries=0, fill=fill))
        per_cluster = p.vectored_reads_per_cluster()
        for ci, (a, _z) in enumerate(lay.clusters):
            need = sum(b.nbytes for br in lay.branches for b in br.baskets
                       if b.entry_start == a and b.nbytes <= cache)
            assert per_cluster[ci] >= -(-need // limit)
        big = [b for br in lay.branches for b in br.baskets if b.nbytes > cache]
        assert big and len([r for r in p.rounds if r.phase == "basket"]) == len(big)
        for r in p.rounds:
            if r.phase == "fill":
                assert r.useful_bytes <= limit


def test_root_fills_span_several_clusters_when_the_cache_allows(lay):
    # TTreeCache::FillBuffer keeps adding clusters while the average says one more fits:
    # 30 % of an 8 MiB file fits a 20 MiB cache, so one ReadBuffers covers every cluster
    sel = select.by_percent(lay, 30, seed=1)
    p = plan.make(lay, sel, "application", plan.Options(learn_entries=0))
    fills = [r for r in p.rounds if r.phase == "fill"]
    assert set(p.vectored_reads_per_cluster()) == {0}
    assert sum(r.useful_bytes for r in fills) == p.bytes_useful - sum(n for _, n in lay.open_reads)
    one = plan.make(lay, sel, "application", plan.Options(learn_entries=0, fill="cluster"))
    assert len(fills) < len([r for r in one.rounds if r.phase == "fill"])


def test_cmssw_learning_reads_every_branch_of_the_first_entries(lay):
    # RootTree::startTraining: a raw TTreeCache over all branches for the learning entries
    sel = select.by_percent(lay, 5, seed=1)
    p = plan.make(lay, sel, "application")           # learning="cmssw", 20 entries
    learn = [r for r in p.rounds if r.phase == "learn"]
    first = sum(b.nbytes for br in lay.branches for b in br.baskets if b.entry_start == 0)
    assert learn and all(q.kind == "readv" for r in learn for q in r.requests)
    assert first <= sum(r.wire_bytes for r in learn) <= first + 64 * 1024   # + merged gaps
    used_first = sum(b.nbytes for br in lay.branches if br.name in sel
                     for b in br.baskets if b.entry_start == 0)
    assert sum(r.useful_bytes for r in learn) == used_first < 0.2 * first
    root = plan.make(lay, sel, "application", plan.Options(learning="root"))
    assert root.bytes_wire < p.bytes_wire - 0.5 * first


def test_learning_reads_each_basket_of_the_first_entries_alone(lay):
    sel = select.by_percent(lay, 100)
    p = plan.make(lay, sel, "application", plan.Options(learn_entries=1, learning="root"))
    learn = [r for r in p.rounds if r.phase == "learn"]
    assert len(learn) == 50 and all(len(r.requests) == 1 for r in learn)
    assert 0 not in p.vectored_reads_per_cluster()   # cluster 0 was read while learning


def test_lazy_download_fetches_whole_touched_segments_once(lay):
    seg = 1 * MiB
    sel = select.by_percent(lay, 1, strategy="smallest_first")
    p = plan.make(lay, sel, "lazy-download",
                  plan.Options(segment_size=seg, read_chunk=256 * 1024, read_window=2))
    touched = set()
    for o, n in list(lay.open_reads) + [(b.seek, b.nbytes) for br in lay.branches
                                        if br.name in sel for b in br.baskets]:
        touched |= set(range(o // seg, (o + n - 1) // seg + 1))
    expect = sum(min(seg, lay.file_bytes - s * seg) for s in touched)
    assert p.bytes_wire == expect and len(p.rounds) == len(touched)
    starts = [r.requests[0].ranges[0][0] for r in p.rounds]
    assert len(set(starts)) == len(starts)
    full = [r for r in p.rounds if r.wire_bytes == seg]
    assert full and all(len(r.requests) == 4 and r.round_trips == 2 for r in full)
    assert p.bytes_useful < p.bytes_wire


def test_all_branches_touch_every_basket(lay):
    allb = {(b.seek, b.nbytes) for br in lay.branches for b in br.baskets}
    sel = select.by_percent(lay, 100, strategy="round_robin", seed=3)
    assert set(sel) == {b.name for b in lay.branches}
    st = plan.make(lay, sel, "storage")
    assert {q.ranges[0] for r in st.rounds if r.phase == "basket" for q in r.requests} == allb
    lz = plan.make(lay, sel, "lazy-download", plan.Options(segment_size=MiB))
    assert lz.bytes_wire == lay.file_bytes


def test_selection_follows_ioexerciser_and_is_reproducible(lay):
    size = {b.name: b.total_bytes for b in lay.branches}
    total = sum(size.values())
    s1 = select.by_percent(lay, 20, "smallest_first", seed=5)
    assert s1 == select.by_percent(lay, 20, "smallest_first", seed=5)
    got = sum(size[n] for n in s1)
    assert got >= 0.2 * total and got - size[s1[-1]] < 0.2 * total     # overshoots by one
    assert [size[n] for n in s1] == sorted(size[n] for n in s1)
    big = select.by_percent(lay, 20, "largest_first")
    assert size[big[0]] == max(size.values()) and len(big) < len(s1)
    rr = select.by_percent(lay, 50, "round_robin")
    assert size[rr[0]] == min(size.values()) and size[rr[1]] == max(size.values())
    assert select.by_names(lay, ["br0002", "br0001"]) == ("br0002", "br0001")


def test_user_file_is_read_only_and_any_tree_name_works(tmp_path):
    p = tmp_path / "nano.root"
    with uproot.recreate(p) as f:
        f.mktree("Runs", {"run": np.int32}).extend({"run": np.arange(3, dtype=np.int32)})
        f.mktree("Events", {"nMuon": np.int32, "Muon_pt": np.float32})
        for _ in range(3):
            f["Events"].extend({"nMuon": np.arange(1000, dtype=np.int32),
                                "Muon_pt": np.ones(1000, dtype=np.float32)})
    before = (sha(p), p.stat().st_mtime_ns)
    lay = layout.load(p)
    assert lay.tree == "Events" and lay.entries == 3000 and lay.cluster_source == "baskets"
    assert lay.clusters == ((0, 1000), (1000, 2000), (2000, 3000))
    assert layout.load(p, tree="Runs").entries == 3
    assert (sha(p), p.stat().st_mtime_ns) == before


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and text
    return text


def test_invalid_inputs_are_one_line_errors(tmp_path, lay):
    with pytest.raises(InputError) as e:
        select.by_percent(lay, 150)
    assert "(got 150)" in one_line(e) and "read.percent" in str(e.value)
    with pytest.raises(InputError) as e:
        select.by_percent(lay, 0)
    one_line(e)
    with pytest.raises(InputError) as e:
        select.by_percent(lay, 10, strategy="middle_first")
    one_line(e)
    with pytest.raises(InputError) as e:
        plan.make(lay, ("br0001",), "bogus")
    assert "plan.mode" in one_line(e)
    with pytest.raises(InputError) as e:
        select.by_names(lay, ["nope"])
    one_line(e)
    with pytest.raises(InputError) as e:
        layout.load(tmp_path / "missing.root")
    assert "missing.root: no such file" in one_line(e)
    txt = tmp_path / "notroot.root"
    txt.write_text("hello, not a ROOT file\n")
    with pytest.raises(InputError) as e:
        layout.load(txt)
    assert "not a ROOT file" in one_line(e)
    bad = tmp_path / "truncated.root"
    bad.write_bytes(b"root" + b"\0" * 60)
    with pytest.raises(InputError) as e:
        layout.load(bad)
    one_line(e)
    notree = tmp_path / "hist.root"
    with uproot.recreate(notree) as f:
        f["h"] = np.histogram(np.arange(10), bins=5)
    with pytest.raises(InputError) as e:
        layout.load(notree)
    assert "no TTree" in one_line(e)
    with pytest.raises(InputError) as e:
        generate.FileSpec(n_branches=0)
    one_line(e)
    with pytest.raises(InputError) as e:
        plan.Options(cache_size=0)
    one_line(e)


def test_repacker_merges_small_gaps_and_xrd_splits_vectors():
    KiB = 1024
    # two reads 1 KiB apart merge (the gap is read and thrown away); a 64 KiB gap does not
    packs = plan._repack([(0, 10 * KiB), (11 * KiB, 10 * KiB), (85 * KiB, 10 * KiB)])
    assert packs == [[(0, 21 * KiB), (85 * KiB, 10 * KiB)]]
    # two big reads are never merged, whatever the gap
    packs = plan._repack([(0, 300 * KiB), (300 * KiB + 1, 300 * KiB)])
    assert [len(p) for p in packs] == [2]
    # 3000 separate 4 KiB ranges: 3 sub-readvs of <= 1022 pieces, one round
    iov = [(i * 100 * KiB, 4 * KiB) for i in range(3000)]
    reqs = plan._readv_requests(iov, plan.Options())
    assert [len(r.ranges) for r in reqs] == [1022, 1022, 956]
    # one 2 MiB range in a vector becomes 4 pieces of 512 KiB
    reqs = plan._readv_requests([(0, 2 * MiB), (3 * MiB, 1)], plan.Options())
    assert reqs[0].ranges[:4] == tuple((i * 512 * KiB, 512 * KiB) for i in range(4))


def test_summary_states_the_totals(lay):
    p = plan.make(lay, select.by_percent(lay, 30), "application")
    s = p.summary()
    assert f"requests {p.requests}," in s and f"round trips {p.round_trips}," in s
    assert f"bytes useful {p.bytes_useful} " in s and f"wire {p.bytes_wire} " in s
    reads = sum(1 for r in p.rounds if r.fill >= 0)
    assert reads >= 1 and f"{reads} storage vectored reads: {reads / len(lay.clusters):.2f} per cluster" in s


@pytest.mark.parametrize("opts", [
    {}, {"learning": "root"}, {"fill": "cluster"}, {"cache_size": 200 * 1024},
    {"cache_size": 200 * 1024, "fill": "cluster", "learning": "root", "learn_entries": 30},
])
@pytest.mark.parametrize("percent", [1, 30, 100])
def test_every_selected_basket_is_fetched_and_counted_once(lay, opts, percent):
    # a basket can cross the wire twice only inside a merged gap (ReadRepacker over-reads
    # and throws the gap away); it is requested, and counted as useful, once
    sel = select.by_percent(lay, percent, strategy="round_robin", seed=2)
    p = plan.make(lay, sel, "application", plan.Options(**opts))
    got = [rg for r in p.rounds for q in r.requests for rg in q.ranges]
    wanted = [(b.seek, b.nbytes) for br in lay.branches if br.name in sel for b in br.baskets]
    for s, n in wanted:
        hits = [1 for o, m in got if o <= s and s + n <= o + m]
        pieces = sum(min(o + m, s + n) - max(o, s) for o, m in got if o < s + n and s < o + m)
        assert hits or pieces >= n, (s, n, len(hits), pieces)
    assert p.bytes_useful == sum(n for _, n in wanted) + sum(n for _, n in lay.open_reads)
    assert p.bytes_useful <= p.bytes_wire < 2 * p.bytes_useful + lay.file_bytes * (percent < 100)


def test_rig_plan_prints_a_read_plan_summary(small, lay):
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(small[0]), "--mode", "storage",
                        "--percent", "30", "--seed", "1"],
                       capture_output=True, text=True, timeout=60, cwd=repo)
    assert r.returncode == 0, r.stderr
    p = plan.make(lay, select.by_percent(lay, 30, seed=1), "storage")
    assert r.stdout.strip() == p.summary()
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(small[0]), "--percent", "150"],
                       capture_output=True, text=True, timeout=60, cwd=repo)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("rig: --percent: ") and "(got '150')" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rig", "plan", "/nonexistent/x.root"],
                       capture_output=True, text=True, timeout=60, cwd=repo)
    assert r.returncode == 2 and r.stderr.strip() == "rig: /nonexistent/x.root: no such file"


def test_rootfile_is_description_layer():
    # pure: never imports what starts processes or touches the network
    import ast
    from pathlib import Path
    pkg = Path(__file__).resolve().parent.parent / "rig" / "rootfile"
    forbidden = {"proc", "netns", "services", "orchestrate", "transfer", "emul", "tuning",
                 "subprocess", "socket", "matplotlib", "results", "report"}
    for f in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            for n in names:
                assert not set(n.split(".")) & forbidden, f"{f.name} imports {n}"


@pytest.mark.parametrize("mode", ["application", "storage", "lazy-download"])
def test_trigger_factor_reads_every_branch_of_every_nth_event(lay, mode):
    # IOExerciser's triggerFactor N: entries 0, N, 2N ... read every branch; 0 = off
    sel = select.by_percent(lay, 1)
    off = plan.make(lay, sel, mode)
    assert plan.make(lay, sel, mode, trigger_factor=0) == off
    one = plan.make(lay, sel, mode, trigger_factor=1)
    full = plan.make(lay, tuple(b.name for b in lay.branches), mode)
    assert one.bytes_useful == full.bytes_useful > off.bytes_useful
    n = 7
    trig = plan.triggered(lay, sel, n)
    want = [b for br in lay.branches if br.name not in sel for b in br.baskets
            if any(e % n == 0 for e in range(b.entry_start, b.entry_stop))]
    assert sorted(trig, key=lambda b: b.seek) == sorted(want, key=lambda b: b.seek) and want
    some = plan.make(lay, sel, mode, trigger_factor=n)
    assert some.bytes_useful == off.bytes_useful + sum(b.nbytes for b in want)
    if mode != "lazy-download":
        got = [rg for r in some.rounds for q in r.requests for rg in q.ranges]
        for b in want:     # whole, or in pieces of a split vector read
            s, n = b.seek, b.nbytes
            assert sum(min(o + m, s + n) - max(o, s) for o, m in got
                       if o < s + n and s < o + m) >= n, b
    if mode == "application":
        # the trained cache holds the selected branches; the triggered baskets are
        # extra vector reads, one (or more) per cluster that has any
        assert some.round_trips > off.round_trips
        assert {r.phase for r in some.rounds} >= {"fill", "trigger"}


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_trigger_factor_must_be_a_whole_number(lay, bad):
    with pytest.raises(InputError) as e:
        plan.make(lay, select.by_percent(lay, 1), "storage", trigger_factor=bad)
    assert "plan.trigger_factor" in one_line(e)
