"""End-to-end, tests/data/scenarios/clients-small.yaml: wget over http and https (nginx,
the run's CA only, `args:` added), scp from the run's sshd with two ciphers, through a
0 ms and a 20 ms path; every transfer moves the whole file, and nothing of the run is
left (keys, sshd, state). Then scp killed mid-transfer (SIGKILL + `rig clean`, SIGTERM):
sshd, its session processes and the per-run keys go too."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultrig import end_run

from rig.process import owner
from rig.realization import netns
from rig.results.store import Store
from rigrun import rig_run

pytestmark = pytest.mark.e2e
DATA = Path(__file__).resolve().parent / "data/scenarios"
FILE_BYTES = 16 << 20


def _cmd(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _sshds(prefix: str) -> list[int]:
    """sshd processes anywhere on the host whose config lies in this run's directory."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and "sshd" in (c := _cmd(int(d.name))) and f"/{prefix}/" in c:
            out.append(int(d.name))
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("clients") / "run"
    prefix = rig_run(DATA / "clients-small.yaml", out, timeout=900).prefix
    assert not (netns.STATE_DIR / prefix).exists()      # keys, known_hosts, configs
    assert not _sshds(prefix)
    return out


def test_wget_and_scp_moved_the_whole_file(run_dir, require_tools):
    require_tools("wget", "scp", "nginx", "openssl")
    rows = Store.open(run_dir).transfers()
    # 2 RTTs x concurrency (1 + 2) x (wget off/all + scp + scp-chacha, off only)
    assert len(rows) == 2 * 3 * (2 + 1 + 1)
    assert not [(r.client, r.tls, r.error) for r in rows if not r.ok]
    assert all(r.bytes == FILE_BYTES for r in rows)
    modes: dict = {}
    for r in rows:
        modes.setdefault(r.client, set()).add(r.tls)
        argv, extra = json.loads(r.argv), json.loads(r.extra)
        if r.tool == "wget":
            assert argv[-1] == "--no-dns-cache" and extra["args"] == ["--no-dns-cache"]
            assert extra["http_code"] == 200 and "--no-check-certificate" not in argv
            assert r.url.startswith("https://" if r.tls == "all" else "http://")
            assert any(a.startswith("--ca-certificate=") for a in argv) == (r.tls == "all")
        else:
            want = ("chacha20-poly1305@openssh.com" if r.client == "scp-chacha"
                    else "aes256-gcm@openssh.com")
            assert extra["cipher"] == want            # what ssh says it negotiated
            assert extra["ssh_received"] > FILE_BYTES and r.url.startswith("sftp://")
    assert modes == {"wget": {"off", "all"}, "scp": {"off"}, "scp-chacha": {"off"}}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_mid_scp_leaves_nothing(tmp_path, require_tools, sig):
    require_tools("scp")
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(DATA / "scp-kill.yaml"),
                          "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    prefix, procs = None, {}
    try:
        deadline = time.monotonic() + 240
        while prefix is None and time.monotonic() < deadline and p.poll() is None:
            prefix = next((s["prefix"] for s in netns.read_states().values()
                           if s.get("pid") == p.pid), None)
            time.sleep(0.05)
        assert prefix, f"no state file of the run (exit {p.poll()})"
        clients: list[int] = []
        while time.monotonic() < deadline and p.poll() is None:    # transfers under way
            clients = [q for q in netns.ns_pids(f"{prefix}-0c") if _cmd(q).startswith("scp ")]
            if len(clients) == 2:
                break
            time.sleep(0.05)
        assert len(clients) == 2, "the scp transfers never started"
        time.sleep(1.0)
        for ns in netns.list_namespaces():
            if ns.startswith(prefix + "-"):
                procs.update({q: _cmd(q) for q in netns.ns_pids(ns)})
        assert len(_sshds(prefix)) >= 3               # the listener and two sessions
        keys = [f for f in (netns.STATE_DIR / prefix).rglob("ssh-*-key")]
        assert len(keys) == 2 and all(f.stat().st_mode & 0o077 == 0 for f in keys)
        up = netns.STATE_DIR / prefix / "data" / "upload"
        writing: list = []      # SSH's set-up takes ~10 round trips (100 ms each) first
        while len(writing) < 2 and time.monotonic() < deadline and p.poll() is None:
            writing = [f for f in up.iterdir() if f.name.startswith(prefix)]
            time.sleep(0.1)
        assert len(writing) == 2, writing            # both uploads being written
    finally:
        starts = {q: owner.start_time(q) for q in procs}
        end_run(p, sig)
    if sig == signal.SIGKILL:
        r = subprocess.run([sys.executable, "-m", "rig", "clean"], capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    else:
        assert p.returncode != 0
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    alive = {q: c for q, c in procs.items() if owner.alive(q, starts[q])}
    assert not alive, alive                  # sshd, its sessions, scp: all gone
    assert not _sshds(prefix)
    assert not (netns.STATE_DIR / prefix).exists()          # keys, known_hosts, config
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
