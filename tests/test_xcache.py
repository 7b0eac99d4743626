"""XCache server kind (issue 26 item 1), pure: the cache's config and placement, bad input
(one line naming file, key and value; exit 2 and nothing created from the CLI), the
bitmap reader on xrdpfc_print's output, and the direct / cold / warm table from rows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import scenario, steps
from rig.errors import InputError, RigError
from rig.orchestration import plan, transfer, xcache
from rig.orchestration.origins import server_plans
from rig.realization import netns
from rig.report import tables, xcache as xreport
from rig.report.model import Run
from rig.results.store import TransferRow, ValidationRow

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "scenarios/xcache-small.yaml"
MiB = 1 << 20


def _doc() -> dict:
    return yaml.safe_load(SMALL.read_text())


def _load(tmp_path: Path, doc: dict) -> scenario.Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    return scenario.load(f)


def _plans(sc: scenario.Scenario):
    path = netns.lay_out(sc.topology, "rig0000", 0, "wan", "198.18.0.0/24")
    return path, server_plans(sc, path, Path("/w"), Path("/d"))


def test_the_cache_sits_on_the_clients_lan_and_reads_the_origin_over_the_wan():
    sc = scenario.load(SMALL)
    path, plans = _plans(sc)
    origin, cache = plans["origin"][0], plans["cache"][0]
    assert (origin.ns, cache.ns) == ("rig0000-0s", "rig0000-0x")
    lan = next(ln for ln in path.links if "c" in ln.members)
    assert "x" in lan.members and "s" not in lan.members and lan.kind == "bridge"
    cfg = cache.kind.files(cache)["xrootd.cfg"].splitlines()
    assert f"pss.origin {origin.addr}:{origin.ports['root']}" in cfg
    assert "pss.cachelib libXrdPfc.so" in cfg and "ofs.osslib libXrdPss.so" in cfg
    assert "oss.localroot /w/wan-cache/cache" in cfg and "pfc.ram 1g" in cfg
    assert cache.kind.prepare_argv(cache) == [["mkdir", "-p", "/w/wan-cache/cache"]]
    # two daemons: their own ports and cache directories, in the cache's namespace
    a, b = plans["pair"]
    assert a.ns == b.ns == "rig0000-0x" and a.ports != b.ports
    assert {a.workdir.name, b.workdir.name} == {"wan-pair-1", "wan-pair-2"}
    lines = "\n".join(plan.plan_lines(sc))
    assert "mkdir -p /run/rig/rig0000/wan-cache/cache" in lines
    assert f"#   pss.origin {origin.addr}:1094" in lines


def test_a_group_through_two_daemons_reads_one_each():
    sc = scenario.load(SMALL)
    _, plans = _plans(sc)
    c = sc.clients[-1]
    jobs = transfer.build_jobs(sc, steps.Group(c, 1, 2, 0), plans, "x", 0)
    assert [j.origin for j in jobs] == ["pair-1", "pair-2"]
    assert jobs[0].url != jobs[1].url and all(j.url.startswith("root://198.18.0.3:")
                                              for j in jobs)


@pytest.mark.parametrize("change, match", [
    (lambda d: d["servers"][1].pop("origin"),
     r"servers\[1\]\.origin: a xcache server needs origin: \(the server whose files"),
    (lambda d: d["servers"][1].update(origin="nope"), r"servers\[1\]\.origin: no server of that"),
    (lambda d: d["servers"][1].update(origin="cache"), r"servers\[1\]\.origin: a cache reads "),
    (lambda d: d["servers"][1].update(origin="pair"), r"origin that is not a cache \(here: origin\)"),
    (lambda d: d["servers"][0].update(origin="cache"), r"servers\[0\]\.origin: only a cache"),
    (lambda d: d["servers"][1].pop("node"),
     r"servers\[1\]\.node: a xcache server sits on the client's side .* give it node: x"),
    (lambda d: d.update(topology="client-router-server", servers=[
        {"name": "origin", "kind": "xrootd"}, {"name": "cache", "kind": "xcache",
                                               "origin": "origin"}],
                      clients=d["clients"][:4]),
     r"servers\[1\]\.node: .*\(topology xcache\); client-router-server has none"),
    (lambda d: d["servers"][0].update(node="x"), r"servers\[1\]\.origin: origin origin is on"),
    (lambda d: d["clients"][0].update(cache="warm"),
     r"clients\[0\]\.cache: only for a client reading through a cache"),
    (lambda d: d["clients"][1].update(cache="tepid"),
     r"clients\[1\]\.cache: must be one of cold, warm"),
    (lambda d: d["clients"][1].update(tls="all"), r"clients\[1\]\.tls: a xcache server does not"),
    (lambda d: d["clients"][1].update(tool="fdt"), r"clients\[1\]\.server: fdt cannot talk"),
])
def test_bad_cache_input_is_one_line(tmp_path, change, match):
    doc = _doc()
    change(doc)
    with pytest.raises(InputError, match=match) as e:
        _load(tmp_path, doc)
    assert "\n" not in str(e.value)


def test_a_cache_without_an_origin_exits_2_from_the_cli_and_creates_nothing(tmp_path):
    doc = _doc()
    doc["servers"][1].pop("origin")
    f = tmp_path / "x.yaml"
    f.write_text(yaml.safe_dump(doc))
    state = tmp_path / "state"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(f), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, RIG_STATE_DIR=str(state)))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"rig: {f}: servers[1].origin:")
    assert not (tmp_path / "out").exists()
    assert not state.exists() or not any(state.iterdir())


# xrdpfc_print 5.5.3 on a cinfo of a 64 MiB file, captured here (complete, and 10 blocks)
FULL = """FILE: cdata/f64M.cinfo
version 4, created Thu Nov 26 12:56:39 2026; cksum net
file_size 65536 kB, buffer_size 1024 kB, n_blocks 64, n_downloaded 64, state complete [100.000%]
Access records (N_acc_total=1):
"""


def test_bytes_held_from_the_bitmap_summary():
    assert xcache.parse_held(FULL, 64 * MiB) == 64 * MiB
    part = FULL.replace("n_downloaded 64, state complete [100.000%]",
                        "n_downloaded 10, state incomplete [15.625%]")
    assert xcache.parse_held(part, 64 * MiB) == 10 * MiB
    # a 10.5 MiB file fully held: its size, not 11 blocks
    odd = FULL.replace("n_blocks 64, n_downloaded 64", "n_blocks 11, n_downloaded 11")
    assert xcache.parse_held(odd, 10 * MiB + MiB // 2) == 10 * MiB + MiB // 2
    with pytest.raises(RigError, match="no block summary"):
        xcache.parse_held("garbage", 1)


def _row(step, rtt, client, server, rep, bps, extra=None, inst=0, conc=1, **more):
    return TransferRow(path="wan", rtt_ms_configured=rtt, client=client, server=server,
                       concurrency=conc, repeat=rep, step=step, instance=inst, ok=True,
                       started_at=100.0, duration_s=8 * 16 * MiB / bps, aggregate_bps=bps,
                       throughput_bps=bps, bytes=16 * MiB, extra=json.dumps(extra or {}),
                       **more)


def test_the_table_puts_direct_cold_and_warm_side_by_side(tmp_path):
    rows = []
    for step, rtt in ((0, 0.0), (1, 60.0)):
        for rep in (0, 1):
            rows.append(_row(step, rtt, "direct", "origin", rep, 1e9 / (1 + rtt / 10)))
            rows.append(_row(step, rtt, "cold", "cache", rep, 5e8 / (1 + rtt / 10),
                             {"cache": "cold", "cache_origin": "origin",
                              "origin_bytes": 16 * MiB, "origin_wire_bytes": 17e6}))
            rows.append(_row(step, rtt, "warm", "cache", rep, 2e9,
                             {"cache": "warm", "cache_origin": "origin",
                              "origin_bytes": 0, "origin_wire_bytes": 1000}))
    run = Run(tmp_path, {}, {}, rows, [], [], [])
    assert xreport.has_cache(run)
    header, body = xreport.table(run)
    got = {(r[1], r[2]): dict(zip(header, r)) for r in body}
    assert got[("0", "direct")]["read"] == "direct"
    assert got[("0", "direct")]["origin_MB"] == "16.78"
    assert got[("60", "cold")]["read"] == "cache cold"
    assert got[("60", "cold")]["origin_MB"] == "16.78" and got[("60", "cold")]["origin_wire_MB"] == "17"
    assert got[("60", "warm")]["origin_MB"] == "0" and got[("60", "warm")]["MB_s"] == "250"
    written = xreport.write(run, tmp_path, tables.markdown, tables.write_csv)
    md = (tmp_path / "xcache.md").read_text()
    assert [p.name for p in written] == ["xcache.csv", "xcache.md"]
    assert "- wan warm (cache warm): 60 ms / 0 ms throughput = 1.00" in md
    assert "- wan direct (direct): 60 ms / 0 ms throughput = 0.14" in md
    from rig.report import html
    page = "".join(html._measurements(run, {}))
    assert "Direct vs cold vs warm cache" in page and "<td>cache warm</td>" in page
    plain = Run(tmp_path, {}, {}, [_row(0, 0.0, "d", "o", 0, 1e9)], [], [], [])
    assert not xreport.has_cache(plain) and xreport.write(plain, tmp_path, None, None) == []


def test_warm_cache_reads_are_not_judged_against_the_wan_s_bounds():
    """A warm cache on the client's LAN serves every byte itself: the WAN path's window
    and capacity are no bound of those reads (they were: "177 % of window bound")."""
    from rig.report.model import build_points
    rows = []
    for rep in (0, 1):
        for name, extra in (("direct", {}), ("cold", {"cache": "cold"}),
                            ("warm", {"cache": "warm"})):
            rows.append(_row(1, 60.0, name, "cache", rep, 2e9, extra, tool="xrdcp", streams=1,
                             window_bytes=8 * MiB))
    val = ValidationRow(path="wan", step=1, phase="before", capacity_bps=5e9,
                        rtt_ms_configured=60.0, rtt_ms_measured=60.0)
    pts = {p.key.client: p for p in build_points(rows, [val])}
    assert pts["warm"].warm_cache and pts["warm"].window_bound_bps() is None
    assert pts["warm"].path_bound_bps() is None
    for name in ("direct", "cold"):
        assert not pts[name].warm_cache
        assert pts[name].window_bound_bps() == pytest.approx(8 * MiB * 8 / 0.06)
