"""Issue 41, "the answer first": report.html opens on flags and failures, the throughput-vs-RTT
chart, the table per client and RTT and the verdict per point, every other section
collapsed; one throughput unit (scenario `report.unit`) on the page, in the CSVs and the
console; error bars only where there are repeats, said in the legend; distinct colours
per client; no window bound where it means nothing. (In a real browser:
tests/test_report_html_browser.py.)"""
from __future__ import annotations

import colorsys
import csv
import re
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.description.units import show_throughput
from rig.report import load_run, render, style
from rig.report.page import table
from rig.report.tables import shown_window_bound


def _hue(c: str) -> float:
    """Hue in degrees of '#rrggbb'."""
    r, g, b = (int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return colorsys.rgb_to_hls(r, g, b)[0] * 360


def _hue_gap(a: str, b: str) -> float:
    d = abs(_hue(a) - _hue(b)) % 360
    return min(d, 360 - d)


def test_a_charts_clients_get_distinct_colours() -> None:
    names = ["xrdcp", "xrdcp-S4", "davix-get", "curl"]
    styles = style.distinct_styles(names)
    colours = [styles[n].color for n in names]
    assert min(_hue_gap(a, b) for i, a in enumerate(colours) for b in colours[i + 1:]) > 25
    # the check can fail: the fixed family shades were two blues of one hue
    assert _hue_gap(style.KNOWN["xrdcp"].color, style.KNOWN["xrdcp-S4"].color) < 10
    many = style.distinct_styles([f"c{i}" for i in range(2 * len(style.PALETTE) + 1)])
    looks = {(s.color, s.linestyle) for s in many.values()}
    assert len(looks) == len(many)          # past the palette, the line style changes


def test_window_bound_blank_at_zero_rtt_and_far_above_the_path(tmp_path: Path) -> None:
    run = load_run(make_run(tmp_path / "r", repeats=1))
    by = {(p.key.client, p.key.rtt_ms): p for p in run.points}
    assert shown_window_bound(by[("xrdcp", 0.0)]) is None       # ~0.05 ms: hundreds of Gbit/s
    assert by[("xrdcp", 0.0)].window_bound_bps() > 100e9         # what was shown before
    assert shown_window_bound(by[("xrdcp", 60.0)]) == pytest.approx(
        by[("xrdcp", 60.0)].window_bound_bps())
    slow = load_run(make_run(tmp_path / "slow", repeats=1, rate_bps=1e8, capacity_bps=1e8))
    p20 = next(p for p in slow.points if p.key.client == "xrdcp-S4" and p.key.rtt_ms == 20)
    assert p20.window_bound_bps() > 10 * 1e8 and shown_window_bound(p20) is None


def test_error_bars_and_their_legend_only_with_repeats(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from rig.report import charts
    for repeats, bars in ((1, False), (3, True)):
        run = load_run(make_run(tmp_path / f"r{repeats}", repeats=repeats))
        pts = [p for p in run.points if p.key.client == "curl"]
        ax = Figure().subplots()
        charts.errorbar(ax, pts, [p.x_rtt_ms for p in pts], "curl", style.style_for("curl"))
        assert ax.containers[0].has_yerr is bars
        legend = charts.repeats_legend(run.points)
        assert ("bars: min-max of the repeats" in legend) is bars, legend
        assert ("mean of 3 repeats" in legend) is bars
        assert ("no error bars" in legend) is not bars


def _sections(page: str) -> tuple[int, list[int], list[int]]:
    """(index of the first folded section, indices of every <h2>, of every fold)."""
    folds = [m.start() for m in re.finditer(r'<details class="more">', page)]
    return (folds[0] if folds else len(page),
            [m.start() for m in re.finditer(r"<h2", page)], folds)


@pytest.mark.slow
def test_report_opens_on_the_answer_and_folds_the_rest(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", concurrency=(1, 2), flagged_steps=[2],
                   failing=[("curl", 120.0)])
    render(run)
    page = (run / "report.html").read_text()
    first_fold, h2s, folds = _sections(page)
    head = page[:first_fold]
    for anchor in ('id="flags"', 'id="headline-chart"', 'id="headline-table"',
                   'id="headline-verdicts"'):
        assert anchor in head, anchor
    assert head.index('id="flags"') < head.index('id="headline-chart"') \
        < head.index('id="headline-table"') < head.index('id="headline-verdicts"')
    flags = re.search(r'<div class="flags bad" id="flags">(.*?)</div>', page, re.S)
    assert flags and "failed</b>" in flags.group(1) and "step(s) flagged" in flags.group(1)
    assert "Rig artefacts" in flags.group(1)
    # every section heading below the headline sits in a collapsed <details>' summary
    below = [i for i in h2s if i > first_fold and 'class="below"' not in page[i:i + 20]]
    assert below and all(page[i - len("<summary>"):i] == "<summary>" for i in below)
    assert len(folds) == len(below) and "<details class=\"more\" open" not in page
    for title in ("Measurements and bottleneck verdicts", "Path validation", "Environment"):
        assert page.index(f"<h2>{title}</h2>") > first_fold, title
    # the window bound means nothing at 0 ms: not in the table per point
    rows = list(csv.DictReader(open(run / "summary.csv")))
    assert all(r["window_bound_gbps"] == "" for r in rows if r["rtt_ms"] == "0")
    assert all(r["window_bound_gbps"] != "" for r in rows if r["rtt_ms"] == "120")


@pytest.mark.slow
def test_one_unit_chosen_by_the_scenario(tmp_path: Path) -> None:
    default = make_run(tmp_path / "g", repeats=1, noise=0.0)
    mbs = make_run(tmp_path / "m", repeats=1, noise=0.0, env={"report_unit": "MB/s"})
    render(default)
    render(mbs)
    cols = next(csv.reader(open(mbs / "summary.csv")))
    assert "mean_mbyteps" in cols and "window_bound_mbyteps" in cols
    assert not any(c.endswith("_gbps") for c in cols)
    assert "mean_gbps" in next(csv.reader(open(default / "summary.csv")))   # names kept
    g = {r["client"] + r["rtt_ms"]: float(r["mean_gbps"]) for r in
         csv.DictReader(open(default / "summary.csv"))}
    m = {r["client"] + r["rtt_ms"]: float(r["mean_mbyteps"]) for r in
         csv.DictReader(open(mbs / "summary.csv"))}
    assert m["curl60"] == pytest.approx(g["curl60"] * 1e9 / 8e6, rel=1e-3)
    vcols = next(csv.reader(open(mbs / "validations.csv")))
    assert "iperf_mbyteps" in vcols and "capacity_mbyteps" in vcols and "iperf_gbps" not in vcols
    assert "iperf_gbps" in next(csv.reader(open(default / "validations.csv")))
    table_m = list(csv.reader(open(mbs / "rtt_table_mean.csv")))
    assert table_m[0][0] == "client \\ RTT (ms) [MB/s]"
    page = (mbs / "report.html").read_text()
    assert "Throughput is in MB/s on this page" in page and "default Gbit/s" in page
    assert "(Gbit/s)" not in page.split('<h2 class="below">')[0]
    assert "Throughput is in Gbit/s on this page" in (default / "report.html").read_text()
    assert show_throughput(4.82e9) == "4.82 Gbit/s"
    assert show_throughput(4.82e9, "MB/s") == "602.5 MB/s"


def test_prose_columns_are_left_aligned_and_tables_scroll() -> None:
    html = table(["client", "mean_gbps", "detail"],
                 [["xrdcp", "1.25", "window-limited: 1.25 Gbit/s is 98% of the window bound "
                                    "1 x 16 MiB / 120 ms"]])
    assert html.startswith('<div class="scroll"><table>')
    cells = re.findall(r"<td[^>]*>", html)
    assert cells == ["<td>", "<td>", '<td class="p">']    # only the sentence is prose


# where Gbit/s stays whatever the page's unit: the statement of the default, and seed 004's
# per-Gbit/s CPU cost (cores per Gbit/s is a unit of its own, not a throughput)
_KEPT = ("default Gbit/s", "<code>report.unit</code>: Gbit/s", "cores/Gbit/s", "core_share_per_gbps", "Gbit/s =",
         "per Gbit/s", "CPU seconds per Gbit")


def _gbit_left(folder: Path) -> list[str]:
    """Every mention of Gbit/s (or a `_gbps` / `gbit_s` column) in the page, its Markdown
    and CSV files, less the kept ones."""
    out = []
    for f in sorted(folder.iterdir()):
        if f.suffix not in (".html", ".md", ".csv"):
            continue
        text = f.read_text()
        for k in _KEPT:
            text = text.replace(k, "")
        for m in re.finditer(r"Gbit/s|_gbps|gbit_s", text):
            out.append(f"{f.name}: …{text[max(0, m.start() - 60):m.end() + 20]}…")
    return out


@pytest.mark.slow
def test_the_verdicts_and_secondary_tables_say_the_pages_unit(tmp_path: Path) -> None:
    """Issue 41 item 1's rest: the verdict prose (models, bounds, evidence), the concurrency,
    TLS-cost and origins tables say the run's unit, not Gbit/s."""
    kw: dict = {"repeats": 2, "concurrency": (1, 4)}
    mbs = make_run(tmp_path / "m", env={"report_unit": "MB/s"}, **kw)
    render(mbs)
    left = _gbit_left(mbs)
    assert not left, "\n".join(left[:10])
    page = (mbs / "report.html").read_text()
    assert " MB/s" in page and "aggregate_mbyteps" in (mbs / "concurrency_table.csv").read_text()
    # where the answer is no: the same run in the default unit says Gbit/s in those places
    gb = make_run(tmp_path / "g", **kw)
    render(gb)
    assert _gbit_left(gb)
    assert "aggregate_gbps" in (gb / "concurrency_table.csv").read_text()
