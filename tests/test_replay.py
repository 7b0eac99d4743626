"""End-to-end tier: a read plan replayed against a real xrootd (root:// and XrdHttp) on
loopback, started by the rig and stopped afterwards. Checks every byte that arrived
(crc of the ranges, in plan order, against the local file), the byte and round counts,
and that synchronous rounds really are synchronous (storage is slower than application
even at loopback latency)."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from rig.description.rootfile import generate, layout, plan, select

pytestmark = pytest.mark.e2e
MiB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    from rig.description.scenario import ServerSpec
    from rig.services.servers import ServerPlan
    from rig.services.servers.start import start_server
    if shutil.which("xrootd") is None:
        pytest.fail("xrootd missing (make install)")
    base = Path(tempfile.mkdtemp(prefix="rig-replay-test-"))
    os.chmod(base, 0o755)          # xrootd drops to its own user: it must reach the data
    data = base / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    src = generate.ensure(generate.FileSpec(size_bytes=16 * MiB, n_branches=50,
                                            cluster_bytes=2 * MiB, seed=11), base / "cache")
    dst = data / "f.root"
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
    sp = ServerPlan(ServerSpec("replaytest", "xrootd"), None, "127.0.0.1",
                    {"root": _free_port(), "http": _free_port()}, base / "srv", data)
    srv = start_server(sp)
    try:
        yield sp, dst, layout.load(dst)
    finally:
        srv.stop()
        assert not srv.alive()
        shutil.rmtree(base)


OPTS = plan.Options(segment_size=4 * MiB, read_chunk=1 * MiB)


@pytest.mark.parametrize("proto", ["root", "http"])
@pytest.mark.parametrize("mode", plan.MODES)
def test_replay_moves_exactly_the_planned_bytes(server, proto, mode):
    if proto == "root":
        pytest.importorskip("XRootD", reason="XRootD Python bindings (pip install xrootd)")
    from rig.services.replay import run
    sp, path, lay = server
    p = plan.make(lay, select.by_percent(lay, 30, seed=4), mode, OPTS)
    r = run.replay(p, sp.url(proto, "f.root"), timeout=60)
    assert r.bytes_received == p.bytes_wire
    assert r.checksum == run.expected_checksum(p, str(path))
    assert len(r.round_s) == len(p.rounds) and r.requests == p.requests
    assert 0 < r.wall_s < 30


@pytest.mark.parametrize("proto", ["root", "http"])
def test_storage_rounds_are_synchronous(server, proto):
    if proto == "root":
        pytest.importorskip("XRootD", reason="XRootD Python bindings (pip install xrootd)")
    from rig.services.replay import run
    sp, _path, lay = server
    sel = select.by_percent(lay, 30, seed=4)
    st = plan.make(lay, sel, "storage", OPTS)
    app = plan.make(lay, sel, "application", OPTS)
    assert st.round_trips > 20 * app.round_trips
    t_st = min(run.replay(st, sp.url(proto, "f.root"), timeout=60).wall_s for _ in range(2))
    t_app = min(run.replay(app, sp.url(proto, "f.root"), timeout=60).wall_s for _ in range(2))
    assert t_st > 2 * t_app, (t_st, t_app)


def test_a_missing_file_is_one_error_line(server):
    from rig.errors import RigError
    from rig.services.replay import run
    sp, _path, lay = server
    p = plan.make(lay, ("br0001",), "storage", OPTS)
    with pytest.raises(RigError) as e:
        run.replay(p, sp.url("http", "nope.root"), timeout=10)
    assert "\n" not in str(e.value) and "404" in str(e.value)
