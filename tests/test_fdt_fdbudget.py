"""rig-fdt's descriptor budget per session (issue 31 item 6): a hello that names a file a
thousand times holds at most filepool.SESSION_FILES descriptors, and another client's
get meanwhile succeeds; a get of more files than the bound still delivers every file.

Loopback only (127.0.0.1, ephemeral ports, a private tmp root), as test_fdt_security."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from rig.fdt import protocol as p
from rig.fdt.filepool import SESSION_FILES, FilePool
from rig.fdt.transport import TransferError
from test_fdt_loopback import PY, _cli, _recv_msg, _stop

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

HOSTILE_NAMES = 1000
SLACK_FDS = 4          # the hostile session's control socket, and descriptors that come and go


def _server(root: Path, limit: int) -> tuple[subprocess.Popen, int]:
    """rig-fdt serve with RLIMIT_NOFILE `limit` (1024: a stock shell's)."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
            f"({limit}, {limit})); from rig.fdt.cli import main; sys.exit(main())")
    proc = subprocess.Popen([PY, "-c", code, "serve", "--root", str(root), "--bind",
                             "127.0.0.1", "--port", "0", "--connect-timeout", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)["port"]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    (r / "f.bin").write_bytes(os.urandom(300_000))
    for i in range(3 * SESSION_FILES):
        (r / f"m{i:03d}.bin").write_bytes(os.urandom(20_000 + 997 * i))
    return r


def test_a_hello_naming_a_file_1000_times_cannot_starve_another_get(root: Path,
                                                                      tmp_path: Path) -> None:
    srv, port = _server(root, 1024)
    hostile = None
    try:
        before = _fds(srv.pid)
        hostile = socket.create_connection(("127.0.0.1", port), timeout=20)
        hostile.sendall(p.CONTROL_MAGIC + p.encode(p.Hello(
            "get", "", 4, 1 << 16, True, names=["f.bin"] * HOSTILE_NAMES)))
        ready = _recv_msg(hostile)
        assert isinstance(ready, p.Ready) and len(ready.sizes or []) == HOSTILE_NAMES, ready
        held = _fds(srv.pid) - before          # the session waits for its 4 streams now
        assert held <= SESSION_FILES + SLACK_FDS, f"{held} descriptors for one session"
        # someone else's ordinary get, while the hostile session is alive
        dest = tmp_path / "got.bin"
        r = _cli("get", "--port", str(port), "--streams", "2", "--connect-timeout", "10",
                 "127.0.0.1", "f.bin", str(dest), timeout=60)
        assert r.returncode == 0, r.stderr
        assert dest.read_bytes() == (root / "f.bin").read_bytes()
    finally:
        if hostile is not None:
            hostile.close()
        rc = _stop(srv)
    assert rc == 0


def test_a_get_of_more_files_than_the_bound_delivers_every_file(root: Path,
                                                                tmp_path: Path) -> None:
    srv, port = _server(root, 1024)
    try:
        names = sorted(f.name for f in root.glob("m*.bin"))
        out = tmp_path / "out"
        out.mkdir()
        r = _cli("get", "--port", str(port), "--streams", "4", "--block", "16KiB",
                 "127.0.0.1", *names, str(out), timeout=120)
        assert r.returncode == 0, r.stderr
        for n in names:
            assert hashlib.sha256((out / n).read_bytes()).digest() == \
                hashlib.sha256((root / n).read_bytes()).digest(), n
    finally:
        rc = _stop(srv)
    assert rc == 0


# ------------------------------------------------------------------ the pool itself

def _opener(d: Path):
    return lambda name: os.open(d / name, os.O_RDONLY)


def test_pool_holds_at_most_its_bound_and_one_descriptor_per_repeated_name(tmp_path):
    for i in range(40):
        (tmp_path / f"{i}").write_bytes(b"x" * (i + 1))
    names = [str(i) for i in range(40)] + ["3"] * 500
    pool = FilePool(_opener(tmp_path), names, limit=5)
    assert pool.stat_all() == [i + 1 for i in range(40)] + [4] * 500
    for i in range(len(names)):
        with pool.use(i) as fd:
            assert os.pread(fd, 100, 0) == b"x" * pool.sizes[i]
        assert pool.open_count() <= 5
    assert pool.peak == 5
    pool.close()
    assert pool.open_count() == 0


def test_pool_refuses_a_file_replaced_after_its_size_was_promised(tmp_path):
    (tmp_path / "a").write_bytes(b"old")
    pool = FilePool(_opener(tmp_path), ["a"], limit=2)
    pool.stat_all()
    (tmp_path / "a").rename(tmp_path / "a.old")     # kept: its inode is not reused
    (tmp_path / "a").write_bytes(b"new!")
    with pytest.raises(TransferError, match="replaced"):
        with pool.use(0):
            pass
    pool.close()
