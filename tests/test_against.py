"""Reference files (rig.description.reference) and the comparison against a study
(rig.report.against), on fake points: pure, no namespaces."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import reference
from rig.errors import InputError
from rig.report import against as A
from rig.report.model import Key, Point
from rig.results.store import ValidationRow

ROOT = Path(__file__).resolve().parent.parent

REF = """
format: 1
study: toy
title: a toy study
seed: 999_toy.txt
conditions: {link: 10 Gbit/s}
series:
  fast: {label: fast client, select: {client: fast}}
  slow: {label: slow client, select: {client: slow}}
  wget: {label: wget, lacks: a wget client}
tables:
  - id: t1
    experiment: E27
    source: 999_toy.txt table 1
    title: MB/s per client
    unit: MB/s
    precision: whole MB/s
    x: rtt_ms
    at: [0, 10, 100]
    rows:
      fast: [1000, 800, 100]
      slow: [500, 200, 20]
claims:
  - {id: rank, experiment: E27, source: t1, text: fast beats slow, kind: ranking, table: t1, series: [fast, slow]}
  - {id: ratio, experiment: E27, source: t1, text: fast/slow, kind: ratio, table: t1, series: [fast, slow], at: [10]}
  - {id: coll, experiment: E27, source: t1, text: slow halves early, kind: collapse, table: t1, series: [slow]}
  - {id: w, experiment: E5, source: fig, text: wget is slow, kind: ranking, x: rtt_ms, series: [fast, wget]}
  - {id: flat, experiment: E9, source: fig, text: flat, kind: flat, x: rtt_ms, series: [fast], within: 0.2}
"""


def _ref(text: str = REF) -> reference.Reference:
    return reference.from_text(text, "toy.yaml")


SPREAD = (0.98, 1.0, 1.02)     # three repeats, 2 % apart: enough to decide


def _pt(client: str, rtt: float, mbs: float, cpu: float | None = None,
        spread: tuple[float, ...] = SPREAD) -> Point:
    p = Point(Key("wan", rtt, client, 1, 1), "curl",
              samples_bps=[mbs * 8e6 * f for f in spread], base_client=client,
              bytes_ok=10**9)
    if cpu is not None:
        p.cpu_s, p.cpu_ratio = [cpu], [0.97]
    return p


class V:
    def __init__(self, kind: str, detail: str = "") -> None:
        self.kind, self.detail = kind, detail


def test_loads_and_agrees() -> None:
    ref = _ref()
    pts = [_pt("fast", x, v) for x, v in ((0, 900), (10, 700), (100, 90))] + \
          [_pt("slow", x, v) for x, v in ((0, 400), (10, 150), (100, 15))]
    res = A.compare(ref, pts, {})
    by = {o.claim.id: o for o in res.outcomes}
    assert by["rank"].verdict == A.AGREES
    assert by["ratio"].verdict == A.AGREES          # 4.67 vs 4.0
    assert by["coll"].verdict == A.AGREES           # both at 10 ms
    assert by["w"].verdict == A.NOT_COMPARABLE and "needs wget: a wget client" in by["w"].why
    assert by["flat"].verdict == A.DISAGREES        # 900 -> 90 is not flat
    assert by["flat"].unexplained                   # no verdicts given
    c = res.counts()
    assert c["E27"] == A.Counts(agrees=3) and c["E27"].status() == "Y"
    assert c["all"].unexplained == 1
    row = res.tables[0].rows[0]
    assert row.cells[0].rig == pytest.approx(900) and row.cells[0].ratio == pytest.approx(0.9)


def test_disagreement_carries_rig_evidence() -> None:
    ref = _ref()
    pts = [_pt("fast", 0, 300, cpu=2.4), _pt("slow", 0, 3000)] + \
          [_pt("fast", x, v) for x, v in ((10, 700), (100, 90))] + \
          [_pt("slow", x, v) for x, v in ((10, 150), (100, 15))]
    pts[0].capacity_bps = 40e9                  # fast could rise x16.7 to the path
    verdicts = {pts[0].key: V("client-CPU-bound", "CPU 0.97 of wall"),
                pts[1].key: V("path-limited", "94% of the validated path")}
    rank = next(o for o in A.compare(ref, pts, verdicts).outcomes if o.claim.id == "rank")
    # the gap: the study has fast 2x slow, the rig 0.1x: x20; fast's CPU bound accounts
    # for it (97 % of a core), slow's bound differs, lifting it reaches x16.7 >= sqrt(20)
    assert rank.verdict == A.DISAGREES and rank.level == "plausible", rank
    assert not rank.explained                   # no ablation: plausible, never explained
    assert "τ=-1.00" in rank.rig and "x20" in rank.explanation
    assert any("client-CPU-bound" in e and "2.40 s/GB client" in e for e in rank.evidence)
    # the held side without a bound's model: unexplained
    partial = {pts[1].key: verdicts[pts[1].key]}
    rank = next(o for o in A.compare(ref, pts, partial).outcomes if o.claim.id == "rank")
    assert rank.unexplained
    # both sides share the label: it cannot say why one beats the other
    shared = {pts[0].key: verdicts[pts[0].key], pts[1].key: V("client-CPU-bound")}
    rank = next(o for o in A.compare(ref, pts, shared).outcomes if o.claim.id == "rank")
    assert rank.unexplained and "shared label" in rank.explanation
    # no headroom known (no validated path): unexplained
    pts[0].capacity_bps = None
    rank = next(o for o in A.compare(ref, pts, verdicts).outcomes if o.claim.id == "rank")
    assert rank.unexplained and "headroom" in rank.explanation
    # the same without a verdict that names a bound: unexplained
    rank = next(o for o in A.compare(ref, pts, {}).outcomes if o.claim.id == "rank")
    assert rank.unexplained


def test_no_rows_is_not_comparable() -> None:
    res = A.compare(_ref(), [_pt("other", 0, 1)], {})
    assert all(o.verdict == A.NOT_COMPARABLE for o in res.outcomes)
    assert "no rows for fast client" in res.outcomes[0].why


def test_kendall_and_onsets() -> None:
    assert A.kendall_tau([3, 2, 1], [30, 20, 10]) == pytest.approx(1.0)
    assert A.kendall_tau([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert A.collapse_x([0, 10, 20], [100, 60, 40], 0.5) == 20
    assert A.collapse_x([0, 10], [100, 90], 0.5) is None
    assert A.plateau_x([1, 2, 4, 8], [1, 5, 9.5, 10], 0.1) == 4


def _bad(tmp_path: Path, mutate) -> str:
    data = yaml.safe_load(REF)
    mutate(data)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as e:
        reference.load(f)
    return str(e.value)


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d.update(colour="red"), "colour: unknown key"),
    (lambda d: d["tables"][0]["rows"]["fast"].pop(), "tables[0].rows.fast: has 2 values"),
    (lambda d: d["tables"][0].update(unit="furlongs"), "tables[0].unit: must be one of"),
    (lambda d: d["claims"][0].update(series=["fast", "nope"]), "claims[0].series: no such series"),
    (lambda d: d["claims"][0].update(experiment="E40"), "claims[0].experiment: expected an experiment"),
    (lambda d: d["series"]["fast"].update(lacks="x"), "series.fast: give exactly one"),
    (lambda d: d["series"]["fast"]["select"].update(colour=1), "series.fast.select.colour: unknown"),
    (lambda d: d["claims"][1].update(at=[7]), "claims[1].at: not an x of table t1"),
    (lambda d: d["claims"][2].update(table="t9"), "claims[2].table: no such table"),
])
def test_bad_reference_one_line(tmp_path: Path, mutate, expect) -> None:
    msg = _bad(tmp_path, mutate)
    assert "bad.yaml" in msg and expect in msg and "\n" not in msg


def test_scenario_bad_reproduces_path_exits_2(tmp_path: Path) -> None:
    sc = (ROOT / "scenarios" / "quick.yaml").read_text() + "\nreproduces: nowhere.yaml\n"
    f = tmp_path / "s.yaml"
    f.write_text(sc)
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(f)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "reproduces" in r.stderr and "nowhere.yaml" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout.strip()


def test_shipped_references_load() -> None:
    files = sorted((ROOT / "reproductions").glob("*.yaml"))
    for f in files:
        reference.load(f)


RUN_REF = """
format: 1
study: syn
title: a synthetic study
seed: 999_toy.txt
series:
  x4: {label: xrdcp 4 streams, select: {client: xrdcp-S4}}
  curl: {label: curl, select: {client: curl}}
tables:
  - {id: t, experiment: E27, source: tab 1, title: MB/s, unit: MB/s, precision: whole,
     x: rtt_ms, at: [0, 20, 60, 120], rows: {x4: [1000, 900, 400, 200], curl: [500, 300, 100, 50]}}
claims:
  - {id: r, experiment: E27, source: tab 1, text: xrdcp ahead, kind: ranking, table: t, series: [x4, curl]}
"""


@pytest.mark.slow
def test_report_redraws_against_section(tmp_path: Path) -> None:
    from fixtures_results import make_run

    from rig.report import render
    run = make_run(tmp_path / "run", env={"reference": {"file": "syn.yaml", "text": RUN_REF}})
    files = render(run)
    page = (run / "report.html").read_text()
    assert "against the study" in page and "xrdcp ahead" in page
    md = (run / "against.md").read_text()
    assert "| E27 | 1 |" in md and "rig/study" in md
    assert any(f.name == "against_t.png" for f in files)


@pytest.mark.slow
def test_report_bad_stored_reference_one_line(tmp_path: Path) -> None:
    from fixtures_results import make_run
    bad = RUN_REF.replace("kind: ranking", "kind: rankin")
    run = make_run(tmp_path / "run", env={"reference": {"file": "syn.yaml", "text": bad}})
    r = subprocess.run([sys.executable, "-m", "rig", "report", str(run)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert "claims[0].kind" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_replay_rows_match_their_scenario_name() -> None:
    p = _pt("app-xrootd@100%", 0, 10)
    p.branch_fraction = 1.0
    assert A.matches(p, {"client": "app-xrootd", "branches_percent": 100.0})
    assert not A.matches(p, {"client": "app-xrootd", "branches_percent": 20.0})


def test_inflation_claim_uses_srtt_over_ping() -> None:
    text = REF + """  - {id: infl, experiment: E37, source: s, text: bbr keeps inflation < 5 ms, kind: inflation,
     x: rtt_ms, series: [fast], study_value: 5}
"""
    ref = _ref(text)
    pts = [_pt("fast", 10, 100), _pt("fast", 100, 50)]
    pts[0].rtt_ms_measured, pts[1].rtt_ms_measured = 10.2, 100.1
    o = next(o for o in A.compare(ref, pts, {}, {pts[0].key: 12.0, pts[1].key: 103.0}).outcomes
             if o.claim.id == "infl")
    assert o.verdict == A.AGREES and "+1.80 ms" in o.rig and "+2.90 ms" in o.rig
    o = next(o for o in A.compare(ref, pts, {}, {pts[0].key: 40.0}).outcomes
             if o.claim.id == "infl")
    assert o.verdict == A.DISAGREES and "+29.80 ms" in o.rig
    o = next(o for o in A.compare(ref, pts, {}).outcomes if o.claim.id == "infl")
    assert o.verdict == A.NOT_COMPARABLE and "no sender srtt" in o.why
    bad = text.replace("study_value: 5}", "}")
    with pytest.raises(InputError, match="study_value"):
        _ref(bad)


def test_joint_share_adds_the_paths_of_one_step() -> None:
    """`joint: true`: at one x the series' points on several paths add, and so do their
    capacities (seed 004's frontends); one path alone is not a joint share."""
    text = REF + """  - {id: j, experiment: E34, source: s, text: links together > half, kind: share,
     x: concurrency, series: [fast], bound: capacity, band: [0.5, 1.15], joint: true}
"""
    ref = _ref(text)
    def pt(path: str, conc: int, gbit: float, cap: float) -> Point:
        return Point(Key(path, 20.0, "fast", 1, conc), "curl",
                     samples_bps=[gbit * 1e9 * f for f in SPREAD],
                     base_client="fast", capacity_bps=cap * 1e9, bytes_ok=10**9)
    pts = [pt("a", 1, 0.9, 1.0), pt("b", 1, 1.1, 4.0),      # 2.0 of 5.0: 40 %
           pt("a", 4, 0.9, 1.0), pt("b", 4, 3.0, 4.0)]      # 3.9 of 5.0: 78 %
    o = next(o for o in A.compare(ref, pts, {}).outcomes if o.claim.id == "j")
    assert o.verdict == A.DISAGREES, o
    assert "1: 40% (2 of 5 Gbit/s over a, b)" in o.rig and "4: 78%" in o.rig
    o = next(o for o in A.compare(ref, pts[2:], {}).outcomes if o.claim.id == "j")
    assert o.verdict == A.AGREES
    o = next(o for o in A.compare(ref, [pts[0], pts[2]], {}).outcomes if o.claim.id == "j")
    assert o.verdict == A.NOT_COMPARABLE and "not the paths of one joint step" in o.why
    with pytest.raises(InputError, match="joint applies to a share claim only"):
        _ref(REF + """  - {id: k, experiment: E34, source: s, text: t, kind: flat, x: rtt_ms,
     series: [fast], joint: true}
""")


def test_verdict_claim_reads_the_bottleneck_verdicts() -> None:
    """kind verdict: agrees where the rig's verdict is the one named (or holds in
    `also`); a disagreement carries the verdicts as evidence."""
    text = REF + """  - {id: v, experiment: E10, source: s, text: one thread is the ceiling, kind: verdict,
     x: rtt_ms, series: [fast], verdict: single-thread-bound}
"""
    ref = _ref(text)
    pts = [_pt("fast", 0, 900), _pt("fast", 10, 700)]

    class W(V):
        def __init__(self, kind: str, also: tuple[str, ...] = ()) -> None:
            super().__init__(kind, "d")
            self.also = also
    ok = {pts[0].key: W("single-thread-bound"), pts[1].key: W("client-CPU-bound",
                                                               ("single-thread-bound",))}
    o = next(o for o in A.compare(ref, pts, ok).outcomes if o.claim.id == "v")
    assert o.verdict == A.AGREES and "single-thread-bound also holds" in o.rig, o
    no = {pts[0].key: W("single-thread-bound"), pts[1].key: W("host-CPU-bound")}
    o = next(o for o in A.compare(ref, pts, no).outcomes if o.claim.id == "v")
    # a host-CPU-bound label without the host's CPU record has no model: unexplained
    assert o.verdict == A.DISAGREES and o.unexplained and "10 ms: host-CPU-bound" in o.rig
    for bad in ("verdict: fast-enough}", "}"):
        with pytest.raises(InputError, match="verdict"):
            _ref(text.replace("verdict: single-thread-bound}", bad))


def test_the_reference_knows_every_verdict_the_report_gives() -> None:
    from rig.report.verdict import KINDS
    assert set(reference.VERDICT_KINDS) == set(KINDS)


def test_cores_together() -> None:
    p = Point(Key("wan", 0, "c", 1, 4), "curl", samples_bps=[1e9], base_client="c")
    p.cpu_s, p.cpu_ratio = [0.5] * 4, [0.5] * 4        # 4 processes, 1 s wall each
    p.server_cpu_s = [0.25] * 4
    assert A.cores_together(p) == pytest.approx(3.0)


@pytest.mark.slow
def test_report_with_a_given_reference(tmp_path: Path) -> None:
    from fixtures_results import make_run
    run = make_run(tmp_path / "run")                     # no stored reference
    ref = tmp_path / "syn.yaml"
    ref.write_text(RUN_REF)
    r = subprocess.run([sys.executable, "-m", "rig", "report", str(run), "--reference", str(ref)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "given to `rig report`" in (run / "against.md").read_text()
    ref.write_text(RUN_REF.replace("unit: MB/s", "unit: furlongs"))
    (run / "against.md").unlink()
    r = subprocess.run([sys.executable, "-m", "rig", "report", str(run), "--reference", str(ref)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "tables[0].unit" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (run / "against.md").exists()


def test_scenario_with_a_bad_reference_exits_2(tmp_path: Path) -> None:
    (tmp_path / "ref.yaml").write_text(RUN_REF.replace("format: 1", "format: 7"))
    f = tmp_path / "s.yaml"
    f.write_text((ROOT / "scenarios" / "quick.yaml").read_text() + "\nreproduces: ref.yaml\n")
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(f)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2
    assert "ref.yaml: format: must be <= 1" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout.strip()


def test_series_statistic_max_takes_the_best_repeat() -> None:
    # seed 003's tables show "only highest values": a series may compare the best repeat
    text = REF.replace("fast: {label: fast client, select: {client: fast}}",
                       "fast: {label: fast client, select: {client: fast}, statistic: max}")
    ref = _ref(text)
    pts = []
    for rtt, vals in ((0, [600, 1000]), (10, [500, 800]), (100, [50, 100])):
        p = _pt("fast", rtt, vals[0])
        p.samples_bps = [v * 8e6 for v in vals]
        pts.append(p)
    s = A.rig_series(pts, ref.series["fast"], "rtt_ms")
    assert s.value(0.0, "MB/s") == pytest.approx(1000)
    mean = A.rig_series(pts, _ref().series["fast"], "rtt_ms")
    assert mean.value(0.0, "MB/s") == pytest.approx(800)
    with pytest.raises(InputError) as e:
        _ref(text.replace("statistic: max", "statistic: median"))
    assert "statistic" in str(e.value) and "median" in str(e.value)


def test_storage_checks_are_points_a_reference_selects():
    """E25: a disk-backed run's storage checks (cold dd, cached, the file's write) as
    points (`select: {measure: ...}`), beside the path check's capacity of the step."""
    from types import SimpleNamespace

    from rig.report import against

    def v(**kw):
        return ValidationRow(path="wan", rtt_ms_configured=0.0, **kw)
    run = SimpleNamespace(
        validations=[v(phase="before", capacity_bps=10e9),
                     v(phase="storage", storage_bps=6e9,
                       raw=json.dumps({"cached_bps": 90e9})),
                     v(phase="after", capacity_bps=12e9),
                     v(phase="storage", storage_bps=5e9, raw="{}"),
                     v(phase="storage", storage_bps=None, storage_note="x")],
        env={"storage": {"written": {"f2G": {"bytes": 2 << 30, "seconds": 8.0}}}})
    pts = {p.measure: p for p in against.storage_points(run)}
    assert sorted(pts) == ["storage-cached", "storage-read", "storage-write"]
    assert pts["storage-read"].samples_bps == [6e9, 5e9]
    assert pts["storage-cached"].samples_bps == [90e9]
    assert pts["storage-write"].samples_bps == [(2 << 30) * 8 / 8.0]
    assert pts["storage-read"].path_bound_bps() == 11e9
    assert against.matches(pts["storage-read"], {"measure": "storage-read"})
    assert not against.matches(pts["storage-read"], {"client": "nettest"})
    assert against.storage_points(SimpleNamespace(validations=[], env={})) == []


def test_a_storage_point_s_evidence_is_its_own_and_the_path_s():
    from types import SimpleNamespace

    from rig.report import against

    def v(**kw):
        return ValidationRow(path="wan", rtt_ms_configured=0.0, **kw)
    run = SimpleNamespace(validations=[v(phase="before", capacity_bps=38e9),
                                       v(phase="storage", storage_bps=12e9,
                                         raw="{}")], env={})
    (p,) = against.storage_points(run)
    line, explained = against.point_evidence(p, {})
    assert explained and line.startswith("storage-read at 0 ms: 1.50 GB/s (12.0 Gbit/s")
    assert "32% of the validated path 38.00 Gbit/s" in line
    run.validations = run.validations[1:]
    assert against.point_evidence(against.storage_points(run)[0], {})[1] is False
