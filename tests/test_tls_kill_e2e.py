"""SIGKILL of a TLS run while xrdcp roots:// transfers run, then `rig clean` (or SIGTERM,
and the run tears itself down): nothing of that run is left (namespaces, xrootd, nginx and client processes, the CA and keys, its
cgroups, its state file and address lease), and nothing of anyone else's is touched."""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.process import owner
from rig.realization import cgroups, data, netns

pytestmark = pytest.mark.e2e
SCEN = Path(__file__).resolve().parent / "data/scenarios/tls-kill.yaml"


def _cmd(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _others() -> dict[str, int | None]:
    """Other runs' and paths' state files whose owner is alive now: they must stay."""
    out = {}
    for p, st in netns.read_states().items():
        pid = st.get("pid", st.get("owner_pid"))
        if pid and owner.alive(pid, st.get("pid_start", st.get("owner_start"))):
            out[p] = pid
    return out


def _run_prefix(p: subprocess.Popen, deadline: float, seen: list[str]) -> str:
    """The run's prefix from its state file; if the run ended or never wrote one, fail
    with its exit code and stderr (a bare StopIteration once hid why, in a suite run
    beside another suite)."""
    while time.monotonic() < deadline:
        for s in netns.read_states().values():
            if s.get("pid") == p.pid:
                return s["prefix"]
        if p.poll() is not None:
            break
        time.sleep(0.05)
    rc = p.poll()
    tail = ("".join(seen) + ("" if rc is None else p.stderr.read()))[-2000:]
    pytest.fail(f"no state file of the run (pid {p.pid}, exit {rc}); stderr tail: {tail}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_mid_tls_transfers_leaves_nothing(tmp_path, require_tools, sig):
    require_tools("xrootd", "xrdcp", "nginx", "curl", "openssl")
    before = _others()
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(SCEN), "--out",
                          str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    prefix, procs = None, {}
    try:
        deadline = time.monotonic() + 180
        seen: list[str] = []
        while time.monotonic() < deadline and p.poll() is None:
            line = p.stderr.readline()
            seen.append(line)
            if "validate (before)" in line:
                break
        prefix = _run_prefix(p, deadline, seen)
        client_ns = f"{prefix}-0c"
        while time.monotonic() < deadline and p.poll() is None:    # transfers under way
            clients = [q for q in netns.ns_pids(client_ns) if "xrdcp" in _cmd(q)]
            if len(clients) == 4:
                break
            time.sleep(0.05)
        assert len(clients) == 4, "the xrdcp transfers never started"
        time.sleep(1.0)
        for ns in netns.list_namespaces():
            if ns.startswith(prefix + "-"):
                procs.update({q: _cmd(q) for q in netns.ns_pids(ns)})
        assert any(c.startswith("xrootd") for c in procs.values())
        assert any("nginx" in c for c in procs.values())
        assert any("roots://" in c for c in procs.values())
        key_dir = netns.STATE_DIR / prefix / "tls"
        assert (key_dir / "ca.key").is_file() and (key_dir / "ca.key").stat().st_mode & 0o077 == 0
        mine = [d for q, d in cgroups.rig_cgroups() if q == prefix]
        if cgroups.detect() is not None:
            assert len(mine) == 2, mine          # the xrootd's and the xrdcp client's
    finally:
        starts = {q: owner.start_time(q) for q in procs}
        if sig == signal.SIGTERM:     # the rig alone: it must stop and remove everything
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=90)
            finally:
                with contextlib.suppress(ProcessLookupError):   # gone: as it should be
                    os.killpg(p.pid, signal.SIGKILL)
        else:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
    if sig == signal.SIGKILL:
        r = subprocess.run([sys.executable, "-m", "rig", "clean"], capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        assert f"removing {prefix} (run, pid {p.pid} gone)" in r.stdout + r.stderr
    else:
        assert p.returncode != 0
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    alive = {q: c for q, c in procs.items() if owner.alive(q, starts[q])}
    assert not alive, alive                  # xrootd, nginx, xrdcp, curl: all gone
    assert not (netns.STATE_DIR / prefix).exists()          # CA, keys, configs
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
    leases = netns.STATE_DIR / "leases"
    assert not [f for f in leases.iterdir() if f.read_text().strip() == prefix] \
        if leases.is_dir() else True
    assert not [d for q, d in cgroups.rig_cgroups() if q == prefix]
    assert not [m for s, m in data.rig_mounts() if s.startswith(prefix)]
    for other, pid in before.items():        # other engineers' live runs and paths stay
        if owner.alive(pid, None):
            assert (netns.STATE_DIR / f"{other}.json").exists(), other
