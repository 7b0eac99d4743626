"""Loopback tests of rig-fdt with real sockets on 127.0.0.1 and ephemeral ports.

Covers integrity (1 and 8 streams, both directions, odd sizes), a corrupting / truncating
/ stream-killing / stalling fake server built from the protocol classes, a dead or
frozen real server (non-zero exit within a deadline), and that nothing is left behind:
no task, no file descriptor, no temp file, a free port.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from rig.fdt import client
from rig.fdt import protocol as p
from rig.fdt.server import Server
from rig.fdt.transport import Options, StallError, TransferError

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

PY = sys.executable
SIZE = 5 * (1 << 20) + 12345          # not a multiple of the block
BLOCK = 256 * 1024


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "f.bin").write_bytes(os.urandom(SIZE))
    return root


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _start_server(root: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([PY, "-m", "rig.fdt", "serve", "--root", str(root), "--bind",
                             "127.0.0.1", "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    line = proc.stdout.readline()            # the readiness line, printed after listen()
    assert line, proc.stderr.read()
    return proc, json.loads(line)["port"]


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout=5)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "rig.fdt", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def server(tree: Path):
    proc, port = _start_server(tree)
    yield port
    assert _stop(proc) == 0, proc.stderr.read()


# --------------------------------------------------------------------- integrity

@pytest.mark.parametrize("streams", [1, 8])
def test_get_is_byte_identical(server: int, tree: Path, tmp_path: Path, streams: int) -> None:
    dest = tmp_path / "out.bin"
    r = _cli("get", "--streams", str(streams), "--port", str(server), "--block", str(BLOCK),
             "--checksum", "127.0.0.1", "f.bin", str(dest))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    assert dest.read_bytes() == (tree / "f.bin").read_bytes()
    assert res["bytes"] == SIZE and res["streams"] == streams
    assert len(res["per_stream_bytes"]) == streams and sum(res["per_stream_bytes"]) == SIZE
    assert res["checksum_adler32"] == f"{zlib.adler32(dest.read_bytes()):08x}"
    assert res["throughput_bps"] > 0 and res["cpu_user_s"] >= 0
    assert r.stderr == ""                     # no progress line when not on a terminal
    assert not list(tmp_path.glob(".*rig-fdt-part"))


def test_get_to_dev_null_and_memory_mode(server: int) -> None:
    r = _cli("get", "--streams", "4", "--port", str(server), "127.0.0.1", "f.bin", "/dev/null")
    assert r.returncode == 0 and json.loads(r.stdout)["bytes"] == SIZE, r.stderr
    r = _cli("get", "--streams", "4", "--port", str(server), "--mem", "64MiB", "--checksum",
             "127.0.0.1")
    res = json.loads(r.stdout)
    assert r.returncode == 0 and res["bytes"] == 64 << 20 and res["mem"], r.stderr


def test_several_files_travel_in_one_session_byte_identical(server: int, tree: Path,
                                                            tmp_path: Path) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "tiny.bin").write_bytes(b"abc")
    (tree / "empty.bin").write_bytes(b"")
    (tree / "g.bin").write_bytes(os.urandom(3 * BLOCK + 1))
    out = tmp_path / "out"
    out.mkdir()
    names = ["f.bin", "sub/tiny.bin", "empty.bin", "g.bin"]
    r = _cli("get", "--streams", "4", "--port", str(server), "--block", str(BLOCK),
             "--checksum", "127.0.0.1", *names, str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    for name, f in zip(names, res["files"]):
        data = (tree / name).read_bytes()
        assert (out / Path(name).name).read_bytes() == data
        assert f["name"] == name and f["bytes"] == len(data)
        assert f["adler32"] == f"{zlib.adler32(data):08x}"
    assert res["bytes"] == sum(f["bytes"] for f in res["files"]) == sum(res["per_stream_bytes"])
    assert not list(out.glob(".*rig-fdt-part"))


def test_several_files_fail_whole_and_leave_nothing(server: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    r = _cli("get", "--port", str(server), "127.0.0.1", "f.bin", "missing.bin", str(out))
    assert r.returncode == 1 and "missing.bin" in json.loads(r.stdout)["error"]
    assert list(out.iterdir()) == []
    r = _cli("get", "--port", str(server), "127.0.0.1", "f.bin", "f.bin", str(out))
    assert r.returncode == 1 and "two files would land" in json.loads(r.stdout)["error"]
    r = _cli("get", "--port", str(server), "127.0.0.1", "f.bin", "f.bin", str(out / "x"))
    assert r.returncode == 1 and "need a directory" in json.loads(r.stdout)["error"]
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("op", ["get", "put"])
def test_timed_memory_mode_runs_for_its_duration_and_reports_intervals(server: int,
                                                                       op: str) -> None:
    r = _cli(op, "--streams", "3", "--port", str(server), "--time", "1.5s", "--interval",
             "0.25s", "--omit", "0.5s", "--checksum", "--block", str(BLOCK), "127.0.0.1")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    assert res["mem"] and res["time_s"] == 1.5 and res["omit_s"] == 0.5
    assert res["bytes"] > 0 and res["bytes"] % BLOCK == 0       # stopped at a block edge
    assert sum(res["per_stream_bytes"]) == res["bytes"]
    assert res["checksum_adler32"] is not None                  # verified by the receiver
    ts = [t for t, _ in res["intervals"]]
    bs = [b for _, b in res["intervals"]]
    assert ts == sorted(ts) and bs == sorted(bs) and bs[-1] == res["bytes"]
    assert 1.5 <= ts[-1] < 3.0, ts                              # ran its time, then stopped
    assert len(ts) >= 6                                         # a sample every 0.25 s
    assert res["steady_throughput_bps"] > 0


def test_timed_mode_bad_arguments_are_one_line_errors() -> None:
    for args in (["--time", "0", "127.0.0.1"], ["--time", "2", "127.0.0.1", "f.bin", "x"],
                 ["--interval", "0", "--mem", "1MiB", "127.0.0.1"]):
        r = _cli("get", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert re.fullmatch(r"rig-fdt( get)?: error: (argument )?--\S+.*", r.stderr.strip())


@pytest.mark.parametrize("streams", [1, 8])
def test_put_is_byte_identical(server: int, tree: Path, tmp_path: Path, streams: int) -> None:
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(SIZE - 999))
    (tree / "sub").mkdir()
    r = _cli("put", "--streams", str(streams), "--port", str(server), "--block", str(BLOCK),
             "--checksum", "127.0.0.1", str(src), "sub/up.bin")
    assert r.returncode == 0, r.stderr
    assert (tree / "sub" / "up.bin").read_bytes() == src.read_bytes()
    assert sorted(x.name for x in (tree / "sub").iterdir()) == ["up.bin"]
    assert json.loads(r.stdout)["bytes"] == SIZE - 999


def test_server_refuses_paths_outside_root_and_missing_files(server: int) -> None:
    for name in ("../../etc/passwd", "nope.bin"):
        r = _cli("get", "--port", str(server), "127.0.0.1", name, "/dev/null")
        assert r.returncode == 1
        assert json.loads(r.stdout.splitlines()[-1])["error"].startswith("server refused")


# -------------------------------------------------------- failures within a deadline

def test_refused_connection_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]             # bound, not listening: refused
        # a hang guard, not a speed goal: a refusal is answered in well under 1 s idle,
        # and a client that retried it would outlive this deadline (TimeoutExpired)
        r = _cli("get", "--port", str(port), "127.0.0.1", "f.bin", str(tmp_path / "x"),
                 timeout=15)
    assert r.returncode == 1
    assert "refused" in r.stderr and not (tmp_path / "x").exists()


def _start_client(port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "rig.fdt", "get", "--streams", "4", "--port", str(port),
                             "--mem", "1TiB", *extra, "127.0.0.1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def _assert_running(proc: subprocess.Popen, seconds: float) -> None:
    """The client is mid-transfer: still running after `seconds` (1 TiB takes minutes)."""
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)


def test_killed_server_ends_client_with_error_quickly(tree: Path) -> None:
    srv, port = _start_server(tree)
    cli = _start_client(port, "--stall-timeout", "20")
    try:
        _assert_running(cli, 1.0)
        srv.kill()
        # a hang guard: the client notices the reset at once; its stall timeout (20 s)
        # would take longer than this wait, which then fails the test (TimeoutExpired)
        rc = cli.wait(timeout=15)
    finally:
        cli.kill()
        cli.wait()
        srv.kill()
        srv.wait()
    assert rc == 1, cli.stderr.read()
    assert "error" in json.loads(cli.stdout.read().splitlines()[-1])


def test_frozen_server_trips_the_stall_timeout(tree: Path) -> None:
    srv, port = _start_server(tree)
    cli = _start_client(port, "--stall-timeout", "1")
    try:
        _assert_running(cli, 0.5)
        os.killpg(srv.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        rc = cli.wait(timeout=20)     # a hang guard, 20x the stall timeout
        took = time.monotonic() - t0
    finally:
        cli.kill()
        cli.wait()
        os.killpg(srv.pid, signal.SIGCONT)
        srv.kill()
        srv.wait()
    assert rc == 4, cli.stderr.read()
    assert took > 0.9     # it waited its 1 s stall timeout (a lower bound: load only adds)
    assert "no data moved" in cli.stderr.read()


def test_deadline_ends_a_long_transfer(server: int) -> None:
    # 1 TiB takes minutes: only the client's own 1 s deadline ends it before this
    # harness deadline (a hang guard, TimeoutExpired if it does not)
    r = _cli("get", "--port", str(server), "--mem", "1TiB", "--timeout", "1", "127.0.0.1",
             timeout=30)
    assert r.returncode == 4
    assert "deadline" in json.loads(r.stdout.splitlines()[-1])["error"]


def test_server_exits_cleanly_on_sigterm_and_frees_its_port(tree: Path) -> None:
    srv, port = _start_server(tree)
    assert _stop(srv) == 0
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


# ------------------------------------------- a misbehaving peer made of protocol parts

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("eof")
        buf += chunk
    return buf


def _recv_msg(sock: socket.socket) -> p.Message:
    n = int.from_bytes(_recv_exact(sock, 4), "big")
    return p.decode_body(_recv_exact(sock, n))


class FakeServer(threading.Thread):
    """Serves `data` like rig-fdt but misbehaves: corrupt, truncate, kill, hang."""

    def __init__(self, data: bytes, mode: str) -> None:
        super().__init__(daemon=True)
        self.data, self.mode = data, mode
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.lsock.settimeout(10)
        self.port = self.lsock.getsockname()[1]
        self.verdict: p.Message | None = None
        self.release = threading.Event()

    def run(self) -> None:
        socks: list[socket.socket] = []
        try:
            ctrl, _ = self.lsock.accept()
            socks.append(ctrl)
            ctrl.settimeout(10)
            assert _recv_exact(ctrl, 4) == p.CONTROL_MAGIC
            hello = _recv_msg(ctrl)
            ctrl.sendall(p.encode(p.Ready("00" * 16, len(self.data))))
            data_socks = []
            for _ in range(hello.streams):
                s, _ = self.lsock.accept()
                s.settimeout(10)
                socks.append(s)
                index = p.DataHello.unpack(_recv_exact(s, p.DATA_HELLO_SIZE)).index
                data_socks.append((index, s))
            self._serve(ctrl, [s for _, s in sorted(data_socks, key=lambda t: t[0])],
                        hello.block)
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
            self.lsock.close()

    def _serve(self, ctrl: socket.socket, streams: list[socket.socket], block: int) -> None:
        sched = p.BlockScheduler(len(self.data), block)
        blocks = list(iter(sched.next_block, None))
        per = [0] * len(streams)
        for k, (off, n) in enumerate(blocks):
            i = k % len(streams)
            payload = bytearray(self.data[off:off + n])
            if self.mode == "corrupt" and k == 1:
                payload[100] ^= 0x01
            if self.mode == "truncate" and k == len(blocks) - 1:
                per[i] += n                      # claim it, never send it
                continue
            if self.mode == "hang" and k == len(blocks) // 2:
                self.release.wait(30)
                return
            streams[i].sendall(p.BlockHeader(1, off, n).pack() + payload[:n // 2])
            if self.mode == "kill" and k == 2:
                streams[i].close()               # dies mid-block
                self.release.wait(30)
                return
            streams[i].sendall(payload[n // 2:])
            per[i] += n
        for s in streams:
            s.sendall(p.BlockHeader.end(1).pack())
        ctrl.sendall(p.encode(p.Done(len(self.data), per, zlib.adler32(self.data))))
        self.verdict = _recv_msg(ctrl)


@pytest.mark.parametrize("mode, error, match", [
    ("corrupt", p.IntegrityError, "adler32 mismatch"),
    ("truncate", p.IntegrityError, "truncated"),
    ("kill", TransferError, "stream . closed by peer"),
    ("hang", StallError, "no data moved"),
])
def test_bad_transfers_are_errors_and_leave_no_file(tmp_path: Path, mode: str, error: type,
                                                    match: str) -> None:
    data = os.urandom(SIZE)
    fake = FakeServer(data, mode)
    fake.start()
    dest = tmp_path / "out.bin"
    opts = Options(block=BLOCK, checksum=True, stall_s=1.0, connect_s=5, timeout_s=20)
    with pytest.raises(error, match=match):   # not the 20 s deadline's error: it ended on
        asyncio.run(client.get("127.0.0.1", fake.port, "f.bin", str(dest), streams=4,
                               opts=opts))       # the fault it met
    fake.release.set()
    fake.join(10)
    assert not fake.is_alive()
    assert list(tmp_path.iterdir()) == []        # neither DEST nor its temporary file
    if mode == "corrupt":
        assert isinstance(fake.verdict, p.Verdict) and not fake.verdict.ok


def _evil_put(port: int, data: bytes, block: int) -> p.Message:
    """Upload with one flipped byte but the true checksum; return the server's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as ctrl:
        ctrl.sendall(p.CONTROL_MAGIC + p.encode(p.Hello("put", "evil.bin", 1, block, True,
                                                        len(data))))
        ready = _recv_msg(ctrl)
        assert isinstance(ready, p.Ready), ready
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(p.DataHello(bytes.fromhex(ready.token), 0, 1).pack())
            for off, n in iter(p.BlockScheduler(len(data), block).next_block, None):
                payload = bytearray(data[off:off + n])
                payload[0] ^= 0xFF
                s.sendall(p.BlockHeader(1, off, n).pack() + payload)
            s.sendall(p.BlockHeader.end(1).pack())
            ctrl.sendall(p.encode(p.Done(len(data), [len(data)], zlib.adler32(data))))
            return _recv_msg(ctrl)


def test_in_process_nothing_is_left_behind(tree: Path) -> None:
    """Good, refused, corrupted and abandoned transfers; then no task, fd or temp file."""
    async def main() -> None:
        before = _fds()
        srv = Server(tree, Options(connect_s=5, stall_s=3))
        port = srv.listen("127.0.0.1", 0)[1]
        serving = asyncio.create_task(srv.serve_forever())
        opts = Options(block=BLOCK, checksum=True, stall_s=3)
        st = await client.get("127.0.0.1", port, "f.bin", None, streams=8, opts=opts)
        assert st.bytes == SIZE and sum(st.per_stream) == SIZE
        with pytest.raises(TransferError, match="refused"):
            await client.get("127.0.0.1", port, "nope", None, streams=2, opts=opts)
        verdict = await asyncio.to_thread(_evil_put, port, os.urandom(SIZE), BLOCK)
        assert isinstance(verdict, p.Verdict) and not verdict.ok
        assert "adler32" in verdict.message
        abandoned = asyncio.create_task(client.get("127.0.0.1", port, "", None, streams=4,
                                                   opts=opts, mem_size=1 << 40))
        while not srv.sessions:                  # the server is sending to it
            await asyncio.sleep(0.01)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        deadline = time.monotonic() + 5
        while srv.tasks and time.monotonic() < deadline:   # server notices the reset
            await asyncio.sleep(0.01)
        assert not srv.tasks and not srv.sessions
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert not [t for t in threading.enumerate() if t.name.startswith("rig-fdt-stream")]
        assert _fds() == before
    asyncio.run(main())
    assert sorted(x.name for x in tree.iterdir()) == ["f.bin"]


def test_binary_runs_the_given_executable_and_argv_records_it(tree: Path,
                                                                 tmp_path: Path) -> None:
    """Issue #28 item 4: a scenario's `binary:` on an fdt client was accepted and then
    ignored. A wrapper executable that leaves a mark and runs rig-fdt is really run."""
    from rig.description.scenario import ClientSpec
    from rig.services.tools import Job
    from rig.services.tools.fdt import Fdt
    mark = tmp_path / "ran"
    wrapper = tmp_path / "other-rig-fdt"
    wrapper.write_text(f"#!{PY}\nimport pathlib, runpy, sys\n"
                       f"pathlib.Path({str(mark)!r}).write_text(' '.join(sys.argv[1:]))\n"
                       "runpy.run_module('rig.fdt', run_name='__main__')\n")
    wrapper.chmod(0o755)
    proc, port = _start_server(tree)
    try:
        tool = Fdt()
        job = Job(ClientSpec(name="fdt-other", tool="fdt", binary=str(wrapper)), 2,
                  addr="127.0.0.1", port=port, relpath="f.bin", file_bytes=SIZE,
                  timeout_s=30.0)
        argv = tool.argv(job)
        assert argv[0] == str(wrapper) and argv[1] == "get"     # what the row's argv stores
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        assert mark.read_text().startswith("get --streams 2 ")
        assert tool.parse(done.stdout, done.stderr, 0, job).bytes == SIZE
        plain = tool.argv(Job(ClientSpec(name="fdt", tool="fdt"), 2, addr="127.0.0.1",
                              port=port, relpath="f.bin", file_bytes=SIZE, timeout_s=30.0))
        assert plain[:3] == [PY, "-m", "rig.fdt"]
    finally:
        assert _stop(proc) == 0
