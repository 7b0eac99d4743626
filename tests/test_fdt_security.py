"""rig-fdt as a server on a real DTN: what a hostile or careless peer must not achieve.

Loopback only (127.0.0.1, ephemeral ports, a private tmp root).  Covers: no write
outside the root (planted symlinks at the temporary name, '.', '/', '..', symlinked
components), reads of regular files only (a FIFO does not freeze the server), running
out of descriptors (the server refuses new sessions, keeps the ones it has, survives),
partial uploads removed on every way a session dies, numeric CLI misuse as one-line
errors, a connect timeout that says so, and random bytes on a live server's sockets.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from rig.fdt import protocol as p
from test_fdt_loopback import PY, _cli, _recv_msg, _start_server, _stop

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

CLEAN_S = 3.0                 # a dead session's leftovers must be gone within this


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    (r / "f.bin").write_bytes(os.urandom(300_000))
    return r


@pytest.fixture
def server(root: Path):
    proc, port = _start_server(root, "--connect-timeout", "3", "--stall-timeout", "2")
    yield port
    assert _stop(proc) == 0, proc.stderr.read()


def _tree(d: Path) -> dict[str, bytes | str]:
    """Every entry below d (hidden ones too): file contents, symlink targets."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(d):
        for n in dirs + files:
            f = Path(dirpath) / n
            rel = str(f.relative_to(d))
            out[rel] = ("-> " + os.readlink(f)) if f.is_symlink() else \
                (f.read_bytes() if f.is_file() else "dir")
    return out


def _result(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout.splitlines()[-1])


def _get_ok(port: int, tmp_path: Path, root: Path) -> None:
    dest = tmp_path / "check.bin"
    r = _cli("get", "--port", str(port), "--connect-timeout", "3", "127.0.0.1", "f.bin",
             str(dest), timeout=20)
    assert r.returncode == 0, r.stderr
    assert dest.read_bytes() == (root / "f.bin").read_bytes()
    dest.unlink()


# ------------------------------------------------------------ nothing outside the root

def test_put_through_a_planted_temporary_symlink_never_writes_outside(
        server: int, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("original\n")
    (root / ".planted.rig-fdt-part").symlink_to(outside / "victim")
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(65536))
    r = _cli("put", "--port", str(server), "127.0.0.1", str(src), "planted")
    assert (outside / "victim").read_text() == "original\n"
    assert r.returncode == 0, r.stderr          # the upload itself is fine, and lands here
    assert (root / "planted").read_bytes() == src.read_bytes()
    assert not (root / "planted").is_symlink()
    assert os.readlink(root / ".planted.rig-fdt-part") == str(outside / "victim")


@pytest.mark.parametrize("name", [".", "/", "..", "../x", "sub/../x", "/etc/x", "a//b",
                                  "x/", "./x", "linkdir/x", "linkfile", "sub"])
def test_put_to_names_that_are_not_a_plain_file_below_root_is_refused(
        server: int, root: Path, tmp_path: Path, name: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep\n")
    (root / "sub").mkdir()
    (root / "linkdir").symlink_to(outside)
    (root / "linkfile").symlink_to(outside / "keep")
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(65536))
    before = _tree(tmp_path)
    r = _cli("put", "--port", str(server), "127.0.0.1", str(src), name)
    assert r.returncode == 1, r.stdout
    assert _result(r)["error"].startswith("server refused"), r.stderr
    assert _tree(tmp_path) == before                 # nothing written anywhere


@pytest.mark.parametrize("name", ["inlink", "linkdir/secret", "escape", "sub", "sub/",
                                  "/f.bin", "./f.bin"])
def test_get_serves_only_regular_files_reached_without_symlinks(
        server: int, root: Path, tmp_path: Path, name: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret\n")
    (root / "sub").mkdir()
    (root / "inlink").symlink_to(root / "f.bin")
    (root / "linkdir").symlink_to(outside)
    (root / "escape").symlink_to(outside / "secret")
    r = _cli("get", "--port", str(server), "127.0.0.1", name, str(tmp_path / "got"))
    assert r.returncode == 1 and _result(r)["error"].startswith("server refused"), r.stdout
    assert not (tmp_path / "got").exists()


def test_names_are_checked_before_any_file_is_touched() -> None:
    from rig.fdt import safefs
    for bad in ("", ".", "..", "/", "/a", "a/", "a//b", "a/./b", "a/../b", "a\x00b",
                "\ud800"):
        with pytest.raises(safefs.PathRefused):
            safefs.split_name(bad)
    assert safefs.split_name("a/b.c/..d") == ["a", "b.c", "..d"]


def test_the_fallback_walk_refuses_symlinks_as_openat2_does(root: Path,
                                                            tmp_path: Path) -> None:
    """Kernels without openat2: the component walk with O_NOFOLLOW gives the same answers."""
    from rig.fdt import safefs
    (root / "sub").mkdir()
    (root / "sub" / "g.bin").write_bytes(b"g")
    (root / "linkdir").symlink_to(tmp_path)
    (root / "lnk").symlink_to(root / "f.bin")
    rfd = safefs.open_root(str(root))
    saved = safefs._have_openat2
    try:
        for mode in (saved, False):
            safefs._have_openat2 = mode
            fd = safefs.open_read(rfd, "sub/g.bin")
            assert os.read(fd, 10) == b"g"
            os.close(fd)
            for bad in ("linkdir/root/f.bin", "lnk", "sub"):
                with pytest.raises(safefs.PathRefused):
                    safefs.open_read(rfd, bad)
    finally:
        safefs._have_openat2 = saved
        os.close(rfd)


# ------------------------------------------------------- nothing freezes or ends the server

def test_a_fifo_in_the_root_is_refused_and_does_not_freeze_the_server(
        server: int, root: Path, tmp_path: Path) -> None:
    os.mkfifo(root / "pipe")
    # a server frozen on open() of the FIFO would trip the client's 3 s connect timeout
    # (another error); the harness's 30 s deadline is only the hang guard
    r = _cli("get", "--port", str(server), "--connect-timeout", "3", "127.0.0.1", "pipe",
             str(tmp_path / "got"), timeout=30)
    assert r.returncode == 1 and "not a regular file" in _result(r)["error"], r.stdout
    _get_ok(server, tmp_path, root)


def _low_fd_server(root: Path, limit: int) -> tuple[subprocess.Popen, int]:
    """rig-fdt serve in a process whose descriptor limit is `limit`."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
            f"({limit}, {limit})); from rig.fdt.cli import main; sys.exit(main())")
    proc = subprocess.Popen([PY, "-c", code, "serve", "--root", str(root), "--bind",
                             "127.0.0.1", "--port", "0", "--connect-timeout", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)["port"]


def test_out_of_descriptors_refuses_new_sessions_keeps_old_ones_and_survives(
        root: Path, tmp_path: Path) -> None:
    limit = 48
    srv, port = _low_fd_server(root, limit)
    hogs: list[socket.socket] = []
    busy = None
    try:
        busy = subprocess.Popen([PY, "-m", "rig.fdt", "get", "--port", str(port), "--streams",
                                 "2", "--time", "3s", "--interval", "0.5s", "127.0.0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        time.sleep(0.7)                         # the timed session is running
        for _ in range(limit + 10):             # silent connections eat the server's fds
            hogs.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.5)
        r = _cli("get", "--port", str(port), "--connect-timeout", "2", "127.0.0.1", "f.bin",
                 "/dev/null", timeout=20)
        assert r.returncode == 1, r.stdout
        assert "server refused" in r.stderr and "file descriptors" in r.stderr, r.stderr
        out, err = busy.communicate(timeout=20)
        assert busy.returncode == 0, err                    # the old session went on
        res = json.loads(out.splitlines()[-1])
        assert res["bytes"] > 0 and res["time_s"] == 3.0
        for s in hogs:
            s.close()
        hogs = []
        time.sleep(1.0)
        assert srv.poll() is None, srv.stderr.read()
        _get_ok(port, tmp_path, root)
    finally:
        for s in hogs:
            s.close()
        if busy is not None and busy.poll() is None:
            busy.kill()
            busy.wait()
        rc = _stop(srv)
    assert rc == 0


# ------------------------------------------------------------- partial uploads go away

_HALF_PUT = """
import socket, sys, time
from rig.fdt import protocol as p
port, size = int(sys.argv[1]), int(sys.argv[2])
ctrl = socket.create_connection(("127.0.0.1", port))
ctrl.sendall(p.CONTROL_MAGIC + p.encode(p.Hello("put", "up.bin", 2, 1 << 16, False, size)))
n = int.from_bytes(ctrl.recv(4), "big")
ready = p.decode_body(ctrl.recv(n, socket.MSG_WAITALL))
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
for i, s in enumerate(socks):
    s.sendall(p.DataHello(bytes.fromhex(ready.token), i, 2).pack())
for k, (off, ln) in enumerate(iter(p.BlockScheduler(size, 1 << 16).next_block, None)):
    if off >= size // 2:
        break
    socks[k % 2].sendall(p.BlockHeader(1, off, ln).pack() + bytes(ln))
print("half", flush=True)
time.sleep(60)
"""


def _parts(root: Path) -> list[str]:
    return [str(f) for f in root.rglob("*") if f.name != "f.bin"]


@pytest.mark.parametrize("how", ["client-killed", "client-stalled", "server-sigterm",
                                 "server-sigkill"])
def test_partial_upload_is_removed_however_the_session_dies(root: Path, how: str) -> None:
    srv, port = _start_server(root, "--stall-timeout", "1")
    cli = subprocess.Popen([PY, "-c", _HALF_PUT, str(port), str(8 << 20)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL)
    try:
        assert cli.stdout.readline() == "half\n", cli.stderr.read()
        time.sleep(0.3)                             # half of it is on the server
        if how == "client-killed":
            cli.kill()
        elif how == "client-stalled":
            cli.send_signal(signal.SIGSTOP)
        elif how == "server-sigterm":
            assert _stop(srv) == 0
        else:
            srv.kill()
        deadline = time.monotonic() + CLEAN_S
        while _parts(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _parts(root) == []
    finally:
        cli.kill()
        cli.wait()
        _stop(srv)


# ------------------------------------------------------------------------- command line

MISUSE = [
    ["serve", "--root", "/nonexistent/rig-fdt-root"],
    ["serve", "--root", "/etc/hostname"],
    ["serve", "--root", "/tmp", "--port", "99999"],
    ["serve", "--root", "/tmp", "--port", "-1"],
    ["serve", "--root", "/tmp", "--bufsize", "1e400"],
    ["serve", "--root", "/tmp", "--connect-timeout", "1e400"],
    ["get", "--port", "99999", "127.0.0.1", "f", "/dev/null"],
    ["get", "--port", "0", "127.0.0.1", "f", "/dev/null"],
    ["get", "--bufsize", "1e400", "127.0.0.1", "f", "/dev/null"],
    ["get", "--bufsize", "1TiB", "127.0.0.1", "f", "/dev/null"],
    ["get", "--bufsize", "0", "127.0.0.1", "f", "/dev/null"],
    ["get", "--block", "1e400", "127.0.0.1", "f", "/dev/null"],
    ["get", "--block", "2GiB", "127.0.0.1", "f", "/dev/null"],
    ["get", "--block", "0", "127.0.0.1", "f", "/dev/null"],
    ["get", "--mem", "1e400", "127.0.0.1"],
    ["get", "--mem", "1e30", "127.0.0.1"],
    ["get", "--timeout", "1e400", "127.0.0.1", "f", "/dev/null"],
    ["get", "--stall-timeout", "0", "127.0.0.1", "f", "/dev/null"],
    ["get", "--connect-timeout", "1e9", "127.0.0.1", "f", "/dev/null"],
    ["get", "--interval", "1e400", "--mem", "1MiB", "127.0.0.1"],
    ["get", "--omit", "1e400", "--mem", "1MiB", "127.0.0.1"],
    ["get", "--time", "1e400", "127.0.0.1"],
    ["put", "--port", "70000", "127.0.0.1", "/etc/hostname", "x"],
    ["put", "--bufsize", "1TiB", "127.0.0.1", "/etc/hostname", "x"],
    ["put", "--mem", "1e400", "127.0.0.1"],
]


@pytest.mark.parametrize("argv", MISUSE, ids=[" ".join(a[:4]) for a in MISUSE])
def test_cli_misuse_is_one_line_and_exit_2(argv: list[str]) -> None:
    r = _cli(*argv, timeout=10)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith((f"rig-fdt {argv[0]}: error: ", "rig-fdt: error: ")), r.stderr
    assert "(got " in lines[0] and "Traceback" not in r.stderr


def test_port_0_means_any_free_port_for_serve(root: Path) -> None:
    srv, port = _start_server(root)
    try:
        assert 1 <= port <= 65535
    finally:
        assert _stop(srv) == 0


def test_a_silent_server_trips_the_connect_timeout_and_says_so() -> None:
    with socket.create_server(("127.0.0.1", 0)) as lsock:   # accepts (backlog), never talks
        port = lsock.getsockname()[1]
        t0 = time.monotonic()
        r = _cli("get", "--port", str(port), "--connect-timeout", "1s", "--mem", "1MiB",
                 "127.0.0.1", timeout=20)
        took = time.monotonic() - t0
    err = _result(r)["error"]
    assert r.returncode == 1 and took > 0.9, (r.returncode, took)   # waited its 1 s (a
    # lower bound: load only adds); the harness's 20 s deadline is the hang guard
    assert "connect timeout" in err and "1s" in err and "deadline" not in err, err


# ----------------------------------------------------------- random bytes on live sockets

def test_random_bytes_on_control_and_data_connections_leave_the_server_serving(
        server: int, root: Path, tmp_path: Path) -> None:
    rnd = random.Random(12)
    junk = [rnd.randbytes(rnd.randrange(1, 4096)) for _ in range(12)]
    frames = [struct.pack("!I", 2**32 - 1), struct.pack("!I", 9) + b"[" * 9,
              struct.pack("!I", 300_000) + b"[" * 300_000,
              struct.pack("!I", 62) + b'{"type":"hello","op":"get","name":"f.bin","streams":'
              b'"4","block":1}']
    payloads = [p.CONTROL_MAGIC + j for j in junk + frames] + \
        [p.DATA_MAGIC + j for j in junk] + junk
    for data in payloads:
        with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                s.recv(65536)
            except OSError:
                pass
    # a real put session whose data stream turns to noise after its hello
    with socket.create_connection(("127.0.0.1", server), timeout=5) as ctrl:
        ctrl.sendall(p.CONTROL_MAGIC + p.encode(p.Hello("put", "noise.bin", 1, 4096, False,
                                                        1 << 20)))
        ready = _recv_msg(ctrl)
        assert isinstance(ready, p.Ready)
        with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
            s.sendall(p.DataHello(bytes.fromhex(ready.token), 0, 1).pack()
                      + rnd.randbytes(1000))
            answer = _recv_msg(ctrl)
        assert isinstance(answer, p.Failure) and "magic" in answer.message, answer
    assert not (root / "noise.bin").exists() and _parts(root) == []
    _get_ok(server, tmp_path, root)
