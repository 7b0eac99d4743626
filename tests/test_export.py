"""rig export and the archiver (issue 41 item 5): one record per transfer in JSON, NDJSON
and CSV with the versioned schema, its point, verdict, artefact, environment and
provenance; posted to a local HTTP server in the OpenSearch _bulk shape and one POST per
record, with a bearer token; a refused or silent archive is one line, within its deadline.
Pure but for a loopback HTTP server in a thread."""
from __future__ import annotations

import csv
import io
import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.errors import InputError, RigError
from rig.report import archive, export
from rig.report.model import load_run

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("exp") / "run"
    return make_run(d, rtts=(0, 20), repeats=2, flagged_steps=(1,), failing=[("curl", 0.0)],
                    env={"scenario_text": "name: syn\n", "scenario_file": "s.yaml"})


def test_one_record_per_transfer_with_point_verdict_and_provenance(run_dir):
    run = load_run(run_dir)
    recs = export.records(run)
    assert len(recs) == len(run.transfers) > 0
    assert {r["schema"] for r in recs} == {export.SCHEMA}
    r0 = recs[0]
    assert set(r0) == {"schema", "point", "transfer", "verdict", "artefact", "provenance",
                       "environment"}
    assert r0["provenance"]["run_id"] == "syn" and len(r0["provenance"]["scenario_sha256"]) == 64
    assert "scenario_text" not in r0["environment"]
    assert r0["verdict"]["kind"] and r0["verdict"]["text"].startswith(r0["verdict"]["kind"])
    # a failed transfer carries no throughput; the flagged step's points are artefacts
    failed = [r for r in recs if not r["transfer"]["ok"]]
    assert failed and all(r["transfer"]["throughput_bps"] is None and r["transfer"]["error"]
                          for r in failed)
    assert all(r["artefact"] for r in recs if r["point"]["rtt_ms"] == 20.0)
    assert not any(r["artefact"] for r in recs if r["point"]["rtt_ms"] == 0.0)


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_each_format_reads_back(run_dir, tmp_path, fmt):
    out = export.write(run_dir, fmt, str(tmp_path / f"x.{fmt}"))
    text = Path(out).read_text()
    n = len(load_run(run_dir).transfers)
    if fmt == "json":
        doc = json.loads(text)
        assert doc["schema"] == export.SCHEMA and len(doc["records"]) == n
    elif fmt == "ndjson":
        lines = text.splitlines()
        assert len(lines) == n and all(json.loads(ln)["schema"] == export.SCHEMA for ln in lines)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
        assert len(rows) == n and rows[0]["schema"] == export.SCHEMA
        assert {"point.rtt_ms", "transfer.throughput_bps", "verdict.kind", "artefact",
                "provenance.run_id", "environment"} <= set(rows[0])
        assert json.loads(rows[0]["environment"])["scenario_file"] == "s.yaml"


def test_bad_input_is_one_line_and_writes_nothing(run_dir, tmp_path):
    for argv, says in ((["export", str(tmp_path / "none")], "does not exist"),
                       (["export", str(run_dir), "--format", "xml"], "--format"),
                       (["export", str(run_dir), "--out", str(tmp_path)], "is a folder"),
                       (["export", str(run_dir), "--post", "ftp://x/"], "http:// or https://"),
                       (["export", str(run_dir), "--post", "http://127.0.0.1:9/",
                         "--token-file", str(tmp_path / "missing")], "--token-file")):
        p = subprocess.run([sys.executable, "-m", "rig", *argv], capture_output=True,
                           text=True, timeout=120, cwd=REPO)
        assert p.returncode == 2, (argv, p.stderr)
        err = p.stderr.strip()
        assert says in err and "\n" not in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


class _Archive(BaseHTTPRequestHandler):
    got: list[tuple[str, dict, bytes]] = []
    answer: tuple[int, dict] = (200, {"errors": False, "items": []})

    def do_POST(self):           # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, dict(self.headers), body))
        code, doc = type(self).answer
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture()
def server():
    _Archive.got, _Archive.answer = [], (200, {"errors": False, "items": []})
    srv = HTTPServer(("127.0.0.1", 0), _Archive)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_opensearch_bulk_and_http_shapes_with_a_token(run_dir, tmp_path, server):
    recs = export.records(load_run(run_dir))
    tok = tmp_path / "tok"
    tok.write_text("s3cret\n")
    assert archive.post(recs, server + "/", index="hep", token_file=str(tok)) == len(recs)
    (path, headers, body), = _Archive.got
    assert path == "/_bulk" and headers["Content-Type"] == "application/x-ndjson"
    assert headers["Authorization"] == "Bearer s3cret"
    lines = body.decode().splitlines()
    assert len(lines) == 2 * len(recs)
    assert all(json.loads(a) == {"index": {"_index": "hep"}} for a in lines[::2])
    assert [json.loads(r) for r in lines[1::2]] == json.loads(json.dumps(recs))
    _Archive.got = []
    assert archive.post(recs[:3], server + "/in", shape="http") == 3
    assert [(p, h["Content-Type"]) for p, h, _ in _Archive.got] == [
        ("/in", "application/json")] * 3
    assert "Authorization" not in _Archive.got[0][1]


def test_a_refusing_archive_is_one_line(run_dir, server):
    recs = export.records(load_run(run_dir))[:2]
    _Archive.answer = (200, {"errors": True, "items": [
        {"index": {"status": 400, "error": {"type": "mapper_parsing_exception"}}}]})
    with pytest.raises(RigError, match="refused records .*mapper_parsing_exception"):
        archive.post(recs, server)
    _Archive.answer = (401, {})
    with pytest.raises(RigError, match=r"answered 401"):
        archive.post(recs, server, shape="http")
    with pytest.raises(InputError, match="--shape"):
        archive.post(recs, server, shape="grafana")


def test_a_silent_archive_fails_at_its_deadline(run_dir):
    recs = export.records(load_run(run_dir))[:1]
    with socket.socket() as s:          # accepts, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(RigError, match="did not take the records"):
            archive.post(recs, f"http://127.0.0.1:{s.getsockname()[1]}", timeout_s=0.5)
