"""The remote executor (rig.process.proc with host=): the local contract over SSH.

A real OpenSSH server runs in a namespace this module creates (tests/sshhost.py) and
stands for host dtn1. The "remote" shares this machine's pid space, which lets the
tests check from outside, through /proc, that no remote process survives.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rig.errors import RigError
from rig.process import proc, remote
from rig.process.remote import Host

from hangguard import hang_guard
from sshhost import pids_with, ssh_host

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def dtn1(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sshhost")
    with ssh_host(tmp) as h:
        ctl = Path(f"/tmp/rig-ctl-{h.prefix}")        # short: a socket path has 108 bytes
        host = h.host(control_path=str(ctl))
        master = proc.open_master(host)
        try:
            yield h, host
        finally:
            master.stop()
            assert not ctl.exists()
            Path(f"{ctl}.log").unlink(missing_ok=True)


def _gone(marker: str, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not pids_with(marker):
            return True
        time.sleep(0.05)
    return False


def test_argv_reaches_the_remote_verbatim_and_exit_codes_come_back(dtn1):
    _, host = dtn1
    nasty = ["a b", "$(touch /tmp/rig-pwned)", "; exit 3", "'\"", "new\nline", "*", ""]
    r = proc.run(["printf", "%s|", *nasty], timeout=10, host=host)
    assert r.ok and r.host == "dtn1"
    assert r.stdout == "".join(f"{a}|" for a in nasty)
    assert not Path("/tmp/rig-pwned").exists()
    assert r.stderr == ""
    r = proc.run(["sh", "-c", "echo err >&2; exit 7"], timeout=10, host=host)
    assert r.returncode == 7 and not r.timed_out and r.stderr == "err\n"
    r = proc.run(["rig-no-such-command-x"], timeout=10, host=host)
    assert r.returncode == 127 and "rig-no-such-command-x" in r.stderr
    with pytest.raises(proc.CommandFailed, match="dtn1: sh -c"):
        proc.run(["sh", "-c", "exit 3"], timeout=10, host=host, check=True)


def test_env_is_set_for_the_remote_command(dtn1):
    _, host = dtn1
    r = proc.run(["sh", "-c", 'printf %s "$RIG_T"'], timeout=10, host=host,
                 env={"RIG_T": "x y;$z"})
    assert r.stdout == "x y;$z"


def test_deadline_kills_the_remote_group_and_leaves_nothing(dtn1):
    _, host = dtn1
    marker = "314.159"
    # a child that ignores TERM and a grandchild in the background: the whole group goes.
    # Idle it takes the 1 s deadline + GRACE_S (3 s): the hang guard at 60 s (15x) stops
    # a run that waited for the sleeps instead (5 min) and names it
    with hang_guard(60, "proc.run with a 1 s deadline on dtn1"):
        r = proc.run(["sh", "-c", f"trap '' TERM; sleep {marker} & sleep {marker}"],
                     timeout=1.0, host=host)
    assert r.timed_out and not r.ok
    assert r.wall_s >= 1.0      # it ran to its deadline (measured on dtn1; load only adds)
    assert _gone(marker, 2.0), pids_with(marker)


def test_cpu_of_the_remote_tree_is_accounted(dtn1):
    _, host = dtn1
    # two children burning ~0.4 s of CPU each: the tree's total comes back
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass"
    r = proc.run(["sh", "-c", f'python3 -c "{burn}" & python3 -c "{burn}"; wait'],
                 timeout=20, host=host)
    assert r.ok, r.stderr
    cpu = r.cpu_user_s + r.cpu_sys_s
    assert 0.75 <= cpu <= 1.6, (r.cpu_user_s, r.cpu_sys_s)


def test_written_bytes_are_watched_on_the_remote(dtn1):
    _, host = dtn1
    r = proc.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "count=8"], timeout=20,
                 host=host, io_target=8 << 20)
    assert r.ok and r.io_wchar is not None and r.io_wchar >= 8 << 20
    assert r.io_done_s is not None and 0 < r.io_done_s <= r.wall_s + 0.01


def test_killing_the_local_side_kills_the_remote_process(dtn1):
    """A SIGKILLed rig takes its ssh children down (their process groups); the agent
    sees its channel close and kills the remote group."""
    _, host = dtn1
    marker = "32.7182"
    pids: list[int] = []
    t = threading.Thread(target=lambda: proc.run(["sleep", marker], timeout=60, host=host,
                                                 on_start=pids.append), daemon=True)
    t.start()
    end = time.monotonic() + 10
    while time.monotonic() < end and not [p for p in pids_with(marker) if p not in pids]:
        time.sleep(0.05)
    assert pids, "ssh did not start"
    os.killpg(pids[0], signal.SIGKILL)
    t.join(10)
    assert _gone(marker, 5.0), pids_with(marker)


def _wait_pid_file(rundir: str, ident: str, svc: proc.Service, timeout: float = 30) -> None:
    """Until the remote agent has written the service's pid file (the service alive)."""
    end = time.monotonic() + timeout
    while not Path(rundir, "pids", f"{ident}.json").exists():
        assert svc.alive(), f"{ident} ended before it wrote its pid file"
        if time.monotonic() > end:       # a hang guard (written in < 1 s idle)
            raise TimeoutError(f"no pid file for {ident} in {rundir} within {timeout:g} s")
        time.sleep(0.05)


def test_remote_service_stop_kills_its_group_and_removes_its_pid_file(dtn1, tmp_path):
    _, host = dtn1
    rundir = f"/dev/shm/rig{os.getpid() % 0xffff:04x}-t"
    marker = "33.1415"
    svc = proc.Service(["sh", "-c", f"trap '' TERM; sleep {marker}"], host=host,
                       rundir=rundir, ident="svc1", log_path=tmp_path / "svc.log").start()
    try:
        _wait_pid_file(rundir, "svc1", svc)
        assert pids_with(marker)
    finally:
        svc.stop()
    assert _gone(marker, 2.0)
    assert not Path(rundir, "pids", "svc1.json").exists()
    proc.remote_op(host, {"op": "clean", "rundir": rundir}, timeout=20)
    assert not Path(rundir).exists()


def test_clean_kills_what_a_dead_run_left_and_removes_its_directory(dtn1):
    """What `rig clean` does on a host after a SIGKILL: the pid files name the groups."""
    _, host = dtn1
    rundir = f"/dev/shm/rig{(os.getpid() + 1) % 0xffff:04x}"
    marker = "34.2718"
    svc = proc.Service(["sleep", marker], host=host, rundir=rundir, ident="s").start()
    _wait_pid_file(rundir, "s", svc)
    rep = proc.remote_op(host, {"op": "clean", "rundir": rundir}, timeout=20)
    assert rep["removed"] and [k[1] for k in rep["killed"]] == ["sleep"]
    assert _gone(marker, 2.0) and not Path(rundir).exists()
    svc.stop()


def test_put_and_fetch_files(dtn1, tmp_path):
    _, host = dtn1
    rundir = f"/dev/shm/rig{(os.getpid() + 2) % 0xffff:04x}"
    try:
        proc.put_file(host, f"{rundir}/conf/a.conf", b"x = 1\n$(no)\n")
        assert Path(rundir, "conf/a.conf").read_bytes() == b"x = 1\n$(no)\n"
        proc.fetch_tree(host, rundir, tmp_path / "back")
        assert (tmp_path / "back/conf/a.conf").read_bytes() == b"x = 1\n$(no)\n"
    finally:
        proc.remote_op(host, {"op": "clean", "rundir": rundir}, timeout=20)


def test_an_unreachable_host_is_one_line_naming_it(dtn1, tmp_path):
    h, _ = dtn1
    bad = Host(name="dtn9", ssh=f"root@{h.addr}", port=2, identity=str(h.identity),
               known_hosts=str(h.known_hosts), control_path=str(tmp_path / "c"))
    with pytest.raises(RigError, match=r"^host dtn9 \(root@[\d.]+ port 2\): cannot connect"):
        proc.open_master(bad)
    r = proc.run(["true"], timeout=5, host=Host(name="dtn9", ssh=f"root@{h.addr}", port=2,
                                                identity=str(h.identity)))
    assert r.returncode == 255 and "ssh to dtn9" in r.stderr


def test_a_refused_key_is_one_line_naming_the_host(dtn1, tmp_path):
    h, _ = dtn1
    key = tmp_path / "other"
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], timeout=20,
             check=True)
    bad = Host(name="dtn1", ssh=f"root@{h.addr}", identity=str(key),
               known_hosts=str(h.known_hosts), control_path=str(tmp_path / "c"))
    with pytest.raises(RigError, match=r"host dtn1 .*cannot connect: .*Permission denied"):
        proc.open_master(bad)


def test_agent_report_parsing_is_strict():
    rep, rest = remote.parse_agent("x\n" + remote.MARK + '{"rc": 3}\n')
    assert rep == {"rc": 3} and rest == "x\n"
    assert remote.parse_agent("no report")[0] is None
    assert remote.parse_agent(remote.MARK + "{broken")[0] is None


def test_doctor_reports_a_remote_host(dtn1):
    import json
    import subprocess
    import sys
    h, _ = dtn1
    rmem = Path("/proc/sys/net/core/rmem_max")
    before = rmem.read_text().strip()
    r = subprocess.run([sys.executable, "-m", "rig", "doctor", "--json", "--host",
                        f"root@{h.addr}", "--identity", str(h.identity), "--known-hosts",
                        str(h.known_hosts)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["kernel"] == os.uname().release and info["kernel_netem"] in (True, False)
    assert info["versions"]["curl"] and info["versions"]["iperf3"]
    # host-global: a run beside this test (a scenario's core_rmem_max) may set it while
    # doctor reads it, so the value doctor saw is the one before or the one after
    assert info["sysctls"]["net.core.rmem_max"] in (before, rmem.read_text().strip())
    # same clock here: the offset is within its stated bound (plus scheduling slack)
    assert abs(info["clock_offset_s"]) <= info["clock_offset_bound_s"] + 0.05
    r = subprocess.run([sys.executable, "-m", "rig", "doctor", "--host", f"root@{h.addr}",
                        "--port", "2", "--identity", str(h.identity)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"rig: host {h.addr} (root@{h.addr}): ")


def test_cpu_op_reads_a_running_service_tree_on_the_remote(dtn1, tmp_path):
    """A remote server's CPU (rig run's server_cpu_*): the agent sums the tree its pid
    file names, children included, from /proc on that host; None once it is gone."""
    _, host = dtn1
    rundir = f"/dev/shm/rig{(os.getpid() + 3) % 0xffff:04x}"
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.5: pass"
    svc = proc.Service(["sh", "-c", f'python3 -c "{burn}"; sleep 30'], host=host,
                       rundir=rundir, ident="srv", log_path=tmp_path / "s.log").start()
    try:
        _wait_pid_file(rundir, "srv", svc)
        c0 = proc.remote_op(host, {"op": "cpu", "rundir": rundir, "ids": ["srv"]},
                            timeout=20)["cpu"]["srv"]
        time.sleep(1.5)      # the burner ends (reaped by sh: its cutime) and sh sleeps
        c1 = proc.remote_op(host, {"op": "cpu", "rundir": rundir, "ids": ["srv", "none"]},
                            timeout=20)["cpu"]
        assert c1["none"] is None
        assert 0.4 <= sum(c1["srv"]) <= 1.0, (c0, c1)       # the 0.5 s burn, reaped
        assert sum(c1["srv"]) >= sum(c0)
    finally:
        svc.stop()
        proc.remote_op(host, {"op": "clean", "rundir": rundir}, timeout=20)


def test_remote_tuning_is_planned_applied_and_restored_in_the_hosts_netns(dtn1):
    """rig.realization.remote_tuning on the "host" (sshd's namespace): the old values
    are read before anything is written, and only values still holding what the run
    wrote are put back."""
    from rig.description.scenario import Tuning
    from rig.realization import remote_tuning
    h, host = dtn1
    def now(k: str) -> str:
        return " ".join(proc.run(["ip", "netns", "exec", h.ns, "sysctl", "-n", k],
                                 timeout=10, check=True).stdout.split())
    cc0, rmem0 = now("net.ipv4.tcp_congestion_control"), now("net.ipv4.tcp_rmem")
    t = Tuning(congestion_control="reno" if cc0 != "reno" else "bbr",
               tcp_rmem_max=24 << 20, mtu=4000)
    rec = remote_tuning.plan(host, t, [(h.addr, True)])
    dev = f"{h.prefix}-9hp"
    assert rec["sysctls_before"] == {"net.ipv4.tcp_rmem": rmem0,
                                     "net.ipv4.tcp_congestion_control": cc0}
    assert rec["mtu_before"] == {dev: 1500} and rec["mtu_wrote"] == {dev: 4000}
    assert now("net.ipv4.tcp_congestion_control") == cc0       # planning writes nothing
    remote_tuning.apply(host, rec)
    try:
        assert now("net.ipv4.tcp_rmem") == f"4096 131072 {24 << 20}"
        assert now("net.ipv4.tcp_congestion_control") == t.congestion_control
        # another run changed rmem since: restore leaves that one alone
        proc.run(["ip", "netns", "exec", h.ns, "sysctl", "-q", "-w",
                  "net.ipv4.tcp_rmem=4096 131072 7000000"], timeout=10, check=True)
        done = remote_tuning.restore(host, rec)
        assert now("net.ipv4.tcp_congestion_control") == cc0
        assert now("net.ipv4.tcp_rmem") == "4096 131072 7000000"
        assert f"{dev} mtu 1500" in done and not any("tcp_rmem" in d for d in done)
    finally:
        proc.run(["ip", "netns", "exec", h.ns, "sysctl", "-q", "-w",
                  f"net.ipv4.tcp_rmem={rmem0}"], timeout=10)
        proc.run(["ip", "-n", h.ns, "link", "set", "dev", dev, "mtu", "1500"], timeout=10)
    with pytest.raises(RigError, match=r"host dtn1: no interface holds the path's address"):
        remote_tuning.plan(host, t, [("192.0.2.99", True)])


@pytest.fixture(scope="module")
def dtn6(tmp_path_factory):
    """A remote host reached over IPv6 only (issue 29: SSH to v6 hosts)."""
    tmp = tmp_path_factory.mktemp("sshhost6")
    with ssh_host(tmp, ip=6) as h:
        ctl = Path(f"/tmp/rig-ctl-{h.prefix}")
        host = h.host(control_path=str(ctl))
        master = proc.open_master(host)
        try:
            yield h, host
        finally:
            master.stop()
            Path(f"{ctl}.log").unlink(missing_ok=True)


def test_a_host_reached_over_ipv6_runs_commands_and_trades_files(dtn6, tmp_path):
    h, host = dtn6
    assert ":" in h.addr and host.ssh == f"root@{h.addr}"
    r = proc.run(["printf", "%s|", "a b", "$(no)"], timeout=10, host=host)
    assert r.ok and r.stdout == "a b|$(no)|"
    rundir = f"/dev/shm/rig{(os.getpid() + 6) % 0xffff:04x}"
    try:
        proc.put_file(host, f"{rundir}/c.conf", b"v6\n")
        proc.fetch_tree(host, rundir, tmp_path / "back")
        assert (tmp_path / "back/c.conf").read_bytes() == b"v6\n"
        # the agent finds free ports on the host's v6 address (it bound AF_INET before)
        rep = proc.remote_op(host, {"op": "ports", "addr": h.addr, "ports": [22, 5201]},
                             timeout=20)
        assert rep["ports"][0] == 23 and rep["ports"][1] >= 5201, rep
    finally:
        proc.remote_op(host, {"op": "clean", "rundir": rundir}, timeout=20)
