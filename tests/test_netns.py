"""Namespace tier: paths are built and always removed; `rig net`, SIGTERM and
SIGKILL + `rig clean` leave nothing of the rig's behind."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.realization import netns, tuning

from rig.process import proc
from rig.realization import data

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parent.parent
RIG = [sys.executable, "-m", "rig"]


def _leftovers(prefix: str) -> dict:
    procs = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if f"/run/rig/{prefix}/" in cmd or f"{prefix}-" in cmd:
                procs.append(cmd[:120])
    return {"ns": [n for n in netns.list_namespaces() if n.startswith(prefix)]
            + [d.name for d in netns.ETC_NETNS.glob(f"{prefix}-*")],
            "mounts": [m for s, m in data.rig_mounts() if s.startswith(prefix)],
            "procs": procs, "state": (netns.STATE_DIR / f"{prefix}.json").exists()}


def _clean(prefix):
    return {"ns": [], "mounts": [], "procs": [], "state": False}


def test_path_is_built_forwards_and_is_removed(tmp_path):
    prefix = netns.new_prefix()
    with netns.path_net(prefix, "p", 0, workdir=tmp_path) as net:
        assert {net.client_ns, net.router_ns, net.server_ns} <= set(netns.list_namespaces())
        r = proc.run(["ping", "-c", "2", "-i", "0.05", "-W", "2", net.server_addr],
                     netns=net.client_ns, timeout=10)
        assert r.returncode == 0, r.stdout + r.stderr
        # the router forwards; nothing else on the host can reach the path
        r = proc.run(["ip", "-j", "route", "get", net.server_addr], netns=net.router_ns, timeout=5)
        assert json.loads(r.stdout)[0]["dev"] == net.site.to_server_if
    assert _leftovers(prefix) == _clean(prefix)


def test_path_is_removed_when_the_body_raises(tmp_path):
    prefix = netns.new_prefix()
    with pytest.raises(RuntimeError):
        with netns.path_net(prefix, "p", 0, workdir=tmp_path):
            raise RuntimeError("boom")
    assert _leftovers(prefix) == _clean(prefix)


def test_net_up_list_down():
    name = f"t{os.getpid()}"
    r = subprocess.run([*RIG, "net", "up", "--name", name, "--rtt", "30ms"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    prefix = info["prefix"]
    try:
        for k in ("client_ns", "router_ns", "server_ns", "client_addr", "server_addr", "backend"):
            assert info[k]
        p = proc.run(["ping", "-n", "-q", "-c", "10", "-i", "0.05", info["server_addr"]],
                     netns=info["client_ns"], timeout=20)
        from rig.orchestration.pathcheck import parse_ping
        mean = parse_ping(p.stdout).mean_ms
        assert mean == pytest.approx(30.0, rel=0.15), p.stdout   # loaded 2-core tolerance
        listed = json.loads(subprocess.run([*RIG, "net", "list"], capture_output=True,
                                           text=True, timeout=30).stdout)
        assert any(x["name"] == name and x["alive"] for x in listed)
    finally:
        r = subprocess.run([*RIG, "net", "down", "--name", name], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _leftovers(prefix) == _clean(prefix)


def test_net_up_takes_a_scenarios_tuning_and_says_its_window(tmp_path):
    name = f"t{os.getpid()}w"
    t = tmp_path / "t.yaml"
    t.write_text("tuning:\n  tcp_rmem_max: 8MiB\n  tcp_wmem_max: 8MiB\n"
                 "  congestion_control: reno\n")
    r = subprocess.run([*RIG, "net", "up", "--name", name, "--rtt", "40ms", "--tuning", str(t),
                        "--rmem", "32MiB", "--mtu", "9000", "--reverse-loss", "0%"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    try:
        # --rmem wins over the file; the window is what tcp_adv_win_scale leaves of it
        assert info["tcp_rmem_max"] == 32 * 2**20 and info["tcp_wmem_max"] == 8 * 2**20
        assert info["congestion_control"] == "reno" and info["mtu"] == 9000
        assert info["window_bytes"] == 16 * 2**20
        assert info["window_bound_bps_at_rtt"] == pytest.approx(16 * 2**20 * 8 / 0.04)
        rmem = proc.run(["sysctl", "-n", "net.ipv4.tcp_rmem"], netns=info["client_ns"],
                        timeout=10).stdout.split()
        assert rmem[2] == str(32 * 2**20)
        mtu = proc.run(["ip", "-j", "link", "show"], netns=info["client_ns"], timeout=10)
        assert any(x.get("mtu") == 9000 for x in json.loads(mtu.stdout)
                   if x["ifname"] != "lo")
    finally:
        r = subprocess.run([*RIG, "net", "down", "--name", name], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _start_run(tmp_path):
    p = subprocess.Popen([*RIG, "run", str(REPO / "tests/data/scenarios/slow-for-kill.yaml"),
                          "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        seen.append(line)
        if "validate (before)" in line:       # servers and emulation up, transfer next
            time.sleep(1.0)                     # let the transfer start
            states = [s for s in netns.read_states().values() if s.get("pid") == p.pid]
            assert states, "run wrote no state file"
            return p, states[0]["prefix"]
        if p.poll() is not None:
            break
    p.kill()
    pytest.fail("run never reached its transfers: " + "".join(seen[-5:]))


def test_sigterm_tears_everything_down(tmp_path):
    before = tuning.read(tuning.GLOBAL_KEYS)
    p, prefix = _start_run(tmp_path)
    assert _leftovers(prefix)["ns"]
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode != 0
    assert _leftovers(prefix) == _clean(prefix)
    assert tuning.read(tuning.GLOBAL_KEYS) == before


def test_sigkill_then_rig_clean_leaves_nothing(tmp_path):
    before = tuning.read(tuning.GLOBAL_KEYS)
    p, prefix = _start_run(tmp_path)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    left = _leftovers(prefix)
    assert left["ns"] and left["state"]          # the kill really left things behind
    r = subprocess.run([*RIG, "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _leftovers(prefix) == _clean(prefix)
    assert tuning.read(tuning.GLOBAL_KEYS) == before
    # measured rows that landed before the kill are still readable
    from rig.results.store import Store
    st = Store.open(tmp_path / "out")
    assert st.validations()


def test_run_that_cannot_proceed_exits_1_in_one_line_and_leaves_nothing(tmp_path):
    r = subprocess.run([*RIG, "run", str(REPO / "tests/data/scenarios/broken-server.yaml"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("rig: server xrootd (xrootd, root): exited before listening")
    assert '"/nonexistent/xrootd" failed' in lines[-1]
    assert "Traceback" not in r.stderr
    from rig.results.store import Store
    prefix = Store.open(tmp_path / "out").environment()["prefix"]
    assert _leftovers(prefix) == _clean(prefix)


def test_clean_removes_an_orphaned_run_directory_only():
    orphan = netns.STATE_DIR / netns.new_prefix()
    (orphan / "srv").mkdir(parents=True)
    other = netns.STATE_DIR / "not-rig"
    other.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run([*RIG, "clean"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert not orphan.exists()
        assert other.exists()            # not the rig's name: never touched
    finally:
        other.rmdir()


def test_capacity_run_buffers_are_raised_only_inside_and_restored_on_error(tmp_path):
    """The capacity check raises tcp_rmem/tcp_wmem max in the rig's namespaces for its
    iperf3 only; the scenario's values are back afterwards, also when the run raised."""
    from rig.orchestration.pathcheck import CAPACITY_BUFFER, large_buffers
    keys = ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]
    host_before = tuning.read(keys)
    prefix = netns.new_prefix()
    with netns.path_net(prefix, "p", 0, workdir=tmp_path) as net:
        own = (net.client_ns, net.server_ns)
        for ns in own:
            tuning.write_ns(ns, {"net.ipv4.tcp_rmem": "4096 131072 16777216",
                                 "net.ipv4.tcp_wmem": "4096 16384 8388608"})
        with pytest.raises(RuntimeError):
            with large_buffers(own):
                for ns in own:
                    inside = tuning.read(keys, ns)
                    assert [v.split()[2] for v in inside.values()] == [str(CAPACITY_BUFFER)] * 2
                    assert inside["net.ipv4.tcp_rmem"].split()[:2] == ["4096", "131072"]
                raise RuntimeError("iperf3 died")
        for ns in own:
            assert tuning.read(keys, ns) == {"net.ipv4.tcp_rmem": "4096 131072 16777216",
                                             "net.ipv4.tcp_wmem": "4096 16384 8388608"}
    assert tuning.read(keys) == host_before        # the host's own never touched
    assert _leftovers(prefix) == _clean(prefix)
