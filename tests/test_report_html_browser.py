"""report.html and compare.html in a real headless browser (Debian's chromium): the page
renders, every embedded image decodes (naturalWidth > 0), and the page logs nothing to
the console. A control page with a broken image and a console error proves the checks
can fail. Skipped, with the reason, only when chromium is not installed.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.report.compare import compare
from rig.report import render

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]

# Appended to a copy of the page: after `load`, record how every image decoded.
PROBE = """<script>window.addEventListener('load', () => {
  const imgs = [...document.images];
  const out = document.createElement('pre'); out.id = 'rig-probe';
  out.textContent = JSON.stringify({images: imgs.length,
    widths: imgs.map(i => i.complete ? i.naturalWidth : -1),
    h1: (document.querySelector('h1') || {}).textContent || '',
    tables: document.querySelectorAll('table').length});
  document.body.appendChild(out);
});</script>"""


def _chromium(args: list[str], url: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rig-chromium-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url],
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)


def browse(page: Path, tmp: Path) -> tuple[dict, list[str]]:
    """(probe result, console messages of the page) for a copy of `page` with PROBE."""
    probed = tmp / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    done = _chromium(["--dump-dom"], probed.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="rig-probe">(.*?)</pre>', done.stdout, re.S)
    assert m, "the probe never ran: the page did not finish loading"
    probe = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    console = [line for line in done.stderr.splitlines()
               if ":CONSOLE" in line and probed.name in line]
    return probe, console


def screenshot_ink(page: Path, tmp: Path) -> float:
    """Fraction of non-white pixels of a screenshot of the page."""
    from PIL import Image
    shot = tmp / "shot.png"
    done = _chromium([f"--screenshot={shot}", "--window-size=1280,2000"], page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    img = Image.open(shot).convert("L")
    hist = img.histogram()
    return 1 - sum(hist[245:]) / (img.width * img.height)


def test_report_html_renders_with_images_and_no_console_errors(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", concurrency=(1, 2), flagged_steps=[2])
    files = render(run)
    pngs = [f for f in files if f.suffix == ".png"]
    assert len(pngs) >= 3
    probe, console = browse(run / "report.html", tmp_path)
    assert probe["h1"].startswith("rig report")
    assert probe["images"] == len(pngs)
    assert all(w > 100 for w in probe["widths"]), probe["widths"]
    assert probe["tables"] >= 4
    assert console == []
    assert screenshot_ink(run / "report.html", tmp_path) > 0.02


def test_compare_html_renders_in_browser(tmp_path: Path) -> None:
    base = make_run(tmp_path / "a", seed=1)
    cand = make_run(tmp_path / "b", seed=2, window_bytes=2 * 2**20)
    result = compare(base, cand, tmp_path / "cmp")
    probe, console = browse(tmp_path / "cmp" / "compare.html", tmp_path)
    assert probe["h1"] == "rig compare"
    assert probe["images"] == 2 and all(w > 100 for w in probe["widths"])
    assert console == []
    assert result.exit_code == 1


def test_browser_checks_catch_broken_image_and_console_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><link rel=\"icon\" href=\"data:,\"></head>"
                   "<body><h1>x</h1><img src=\"data:image/png;base64,AAAA\">"
                   "<script>console.error('boom')</script></body></html>")
    probe, console = browse(bad, tmp_path)
    assert probe["widths"] == [0]
    assert any("boom" in line for line in console)


# Appended to a copy of report.html: where the headline sits in a 1,400 x 900 window, and
# whether the folded sections are shut (their tables not laid out).
FIRST_SCREEN = """<script>window.addEventListener('load', () => {
  const top = id => { const e = document.getElementById(id);
                      return e ? Math.round(e.getBoundingClientRect().top) : null; };
  const folds = [...document.querySelectorAll('details.more')];
  const inside = folds.flatMap(d => [...d.querySelectorAll('table, figure')]);
  const out = document.createElement('pre'); out.id = 'rig-probe';
  out.textContent = JSON.stringify({width: window.innerWidth, height: window.innerHeight,
    chart: top('headline-chart'), table: top('headline-table'),
    verdicts: top('headline-verdicts'), folds: folds.length,
    open: folds.filter(d => d.open).length, inside: inside.length,
    shown: inside.filter(e => e.checkVisibility()).length,
    page_width: document.documentElement.scrollWidth});
  document.body.appendChild(out);
});</script>"""
SCREEN_H = 900


def first_screen(page: Path, tmp: Path, html: str | None = None) -> dict:
    """The FIRST_SCREEN probe's result for `page` (or for `html` written beside it)."""
    probed = tmp / f"screen-{page.name}"
    probed.write_text((html or page.read_text()).replace("</body>", FIRST_SCREEN + "</body>"))
    done = _chromium(["--dump-dom", f"--window-size=1400,{SCREEN_H}"], probed.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="rig-probe">(.*?)</pre>', done.stdout, re.S)
    assert m, "the probe never ran: the page did not finish loading"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _on_first_screen(probe: dict) -> bool:
    """The headline's tops inside the window (headless Chromium's is 757 px tall at
    --window-size=1400,900: its own frame takes the rest)."""
    return all(probe[k] is not None and 0 <= probe[k] < min(SCREEN_H, probe["height"])
               for k in ("chart", "table", "verdicts"))


def test_report_opens_on_the_answer_at_1400px(tmp_path: Path) -> None:
    """Issue 41: at 1,400 px the throughput-vs-RTT chart, the table per client and RTT and
    the verdicts sit in the first screen; every other section is collapsed, and no table
    makes the page wider than the window. Controls: the same page with a tall block above
    the headline, and with its sections opened, fail the same checks."""
    run = make_run(tmp_path / "run", concurrency=(1, 2), flagged_steps=[2])
    render(run)
    page = run / "report.html"
    probe = first_screen(page, tmp_path)
    assert probe["width"] == 1400, probe
    assert _on_first_screen(probe), probe
    assert probe["folds"] >= 4 and probe["open"] == 0, probe
    assert probe["inside"] > 0 and probe["shown"] == 0, probe
    assert probe["page_width"] <= 1400, probe
    text = page.read_text()
    pushed = first_screen(page, tmp_path, text.replace(
        '<div class="flags', '<div style="height:1200px"></div><div class="flags', 1))
    assert not _on_first_screen(pushed), pushed
    opened = first_screen(page, tmp_path, text.replace('<details class="more">',
                                                       '<details class="more" open>'))
    # all but what sits in a nested, still closed <details> (engine statistics)
    assert opened["open"] == opened["folds"] and opened["shown"] >= opened["inside"] - 1 > 0, \
        opened
