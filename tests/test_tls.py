"""TLS modes and server CPU: scenario keys, argv, server configs, the /proc CPU reader,
result loading without the new columns, and a CA made with openssl that a client must
verify against (no test disables verification)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import scenario, steps
from rig.process import cputree
from rig.realization import tls
from rig.results import check
from rig.results.store import Store, TransferRow
from rig.services import servers, tools

REPO = Path(__file__).resolve().parent.parent


def _sc(tmp_path: Path, **over) -> dict:
    d = {"name": "t", "paths": [{"name": "wan", "rtt": ["0ms"]}],
         "files": [{"name": "f", "size": "1MiB"}],
         "servers": [{"name": "x", "kind": "xrootd"}],
         "clients": [{"name": "xrdcp", "tool": "xrdcp", "file": "f"},
                     {"name": "curl", "tool": "curl", "file": "f"},
                     {"name": "davix", "tool": "davix-get", "file": "f"}],
         "sweep": {"concurrency": [1, 4], "tls": ["off", "control", "all"]}}
    d.update(over)
    return d


def _cli(tmp_path: Path, d: dict) -> subprocess.CompletedProcess:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    return subprocess.run([sys.executable, "-m", "rig", "plan", str(f)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_sweep_tls_expands_per_tool_capability(tmp_path):
    sc = scenario.parse(_sc(tmp_path), source="s.yaml")
    gs = steps.groups(sc)
    modes = {c: sorted({g.tls for g in gs if g.client.name == c}) for c in ("xrdcp", "curl", "davix")}
    assert modes == {"xrdcp": ["all", "control", "off"], "curl": ["all", "off"],
                     "davix": ["all", "off"]}
    assert len(gs) == scenario.measurements(sc) == 2 * (3 + 2 + 2)
    assert scenario.uses_tls(sc)


def test_yaml_off_and_on_mean_off_and_all(tmp_path):
    text = ("name: t\npaths: [{name: w, rtt: [0ms]}]\nfiles: [{name: f, size: 1MiB}]\n"
            "servers: [{name: x, kind: nginx}]\n"
            "clients: [{name: c, tool: curl, file: f, tls: on}]\nsweep: {tls: [off, on]}\n")
    f = tmp_path / "s.yaml"
    f.write_text(text)
    sc = scenario.load(f)
    assert sc.clients[0].tls == "all" and sc.sweep.tls == ["off", "all"]


@pytest.mark.parametrize("over, key, msg", [
    ({"sweep": {"tls": ["off", "fast"]}}, "sweep.tls[1]", "must be one of off, control, all"),
    ({"clients": [{"name": "c", "tool": "curl", "file": "f", "tls": "control"}]},
     "clients[0].tls", "curl cannot use TLS mode control (only xrdcp)"),
    ({"clients": [{"name": "c", "tool": "iperf3", "tls": "all"}]},
     "clients[0].tls", "iperf3 cannot use TLS mode all"),
    ({"clients": [{"name": "c", "tool": "curl", "file": "f"}], "sweep": {"tls": ["control"]}},
     "sweep.tls", "no client can use TLS mode control"),
])
def test_bad_tls_input_is_one_line_exit_2(tmp_path, over, key, msg):
    r = _cli(tmp_path, _sc(tmp_path, **over))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f": {key}: " in lines[0] and msg in lines[0], lines
    assert lines[0].startswith("rig: ") and "(got " in lines[0]


def _plan(kind: str, tlsf: servers.TlsFiles | None, tmp: Path) -> servers.ServerPlan:
    spec = scenario.ServerSpec(name="x", kind=kind)
    return servers.ServerPlan(spec, "ns", "198.18.0.6",
                              servers.default_ports(kind, 0, tls=tlsf is not None),
                              tmp / "w", tmp / "d", tls=tlsf)


TLSF = servers.TlsFiles("CERT", "KEY", "/ca/ca.pem", "/ca/certs")


def test_client_argv_and_env_trust_only_the_run_ca(tmp_path):
    plan = _plan("xrootd", TLSF, tmp_path)
    f = scenario.FileSpec(name="f", size=1)
    jobs = {}
    for tool, proto, mode in (("xrdcp", "root", "control"), ("xrdcp", "root", "all"),
                              ("curl", "http", "all"), ("davix-get", "http", "all"),
                              ("curl", "http", "off")):
        c = scenario.ClientSpec(name="c", tool=tool, protocol=proto)
        t = tools.get(tool)
        j = t.job(c, 1, 0, server=plan, file=f, iperf=("", 0), timeout_s=10, tls=mode)
        jobs[(tool, mode)] = (t.argv(j), t.env(j), j.url)
    argv, env, url = jobs[("xrdcp", "control")]
    assert url == "roots://198.18.0.6:1094//f" and "--tlsnodata" in argv
    assert env["X509_CERT_DIR"] == "/ca/certs"
    argv, env, url = jobs[("xrdcp", "all")]
    assert url.startswith("roots://") and "--tlsnodata" not in argv
    argv, _, url = jobs[("curl", "all")]
    assert url == "https://198.18.0.6:8443/f" and argv[argv.index("--cacert") + 1] == "/ca/ca.pem"
    argv, _, url = jobs[("davix-get", "all")]
    assert argv[argv.index("--capath") + 1] == "/ca/certs" and url.startswith("https://")
    argv, _, url = jobs[("curl", "off")]
    assert url == "http://198.18.0.6:8000/f" and "--cacert" not in argv
    for a, _, _ in jobs.values():     # never a switch that turns verification off
        assert not {"-k", "--insecure"} & set(a)


def test_server_configs_with_and_without_tls(tmp_path):
    x = servers.server_files(_plan("xrootd", TLSF, tmp_path))
    cfg = x["xrootd.cfg"]
    assert f"xrd.tls {tmp_path}/w/tls-cert.pem {tmp_path}/w/tls-key.pem" in cfg
    assert "xrd.tlsca certdir /ca/certs" in cfg and "XrdHttps:8443" in cfg
    assert x["tls-key.pem"] == "KEY"
    n = servers.server_files(_plan("nginx", TLSF, tmp_path))["nginx.conf"]
    assert "listen 198.18.0.6:8443 ssl;" in n and "ssl_certificate_key" in n
    plain = servers.server_files(_plan("xrootd", None, tmp_path))
    assert "xrd.tls" not in plain["xrootd.cfg"] and "tls-key.pem" not in plain
    assert "ssl" not in servers.server_files(_plan("nginx", None, tmp_path))["nginx.conf"]
    a = servers.server_files(_plan("apache", TLSF, tmp_path))
    conf = a["apache2.conf"]
    assert "Listen 198.18.0.6:8473\n<VirtualHost 198.18.0.6:8473>" in conf
    assert f"SSLCertificateKeyFile {tmp_path}/w/tls-key.pem" in conf and "SSLEngine on" in conf
    assert a["tls-key.pem"] == "KEY" and "Listen 198.18.0.6:8070" in conf
    plain_a = servers.server_files(_plan("apache", None, tmp_path))
    assert "SSL" not in plain_a["apache2.conf"] and "tls-key.pem" not in plain_a
    c = scenario.ClientSpec(name="c", tool="wget", protocol="http")
    j = tools.get("wget").job(c, 1, 0, server=_plan("apache", TLSF, tmp_path),
                              file=scenario.FileSpec(name="f", size=1), iperf=("", 0),
                              timeout_s=10, tls="all")
    assert j.url == "https://198.18.0.6:8473/f"


def test_parse_stat_handles_odd_command_names():
    line = "42 (a) b (c)) S 7 42 42 0 -1 4194560 1 0 0 0 250 130 5 3 20 0 1 0 1 2 3"
    ppid, u, s = cputree.parse_stat(line)
    tick = os.sysconf("SC_CLK_TCK")
    assert ppid == 7 and u == pytest.approx(255 / tick) and s == pytest.approx(133 / tick)


def test_proc_stat_parse_and_share():
    text = ("cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n"
            "cpu1 50 3 25 400 10 2 1 5 0 0\nintr 1 2\nctxt 3\n")
    h = cputree.parse_proc_stat(text)
    tick = os.sysconf("SC_CLK_TCK")
    assert h.cpus == 2
    assert h.total_s == pytest.approx(990 / tick)
    assert h.busy_s == pytest.approx(170 / tick)        # all but idle (800) and iowait (20)
    assert h.irq_s == pytest.approx(5 / tick) and h.steal_s == pytest.approx(10 / tick)
    later = cputree.HostCpu(h.busy_s + 1.5, h.total_s + 2.0, 2)
    assert later.share_since(h) == pytest.approx(0.75)
    assert h.share_since(h) is None
    with pytest.raises(ValueError):
        cputree.parse_proc_stat("intr 1\n")


def test_host_busy_time_holds_a_busy_childs_cpu():
    """Between two marks, the host's busy seconds are at least a child's CPU seconds
    (whatever else runs: other load only adds)."""
    before = cputree.host_cpu()
    r = subprocess.run([sys.executable, "-c", "import time\nt=time.process_time()\n"
                        "while time.process_time()-t<0.4: pass\n"
                        "print(time.process_time())"], capture_output=True, text=True,
                       timeout=60)
    after = cputree.host_cpu()
    assert before and after and after.cpus == os.cpu_count()
    assert after.busy_s - before.busy_s >= float(r.stdout) * 0.9 - 0.05
    share = after.share_since(before)
    assert share is not None and 0.0 < share <= 1.0


def test_tree_cpu_counts_a_busy_child():
    """A child burning ~0.3 s of CPU shows in its parent's tree, within tolerance."""
    code = ("import subprocess,sys;"
            "subprocess.run([sys.executable,'-c','import time\\nt=time.process_time()\\n"
            "while time.process_time()-t<0.3: pass\\nimport sys; sys.stdin.read()'])")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        import time
        deadline = time.monotonic() + 20
        got = None
        while time.monotonic() < deadline:
            got = cputree.tree_cpu(p.pid)
            if got and got.user_s + got.sys_s >= 0.3:
                break
            time.sleep(0.05)
        assert got is not None and 0.3 <= got.user_s + got.sys_s < 1.5, got
    finally:
        p.kill()
        p.wait(10)
    assert cputree.tree_cpu(p.pid) is None


def test_old_results_without_new_columns_still_load(tmp_path):
    from fixtures_results import downgrade_to_format1
    db = tmp_path / "results.sqlite"
    st = Store.create(db, "r")
    st.add_transfer(TransferRow(run_id="r", step=0, path="w", backend="none", client="c",
                                tool="curl", streams=1, concurrency=1, instance=0, repeat=0,
                                ok=True, argv="[]", bytes=10, duration_s=1.0,
                                throughput_bps=80.0, aggregate_bps=80.0))
    st.finish()
    downgrade_to_format1(db)
    check.check(db)                     # no "missing column"
    row = Store.open(db).transfers()[0]
    assert row.tls is None and row.server_cpu_user_s is None
    from rig.report.model import load_run
    assert load_run(tmp_path).points[0].tls == "off"


@pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("curl") is None,
                    reason="needs openssl and curl")
def test_run_ca_signs_a_cert_that_verifies_and_another_ca_does_not(tmp_path):
    ca = tls.make_ca(tmp_path / "tls")
    other = tls.make_ca(tmp_path / "other")
    cert, key = tls.server_cert(ca, "wan-x", "198.18.0.6")
    (tmp_path / "s.pem").write_text(cert)
    hashed = list(ca.hashed_dir.iterdir())
    assert len(hashed) == 1 and hashed[0].name.endswith(".0")

    def verify(cafile: Path) -> int:
        return subprocess.run(["openssl", "verify", "-CAfile", str(cafile), "-verify_ip",
                               "198.18.0.6", str(tmp_path / "s.pem")], capture_output=True,
                              timeout=30).returncode
    assert verify(ca.cert) == 0
    assert verify(other.cert) != 0
    assert "BEGIN PRIVATE KEY" in key


def test_replays_read_over_tls_trusting_only_the_run_ca(tmp_path):
    """Caching-mode replays (issue 26): XrdCl over roots:// (X509_CERT_DIR), libdavix and
    libcurl over https:// (the helper's --capath / --cafile)."""
    f = scenario.FileSpec(name="aod", size=1)
    t = tools.get("replay")
    for kind, lib, proto, url in (("xrootd", "xrootd", "root", "roots://198.18.0.6:1094//aod"),
                                  ("nginx", "davix", "http", "https://198.18.0.6:8443/aod"),
                                  ("apache", "curl", "http", "https://198.18.0.6:8473/aod")):
        c = scenario.ClientSpec.of(name="r", tool="replay", protocol=proto, mode="lazy-download",
                                library=lib)
        j = t.job(c, 1, 0, server=_plan(kind, TLSF, tmp_path), file=f, iperf=("", 0),
                  timeout_s=10, tls="all")
        argv, env = t.argv(j), t.env(j)
        assert j.url == url and j.local == str(tmp_path / "d" / "aod")
        assert argv[argv.index("--ca-dir") + 1] == "/ca/certs"
        assert argv[argv.index("--ca-file") + 1] == "/ca/ca.pem"
        assert env["X509_CERT_DIR"] == "/ca/certs"
        off = t.job(c, 1, 0, server=_plan(kind, None, tmp_path), file=f, iperf=("", 0),
                    timeout_s=10)
        assert "--ca-dir" not in t.argv(off) and "X509_CERT_DIR" not in t.env(off)
