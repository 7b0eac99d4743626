"""Uploads (issue 26 item 3): the direction as an axis, each tool's upload argv, the
server side made writable only where some client uploads, and each stored copy checked
by size and adler32 then removed. Pure: no root, nothing started."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration import transfer
from rig.process import proc
from rig.services import servers, tools

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests/data/scenarios/upload-small.yaml"


def test_sweep_direction_adds_an_upload_beside_each_download_that_can_write():
    sc = scenario.load(SMALL)
    got = sorted({(g.client.name, g.client.direction) for g in steps.groups(sc)})
    names = ("xrdcp", "curl-xrootd", "davix-nginx", "curl-apache", "scp", "fdt")
    assert got == sorted([(n, "download") for n in (*names, "wget")]
                         + [(f"{n}@upload", "upload") for n in names])
    # 13 configurations x concurrency 1 and 2
    assert len(steps.groups(sc)) == scenario.measurements(sc) == 26
    assert scenario.upload_servers(sc) == {"xrootd", "nginx", "apache", "sshd", "fdt"}


def _jobs(sc, prefix="rig00aa"):
    from rig.orchestration import origins
    from rig.realization import netns
    path = netns.lay_out(sc.topology, prefix, 0, "wan", "198.18.0.0/24",
                         servers=scenario.server_count(sc))
    plans = origins.server_plans(sc, path, Path("/run/rig") / prefix, Path("/d"))
    out = {}
    for g in steps.groups(sc):
        if g.concurrency == 2:
            (j0, j1) = transfer.build_jobs(sc, g, plans, path.server_addr, 5201, prefix)
            out[g.client.name] = (tools.get(g.client.tool).command(j0), j0, j1)
    return out, plans


def test_each_tool_sends_the_served_file_to_the_server_s_upload_folder():
    jobs, plans = _jobs(scenario.load(SMALL))
    argv = {k: v[0] for k, v in jobs.items()}
    assert argv["xrdcp@upload"][-2:] == ["/d/f16M",
                                         "root://198.18.0.6:1094//upload/rig00aa-xrdcp-upload-0"]
    assert argv["curl-xrootd@upload"][-1] == "http://198.18.0.6:8000/upload/rig00aa-curl-xrootd-upload-0"
    assert argv["curl-xrootd@upload"][argv["curl-xrootd@upload"].index("--upload-file") + 1] == "/d/f16M"
    assert argv["davix-nginx@upload"][0] == "davix-put"
    assert argv["davix-nginx@upload"][-2:] == ["/d/f16M", "http://198.18.0.6:8090/upload/rig00aa-davix-nginx-upload-0"]
    assert argv["scp@upload"][-2:] == ["/d/f16M", "www-data@198.18.0.6:/d/upload/rig00aa-scp-upload-0"]
    assert argv["fdt@upload"][-2:] == ["/d/f16M", "upload/rig00aa-fdt-upload-0"]
    assert "put" in argv["fdt@upload"] and "--upload-file" not in argv["curl-xrootd"]
    # each process its own name; each stored copy where this host can check it
    _, j0, j1 = jobs["xrdcp@upload"]
    assert (j0.stored, j1.stored) == ("/d/upload/rig00aa-xrdcp-upload-0",
                                      "/d/upload/rig00aa-xrdcp-upload-1")
    assert jobs["xrdcp"][1].direction == "download" and jobs["xrdcp"][1].stored == ""
    # the servers written to take writes there, and only there
    files = {n: servers.server_files(ps[0]) for n, ps in plans.items()}
    assert "dav_methods PUT;" in files["nginx"]["nginx.conf"]
    assert "Dav On" in files["apache"]["apache2.conf"]
    assert "internal-sftp -d /d" in files["sshd"]["sshd_config"]
    sc = scenario.load(REPO / "scenarios/quick-ipv6.yaml")
    _, plans = _jobs(sc)
    ro = {n: servers.server_files(ps[0]) for n, ps in plans.items()}
    assert "dav_methods" not in ro["nginx"]["nginx.conf"] and "Dav" not in ro["apache"]["apache2.conf"]
    assert "internal-sftp -R" in ro["sshd"]["sshd_config"]


def _doc(tmp_path, **over) -> Path:
    d = {"name": "u", "paths": [{"name": "wan", "rtt": ["0ms"]}],
         "files": [{"name": "f", "size": "1MiB"}],
         "servers": [{"name": "x", "kind": "xrootd"}, {"name": "n", "kind": "nginx"}],
         "clients": [{"name": "c", "tool": "curl", "server": "n", "file": "f"}]}
    d.update(over)
    f = tmp_path / "u.yaml"
    f.write_text(json.dumps(d))
    return f


@pytest.mark.parametrize("over, key, msg", [
    ({"clients": [{"name": "w", "tool": "wget", "server": "n", "file": "f",
                   "direction": "upload"}]}, "clients[0].direction", "wget cannot upload"),
    ({"sweep": {"direction": ["download", "upload"]},
      "clients": [{"name": "w", "tool": "wget", "server": "n", "file": "f"}]},
     "sweep.direction", "no client can upload"),
    ({"sweep": {"direction": ["upload", "upload"]}}, "sweep.direction", "a direction named twice"),
    ({"sweep": {"direction": ["sideways"]}}, "sweep.direction[0]", "must be one of"),
    ({"servers": [{"name": "o", "kind": "xrootd"}, {"name": "x", "kind": "xcache", "origin": "o"}],
      "topology": "xcache",
      "clients": [{"name": "c", "tool": "xrdcp", "server": "x", "file": "f",
                   "direction": "upload"}]},
     "clients[0].direction", "a xcache server does not accept xrdcp's writes"),
    ({"storage": {"kind": "disk", "dir": "/var/tmp"},
      "clients": [{"name": "c", "tool": "curl", "server": "n", "file": "f",
                   "direction": "upload"}]},
     "clients[0].direction", "uploads go to the run's tmpfs"),
    ({"clients": [{"name": "c", "tool": "curl", "server": "n", "file": "f",
                   "direction": "upload", "dest_dir": "/tmp"}]}, "clients[0].dest_dir",
     "no dest_dir"),
    ({"clients": [{"name": "c", "tool": "xrdcp", "server": "x", "file": "f",
                   "direction": "upload", "sources": 2}]}, "clients[0].sources",
     "it does not upload"),
])
def test_bad_uploads_are_one_line(tmp_path, over, key, msg):
    f = _doc(tmp_path, **over)
    with pytest.raises(InputError) as e:
        scenario.load(f)
    assert (e.value.key, e.value.file) == (key, str(f)) and msg in str(e.value), str(e.value)


def _outcome(tmp_path, name: str, stored: bytes | None, rc: int = 0):
    src = tmp_path / "f"
    if not src.exists():
        src.write_bytes(bytes(range(256)) * 4096)
    dst = tmp_path / "upload" / name
    dst.parent.mkdir(exist_ok=True)
    if stored is not None:
        dst.write_bytes(stored)
    c = scenario.ClientSpec(name="c@upload", tool="curl", protocol="http", direction="upload")
    job = tools.Job(c, 1, url="http://x/upload/" + name, file_bytes=src.stat().st_size,
                    direction="upload", src=str(src), stored=str(dst))
    res = proc.Result(["curl"], rc, json.dumps({"http_code": 201, "size_upload": job.file_bytes,
                                                "time_total": 0.5}), "", 0.6, 0.1, 0.1)
    return transfer.Outcome(job, ["curl"], {}, res, 0.0, 0.0), dst


def test_each_stored_copy_is_checked_then_removed(tmp_path):
    whole = bytes(range(256)) * 4096
    good, g = _outcome(tmp_path, "good", whole)
    bad, b = _outcome(tmp_path, "bad", whole[:-1] + b"\x00")
    short, s = _outcome(tmp_path, "short", whole[:1000])
    gone, _ = _outcome(tmp_path, "gone", None)
    outs = [good, bad, short, gone]
    rows = transfer.rows(outs, {"run_id": "r", "step": 0, "path": "p", "backend": "none",
                                "concurrency": 4, "repeat": 0})
    assert all(r.ok for r in rows) and rows[0].bytes == len(whole)
    assert rows[0].duration_s == 0.5 and rows[0].direction == "upload"
    known: dict[str, str] = {}
    transfer.verify_uploads(outs, rows, known)
    want = f"{zlib.adler32(whole):08x}"
    assert known == {str(tmp_path / "f"): want}
    assert rows[0].ok and json.loads(rows[0].extra)["upload_adler32"] == want
    assert not rows[1].ok and rows[1].error.startswith("upload checksum mismatch: adler32 ")
    assert not rows[2].ok and rows[2].error == f"upload stored 1000 of {len(whole)} bytes"
    assert not rows[3].ok and rows[3].error.startswith("upload not on the server (")
    assert not any(p.exists() for p in (g, b, s))
    assert transfer.adler32_of(str(tmp_path / "f")) == want
