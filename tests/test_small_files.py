"""Many small files as a workload (issue 40 item 7), the pure parts: a `files:` entry's
`count:` (one-line refusals naming file, key and value), a set's jobs (one invocation
naming every file for xrdcp and curl, one process per file for davix-get and `reuse:
false`), the list each tool reads, what a row says (files/s, time to first byte,
connections, curl's handshake times per file), and a set's check: a changed or missing
file fails the row. The runner of one process per file (rig/process/eachfile.py) is run
for real with cp and false. No root, no network."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig import checksum
from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration import transfer
from rig.realization import data
from rig.services import tools

REPO = Path(__file__).resolve().parent.parent


def _doc(**file_keys) -> dict:
    return {"name": "sf", "paths": [{"name": "wan", "kind": "emulated", "rtt": ["0ms"]}],
            "files": [{"name": "small", "size": "64KiB", "count": 3, **file_keys}],
            "servers": [{"name": "x", "kind": "xrootd"}],
            "sweep": {"tls": ["off", "all"]},
            "clients": [{"name": "xrdcp", "tool": "xrdcp", "file": "small"},
                        {"name": "curl", "tool": "curl", "file": "small"},
                        {"name": "curl-each", "tool": "curl", "file": "small",
                         "reuse": False},
                        {"name": "davix", "tool": "davix-get", "file": "small"}]}


def _load(tmp_path: Path, doc: dict) -> scenario.Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    return scenario.load(f)


def _refused(tmp_path: Path, doc: dict) -> str:
    with pytest.raises(InputError) as e:
        _load(tmp_path, doc)
    line = str(e.value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("keys, where, value", [
    ({"count": 0}, "files[0].count", "0"),
    ({"count": -1}, "files[0].count", "-1"),
    ({"count": 1.5}, "files[0].count", "1.5"),
    ({"count": 100001}, "files[0].count", "100001"),
    ({"count": 2000, "size": "1GiB"}, "files[0].count", "2000"),
    ({"size": "-1B"}, "files[0].size", "-1B"),
    ({"size": -1}, "files[0].size", "-1"),
    ({"kind": "root", "size": "1MiB"}, "files[0].count", "3"),
])
def test_a_bad_count_or_size_is_refused_in_one_line_naming_the_key_and_value(
        tmp_path, keys, where, value):
    line = _refused(tmp_path, _doc(**keys))
    assert where in line and value in line, line


def test_a_set_is_fetched_only_by_tools_that_can_and_reuse_only_for_a_set(tmp_path):
    doc = _doc()
    doc["clients"].append({"name": "w", "tool": "wget", "file": "small"})
    line = _refused(tmp_path, doc)
    assert "clients[4].file" in line and "wget does not fetch a set" in line
    doc = _doc()
    doc["clients"][3]["reuse"] = True        # davix-get has no such key
    assert "clients[3].reuse" in _refused(tmp_path, doc)
    doc = _doc()
    doc["files"].append({"name": "one", "size": "1MiB"})
    doc["clients"][2]["file"] = "one"        # reuse: false of a single file
    assert "clients[2].reuse: only for a client of a set" in _refused(tmp_path, doc)
    doc = _doc()
    doc["clients"][0]["checksum"] = False
    assert "clients[0].checksum: every file of a set (count:) is checked" in \
        _refused(tmp_path, doc)
    doc = _doc()
    doc["clients"][1]["direction"] = "upload"
    assert "clients[1].file: a set of files (count:) is downloaded only" in \
        _refused(tmp_path, doc)
    # and the good one loads, its members named in order
    sc = _load(tmp_path, _doc())
    f = sc.file("small")
    assert f.members == ["small/00000", "small/00001", "small/00002"]
    assert f.total == 3 * (64 << 10)


def _jobs(sc, checksums=None, keep_dir="/k", prefix="rig00aa"):
    from rig.orchestration.acts import servers as server_act
    from rig.realization import netns
    path = netns.lay_out(sc.topology, prefix, 0, "wan", "198.18.0.0/24",
                         servers=scenario.server_count(sc))
    plans = server_act.plans(sc, path, Path("/run/rig") / prefix)
    out = {}
    for g in steps.groups(sc):
        (j,) = transfer.build_jobs(sc, g, plans, path.server_addr, 5201, prefix,
                                   checksums=checksums, keep_dir=keep_dir)
        out[(g.client.name, g.tls)] = (tools.get(g.client.tool).command(j), j)
    return out


def test_each_tool_fetches_the_set_as_a_user_would(tmp_path):
    sc = _load(tmp_path, _doc())
    sums = {m: f"0000000{i}" for i, m in enumerate(sc.file("small").members)}
    jobs = _jobs(sc, checksums=sums)
    argv, j = jobs[("xrdcp", "off")]
    assert argv[-3:] == ["--infiles", "/k/rig00aa-xrdcp-0.list", "/k/rig00aa-xrdcp-0/"]
    assert "--cksum" not in argv                      # one value only: checked after
    assert j.files[0][1].splitlines() == [u for u, _, _ in j.members]
    assert j.members[2][1:] == ("small/00002", "00000002") and j.file_bytes == 3 << 16
    argv, j = jobs[("xrdcp", "all")]
    assert all(u.startswith("roots://") for u, _, _ in j.members)
    argv, j = jobs[("curl", "all")]
    assert argv[-2:] == ["--config", "/k/rig00aa-curl-0.list"] and "--cacert" in argv
    assert j.files[0][1].splitlines()[:2] == [
        f'url = "{j.members[0][0]}"', 'output = "/k/rig00aa-curl-0/00000"']
    assert j.members[0][0].startswith("https://")
    for name in ("curl-each", "davix"):
        argv, j = jobs[(name, "off")]
        assert argv[1:4] == ["-m", "rig.process.eachfile", "--list"], argv
        assert argv[-2:] in (["{dest}", "{url}"], ["{url}", "{dest}"])
        assert j.files[0][1].splitlines()[1] == \
            f"{j.members[1][0]}\t/k/rig00aa-{name}-0/00001"


def _outcome(job, stdout="", rc=0, wall=2.0, first=None):
    from rig.process.proc import Result
    res = Result(["x"], rc, stdout, "", wall, 0.1, 0.1)
    return transfer.Outcome(job, ["x"], {}, res, 0.0, 0.0, first_s=first)


def _curl_line(connects, tc, ta, code=200):
    return json.dumps({"http_code": code, "size_download": 65536, "num_connects": connects,
                       "time_connect": tc, "time_appconnect": ta,
                       "time_starttransfer": ta + 0.02, "time_total": ta + 0.03})


def test_a_row_gives_files_per_second_ttfb_and_curls_handshakes_per_file(tmp_path):
    sc = _load(tmp_path, _doc())
    jobs = _jobs(sc, checksums={})
    # curl over TLS, one connection reused: the one handshake divided over three files
    _, j = jobs[("curl", "all")]
    out = "\n".join([_curl_line(1, 0.02, 0.06), _curl_line(0, 0, 0), _curl_line(0, 0, 0)])
    m = transfer.measure(_outcome(j, out, first=0.09))
    c = m["set_columns"]
    assert m["ok"] and c["files"] == 3 and c["files_per_s"] == pytest.approx(1.5)
    assert c["connections"] == 1 and c["ttfb_s"] == 0.09
    assert c["connect_s_per_file"] == pytest.approx(0.02 / 3)
    assert c["tls_s_per_file"] == pytest.approx(0.04 / 3)
    # plain: no TLS column; a 404 among them fails the row, naming the file
    _, j = jobs[("curl", "off")]
    out = "\n".join([_curl_line(1, 0.02, 0), _curl_line(0, 0, 0), _curl_line(0, 0, 0, 404)])
    m = transfer.measure(_outcome(j, out, rc=22))
    assert not m["ok"] and m["error"] == "file small/00002: HTTP 404"
    assert m["set_columns"]["files_per_s"] is None and m["set_columns"]["tls_s_per_file"] is None
    # fewer lines than files: not ok
    m = transfer.measure(_outcome(j, _curl_line(1, 0.02, 0)))
    assert not m["ok"] and m["error"] == "1 of 3 files fetched"


def test_one_process_per_file_is_timed_from_the_first_file_and_names_a_failed_one(tmp_path):
    sc = _load(tmp_path, _doc())
    jobs = _jobs(sc, checksums={})
    _, j = jobs[("davix", "off")]
    lines = [json.dumps({"i": i, "rc": 0, "start_s": 0.05 + i, "first_s": 0.3,
                         "wall_s": 1.0, "out": "", "err": ""}) for i in range(3)]
    m = transfer.measure(_outcome(j, "\n".join(lines), wall=3.5))
    c = m["set_columns"]
    assert m["ok"] and m["duration_s"] == pytest.approx(3.0)    # the runner's start left out
    assert c["files_per_s"] == pytest.approx(1.0) and c["ttfb_s"] == 0.3
    assert c["connections"] == 3 and c["connect_s_per_file"] is None
    bad = lines[:1] + [json.dumps({"i": 1, "rc": 2, "start_s": 1.05, "first_s": None,
                                   "wall_s": 0.1, "out": "", "err": "Connection refused"})]
    m = transfer.measure(_outcome(j, "\n".join(bad), rc=2))
    assert not m["ok"] and m["error"] == "file small/00001: Connection refused"


def test_a_set_is_checked_file_by_file_and_a_changed_or_missing_one_fails_the_row(tmp_path):
    sc = _load(tmp_path, _doc())
    sums: dict[str, str] = {}
    served = tmp_path / "data"
    served.mkdir()
    data._fill(served, sc.files, {}, 0, None, checksums=sums)
    assert sorted(sums) == sc.file("small").members
    assert all(sums[m] == checksum.of_file(str(served / m)) for m in sums)
    keep = tmp_path / "keep"
    jobs = _jobs(sc, checksums=sums, keep_dir=str(keep))
    _, j = jobs[("curl", "off")]
    import shutil
    shutil.copytree(served / "small", j.dest)
    Path(j.list_file).write_text("x")
    info, why = transfer.verify_set(j, True)
    assert why is None and info["mismatched"] == 0 and info["files"] == 3
    data.corrupt(Path(j.dest) / "00001")
    info, why = transfer.verify_set(j, True)
    assert info["mismatched"] == 1
    assert why.startswith("1 of 3 files failed their check; first: small/00001: "
                          "adler32 mismatch: got "), why
    (Path(j.dest) / "00002").unlink()
    info, why = transfer.verify_set(j, True)
    assert info["mismatched"] == 2 and "small/00001" in why
    # the rows: a failed check fails the row, drops files/s and the aggregate, removes
    row = transfer.rows([_outcome(j, "\n".join(_curl_line(1, 0.01, 0) for _ in range(3)))],
                        {"run_id": "r", "step": 0, "path": "p", "backend": "none",
                         "concurrency": 1, "repeat": 0})
    assert row[0].ok and row[0].files_per_s
    transfer.verify_downloads([_outcome(j)], row)
    assert not row[0].ok and row[0].error.startswith("2 of 3 files failed their check")
    assert row[0].files_per_s is None and row[0].aggregate_bps is None
    assert not Path(j.dest).exists() and not Path(j.list_file).exists()


def test_the_runner_of_one_process_per_file_times_each_and_stops_at_a_failure(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}").write_bytes(b"x" * 1000)
    out = tmp_path / "out"
    out.mkdir()
    lst = tmp_path / "list"
    lst.write_text("".join(f"{src / f'f{i}'}\t{out / f'f{i}'}\n" for i in range(3)))
    cmd = [sys.executable, "-m", "rig.process.eachfile", "--list", str(lst), "--timeout",
           "30", "--"]
    p = subprocess.run([*cmd, "cp", "{url}", "{dest}"], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    recs = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert p.returncode == 0 and [r["i"] for r in recs] == [0, 1, 2] and \
        all(r["rc"] == 0 for r in recs)
    assert all((out / f"f{i}").read_bytes() == b"x" * 1000 for i in range(3))
    for f in out.iterdir():
        f.unlink()
    p = subprocess.run([*cmd, "false", "{url}"], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    recs = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert p.returncode == 1 and len(recs) == 1 and recs[0]["rc"] == 1
    assert recs[0]["first_s"] is None


def test_the_plan_shows_a_long_list_shortened(tmp_path):
    doc = _doc(count=40)
    sc = _load(tmp_path, doc)
    from rig.orchestration.plan import build_plan
    lines = "\n".join(build_plan(sc).described())
    assert "#   .. 36 more lines, 40 in all" in lines
    assert "# write small/00000 .. small/00039: 40 files of 65536 random bytes" in lines


def test_the_report_table_gives_medians_and_the_tls_cost_per_file_as_a_difference():
    from rig.report import small_files
    from rig.results.store import TransferRow

    def row(client, tls, fps, ok=True, conns=None, tls_s=None, rtt=20.0):
        return TransferRow(path="wan", rtt_ms_configured=rtt, client=client, tls=tls, ok=ok,
                           files=10, files_per_s=fps if ok else None, ttfb_s=0.05,
                           connections=conns, connect_s_per_file=0.002 if conns else None,
                           tls_s_per_file=tls_s)
    rows = [row("curl", "off", 10.0, conns=1), row("curl", "off", 20.0, conns=1),
            row("curl", "off", 30.0, conns=1), row("curl", "all", 8.0, conns=1, tls_s=0.004),
            row("curl", "all", 1.0, ok=False), row("xrdcp", "off", 5.0),
            TransferRow(path="wan", rtt_ms_configured=20.0, client="big", ok=True,
                        throughput_bps=1e9)]
    m = small_files.medians(rows)
    assert set(m) == {("wan", 20.0, "curl", "off"), ("wan", 20.0, "curl", "all"),
                      ("wan", 20.0, "xrdcp", "off")}            # a failed row, a big file: no
    assert m[("wan", 20.0, "curl", "off")]["files_per_s"] == 20.0
    assert m[("wan", 20.0, "curl", "off")]["repeats"] == 3
    run = type("R", (), {"transfers": rows})()
    header, body = small_files.table(run)
    by = {(b[2], b[3]): dict(zip(header, b)) for b in body}
    assert by[("curl", "all")]["ms_per_file"] == "125"
    assert by[("curl", "off")]["ms_per_file"] == "50"
    assert by[("curl", "all")]["tls_extra_ms_per_file"] == "75"     # 125 - 50
    assert by[("curl", "all")]["tls_ms_per_file"] == "4"
    assert by[("curl", "off")]["tls_extra_ms_per_file"] == ""
    assert by[("xrdcp", "off")]["connections"] == ""
    assert small_files.has_files(run) and not small_files.has_files(
        type("R", (), {"transfers": rows[-1:]})())


def test_rig_fdt_takes_the_set_in_one_session_up_to_its_limit(tmp_path):
    doc = _doc()
    doc["servers"] = [{"name": "f", "kind": "fdt"}]
    doc["sweep"] = {}
    doc["clients"] = [{"name": "fdt", "tool": "fdt", "file": "small", "streams": 2}]
    sc = _load(tmp_path, doc)
    (argv, j), = _jobs(sc, checksums={}).values()
    assert argv[-4:] == ["small/00000", "small/00001", "small/00002", "/k/rig00aa-fdt-0"]
    assert "--checksum" not in argv and j.files == ()     # names on its command line
    doc["files"][0]["count"] = 4097
    line = _refused(tmp_path, doc)
    assert "clients[0].file: fdt takes at most 4096 files at once; the set has 4097" in line
