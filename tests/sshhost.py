"""A remote host for tests, without a remote machine: OpenSSH's sshd inside a network
namespace this test creates, reached from the host over a veth pair.

The namespace `rig<hex>-9h` carries a leased address range and a state file owned by
the test process (so another user's `rig clean` leaves it alone while the test runs);
sshd has its own host key, authorized_keys and config in a tmp dir, listens only on
the namespace's address, and is started through rig.process.proc. The host's own sshd
and ~root/.ssh are never touched; the client uses a test-private identity and
known_hosts file passed explicitly. Everything is removed on exit.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rig.process import owner, proc
from rig.process.remote import Host
from rig.realization import netns

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshHost:
    prefix: str
    ns: str
    addr: str            # the "remote host's" address (inside ns)
    local_addr: str      # this host's end of the veth
    identity: Path
    known_hosts: Path
    sshd: proc.Service

    def host(self, name: str = "dtn1", **kw) -> Host:
        return Host(name=name, ssh=f"root@{self.addr}", identity=str(self.identity),
                    known_hosts=str(self.known_hosts), **kw)


def _run(argv: list[str]) -> None:
    proc.run(argv, timeout=20, check=True)


@contextlib.contextmanager
def ssh_host(tmp: Path, ip: int = 4) -> Iterator[SshHost]:
    """sshd in a fresh namespace; yields how to reach it; removes everything. ip=6: the
    veth carries the lease's IPv6 twin (rig.realization.netns.v6_of), a v6-only host."""
    prefix = netns.new_prefix()
    ns, veth_h, veth_r = f"{prefix}-9h", f"{prefix}-9hv", f"{prefix}-9hp"
    netns.write_state(prefix, {"prefix": prefix, "kind": "net", "name": f"test-{prefix}",
                               "owner_pid": os.getpid(),
                               "owner_start": owner.start_time(os.getpid())})
    subnet = ipaddress.ip_network(netns.lease_subnet(prefix))
    plen = 30
    if ip == 6:
        subnet, plen = netns.v6_of(ipaddress.ip_network(f"{subnet.network_address}/30")), 126
    local_addr, addr = str(subnet.network_address + 1), str(subnet.network_address + 2)
    nodad = ["nodad"] if ip == 6 else []
    keys = tmp / "ssh"
    keys.mkdir(mode=0o700)
    sshd = None
    try:
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth_h, "type", "veth", "peer", "name", veth_r])
        _run(["ip", "link", "set", veth_r, "netns", ns])
        _run(["ip", "addr", "add", f"{local_addr}/{plen}", "dev", veth_h, *nodad])
        _run(["ip", "link", "set", veth_h, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{addr}/{plen}", "dev", veth_r, *nodad])
        _run(["ip", "-n", ns, "link", "set", veth_r, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "hostkey")])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")])
        shutil.copyfile(keys / "id.pub", keys / "authorized_keys")
        pub = (keys / "hostkey.pub").read_text().split()
        (tmp / "known_hosts").write_text(f"{addr} {pub[0]} {pub[1]}\n")   # ssh's own form
        (keys / "sshd_config").write_text(
            f"ListenAddress {addr}\nPort 22\nHostKey {keys / 'hostkey'}\n"
            f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile none\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nMaxSessions 64\nMaxStartups 64\n"
            "AcceptEnv none\nPrintMotd no\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # sshd's privsep dir (empty)
        sshd = proc.Service([SSHD, "-D", "-e", "-f", str(keys / "sshd_config")], netns=ns,
                            log_path=tmp / "sshd.log", name="sshd").start()
        deadline = time.monotonic() + 30      # a hang guard: it listens in < 1 s idle
        while not _accepts(ns, addr):
            assert sshd.alive(), (tmp / "sshd.log").read_text()
            if time.monotonic() > deadline:
                raise TimeoutError(f"sshd did not listen on {addr} within 30 s: "
                                   f"{(tmp / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.05)
        yield SshHost(prefix, ns, addr, local_addr, keys / "id", tmp / "known_hosts", sshd)
    finally:
        if sshd is not None:
            sshd.stop()
        netns.kill_ns_processes(ns) if ns in netns.list_namespaces() else None
        proc.run(["ip", "link", "del", veth_h], timeout=20)
        proc.run(["ip", "netns", "del", ns], timeout=20)
        netns.release_subnet(prefix)
        netns.drop_state(prefix)


@dataclass(frozen=True)
class HostLink:
    """A veth pair between two test hosts' namespaces: the path under test."""
    a_addr: str          # host a's address on the link (e.g. the server host)
    b_addr: str          # host b's address on the link (e.g. the client host)
    a_dev: str
    b_dev: str


@contextlib.contextmanager
def link_hosts(a: SshHost, b: SshHost) -> Iterator[HostLink]:
    """A veth pair between a's and b's namespaces with a /30 of a range leased here;
    removed (with its lease and state file) on exit."""
    prefix = netns.new_prefix()
    da, db = f"{prefix}-9la", f"{prefix}-9lb"
    netns.write_state(prefix, {"prefix": prefix, "kind": "net", "name": f"test-{prefix}",
                               "owner_pid": os.getpid(),
                               "owner_start": owner.start_time(os.getpid())})
    subnet = ipaddress.ip_network(netns.lease_subnet(prefix))
    aa, ba = str(subnet.network_address + 1), str(subnet.network_address + 2)
    try:
        _run(["ip", "link", "add", da, "type", "veth", "peer", "name", db])
        _run(["ip", "link", "set", da, "netns", a.ns])
        _run(["ip", "link", "set", db, "netns", b.ns])
        for ns, dev, addr in ((a.ns, da, aa), (b.ns, db, ba)):
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
        yield HostLink(aa, ba, da, db)
    finally:
        proc.run(["ip", "-n", a.ns, "link", "del", da], timeout=20)
        netns.release_subnet(prefix)
        netns.drop_state(prefix)


@dataclass(frozen=True)
class ThreeHosts:
    """dtn1 (server host) -- rtr -- dtn2 (client host), routed through rtr."""
    server: SshHost
    client: SshHost
    router: SshHost
    client_link: HostLink     # a = rtr, b = dtn2
    server_link: HostLink     # a = dtn1, b = rtr


@contextlib.contextmanager
def three_hosts(tmp: Path) -> Iterator[ThreeHosts]:
    """Three sshd hosts, two veth pairs, and routes on the ends through rtr (whose
    forwarding stays off: a run through it turns it on); all removed on exit."""
    for d in ("dtn1", "dtn2", "rtr"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as st:
        s = st.enter_context(ssh_host(tmp / "dtn1"))
        c = st.enter_context(ssh_host(tmp / "dtn2"))
        r = st.enter_context(ssh_host(tmp / "rtr"))
        cl = st.enter_context(link_hosts(r, c))
        sl = st.enter_context(link_hosts(s, r))
        _run(["ip", "-n", c.ns, "route", "add", f"{sl.a_addr}/32", "via", cl.a_addr])
        _run(["ip", "-n", s.ns, "route", "add", f"{cl.b_addr}/32", "via", sl.b_addr])
        yield ThreeHosts(s, c, r, cl, sl)


def _accepts(ns: str, addr: str) -> bool:
    from rig.process.nsprobe import tcp_open
    return tcp_open(None, addr, 22) if ns is None else tcp_open(ns, addr, 22)


def pids_with(marker: str) -> list[int]:
    """Processes on this machine (the "remote host" shares its pid space) whose
    command line contains `marker`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            out.append(int(d))
    return out


def reachable(addr: str, port: int = 22) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=1):
            return True
    except OSError:
        return False


def start_run(scenario: Path, out: Path, *until: str,
              dir_marker: str = "run directory ") -> tuple[subprocess.Popen, str | None]:
    """`rig run SCENARIO` in its own session, its stderr read until a line holding one of
    `until`; returns the process (still running, or ended) and the prefix named by its
    run-directory line (None if it printed none). The caller SIGKILLs or waits for it."""
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(scenario), "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    prefix = None
    try:
        assert p.stderr is not None
        for line in p.stderr:
            if dir_marker in line:
                prefix = line.rsplit("/", 1)[1].strip()
            if any(u in line for u in until):
                break
    except BaseException:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        raise
    return p, prefix


TOOLS = ("ssh", "nginx", "xrootd", "xrdcp", "curl", "iperf3", "iptables")


def missing_tools() -> list[str]:
    """What the emulated-router e2e tests need and this machine lacks (`make install`)."""
    return [t for t in TOOLS if not shutil.which(t)]


def remote_scenario(example: Path, hosts: dict, shm: str, *, size: str = "32MiB",
                    repeats: int = 1, iperf_s: int = 1) -> dict:
    """An example scenario pointed at the test's sshd hosts ({name: SshHost}, run
    directories under `shm`), with one file, no tuning and a short validation."""
    import yaml
    d = yaml.safe_load(example.read_text())
    for name, h in hosts.items():
        d["hosts"][name].update(ssh=f"root@{h.addr}", identity=str(h.identity),
                                known_hosts=str(h.known_hosts), rundir=f"{shm}/{name}")
    d["files"] = [{"name": "f256M", "size": size}]
    d["sweep"] = {"repeats": repeats}
    d["tuning"] = {}
    d["validation"] = {"ping_count": 20, "iperf_duration": f"{iperf_s}s", "iperf_streams": 2}
    d["transfer_timeout"] = "60s"
    return d


def run_then_sigkill(scenario: Path, out: Path, until: str, ready) -> str | None:
    """Start `rig run`, wait (<= 60 s) until `ready()` says all is in place, SIGKILL rig
    itself (its ssh children live on, as after a crash); return the run's prefix."""
    p, prefix = start_run(scenario, out, until)
    try:
        deadline = time.monotonic() + 60
        while prefix and not ready() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    return prefix


def gone_after_clean(prefix: str, leftovers) -> None:
    """After `rig clean`: within 5 s neither `leftovers(prefix)` (processes, run
    directories) nor the path's engine remain, and the run's state file is gone."""
    deadline = time.monotonic() + 5
    while (leftovers(prefix) or pids_with(f"{prefix}-wan-engine")) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers(prefix), leftovers(prefix)
    assert not pids_with(f"{prefix}-wan-engine")
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
