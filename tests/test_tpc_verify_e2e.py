"""The destination of an HTTPS third-party copy verifies the source: XrdHttpTPC 5.5 pulls
with the CA directory of its `xrd.tlsca`, so a destination trusting the source's CA
copies the file, and one trusting another CA only refuses (the control that shows the
check can fail). Two xrootd destinations and a source on the loopback of a namespace of
this test's own."""
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from rig.process import nsprobe, proc
from rig.realization import netns, tls

pytestmark = pytest.mark.e2e
ADDR = "127.0.0.1"


def _server(w: Path, name: str, ca: tls.Ca, trust: tls.Ca, ports: tuple[int, int],
            ns: str, tpc: bool) -> proc.Service:
    d = w / name
    (d / "data" / "incoming").mkdir(parents=True)
    cert, key = tls.server_cert(ca, name, ADDR)
    (d / "c.pem").write_text(cert)
    (d / "k.pem").touch(mode=0o600)
    (d / "k.pem").write_text(key)
    if name == "src":
        (d / "data" / "f").write_bytes(os.urandom(1 << 20))
    cfg = [f"oss.localroot {d / 'data'}", "all.export / nolock", "xrd.network nodnr",
           f"xrd.port {ports[0]}", f"all.adminpath {d / 'admin'}", f"all.pidpath {d / 'run'}",
           f"xrd.protocol XrdHttp:{ports[1]} libXrdHttp.so",
           f"xrd.tls {d / 'c.pem'} {d / 'k.pem'}", f"xrd.tlsca certdir {trust.hashed_dir}"]
    if tpc:
        cfg.append("http.exthandler xrdtpc libXrdHttpTPC.so")
    (d / "x.cfg").write_text("\n".join(cfg) + "\n")
    pw = pwd.getpwnam("xrootd")
    for root, dirs, files in os.walk(d):
        for n in [root, *(os.path.join(root, x) for x in dirs + files)]:
            os.chown(n, pw.pw_uid, pw.pw_gid)
    svc = proc.Service(["xrootd", "-R", "xrootd", "-n", f"{ns}-{name}", "-c", str(d / "x.cfg"),
                        "-l", str(d / "log")], netns=ns, log_path=d / "stdout.log").start()
    nsprobe.wait_tcp(ns, ADDR, ports[1], timeout=20, what=name, alive=svc.alive)
    return svc


def test_the_destination_verifies_the_source_against_its_ca(require_tools):
    require_tools("xrootd", "curl", "openssl")
    ns = f"{netns.new_prefix()}-0t"
    # xrootd runs as its own user: a directory it can reach (pytest's tmp_path is 0700)
    w = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
    w.chmod(0o755)
    proc.run(["ip", "netns", "add", ns], timeout=10, check=True)
    started: list[proc.Service] = []
    try:
        proc.run(["ip", "-n", ns, "link", "set", "lo", "up"], timeout=10, check=True)
        ca_src, ca_dst = tls.make_ca(w / "ca-src"), tls.make_ca(w / "ca-dst")
        started.append(_server(w, "src", ca_src, ca_src, (1094, 8000), ns, False))
        started.append(_server(w, "good", ca_dst, ca_src, (1095, 8001), ns, True))
        started.append(_server(w, "bad", ca_dst, ca_dst, (1096, 8002), ns, True))
        out = {}
        for name, port in (("good", 8001), ("bad", 8002)):
            r = proc.run(["curl", "--silent", "--show-error", "--fail", "--cacert",
                          str(ca_dst.cert), "--max-time", "30", "--request", "COPY",
                          "--header", f"Source: https://{ADDR}:8000/f", "--header",
                          "Overwrite: T", f"https://{ADDR}:{port}/incoming/x"],
                         netns=ns, timeout=60)
            assert r.returncode == 0, r.stderr
            out[name] = r.stdout.strip().splitlines()[-1]
        assert out["good"].startswith("success")
        assert (w / "good" / "data" / "incoming" / "x").read_bytes() == \
            (w / "src" / "data" / "f").read_bytes()
        assert out["bad"].startswith("failure") and "SSL" in out["bad"], out["bad"]
    finally:
        for s in started:
            s.stop()
        proc.run(["ip", "netns", "del", ns], timeout=10)
        shutil.rmtree(w, ignore_errors=True)
    assert ns not in netns.list_namespaces()
