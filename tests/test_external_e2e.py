"""External endpoints end to end (issue 40 item 1): a server the rig does not start.

The test makes the endpoint itself, outside the rig: its own namespace
(`rigtest-ext-<pid>`, a name `rig clean` never matches), a veth to the host with a /30 of
203.0.113.0/24 (TEST-NET-3), and a real xrootd there serving root:// and HTTP (XrdHttp)
from a folder of its own. The rig is given only the URL. It must route its client's
traffic through its emulated path on to the endpoint, measure the path's RTT as the
configured RTT plus the base RTT beyond it, run the transfers, name the endpoint in its
rows, and leave nothing of its own (namespaces, links, iptables rules, the forwarding
sysctls) behind; the test removes only what it made.

An endpoint that does not answer: one line naming the URL, exit 1, nothing left."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
RTTS_MS = (0, 40)
# the path check's RTT through the rig's userspace engine on a loaded 2-vCPU VM: the
# engine's residual (+0.2-0.3 ms idle, issue 42) and the host's wake-up tail; generous
TOLERANCE_MS = 3.0
FILE_BYTES = 16 * 2**20


def _run(argv: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=check,
                          stdin=subprocess.DEVNULL)


class Endpoint:
    """The test's own storage: namespace, veth, address, xrootd (root:// + XrdHttp)."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.ns = f"rigtest-ext-{pid}"
        self.host_if, self.ns_if = f"rtx{pid}h", f"rtx{pid}n"
        base = 4 * (pid % 63)
        self.host_addr, self.addr = f"203.0.113.{base + 1}", f"203.0.113.{base + 2}"
        self.dir = Path(tempfile.mkdtemp(prefix="rigtest-ext-", dir="/dev/shm"))
        self.proc: subprocess.Popen | None = None
        self.root_port, self.http_port = 31094, 38000

    def up(self) -> "Endpoint":
        assert self.ns not in _run(["ip", "netns", "list"]).stdout, f"{self.ns} exists"
        _run(["ip", "netns", "add", self.ns])
        _run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if,
              "netns", self.ns])
        _run(["ip", "addr", "add", f"{self.host_addr}/30", "dev", self.host_if])
        _run(["ip", "link", "set", self.host_if, "up"])
        _run(["ip", "-n", self.ns, "addr", "add", f"{self.addr}/30", "dev", self.ns_if])
        _run(["ip", "-n", self.ns, "link", "set", self.ns_if, "up"])
        _run(["ip", "-n", self.ns, "link", "set", "lo", "up"])
        os.chmod(self.dir, 0o755)
        data = self.dir / "data" / "store"
        data.mkdir(parents=True)
        (data / "f16M").write_bytes(os.urandom(FILE_BYTES))
        for d in (self.dir, self.dir / "data", data):
            os.chmod(d, 0o755)
        os.chmod(data / "f16M", 0o644)
        run = self.dir / "run"
        run.mkdir()
        shutil.chown(run, "xrootd", "xrootd")
        cfg = self.dir / "xrootd.cfg"
        cfg.write_text(f"all.export /store\noss.localroot {self.dir / 'data'}\n"
                       f"all.adminpath {run}\nall.pidpath {run}\n"
                       f"xrd.protocol XrdHttp:{self.http_port} libXrdHttp.so\n")
        os.chmod(cfg, 0o644)
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, "xrootd", "-R", "xrootd", "-n", "rigtestext",
             "-p", str(self.root_port), "-c", str(cfg), "-l", str(run / "xrootd.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        from rig.process import nsprobe
        nsprobe.wait_tcp(self.ns, self.addr, self.root_port, timeout=30, what="test xrootd")
        nsprobe.wait_tcp(self.ns, self.addr, self.http_port, timeout=30, what="test XrdHttp")
        return self

    def down(self) -> None:
        if self.proc is not None:
            with_timeout_kill(self.proc)
        _run(["ip", "netns", "pids", self.ns], check=False)
        for pid in _run(["ip", "netns", "pids", self.ns], check=False).stdout.split():
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        _run(["ip", "netns", "del", self.ns], check=False)
        _run(["ip", "link", "del", self.host_if], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def with_timeout_kill(p: subprocess.Popen) -> None:
    import signal
    with __import__("contextlib").suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


@pytest.fixture
def endpoint(require_tools):
    require_tools("xrootd", "xrdcp", "xrdfs", "curl", "iptables", "ping")
    ep = Endpoint()
    try:
        yield ep.up()
    finally:
        ep.down()
    assert ep.ns not in _run(["ip", "netns", "list"]).stdout


def _host_state() -> dict:
    """What a run may touch on the host: iptables (nat and filter), links, the
    per-interface forwarding sysctls."""
    links = sorted(os.listdir("/sys/class/net"))
    fwd = {i: Path(f"/proc/sys/net/ipv4/conf/{i}/forwarding").read_text().strip()
           for i in links if Path(f"/proc/sys/net/ipv4/conf/{i}/forwarding").exists()}
    return {"nat": _run(["iptables", "-w", "5", "-t", "nat", "-S"]).stdout,
            "filter": _run(["iptables", "-w", "5", "-S"]).stdout,
            "links": [x for x in links if x.startswith("rig")], "forwarding": fwd,
            "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()}


def _scenario(tmp: Path, url: str, clients: str) -> Path:
    p = tmp / "ext.yaml"
    p.write_text(f"""name: ext-e2e
paths:
  - {{name: wan, rtt: [{', '.join(f'{r}ms' for r in RTTS_MS)}]}}
servers: [{{name: site, kind: external, url: "{url}"}}]
clients:
{clients}
validation: {{ping_count: 10, rtt_rechecks: 0}}
transfer_timeout: 120s
""")
    return p


def _only_ours(before: dict, after: dict, prefix: str) -> None:
    """Nothing of the run left: no rule with its prefix, no link of its prefix, the
    forwarding sysctls of every interface there before as they were."""
    assert prefix not in after["nat"] and prefix not in after["filter"]
    assert not [x for x in after["links"] if x.startswith(prefix)], after["links"]
    assert after["ip_forward"] == before["ip_forward"]
    for i, v in before["forwarding"].items():
        if i in after["forwarding"] and not i.startswith("rig"):
            assert after["forwarding"][i] == v, (i, v, after["forwarding"][i])


def test_transfers_cross_the_emulated_path_to_an_endpoint_the_rig_did_not_start(
        tmp_path, endpoint):
    from rigrun import rig_run
    from rig.results.store import Store
    before = _host_state()
    url = f"root://{endpoint.addr}:{endpoint.root_port}//store"
    http = f"http://{endpoint.addr}:{endpoint.http_port}/store"
    clients = ("  - {name: xrdcp, tool: xrdcp, file: f16M}\n"
               "  - {name: xrdcp-abs, tool: xrdcp, file: /store/f16M}\n")
    scen = _scenario(tmp_path, url, clients)
    # the HTTP door of the same xrootd, a second run (one endpoint per scenario)
    run = rig_run(scen, tmp_path / "run", timeout=900)
    assert "endpoint site: answers; base RTT" in run.stderr
    st = Store.open(run.out)
    try:
        rows, vals, env = st.transfers(), st.validations(), st.environment()
    finally:
        st.close()
    _only_ours(before, _host_state(), run.prefix)
    ep = env["endpoints"]["site"]
    assert ep["url"] == url and ep["address"] == endpoint.addr
    assert ep["files"] == {f"{url}/f16M": FILE_BYTES}
    base = ep["base_rtt_ms"]
    assert base is not None and 0 < base < TOLERANCE_MS, base
    assert env["origins"]["wan"]["site"]["external"] == url
    # every transfer: ok, all the bytes, named by the endpoint's URL, on every step
    assert len(rows) == 2 * len(RTTS_MS)
    for r in rows:
        assert r.ok, (r.client, r.error)
        assert r.bytes == FILE_BYTES
        assert r.url == f"root://{endpoint.addr}:{endpoint.root_port}//store/f16M", r.url
        assert r.origin == "site"
        assert endpoint.addr in r.argv
    # the path check pinged the endpoint through the path: configured RTT + base RTT
    checks = [v for v in vals if v.phase in ("before", "after")]
    assert len(checks) == 2 * len(RTTS_MS)
    for v in checks:
        raw = json.loads(v.raw)
        assert raw["endpoint_addr"] == endpoint.addr and raw["capacity_run"] is False
        assert v.iperf_bps is None
        assert v.rtt_ms_measured is not None, raw
        want = v.rtt_ms_configured + base
        assert abs(v.rtt_ms_measured - want) <= TOLERANCE_MS, (v.rtt_ms_configured, base,
                                                               v.rtt_ms_measured)
    # the delay is the rig's: the step at 40 ms took the endpoint 40 ms further away
    by = {v.rtt_ms_configured: v.rtt_ms_measured for v in checks if v.phase == "before"}
    assert by[40] - by[0] >= 40 - TOLERANCE_MS
    # the report names the endpoint
    assert f"External endpoint site: {url} (at {endpoint.addr}" in \
        (run.out / "report.html").read_text()
    # no server of the rig's, no iperf3 anywhere
    log = (run.out / "commands.log").read_text()
    assert " xrootd -R" not in log and "iperf3 -s" not in log and "iperf3 -c" not in log
    print(f"base RTT {base:.3f} ms; ping through the path "
          + ", ".join(f"{k:g} ms: {m:.3f} ms" for k, m in sorted(by.items()))
          + "; throughput " + ", ".join(f"{r.client}@{r.rtt_ms_configured:g}ms "
                                       f"{r.throughput_bps / 1e6:.0f} Mbit/s" for r in rows))

    # the same endpoint's HTTP door: curl and davix-get, their HEAD as the stat
    scen2 = _scenario(tmp_path, http, "  - {name: curl, tool: curl, file: f16M}\n"
                                      "  - {name: davix, tool: davix-get, file: f16M}\n")
    run2 = rig_run(scen2, tmp_path / "run2", timeout=900)
    st = Store.open(run2.out)
    try:
        rows2 = st.transfers()
    finally:
        st.close()
    assert len(rows2) == 2 * len(RTTS_MS)
    for r in rows2:
        assert r.ok and r.bytes == FILE_BYTES, (r.client, r.error)
        assert r.url == f"{http}/f16M"
    _only_ours(before, _host_state(), run2.prefix)


def test_an_endpoint_that_does_not_answer_is_one_line_and_leaves_nothing(tmp_path, endpoint):
    before = _host_state()
    url = f"root://{endpoint.addr}:{endpoint.root_port + 1}//store"     # nothing listens
    scen = _scenario(tmp_path, url, "  - {name: xrdcp, tool: xrdcp, file: f16M}\n")
    r = _run([sys.executable, "-m", "rig", "run", str(scen), "--out", str(tmp_path / "run")],
             timeout=300, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if url in ln and "does not answer" in ln]
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    from rig.realization import netns
    from rig.results.store import Store
    st = Store.open(tmp_path / "run")
    try:
        prefix = st.environment()["prefix"]
    finally:
        st.close()
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    assert prefix not in _run(["ip", "link"]).stdout
    _only_ours(before, _host_state(), prefix)
    # a file the endpoint does not have: the stat's one line, naming the file's URL
    good = f"root://{endpoint.addr}:{endpoint.root_port}//store"
    scen = _scenario(tmp_path, good, "  - {name: xrdcp, tool: xrdcp, file: nothere}\n")
    r = _run([sys.executable, "-m", "rig", "run", str(scen), "--out", str(tmp_path / "run2")],
             timeout=300, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"endpoint {good}: {good}/nothere cannot be read" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    _only_ours(before, _host_state(), prefix)


def test_rig_clean_removes_a_killed_runs_gateway(tmp_path, endpoint):
    """SIGKILL during the first step: the rules with the run's prefix, the forwarding
    sysctl it wrote and its links stay; `rig clean` removes them, and nothing else."""
    before = _host_state()
    url = f"root://{endpoint.addr}:{endpoint.root_port}//store"
    scen = _scenario(tmp_path, url, "  - {name: xrdcp, tool: xrdcp, file: f16M}\n")
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(scen), "--out",
                          str(tmp_path / "run")], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        seen = ""
        while time.monotonic() < deadline:      # the gateway is up once the check answered
            line = p.stderr.readline()
            seen += line
            if "answers; base RTT" in line or not line:
                break
        assert "answers; base RTT" in seen, seen[-2000:]
        os.killpg(p.pid, 9)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait(timeout=30)
    from rig.results.store import Store
    st = Store.open(tmp_path / "run")
    try:
        prefix = st.environment()["prefix"]
    finally:
        st.close()
    left = _host_state()
    assert prefix in left["nat"] and prefix in left["filter"]
    assert f"{prefix}0gh" in left["links"]
    # `rig clean`, held to this run's prefix (other runs may share the host)
    from rig.orchestration.clean import clean
    said: list[str] = []
    clean(prefixes={prefix}, say=said.append)
    assert any("removed iptables rule" in s for s in said), said
    _only_ours(before, _host_state(), prefix)
    from rig.realization import netns
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    # the test's own endpoint is untouched
    assert endpoint.ns in _run(["ip", "netns", "list"]).stdout
    assert endpoint.host_if in os.listdir("/sys/class/net")


def test_sigterm_during_a_step_undoes_the_gateway(tmp_path, endpoint):
    """SIGTERM (as Ctrl-C) once the endpoint answered: the run's teardown removes its
    rules, puts the forwarding sysctls back and deletes its links and namespaces."""
    import signal
    before = _host_state()
    url = f"root://{endpoint.addr}:{endpoint.root_port}//store"
    scen = _scenario(tmp_path, url, "  - {name: xrdcp, tool: xrdcp, file: f16M}\n")
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(scen), "--out",
                          str(tmp_path / "run")], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        seen = ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            seen += line
            if "answers; base RTT" in line or not line:
                break
        assert "answers; base RTT" in seen, seen[-2000:]
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait(timeout=30)
    assert p.returncode == 130, (seen + err)[-2000:]
    assert "Traceback" not in err
    from rig.results.store import Store
    st = Store.open(tmp_path / "run")
    try:
        prefix = st.environment()["prefix"]
    finally:
        st.close()
    from rig.realization import netns
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    _only_ours(before, _host_state(), prefix)
