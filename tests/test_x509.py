"""X.509 / VOMS proxy authentication, the pure side (issue 40 item 3): a server's `auth:`
and a client's `credential:` checked together (one line naming the file, the key and the
value), what each client presents (argv and environment: a proxy's path, never its
text), xrootd's configuration, the plan's credential-making commands, and how a refused
credential reads in a row. No root, nothing created but tmp files."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rig.description import scenario as loader
from rig.errors import InputError
from rig.orchestration.plan import build_plan
from rig.realization import x509
from rig.services import tools
from rig.services.servers import xrootd

BASE = {"name": "t", "paths": [{"name": "wan", "rtt": "0ms"}],
        "files": [{"name": "f", "size": "1MiB"}],
        "servers": [{"name": "x", "kind": "xrootd", "auth": "x509"}],
        "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]}
EXT = {"name": "t", "paths": [{"name": "wan", "rtt": "0ms"}],
       "servers": [{"name": "site", "kind": "external", "url": "root://h//store"}],
       "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]}


def _with(base: dict, **kw) -> dict:
    d = copy.deepcopy(base)
    d.update(kw)
    return d


def _load(doc: dict):
    return loader.parse(doc, source="s.yaml")


@pytest.mark.parametrize("doc,key,says,value", [
    (_with(BASE, servers=[{"name": "x", "kind": "nginx", "auth": "x509"}],
           clients=[{"name": "c", "tool": "curl", "file": "f"}]),
     "servers[0].auth", "a nginx server cannot do auth: x509 (can: xrootd)", "x509"),
    (_with(BASE, servers=[{"name": "x", "kind": "xrootd", "auth": "kerberos"}]),
     "servers[0].auth", "must be one of none, x509", "kerberos"),
    (_with(EXT, servers=[{"name": "site", "kind": "external", "url": "root://h//s",
                          "auth": "x509"}]),
     "servers[0].auth", "not for an external endpoint", "x509"),
    (_with(BASE, clients=[{"name": "c", "tool": "xrdcp", "file": "f", "credential": "stale"}]),
     "clients[0].credential", "expected one of valid, expired, foreign, missing", "stale"),
    (_with(BASE, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                           "credential": {"cert": "/etc/hostname"}}]),
     "clients[0].credential", "or {proxy: PATH}", "{'cert'"),
    (_with(EXT, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                          "credential": {"proxy": "/nonexistent/x509up_u0"}}]),
     "clients[0].credential.proxy", "no such readable file", "/nonexistent/x509up_u0"),
    (_with(EXT, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                          "credential": "expired"}]),
     "clients[0].credential", "endpoint site takes a file of yours", "expired"),
    (_with(BASE, servers=[{"name": "x", "kind": "xrootd"}],
           clients=[{"name": "c", "tool": "xrdcp", "file": "f", "credential": "valid"}]),
     "clients[0].credential", "server x authenticates nobody", "valid"),
    (_with(BASE, clients=[{"name": "c", "tool": "wget", "file": "f"}]),
     "clients[0].tool", "wget cannot present an x509 credential (can: curl, davix-get, xrdcp)",
     "wget"),
    (_with(BASE, clients=[{"name": "c", "tool": "curl", "file": "f", "tls": "off"}]),
     "clients[0].tls", "over HTTPS only: tls: all", "off"),
    ({"name": "two", "topology": "host",
      "hosts": {"dtn1": {"ssh": "root@dtn1.example"}},
      "paths": [{"name": "loop", "kind": "real", "server_host": "dtn1",
                 "server_addr": "192.0.2.7"}],
      "files": [{"name": "f", "size": "1MiB"}],
      "servers": [{"name": "x", "kind": "xrootd", "auth": "x509"}],
      "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]},
     "servers[0].auth", "path loop runs on another host", "x509"),
])
def test_bad_auth_input_is_one_line(doc, key, says, value):
    with pytest.raises(InputError) as e:
        _load(doc)
    line = str(e.value)
    assert line.startswith(f"s.yaml: {key}"), line
    assert says in line and value in line and "\n" not in line, line


def test_a_proxy_file_for_an_external_endpoint(tmp_path):
    proxy = tmp_path / "x509up"
    proxy.write_text("not read at load time")
    sc = _load(_with(EXT, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                                    "credential": {"proxy": str(proxy)}}]))
    assert sc.clients[0].credential == {"proxy": str(proxy)}
    # on a rig server it is refused: that server trusts only the run's CA
    with pytest.raises(InputError, match=r"clients\[0\]\.credential: server x trusts only"):
        _load(_with(BASE, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                                    "credential": {"proxy": str(proxy)}}]))


def _job(cred: str, tool: str = "xrdcp", tls: str = "off") -> tools.Job:
    """A job of `tool` against a planned `auth: x509` server presenting `cred`."""
    from rig.orchestration.transfer import with_credential
    from rig.services.servers import ServerPlan, TlsFiles
    sc = _load(_with(BASE, clients=[{"name": "c", "tool": tool, "file": "f",
                                     "credential": cred}]))
    tf = TlsFiles("<cert>", "<key>", "/run/rig/r/tls/ca.pem", "/run/rig/r/tls/certs",
                  "wan-x")
    plan = ServerPlan(spec=sc.servers[0], ns="s", addr="198.18.0.6",
                      ports={"root": 1094, "http": 8000}, workdir=Path("/run/rig/r/wan-x"),
                      datadir=Path("/run/rig/r/data"), tls=tf)
    c = sc.clients[0]
    job = tools.get(tool).job(c, 1, 0, server=plan, file=sc.files[0], iperf=("", 0),
                              timeout_s=30, tls=tls)
    return with_credential(job, cred, plan)


def test_what_each_client_presents():
    j = _job("valid")
    env = tools.get("xrdcp").env(j)
    assert env["X509_USER_PROXY"] == "/run/rig/r/tls/x509/proxy-valid.pem"
    assert env["X509_CERT_DIR"] == "/run/rig/r/tls/certs"
    assert env["XrdSecGSISRVNAMES"] == "wan-x" and env["X509_USER_CERT"] == "/dev/null/none"
    assert "XrdSecGSICREATEPROXY" not in env     # xrdcp 5.5.3 segfaults without a proxy
    for tool in ("curl", "davix-get"):
        argv = tools.get(tool).command(_job("expired", tool, "all"))
        i = argv.index("--cert")
        assert argv[i + 1] == argv[argv.index("--key") + 1] == \
            "/run/rig/r/tls/x509/proxy-expired.pem"
    # missing: nothing presented over HTTP; xrdcp is pointed where no proxy is (so it does
    # not fall back to /tmp/x509up_u<uid>)
    assert "--cert" not in tools.get("curl").command(_job("missing", "curl", "all"))
    assert tools.get("xrdcp").env(_job("missing"))["X509_USER_PROXY"].endswith(
        "proxy-missing.pem")
    # a client of a server without auth presents nothing
    plain = _load(_with(BASE, servers=[{"name": "x", "kind": "xrootd"}]))
    from rig.description.scenario import auth
    assert auth.credential(plain.clients[0], plain.servers[0]) is None


def test_a_refused_credential_reads_so_in_the_row():
    err = tools.credential_error(_job("expired"), "[FATAL] Auth failed: No protocols left")
    assert err.startswith("credential refused (expired proxy): [FATAL] Auth failed")
    err = tools.credential_error(_job("foreign", "curl", "all"),
                                 "OpenSSL SSL_read: sslv3 alert unknown ca")
    assert err.startswith("credential refused (proxy of a CA the server does not trust)")
    # TLS 1.3: the server's alert may lose the race with its reset
    err = tools.credential_error(_job("expired", "davix-get", "all"),
                                 "Could not send request: Connection reset by peer")
    assert err.startswith("credential refused (expired proxy; the server ended the TLS")
    # ... a reset is no refusal where no certificate was presented
    assert tools.credential_error(_job("missing", "curl", "all"), "Connection reset by peer") \
        == "Connection reset by peer"
    # an error that is not the credential's stays as it is
    assert tools.credential_error(_job("valid"), "deadline of 30s passed") == \
        "deadline of 30s passed"
    # the valid proxy's success is a success; a proxy that had to be refused is a failure
    assert tools.credential_error(_job("valid"), None) is None
    assert tools.credential_error(_job("missing"), None).startswith("credential not refused")
    # a job without a credential is left alone
    bare = tools.Job(client=_job("valid").client, streams=1)
    assert tools.credential_error(bare, "HTTP 403") == "HTTP 403"


def test_xrootd_config_with_x509():
    from rig.services.servers import ServerPlan, TlsFiles
    sc = _load(BASE)
    tf = TlsFiles("<cert>", "<key>", "/w/tls/ca.pem", "/w/tls/certs", "wan-x")
    p = ServerPlan(spec=sc.servers[0], ns="s", addr="198.18.0.6",
                   ports={"root": 1094, "http": 8000}, workdir=Path("/w/wan-x"),
                   datadir=Path("/w/data"), tls=tf)
    files = xrootd.Xrootd().files(p)
    cfg = files["xrootd.cfg"].splitlines()
    assert "sec.protbind * only gsi" in cfg and "ofs.authorize 1" in cfg
    gsi = next(ln for ln in cfg if ln.startswith("sec.protocol gsi"))
    assert "-certdir:/w/tls/certs" in gsi and "-vomsfun:libXrdVoms.so" in gsi
    assert "setenv X509_VOMS_DIR = /w/tls/vomsdir" in cfg
    assert files["authdb"] == "o rig / a\n"
    # one HTTP listener (XrdHttp 5.5 loads the security extractor once per process)
    assert xrootd.Xrootd().plan_ports(sc.servers[0], {"root": 1, "http": 2, "https": 3}) \
        == {"root": 1, "http": 2}
    plain = _load(_with(BASE, servers=[{"name": "x", "kind": "xrootd"}]))
    p2 = ServerPlan(spec=plain.servers[0], ns="s", addr="198.18.0.6",
                    ports={"root": 1094, "http": 8000}, workdir=Path("/w/wan-x"),
                    datadir=Path("/w/data"), tls=tf)
    assert not [ln for ln in xrootd.Xrootd().files(p2)["xrootd.cfg"].splitlines()
                if ln.startswith(("sec.", "ofs.authorize"))]


def test_the_plan_shows_the_credential_making_commands():
    sc = _load(BASE)
    text = "\n".join(build_plan(sc).lines())
    assert "voms-proxy-fake" in text and "proxy-expired.pem" in text
    assert "-pastproxy 7200" in text and "/CN=rig foreign CA" in text
    assert "XrdSecGSISRVNAMES=wan-x" in text
    # no proxy's text in the plan: paths only
    assert "BEGIN CERTIFICATE" not in text


def test_plan_argvs_name_every_file_make_writes():
    argvs = x509.plan_argvs(Path("/r/tls"))
    outs = [a[a.index("-out") + 1] for a in argvs if a[0] == "voms-proxy-fake"]
    assert outs == [str(x509.proxy_path(Path("/r/tls"), w))
                    for w in ("valid", "expired", "foreign")]


def test_a_refused_row_has_no_bytes_and_no_throughput():
    """xrdcp is timed by the bytes it wrote: a refusal's were its error message."""
    import dataclasses
    from rig.orchestration import transfer
    from rig.process.proc import Result
    res = Result(["xrdcp"], 52, "", "Run: [FATAL] Auth failed: No protocols left to try",
                 0.3, 0.2, 0.0, io_wchar=92, io_done_s=None)
    m = transfer.measure(transfer.Outcome(_job("expired"), ["xrdcp"], {}, res, 0.0, 0.0))
    assert not m["ok"] and m["bytes"] is None and m["throughput_bps"] is None
    assert m["error"].startswith("credential refused (expired proxy)")
    assert m["extra"]["credential"] == "expired"
    # the same bytes of a job without a credential are counted as before
    bare = dataclasses.replace(_job("valid"), credential="", proxy="")
    assert transfer.measure(transfer.Outcome(bare, ["xrdcp"], {}, res, 0.0, 0.0))["bytes"] == 92
    # a valid proxy's whole file is a throughput point
    okres = Result(["xrdcp"], 0, "", "", 0.5, 0.2, 0.0, io_wchar=1 << 20, io_done_s=0.4)
    m = transfer.measure(transfer.Outcome(_job("valid"), ["xrdcp"], {}, okres, 0.0, 0.0))
    assert m["ok"] and m["bytes"] == 1 << 20 and m["throughput_bps"]


def test_an_external_endpoint_with_a_proxy_of_yours(tmp_path):
    """The stat before the first step and every client present the user's proxy by its
    path; the plan shows it."""
    proxy = tmp_path / "x509up_u1000"
    proxy.write_text("-----BEGIN CERTIFICATE-----\nnot read here\n")
    doc = _with(EXT, servers=[{"name": "site", "kind": "external",
                               "url": "https://se.example.org:8443/store"}],
                clients=[{"name": "c", "tool": "curl", "file": "f",
                          "credential": {"proxy": str(proxy)}},
                         {"name": "d", "tool": "davix-get", "file": "f", "server": "site"}])
    text = "\n".join(build_plan(_load(doc)).lines())
    assert f"curl -sS -f -I --cert {proxy} --key {proxy}" in text      # the stat
    curl = next(ln for ln in text.splitlines() if " curl --silent" in ln)
    assert f"--cert {proxy} --key {proxy}" in curl
    davix = next(ln for ln in text.splitlines() if " davix-get " in ln)
    assert "--cert" not in davix          # a client without a credential presents none
    assert "BEGIN CERTIFICATE" not in text
    root = _with(EXT, clients=[{"name": "c", "tool": "xrdcp", "file": "f",
                                "credential": {"proxy": str(proxy)}}])
    text = "\n".join(build_plan(_load(root)).lines())
    assert f"X509_USER_PROXY={proxy}" in text and "xrdfs root://h:1094 stat" in text
    assert "XrdSecGSISRVNAMES" not in text     # a site's certificate names its host
