"""A closed stdout ends quietly, as `cat` does (issue 31): `rig plan ... | head` and the
like. Each command runs as a real process whose stdout is a pipe already closed by its
reader, so its first write fails with EPIPE. The property: exit 141 (what a shell
reports for `cat` killed by SIGPIPE), nothing on stderr, no traceback. Real processes on
loopback only: no namespaces, no root.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.description.rootfile import generate

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

REPO = Path(__file__).resolve().parent.parent
CLOSED = 141
TIMEOUT = 120


def _closed_run(argv: list[str]) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    os.close(r)                       # the reader is gone before the first write
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=TIMEOUT, cwd=REPO)
    finally:
        os.close(w)


def _rig(*args: str) -> list[str]:
    return [sys.executable, "-m", "rig", *args]


def _fdt(*args: str) -> list[str]:
    return [sys.executable, "-m", "rig.fdt", *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    a, b = make_run(d / "a", seed=1, repeats=2), make_run(d / "b", seed=2, repeats=2)
    root = generate.ensure(generate.FileSpec(size_bytes=4 << 20, n_branches=20,
                                             cluster_bytes=1 << 20, seed=3), d / "root")
    return {"a": a, "b": b, "root": root, "d": d}


@pytest.mark.parametrize("label", [
    "plan", "plan-help", "rounds", "net-list", "compare", "report", "fdt-help",
    "fdt-serve"])
def test_closed_stdout_ends_quietly(runs, label, tmp_path):
    argv = {
        "plan": _rig("plan", "scenarios/tls-concurrency.yaml"),
        "plan-help": _rig("plan", "--help"),
        "rounds": _rig("plan", str(runs["root"]), "--rounds"),
        "net-list": _rig("net", "list"),
        "compare": _rig("compare", str(runs["a"]), str(runs["b"]), "--out", str(tmp_path / "o")),
        "report": _rig("report", str(runs["a"])),
        "fdt-help": _fdt("get", "--help"),
        "fdt-serve": _fdt("serve", "--root", str(tmp_path), "--bind", "127.0.0.1", "--port", "0"),
    }[label]
    done = _closed_run(argv)
    # --help: argparse drops a failed write itself and exits 0, also quiet
    want = {0, CLOSED} if label.endswith("help") else {CLOSED}
    assert done.returncode in want, (label, done.returncode, done.stderr[-2000:])
    assert done.stderr == "", (label, done.stderr[-2000:])


def test_fdt_get_with_a_closed_stdout_ends_quietly(tmp_path):
    (tmp_path / "f").write_bytes(os.urandom(1 << 20))
    srv = subprocess.Popen(_fdt("serve", "--root", str(tmp_path), "--bind", "127.0.0.1",
                                "--port", "0"), stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(srv.stdout.readline())["port"]
        done = _closed_run(_fdt("get", "--port", str(port), "--timeout", "60s",
                                "127.0.0.1", "f", str(tmp_path / "copy")))
        assert done.returncode == CLOSED, (done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
        assert (tmp_path / "copy").read_bytes() == (tmp_path / "f").read_bytes()
    finally:
        srv.terminate()
        srv.wait(timeout=30)
