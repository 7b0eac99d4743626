"""The rules that decide agrees, undecided, rig artefact, explained, plausible and
unexplained (rig.report.against, rig.report.explain), tested on cases where the answer is
known to be NO as well as YES. Pure: fake points, no namespaces."""
from __future__ import annotations

import itertools
import math

import pytest

from rig.description import reference
from rig.report import against as A
from rig.report import explain as X
from rig.report.model import GroupCpu, Key, Point

HEAD = """
format: 1
study: toy
title: a toy study
seed: 999_toy.txt
series:
  xrdcp: {label: xrdcp, select: {client: xrdcp}}
  curl: {label: curl, select: {client: curl}}
  xrdcp-nocsum: {label: xrdcp without page checksums, select: {client: xrdcp-nocsum}}
  xrdcp-big: {label: xrdcp 64 MiB window, select: {client: xrdcp-big}}
claims:
"""
MADE_UP = HEAD + """  - {id: made-up, experiment: E1, source: nowhere, kind: ratio, x: rtt_ms,
     text: xrdcp is 100000 times faster than curl at every RTT,
     series: [xrdcp, curl], band: [100000, 1000000000]}
"""
RATIO = HEAD + """  - {id: r, experiment: E1, source: t, kind: ratio, x: rtt_ms,
     text: xrdcp is at least 2x curl, series: [xrdcp, curl], band: [2, 100],
     ablations: [{cause: page checksums off, series: {xrdcp: xrdcp-nocsum}},
                 {cause: bigger windows, series: {xrdcp: xrdcp-big}}]}
"""
KINDS = ("window-limited", "path-limited", "client-CPU-bound", "latency-bound",
         "host-CPU-bound", "cwnd-limited", "application-limited", "loss-limited",
         "single-thread-bound", "server-cpu-bound", "storage-bound", "unexplained")


class V:
    def __init__(self, kind: str, detail: str = "d") -> None:
        self.kind, self.detail, self.also = kind, detail, ()


def _ref(text: str) -> reference.Reference:
    return reference.from_text(text, "toy.yaml")


def _pt(client: str, rtt: float, gbit: float, spread=(0.98, 1.0, 1.02), **kw) -> Point:
    p = Point(Key("wan", rtt, client, 1, 1), "curl",
              samples_bps=[gbit * 1e9 * f for f in spread], base_client=client,
              bytes_ok=10**9, capacity_bps=kw.pop("capacity", 40e9))
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def _bound_at(p: Point, kind: str) -> dict:
    """Fields that make `kind`'s model predict exactly p's mean (the bound holds it)."""
    m, rtt = p.mean_bps, (p.key.rtt_ms or 1.0) / 1e3
    return {"window-limited": {"window_bytes": int(m * rtt / 8)},
            "path-limited": {"capacity_bps": m},
            "client-CPU-bound": {"cpu_s": [1.0], "cpu_ratio": [1.0]},
            "single-thread-bound": {"cpu_s": [1.0], "cpu_ratio": [1.0]},
            "latency-bound": {"round_trips": [10], "durations_s": [10 * rtt] * 3},
            "host-CPU-bound": {"host_cpu": {(1, 0): GroupCpu(share=1.0, cpus=2, wall_s=1.0)}},
            "storage-bound": {"storage_bps": m},
            "loss-limited": {"loss_configured": (X.MSS_DEFAULT * 8 / rtt * X.MATHIS_C / m) ** 2},
            }.get(kind, {})


def _one(ref, pts, verdicts, artefacts=None) -> A.Outcome:
    return A.compare(ref, pts, verdicts, None, artefacts).outcomes[0]


@pytest.mark.parametrize("kx, kc", list(itertools.product(KINDS + ("emulator-limited",),
                                                          repeat=2)))
def test_a_made_up_claim_is_never_explained(kx, kc) -> None:
    """"xrdcp is 100000 times faster than curl": whatever the rig's verdicts, and even with
    every model holding its point exactly, no bound of this host comes near a gap of
    10^5 (the path allows x40 at most): unexplained, never plausible or explained."""
    x, c = _pt("xrdcp", 20, 1.0), _pt("curl", 20, 1.0)
    for p, k in ((x, kx), (c, kc)):
        for f, v in _bound_at(p, k).items():
            setattr(p, f, v)
    o = _one(_ref(MADE_UP), [x, c], {x.key: V(kx), c.key: V(kc)})
    assert o.verdict == A.DISAGREES and o.level == X.UNEXPLAINED, (o.level, o.explanation)
    assert A.count([o]).unexplained == 1


def test_made_up_claim_through_the_report_rules_with_an_artefact() -> None:
    x, c = _pt("xrdcp", 20, 1.0), _pt("curl", 20, 1.0)
    o = _one(_ref(MADE_UP), [x, c], {}, {x.key: "step 2: path check flagged (rtt 20.4)"})
    assert o.verdict == A.ARTEFACT and "path check flagged" in o.why
    assert A.count([o]) == A.Counts(artefact=1) and A.count([o]).status() == "P"


def test_artefact_x_left_out_the_rest_compared() -> None:
    ref = _ref(RATIO)
    pts = [_pt("xrdcp", r, g) for r, g in ((0, 3.0), (20, 0.1))] + \
          [_pt("curl", r, 1.0) for r in (0, 20)]
    # at 20 ms the ratio is 0.1 (disagrees): but the xrdcp point there is an artefact
    o = _one(ref, pts, {}, {pts[1].key: "emulator-limited (late releases)"})
    assert o.verdict == A.AGREES and o.left_out and "emulator-limited" in o.left_out[0][1]
    o = _one(ref, pts, {})
    assert o.verdict == A.DISAGREES


@pytest.mark.parametrize("spread, verdict", [
    ((0.98, 1.0, 1.02), A.DISAGREES),        # tight repeats: decided
    ((0.5, 1.0, 1.5), A.UNDECIDED),          # one repeat alone crosses the band
    ((1.0,), A.UNDECIDED),                   # one repeat: no spread to decide from
])
def test_noise_makes_a_claim_undecided(spread, verdict) -> None:
    ref = _ref(HEAD + """  - {id: r, experiment: E1, source: t, kind: ratio, x: rtt_ms,
     text: xrdcp at least 2x curl, series: [xrdcp, curl], band: [2, 100]}
""")
    # means 1.8 vs 1.0: disagrees (1.8 < 2); the 1.5x repeat alone gives 2.7: agrees
    o = _one(ref, [_pt("xrdcp", 0, 1.8, spread), _pt("curl", 0, 1.0, spread)], {})
    assert o.verdict == verdict, o.why
    assert A.count([o]).undecided == (verdict == A.UNDECIDED)


def test_undecided_agreement_is_not_counted_as_agreement() -> None:
    ref = _ref(HEAD + """  - {id: r, experiment: E1, source: t, kind: ranking, x: rtt_ms,
     text: xrdcp beats curl, series: [xrdcp, curl]}
""")
    o = _one(ref, [_pt("xrdcp", 0, 1.05, (0.7, 1.0, 1.3)), _pt("curl", 0, 1.0, (0.7, 1.0, 1.3))],
             {})
    assert o.verdict == A.UNDECIDED and A.count([o]).agrees == 0


def _ablation_points(nocsum_gbit: float) -> list[Point]:
    x = _pt("xrdcp", 20, 1.0, cpu_s=[1.0], cpu_ratio=[0.97])
    c = _pt("curl", 20, 1.0, cpu_s=[0.2], cpu_ratio=[0.2])
    return [x, c, _pt("xrdcp-nocsum", 20, nocsum_gbit), _pt("xrdcp-big", 20, 1.05)]


@pytest.mark.parametrize("nocsum, level, closed", [
    (2.4, X.EXPLAINED, 1.0),        # x2.4 of curl: within the band, all of the gap
    (1.5, X.EXPLAINED, 0.58),       # log 1.5 / log 2: 58 % of the gap closed
    (1.2, X.PLAUSIBLE, 0.26),       # 26 %: not enough; the CPU bound stays plausible
    (0.8, X.PLAUSIBLE, 0.07),       # checksums off made it worse; the best ablation,
])                                  # bigger windows (1.05x), closed 7 %
def test_an_ablation_explains_only_what_it_closed(nocsum, level, closed) -> None:
    pts = _ablation_points(nocsum)
    vs = {pts[0].key: V("client-CPU-bound"), pts[1].key: V("window-limited")}
    o = _one(_ref(RATIO), pts, vs)
    assert o.verdict == A.DISAGREES and o.level == level, o.explanation
    assert o.closed == pytest.approx(closed, abs=0.01)
    assert "page checksums off" in o.explanation and "bigger windows" in o.explanation


def test_an_ablation_without_rows_explains_nothing() -> None:
    pts = _ablation_points(2.4)[:2]
    o = _one(_ref(RATIO), pts, {})
    assert o.level == X.UNEXPLAINED and "no rows for its series" in o.explanation


def test_an_ablation_names_only_the_claim_s_series() -> None:
    from rig.errors import InputError
    bad = RATIO.replace("series: {xrdcp: xrdcp-nocsum}", "series: {nope: xrdcp-nocsum}")
    with pytest.raises(InputError, match=r"claims\[0\]\.ablations\[0\]\.series: not a series"):
        _ref(bad)
    bad = RATIO.replace("series: {xrdcp: xrdcp-nocsum}", "series: {xrdcp: ghost}")
    with pytest.raises(InputError, match="no such series"):
        _ref(bad)


def test_the_rig_s_reading_is_counted_apart() -> None:
    ref = _ref(HEAD + """  - {id: own, experiment: E1, source: t, kind: ranking, x: rtt_ms,
     text: xrdcp beats curl, series: [xrdcp, curl]}
  - {id: mine, experiment: E1, source: t, kind: ranking, x: rtt_ms,
     text: curl beats xrdcp, series: [curl, xrdcp],
     inference: the study shows no curl number; the rig reads its figure}
""")
    a = A.compare(ref, [_pt("xrdcp", 0, 2.0), _pt("curl", 0, 1.0)], {})
    c = a.counts()["E1"]
    assert (c.agrees, c.disagrees, c.reading, c.reading_agrees) == (1, 0, 1, 0)
    assert c.status() == "Y"


@pytest.mark.parametrize("counts, status", [
    (A.Counts(agrees=2, disagrees=1, plausible=1), "Y"),
    (A.Counts(agrees=1, disagrees=1, plausible=1), "P"),            # half is not most
    (A.Counts(agrees=1, disagrees=3, unexplained=3), "P"),
    (A.Counts(agrees=1, disagrees=2, explained=2), "Y"),            # every one explained
    (A.Counts(agrees=0, disagrees=2, explained=1, plausible=1), "P"),
    (A.Counts(agrees=1, undecided=2), "P"),                         # undecided is not agreed
    (A.Counts(artefact=3), "P"),
    (A.Counts(not_comparable=2), "N"),
    (A.Counts(reading=4, reading_agrees=4), "P"),      # the rig's own reading only: never Y
])
def test_status_rule(counts, status) -> None:
    assert counts.status() == status


def test_models_predict_from_what_was_recorded() -> None:
    p = _pt("c", 40, 0.2, window_bytes=1 << 20)
    bps, how = X.model(p, "window-limited")
    assert bps == pytest.approx((1 << 20) * 8 / 0.040) and "1 MiB" in how
    # the case: 0.151 Gbit/s against a bound of 0.104 is 145 %: not what holds it
    q = _pt("c", 40, 0.151, window_bytes=int(0.104e9 * 0.040 / 8))
    assert X.accounts(q, "window-limited")[0] is None
    assert "145%" in X.accounts(q, "window-limited")[1]
    m = _pt("c", 50, 0.1, loss_configured=0.01)
    bps, _ = X.model(m, "loss-limited")
    assert bps == pytest.approx(1448 * 8 / 0.05 * math.sqrt(1.5) / 0.1)
    for kind in ("cwnd-limited", "application-limited", "unexplained", "failed",
                 "emulator-limited", None):
        assert X.model(p, kind) is None
    assert X.headroom(p, "path-limited") is None
    assert X.headroom(p, "window-limited") == pytest.approx(200)
    assert X.closed_share(4.0, 2.0) == pytest.approx(0.5)
    assert X.closed_share(4.0, 1.0) == pytest.approx(1.0)
    assert X.closed_share(4.0, 8.0) < 0


def test_ranking_gap_from_the_study_s_numbers() -> None:
    assert A._discordant(0.0, [1.0, 4.0], [2.0, 1.0], True) == [A.Gap(0.0, 0, 1, 8.0)]
    assert A._discordant(0.0, [1.0, 4.0], [2.0, 1.0], False) == [A.Gap(0.0, 0, 1, 4.0)]
    assert A._discordant(0.0, [4.0, 1.0], [2.0, 1.0], True) == []


MADE_UP_FILE = """
format: 1
study: madeup
title: a made-up study
seed: 999_madeup.txt
series:
  xrdcp: {label: xrdcp, select: {client: xrdcp}}
  curl: {label: curl, select: {client: curl}}
claims:
  - {id: made-up, experiment: E5, source: nowhere, kind: ratio, x: rtt_ms,
     text: xrdcp is 100000 times faster than curl at every RTT,
     series: [xrdcp, curl], band: [100000, 1000000000]}
"""


@pytest.mark.slow
def test_rig_report_calls_a_made_up_claim_unexplained(tmp_path) -> None:
    """Issue 38: a reference with a made-up claim given to `rig report` on a run (here a
    synthetic one, 3 repeats, one flagged step): disagrees, unexplained, and the flagged
    step's points are left out as rig artefacts."""
    import subprocess
    import sys

    from fixtures_results import make_run
    run = make_run(tmp_path / "run", flagged_steps=(2,))
    ref = tmp_path / "madeup.yaml"
    ref.write_text(MADE_UP_FILE)
    r = subprocess.run([sys.executable, "-m", "rig", "report", str(run), "--reference",
                        str(ref)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    md = (run / "against.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| E5 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # experiment, claims, agrees, disagrees, undecided, artefact, n/c, explained,
    # plausible, unexplained, reading, status
    assert cells[1:10] == ["1", "0", "1", "0", "0", "0", "0", "0", "1"], row
    assert cells[11] == "P"
    assert "UNEXPLAINED" in md and "left out as rig artefacts" in md and "60 ms" in md


@pytest.mark.slow
def test_repro_status_sums_a_run_s_outcomes(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from fixtures_results import make_run
    run = make_run(tmp_path / "run", env={"reference": {"file": "madeup.yaml",
                                                        "text": MADE_UP_FILE}})
    tool = Path(__file__).resolve().parent.parent / "tools" / "repro-status"
    r = subprocess.run([sys.executable, str(tool), str(run)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "| E5 | P | 0 | 1 | 0 | 0 | 0 | 0 | 0 | 1 | 0 | 0 | syn |" in r.stdout
    r = subprocess.run([sys.executable, str(tool), str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["ranking", "alike"])
def test_a_claim_whose_every_point_at_its_x_is_an_artefact_is_an_artefact(kind) -> None:
    """Seed 002 (2026-11-28): a ranking of series at one concurrency, without a table,
    whose points there were all rig artefacts came out 'tied, not ranked (0 > 0)' and
    undecided with '0 repeats', not a rig artefact; the x it names had no point left."""
    ref = _ref(HEAD + f"""  - {{id: k, experiment: E1, source: t, kind: {kind}, x: rtt_ms,
     text: xrdcp beats curl at 20 ms, series: [xrdcp, curl], at: [20], within: 0.1}}
""")
    pts = [_pt("xrdcp", r, g) for r, g in ((0, 3.0), (20, 2.0))] + \
          [_pt("curl", r, 1.0) for r in (0, 20)]
    spoiled = {p.key: "step 2: the engine was late" for p in pts if p.key.rtt_ms == 20}
    o = _one(ref, pts, {}, spoiled)
    assert o.verdict == A.ARTEFACT and "engine was late" in o.why, (o.verdict, o.why)
    # one series spoiled is enough to leave the x out
    o = _one(ref, pts, {}, {pts[1].key: "step 2: path check flagged"})
    assert o.verdict == A.ARTEFACT
    # nothing spoiled: decided (2x apart, tight repeats)
    o = _one(ref, pts, {})
    assert o.verdict == (A.AGREES if kind == "ranking" else A.DISAGREES), o.why


def test_a_series_without_rows_is_not_comparable_even_beside_artefacts() -> None:
    """A claim on a series the run has no rows for (a split scenario of the same study
    runs it) is 'not comparable here: the run has no rows', even where the run's other
    series are rig artefacts: it was counted as an artefact in both runs' counts."""
    ref = _ref(RATIO)
    pts = [_pt("xrdcp", 20, 2.0)]          # no curl rows at all
    o = _one(ref, pts, {}, {pts[0].key: "step 2: the engine was late"})
    assert o.verdict == A.NOT_COMPARABLE and o.why.startswith("the run has no rows for curl")
    # every point of a present series spoiled: an artefact, not 'no rows'
    pts = [_pt("xrdcp", 20, 2.0), _pt("curl", 20, 1.0)]
    o = _one(ref, pts, {}, {pts[1].key: "step 2: the engine was late"})
    assert o.verdict == A.ARTEFACT
