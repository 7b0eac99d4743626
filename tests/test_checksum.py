"""Checksums on every download (issue 40 item 6), the pure logic: the adler32 taken once
as the rig makes a file, each tool's way of checking its bytes against it (xrdcp/xrdcl
`--cksum adler32:<value>`, rig-fdt `--checksum` and its reported value, a kept file the
rig checksums after the group, a TPC destination's copy), and what a row says: a match is
ok, a mismatch a failed row with `adler32 mismatch: got X, want Y` and no aggregate."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from rig import checksum
from rig.description import scenario, steps
from rig.orchestration import transfer
from rig.orchestration.acts import data as data_act
from rig.process import proc
from rig.realization import data
from rig.services import tools

REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/checksum-small.yaml"
COMMON = {"run_id": "r", "step": 0, "path": "p", "backend": "none", "concurrency": 2,
          "repeat": 0}


def test_adler32_forms_and_the_mismatch_reason():
    assert checksum.of_file.__doc__ and checksum.hexdigest(zlib.adler32(b"abc")) == "024d0127"
    assert checksum.normal("0x24D0127") == "024d0127" and checksum.normal("xyz") is None
    assert checksum.mismatch("024D0127", "024d0127") is None
    assert checksum.mismatch("1a2b3c4d", "5e6f7a8b") == \
        "adler32 mismatch: got 1a2b3c4d, want 5e6f7a8b"
    assert checksum.mismatch(None, "5e6f7a8b") == "adler32 mismatch: got nothing, want 5e6f7a8b"


def test_a_made_file_has_its_adler32_taken_as_it_is_written_and_corrupt_changes_it(tmp_path):
    p = tmp_path / "f"
    made = data.write_random(p, (8 << 20) + 5, seed=3)
    assert made == checksum.of_file(str(p))
    off = data.corrupt(p)
    assert off == ((8 << 20) + 5) // 2 and checksum.of_file(str(p)) != made


def _jobs(sc, checksums=None, keep_dir="/k", prefix="rig00aa"):
    from rig.orchestration import origins
    from rig.realization import netns
    path = netns.lay_out(sc.topology, prefix, 0, "wan", "198.18.0.0/24",
                         servers=scenario.server_count(sc))
    plans = origins.server_plans(sc, path, Path("/run/rig") / prefix, Path("/d"))
    out = {}
    for g in steps.groups(sc):
        (j,) = transfer.build_jobs(sc, g, plans, path.server_addr, 5201, prefix,
                                   checksums=checksums, keep_dir=keep_dir)
        out[g.client.name] = (tools.get(g.client.tool).command(j), j)
    return out


def test_each_tool_checks_against_the_value_the_rig_made():
    sc = scenario.load(SCEN)
    jobs = _jobs(sc, {"good": "0000abcd", "bad": "1234abcd"})
    argv = {k: v[0] for k, v in jobs.items()}
    # the tool's own end-to-end option, given the rig's value (never adler32:source)
    assert argv["xrdcp-good"][argv["xrdcp-good"].index("--cksum") + 1] == "adler32:0000abcd"
    assert argv["xrdcp-good"][-1] == "/dev/null"
    assert "--checksum" in argv["fdt-bad"] and jobs["fdt-bad"][1].adler32 == "1234abcd"
    # no such option: a kept file in the downloads folder, checksummed after the group
    for name in ("curl-good", "davix-good", "wget-good", "scp-good"):
        assert jobs[name][1].dest == f"/k/rig00aa-{name}-0", name
        assert jobs[name][1].dest in argv[name], name
    # a third-party copy: the destination's copy, where this host sees it
    assert jobs["tpc-bad"][1].stored == "/d/incoming/tpc-bad-0"
    # `rig plan`: the value is not known yet
    plan = _jobs(sc, None)
    assert "adler32:<adler32 of good>" in plan["xrdcp-good"][0]
    # a client on another host: no kept file (xrdcp still checks)
    remote = _jobs(sc, {"good": "0000abcd", "bad": "1234abcd"}, keep_dir=None)
    assert remote["curl-good"][1].dest == "/dev/null"
    assert data_act.keep_size(sc) == (4 << 20) + (16 << 20)


def test_without_checksum_true_the_raw_figure_is_left(tmp_path):
    """Opt-in: a client without `checksum: true` (or with false) is unchecked, to
    /dev/null, its row says `how: off`; http-tpc (no such key) is always checked."""
    for repl in ("checksum: false,", ""):
        f = tmp_path / "s.yaml"
        f.write_text(SCEN.read_text().replace("checksum: true,", repl))
        jobs = _jobs(scenario.load(f), {"good": "0000abcd", "bad": "1234abcd"})
        assert "--cksum" not in jobs["xrdcp-good"][0] and "--checksum" not in jobs["fdt-good"][0]
        assert jobs["curl-good"][1].dest == "/dev/null"
        info, why = transfer.verdict(jobs["curl-good"][1], True, None, {})
        assert info["how"] == "off" and why is None
        assert jobs["tpc-bad"][1].stored == "/d/incoming/tpc-bad-0"
        assert data_act.keep_size(scenario.load(f)) == 0


def _kept(tmp_path, name: str, body: bytes, want: str, rc: int = 0):
    dest = tmp_path / name
    dest.write_bytes(body)
    c = scenario.ClientSpec(name=name, tool="curl", protocol="http",
                            options=tools.DestDir(checksum=True))
    job = tools.Job(c, 1, url="http://x/f", file_bytes=len(body), dest=str(dest),
                    adler32=want)
    out = json.dumps({"http_code": 200 if rc == 0 else 404, "size_download": len(body),
                      "time_total": 0.5})
    res = proc.Result(["curl"], rc, out, "", 0.6, 0.1, 0.1, io_wchar=len(body),
                      io_done_s=0.5)
    return transfer.Outcome(job, ["curl"], {}, res, 0.0, 0.0), dest


def test_a_kept_copy_is_checked_after_the_group_then_removed(tmp_path):
    body = bytes(range(256)) * 4096
    want = checksum.hexdigest(zlib.adler32(body))
    good, g = _kept(tmp_path, "good", body, want)
    bad, b = _kept(tmp_path, "bad", body[:-1] + b"\x00", want)
    rows = transfer.rows([good, bad], COMMON)
    assert all(r.ok for r in rows) and rows[0].aggregate_bps      # before the check
    transfer.verify_downloads([good, bad], rows)
    got = checksum.of_file.__name__ and checksum.hexdigest(zlib.adler32(body[:-1] + b"\x00"))
    assert rows[0].ok and json.loads(rows[0].extra)["checksum"] == {
        "how": "kept", "algo": "adler32", "want": want, "got": want}
    assert not rows[1].ok and rows[1].error == f"adler32 mismatch: got {got}, want {want}"
    assert rows[0].aggregate_bps is None and rows[1].aggregate_bps is None
    assert not g.exists() and not b.exists()


def test_a_failed_transfer_is_not_read_and_keeps_its_own_reason(tmp_path):
    body = b"x" * 1000
    o, d = _kept(tmp_path, "f", body, "00000001", rc=22)
    rows = transfer.rows([o], COMMON)
    transfer.verify_downloads([o], rows)
    assert not rows[0].ok and rows[0].error == "HTTP 404"
    assert not d.exists()


def test_the_tool_s_own_check_fails_the_row_in_its_parse():
    sc = scenario.load(SCEN)
    jobs = _jobs(sc, {"good": "0000abcd", "bad": "1234abcd"})
    x = jobs["xrdcp-bad"][1]
    p = tools.get("xrdcp").parse("", "Run: [ERROR] CheckSum error\n", 53, x)
    assert p.error == ("adler32 mismatch: got another value (xrdcp --cksum: CheckSum error), "
                       "want 1234abcd")
    f = jobs["fdt-bad"][1]
    out = json.dumps({"bytes": 4 << 20, "seconds": 0.1, "throughput_bps": 3e8, "streams": 2,
                      "cpu_user_s": 0, "cpu_sys_s": 0, "checksum_adler32": "99990000"})
    p = tools.get("fdt").parse(out, "", 0, f)
    assert p.error == "adler32 mismatch: got 99990000, want 1234abcd"
    assert tools.get("fdt").parse(out.replace("99990000", "1234abcd"), "", 0, f).error is None


@pytest.mark.parametrize("tool,how", [("xrdcp", "tool"), ("xrdcl", "tool"), ("fdt", "tool"),
                                      ("curl", "kept"), ("davix-get", "kept"),
                                      ("wget", "kept"), ("scp", "kept"),
                                      ("http-tpc", "destination"), ("replay", "ranges"),
                                      ("iperf3", "none")])
def test_every_tool_says_how_its_downloads_are_checked(tool, how):
    assert tools.get(tool).verify == how
    assert set(t.verify for t in tools.all_tools()) <= set(tools.VERIFY)


def test_a_remote_client_s_kept_file_is_not_read_here(tmp_path):
    o, d = _kept(tmp_path, "f", b"x" * 1000, "00000001")
    info, why = transfer.verdict(o.job, True, None, {}, remote=True)
    assert info["how"] == "unchecked" and why is None
