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
    assert r.cpu_wait_s is not None and 0 <= r.cpu_wait_s < 30     # schedstat, over the wall


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


# --- the native HTTP helper (tools/rig-replay-http): libdavix and libcurl make the requests


def _helper():
    from rig.services.replay import http_helper
    if http_helper.path() is None:
        pytest.fail("tools/rig-replay-http not built (make install)")
    return http_helper


@pytest.mark.parametrize("library,mode", [("davix", "application"), ("davix", "storage"),
                                          ("davix", "lazy-download"), ("curl", "lazy-download")])
def test_helper_moves_exactly_the_planned_bytes(server, library, mode):
    from rig.services.replay import run
    h = _helper()
    sp, path, lay = server
    p = plan.make(lay, select.by_percent(lay, 30, seed=4), mode, OPTS)
    out = h.run(p, sp.url("http", "f.root"), library, timeout=60)
    assert out["checksum"] == run.expected_checksum(p, str(path))
    assert out["bytes_received"] == p.bytes_wire
    assert len(out["round_s"]) == len(p.rounds)
    assert 0 < out["wall_s"] < 30 and out["cpu_user_s"] >= 0
    # its threads' run-queue wait over the replay (schedstat: this kernel has it)
    assert isinstance(out["cpu_wait_s"], float) and 0 <= out["cpu_wait_s"] < 30
    # every plan request is at least one HTTP request; libdavix may split a readv further
    assert out["http_requests"] >= p.requests if library == "curl" else out["http_requests"] >= len(p.rounds)


def test_helper_checksums_equal_between_libraries_and_python(server):
    """One plan of plain reads: libdavix, libcurl and the Python baseline receive the same
    bytes (the checksum is over every range, in plan order)."""
    from rig.services.replay import run
    h = _helper()
    sp, path, lay = server
    p = plan.make(lay, select.by_percent(lay, 100, seed=4), "lazy-download", OPTS)
    url = sp.url("http", "f.root")
    sums = {lib: h.run(p, url, lib, timeout=60)["checksum"] for lib in ("davix", "curl")}
    sums["python"] = run.replay(p, url, timeout=60).checksum
    assert set(sums.values()) == {run.expected_checksum(p, str(path))}, sums


def test_helper_storage_rounds_are_synchronous(server):
    h = _helper()
    sp, _path, lay = server
    sel = select.by_percent(lay, 30, seed=4)
    st, app = (plan.make(lay, sel, m, OPTS) for m in ("storage", "application"))
    url = sp.url("http", "f.root")
    t_st = min(h.run(st, url, "davix", timeout=60)["wall_s"] for _ in range(2))
    t_app = min(h.run(app, url, "davix", timeout=60)["wall_s"] for _ in range(2))
    assert t_st > 2 * t_app, (t_st, t_app)


def test_helper_missing_file_is_one_error_line(server):
    from rig.errors import RigError
    h = _helper()
    sp, _path, lay = server
    p = plan.make(lay, ("br0001",), "storage", OPTS)
    for lib in ("davix", "curl"):
        q = p if lib == "davix" else plan.make(lay, ("br0001",), "lazy-download", OPTS)
        with pytest.raises(RigError) as e:
            h.run(q, sp.url("http", "nope.root"), lib, timeout=10)
        assert "\n" not in str(e.value) and "failed" in str(e.value), lib


def test_helper_honours_its_deadline(server, tmp_path):
    """A server that accepts and never answers: the helper gives up at its deadline (the
    libraries' timeouts, SIGALRM as the backstop), it does not hang."""
    import time
    from rig.process import proc
    h = _helper()
    _sp, _path, lay = server
    p = plan.make(lay, ("br0001",), "storage", OPTS)
    (tmp_path / "plan.json").write_text(h.plan_json(p))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        for lib in ("davix", "curl"):
            t0 = time.monotonic()
            r = proc.run([h.path(), "--library", lib, "--url", f"http://127.0.0.1:{port}/f.root",
                          "--plan", str(tmp_path / "plan.json"), "--timeout", "2"], timeout=20)
            took = time.monotonic() - t0
            assert r.returncode in (1, 4) and not r.timed_out, (lib, r.returncode, r.stderr)
            assert took > 1.5, (lib, took)   # it waited its own 2 s deadline (load only adds);
            # not r.timed_out: that deadline, not the harness's 20 s hang guard, ended it


@pytest.mark.parametrize("library", ["davix", "curl", "xrootd"])
def test_lazy_download_into_a_shadow_file(server, library, tmp_path):
    """As CMSSW's LocalCacheFile: the segments land in an unlinked shadow file in the
    directory given (nothing is left there), and the checksum read back from it is the
    local file's. With the lazy plan's 4 segments of 4 MiB, a wrong offset in the mapping
    or a missing write changes the checksum."""
    from rig.services.replay import run
    sp, path, lay = server
    p = plan.make(lay, select.by_percent(lay, 100, seed=4), "lazy-download",
                  OPTS if library == "xrootd" else
                  plan.Options(segment_size=4 * MiB, read_chunk=4 * MiB, read_window=1))
    assert len([r for r in p.rounds if r.phase == "segment"]) >= 4
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    if library == "xrootd":
        pytest.importorskip("XRootD", reason="XRootD Python bindings (pip install xrootd)")
        r = run.replay(p, sp.url("root", "f.root"), timeout=60, shadow_dir=str(shadow))
        checksum, received = r.checksum, r.bytes_received
    else:
        out = _helper().run(p, sp.url("http", "f.root"), library, timeout=60,
                            shadow_dir=str(shadow))
        checksum, received = out["checksum"], out["bytes_received"]
    assert checksum == run.expected_checksum(p, str(path))
    assert received == p.bytes_wire
    assert list(shadow.iterdir()) == []
