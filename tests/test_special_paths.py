"""No path a user names can make a command hang (issue 31 item 6): a FIFO, /dev/zero,
a directory, a socket or a symlink to a FIFO, named as a ROOT file (`rig plan`, a
scenario's `files[].path`), as a scenario, as a results folder's database (`rig report`,
`rig compare`), as an ssh identity, or as `rig-fdt put` SRC / `get` DEST, is refused in
one line with no traceback, well within a deadline (a hang is a timeout here)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

REPO = Path(__file__).resolve().parent.parent
DEADLINE_S = 60          # a refusal takes well under a second; a hang never ends
KINDS = ("fifo", "devzero", "directory", "socket", "symlink-fifo")


@pytest.fixture
def special(tmp_path):
    """A factory: a special file of `kind` at tmp_path/name (sockets bound, closed after)."""
    socks: list[socket.socket] = []

    def make(kind: str, name: str) -> Path:
        p = tmp_path / name
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "devzero":
            p.symlink_to("/dev/zero")
        elif kind == "directory":
            p.mkdir()
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(p))
            socks.append(s)
        else:
            real = tmp_path / f"real-{p.name}"
            os.mkfifo(real)
            p.symlink_to(real)
        return p
    yield make
    for s in socks:
        s.close()


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} hung for {DEADLINE_S}s")


def _refused(r: subprocess.CompletedProcess, rc: int = 2) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


RIG = [sys.executable, "-m", "rig"]


@pytest.mark.parametrize("kind", KINDS)
def test_rig_plan_root_file(kind, special, tmp_path):
    p = special(kind, "x.root")
    line = _refused(_run(RIG + ["plan", str(p), "--mode", "storage"], tmp_path))
    assert str(p) in line and ("not a regular file" in line or "is a socket" in line), line


@pytest.mark.parametrize("kind", KINDS)
def test_scenario_root_path(kind, special, tmp_path):
    p = special(kind, "x.root")
    s = {"name": "c", "paths": [{"name": "wan", "rtt": "10ms"}],
         "files": [{"name": "aod", "kind": "root", "path": str(p)}],
         "servers": [{"name": "xrootd", "kind": "xrootd"}],
         "clients": [{"name": "st", "tool": "replay", "mode": "storage", "library": "xrootd",
                      "server": "xrootd", "file": "aod"}]}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(s))
    line = _refused(_run(RIG + ["plan", str(f)], tmp_path))
    assert "files[0].path" in line and "not a regular file" in line or "is a socket" in line


@pytest.mark.parametrize("kind", KINDS)
def test_scenario_file_itself(kind, special, tmp_path):
    p = special(kind, "s.yaml")
    line = _refused(_run(RIG + ["plan", str(p)], tmp_path))
    assert str(p) in line or p.name in line, line


@pytest.mark.parametrize("kind", KINDS)
def test_ssh_identity(kind, special, tmp_path):
    p = special(kind, "id")
    s = {"name": "c", "hosts": {"far": {"ssh": "me@far", "identity": str(p)}},
         "paths": [{"name": "wan", "rtt": "10ms"}],
         "files": [{"name": "f", "size": "1MiB"}],
         "servers": [{"name": "nginx", "kind": "nginx"}],
         "clients": [{"name": "c", "tool": "curl", "server": "nginx", "file": "f"}]}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(s))
    line = _refused(_run(RIG + ["plan", str(f)], tmp_path))
    assert "identity" in line and ("not a regular file" in line), line


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cmd", ["report", "compare"])
def test_results_database(kind, cmd, special, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    special(kind, "run/results.sqlite")
    argv = RIG + (["report", str(run)] if cmd == "report"
                  else ["compare", str(run), str(run), "--out", str(tmp_path / "cmp")])
    line = _refused(_run(argv, tmp_path))
    assert "results.sqlite" in line, line


@pytest.mark.parametrize("kind", KINDS)
def test_fdt_put_source(kind, special, tmp_path):
    p = special(kind, "src")
    # the source is opened before any connection: no server is needed to prove it
    r = _run([sys.executable, "-m", "rig.fdt", "put", "127.0.0.1", str(p), "dst",
              "--port", "9"], tmp_path)
    line = _refused(r, rc=1)
    assert str(p) in line, line


def test_fdt_get_dest_fifo_without_reader(tmp_path):
    """A FIFO as a get's DEST with nobody reading it: refused at once (ENXIO), where a
    blocking open would wait for a reader forever."""
    from rig.fdt.client import _Dest
    fifo = tmp_path / "dest"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as e:
        _Dest(str(fifo), 10)
    assert e.value.errno == 6     # ENXIO


@pytest.mark.parametrize("kind", ["fifo", "devzero", "socket", "symlink-fifo"])
@pytest.mark.parametrize("cmd", ["report", "compare"])
def test_a_special_file_where_a_report_writes_is_refused(kind, cmd, special, tmp_path):
    """`rig report` writes into the run folder, `rig compare` into --out: a FIFO planted
    where summary.csv (or any output) goes would block the writer forever."""
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_results import make_run
    a = make_run(tmp_path / "a", seed=1, rtts=(0, 20))
    if cmd == "report":
        special(kind, "a/summary.csv")
        argv = RIG + ["report", str(a)]
    else:
        b = make_run(tmp_path / "b", seed=2, rtts=(0, 20))
        (tmp_path / "cmp").mkdir()
        special(kind, "cmp/compare.csv")
        argv = RIG + ["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]
    line = _refused(_run(argv, tmp_path))
    assert "in the output folder" in line, line
