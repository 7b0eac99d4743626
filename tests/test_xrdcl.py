"""The `xrdcl` client tool: XrdCl 6.x (PyPI's xrootd wheel in .venv-xrdcl6, `make xrdcl6`)
copying through CopyProcess. Pure tests of its argv, environment and parsing, and one
real copy from a real xrootd 5.5 server on the loopback of a namespace of this test's
own (e2e: root)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from rig.description.scenario import ClientSpec
from rig.errors import InputError
from rig.services.tools import Job
from rig.services.tools import xrdcl as X

TOOL = X.Xrdcl()


def _job(**kw) -> Job:
    return Job(ClientSpec.of(name="x6", tool="xrdcl", **kw), 4, url="root://10.0.0.2:1094//f",
               relpath="f", file_bytes=1 << 20, timeout_s=60.0)


def test_argv_env_and_binary() -> None:
    argv = TOOL.argv(_job())
    assert argv == [str(X.SIDE_PYTHON), str(X.HELPER), "--streams", "4",
                    "root://10.0.0.2:1094//f", "/dev/null"]
    assert TOOL.argv(_job(binary="/opt/xrd5/bin/python"))[0] == "/opt/xrd5/bin/python"
    env = TOOL.env(_job(env={"XRD_CPPARALLELCHUNKS": "8", "XRD_CPUSEPGWRTRD": "0"}))
    assert env["XRD_CPPARALLELCHUNKS"] == "8" and env["XRD_CPUSEPGWRTRD"] == "0"
    assert env["XRD_CONNECTIONRETRY"] == "1"          # fails fast, as xrdcp does here
    assert TOOL.row_fields(_job(), env) == {"page_checksum": 0}


def test_parse_keeps_the_version_and_names_failures() -> None:
    out = json.dumps({"xrdcl_version": "v6.2.1", "streams": 4, "chunk_size": 8388608,
                      "parallel_chunks": 4, "copy_seconds": 0.5})
    p = TOOL.parse(out + "\n", "", 0, _job())
    assert p.error is None and p.extra["xrdcl_version"] == "v6.2.1"
    bad = TOOL.parse("", "xrdcl-copy: [ERROR] [FATAL] Connection error\n", 1, _job())
    assert bad.error == "xrdcl-copy: [ERROR] [FATAL] Connection error"
    assert TOOL.parse("{}", "", 0, _job()).error.startswith("xrdcl-copy json output lacks")
    assert TOOL.parse("not json", "", 0, _job()).error == "no xrdcl-copy json output"


def test_a_run_without_the_side_environment_is_one_line(monkeypatch, tmp_path) -> None:
    from types import SimpleNamespace
    monkeypatch.setattr(X, "SIDE_PYTHON", tmp_path / "absent" / "python")
    sc = SimpleNamespace(source="s.yaml", clients=[ClientSpec(name="a", tool="xrdcp"),
                                                   ClientSpec(name="b", tool="xrdcl")])
    with pytest.raises(InputError) as e:
        X.require_side_env(sc)
    assert str(e.value).startswith("s.yaml: clients[1].tool: needs XrdCl 6")
    sc.clients[1] = ClientSpec(name="b", tool="xrdcl", binary="/opt/x/python")
    X.require_side_env(sc)                               # its own interpreter: no check


@pytest.mark.e2e
def test_a_real_copy_through_copyprocess(require_tools) -> None:
    """4 streams from xrootd 5.5 into a file: byte-identical, version and streams in the
    JSON the row keeps."""
    require_tools("xrootd")
    if not X.SIDE_PYTHON.exists():
        pytest.fail(f"{X.MISSING} (make install runs it)")
    from rig.process import nsprobe, proc
    from rig.realization import netns
    ns = f"{netns.new_prefix()}-0x"
    w = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
    w.chmod(0o755)
    (w / "data").mkdir()
    src = os.urandom(24 * (1 << 20) + 4321)
    (w / "data" / "f").write_bytes(src)
    (w / "x.cfg").write_text(f"oss.localroot {w / 'data'}\nall.export / nolock\n"
                             f"xrd.network nodnr\nxrd.port 1094\nall.adminpath {w / 'admin'}\n"
                             f"all.pidpath {w / 'run'}\n")
    pw = pwd.getpwnam("xrootd")
    for root, dirs, files in os.walk(w):
        for n in [root, *(os.path.join(root, x) for x in dirs + files)]:
            os.chown(n, pw.pw_uid, pw.pw_gid)
    proc.run(["ip", "netns", "add", ns], timeout=10, check=True)
    svc = None
    try:
        proc.run(["ip", "-n", ns, "link", "set", "lo", "up"], timeout=10, check=True)
        svc = proc.Service(["xrootd", "-R", "xrootd", "-n", ns, "-c", str(w / "x.cfg"),
                            "-l", str(w / "log")], netns=ns, log_path=w / "out.log").start()
        nsprobe.wait_tcp(ns, "127.0.0.1", 1094, timeout=20, what="xrootd", alive=svc.alive)
        dest = w / "copy"
        job = Job(ClientSpec(name="x6", tool="xrdcl"), 4, url="root://127.0.0.1:1094//f",
                  relpath="f", file_bytes=len(src), timeout_s=60.0, dest=str(dest))
        r = proc.run(TOOL.argv(job), timeout=90, netns=ns, env=TOOL.env(job))
        assert r.returncode == 0, r.stderr
        parsed = TOOL.parse(r.stdout, r.stderr, r.returncode, job)
        assert parsed.error is None
        assert parsed.extra["xrdcl_version"].startswith("v6.")
        assert parsed.extra["streams"] == 4
        assert dest.read_bytes() == src
    finally:
        if svc is not None:
            svc.stop()
        proc.run(["ip", "netns", "del", ns], timeout=10)
        shutil.rmtree(w, ignore_errors=True)
    assert ns not in netns.list_namespaces()
