"""XCache end to end (issue 26 item 1): a reduced scenario through real namespaces, a real
xrootd origin behind the emulated WAN and real XrdPfc caches on the client's LAN, read by
xrdcp and curl: direct, warm (the first one fills the cache first) and cold reads, with
the bytes the cache fetched from the origin; two cache daemons each fetch the file
once. Then a run killed with SIGKILL (and `rig clean`) or SIGTERM in the middle of a cold
read leaves no cache daemon, no cache directory, nothing of the run."""
from __future__ import annotations

import json
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultrig import end_run

from rig.process import owner
from rig.realization import netns

pytestmark = pytest.mark.e2e
SMALL = Path(__file__).resolve().parent / "data/scenarios/xcache-small.yaml"
FILE = 16 << 20


def _rows(out: Path) -> list[dict]:
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM transfers ORDER BY rowid")]
    finally:
        db.close()


def test_direct_cold_and_warm_reads_record_what_the_cache_fetched(tmp_path, require_tools):
    require_tools("xrootd", "xrdcp", "xrdpfc_print", "curl")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(SMALL), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(out)
    assert rows and all(x["ok"] for x in rows), [(x["client"], x["error"]) for x in rows]
    by: dict[str, list[dict]] = {}
    for x in rows:
        by.setdefault(x["client"], []).append({**x, "x": json.loads(x["extra"] or "{}")})
    assert "cache" not in by["direct"][0]["x"]
    # the first warm read found the cache empty: filled first, unmeasured
    assert [w["x"]["cache_prefilled"] for w in by["warm"]] == [True, False]
    for name in ("warm", "warm-http"):
        for w in by[name]:
            assert w["x"]["cache"] == "warm" and w["x"]["cache_bytes_before"] == FILE
            assert w["x"]["origin_bytes"] == 0
            assert w["x"]["origin_wire_bytes"] < 256 << 10      # the origin sent ~nothing
    for c in by["cold"]:
        assert c["x"]["cache"] == "cold" and c["x"]["cache_bytes_before"] == 0
        assert c["x"]["origin_bytes"] == FILE                  # the bitmap: every block
        # the origin's interface: the file plus headers (Ethernet/IP/TCP, < 10 %)
        assert FILE <= c["x"]["origin_wire_bytes"] < 1.1 * FILE, c["x"]
    pair = by["pair-cold"]
    assert len(pair) == 4 and {p["x"]["cache_instance"] for p in pair} == {"pair-1", "pair-2"}
    assert all(p["x"]["origin_bytes"] == FILE for p in pair)   # each daemon fetched it once
    # warm reads cross only the client's LAN; cold ones wait for the origin at 20 ms
    warm = statistics.median(w["throughput_bps"] for w in by["warm"])
    cold = statistics.median(c["throughput_bps"] for c in by["cold"])
    assert warm > 1.5 * cold, (warm, cold)
    assert "| wan | 20 | cold | cache cold |" in (out / "xcache.md").read_text()
    db = sqlite3.connect(out / "results.sqlite")
    try:
        prefix = json.loads(db.execute("SELECT value_json FROM environment WHERE key = "
                                       "'prefix'").fetchone()[0])
    finally:
        db.close()
    assert not (netns.STATE_DIR / prefix).exists()       # its cache directories with it


def _cmd(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_during_a_cold_read_leaves_no_cache(tmp_path, require_tools, sig):
    require_tools("xrootd", "xrdcp", "xrdpfc_print")
    doc = SMALL.read_text().replace("rtt: [20ms]", "rtt: [120ms]")
    scen = tmp_path / "kill.yaml"
    scen.write_text(doc)
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(scen), "--out",
                          str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    prefix, procs, cache_dir = None, {}, None
    try:
        deadline = time.monotonic() + 180
        seen = []
        while time.monotonic() < deadline and p.poll() is None:
            line = p.stderr.readline()
            seen.append(line)
            if "cold streams=1" in line or "filling" in line:
                break
        prefix = next((s["prefix"] for s in netns.read_states().values()
                       if s.get("pid") == p.pid), None)
        assert prefix, "".join(seen)[-2000:]
        cache_dir = netns.STATE_DIR / prefix / "wan-cache" / "cache"
        while time.monotonic() < deadline and p.poll() is None:   # a read fills the cache
            if (cache_dir / "f16M.cinfo").exists():
                break
            time.sleep(0.02)
        assert (cache_dir / "f16M.cinfo").exists(), "".join(seen)[-2000:]
        for ns in netns.list_namespaces():
            if ns.startswith(prefix + "-"):
                procs.update({q: _cmd(q) for q in netns.ns_pids(ns)})
        assert any("wan-cache" in c for c in procs.values()), procs
    finally:
        starts = {q: owner.start_time(q) for q in procs}
        end_run(p, sig)
    if sig == signal.SIGKILL:
        assert cache_dir is not None and cache_dir.is_dir()     # left by the killed run
        r = subprocess.run([sys.executable, "-m", "rig", "clean"], capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        assert f"removing {prefix} (run, pid {p.pid} gone)" in r.stdout + r.stderr
    else:
        assert p.returncode != 0
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    alive = {q: c for q, c in procs.items() if owner.alive(q, starts[q])}
    assert not alive, alive                     # the origin, both cache daemons, xrdcp
    assert not (netns.STATE_DIR / prefix).exists()      # the cache directories with it
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
