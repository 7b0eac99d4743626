"""xrootd: root:// and HTTP (XrdHttp) from one instance, run as user xrootd.

With `auth: x509`: GSI and X.509 client certificates (`x509_lines`).

With TLS (a plan with `tls`): `xrd.tls` gives it the run's certificate, so a client that
asks for roots:// gets TLS on the root port (every stream, or the control stream only
when the client says --tlsnodata; plain root:// still works), and a second XrdHttp
listener named `XrdHttps` serves HTTPS on its own port (checked with xrootd 5.5.3).
A third-party-copy server has no second listener: XrdHttp 5.5 loads an external handler
(XrdHttpTPC) once per process and refuses the second listener's ("Instance name already
present for an http external handler plugin"), so it serves HTTPS on its HTTP port,
which speaks both once it has a TLS identity. So does a server with `auth:`: XrdHttp 5.5
loads its security extractor (`http.secxtractor`, libXrdHttpVOMS) once per process too
("Config failure: one or more directives are flawed" on the second listener)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rig.services.servers import TLS_CERT, TLS_KEY, ServerKind, ServerPlan, register

VO = "rig"        # the VO of the run's proxies (rig.realization.x509.VO)

if TYPE_CHECKING:
    from rig.description.scenario.clients import ServerSpec


@register
class Xrootd(ServerKind):
    kind = "xrootd"
    writes = True                # uploads into UPLOAD_DIR
    ports = {"root": 1094, "http": 8000}
    tls_ports = {"https": 8443}
    version_argv = ["xrootd", "-v"]
    run_as = "xrootd"          # it refuses to run as root and writes its admin paths
    logs = ("xrootd.log",)
    tpc = True
    auths = frozenset({"x509"})

    def plan_ports(self, spec: ServerSpec, ports: dict[str, int]) -> dict[str, int]:
        if spec.tpc or spec.auth != "none":    # HTTPS on the HTTP port (the docstring)
            return {k: v for k, v in ports.items() if k != "https"}
        return ports

    def files(self, p: ServerPlan) -> dict[str, str]:
        tls = [f"xrd.tls {p.workdir / TLS_CERT} {p.workdir / TLS_KEY}",
               f"xrd.tlsca certdir {p.tls.ca_dir}"] if p.tls else []
        if p.tls and "https" in p.ports:
            tls.append(f"xrd.protocol XrdHttps:{p.ports['https']} libXrdHttp.so")
        auth = {AUTHDB: authdb_text()} if p.spec.auth == "x509" else {}
        return {**self.tls_files(p), **auth, "xrootd.cfg": "\n".join([
            f"oss.localroot {p.datadir}",
            *daemon_lines(p),
            *tls,
            *x509_lines(p),
            "xrootd.trace off", "xrd.trace off", *self._tpc_lines(p), "",
        ])}

    @staticmethod
    def _tpc_lines(p: ServerPlan) -> list[str]:
        """HTTP third-party copy (pull) through XrdHttpTPC. XrdHttp 5.5 loads external
        handlers only once it has a TLS identity (`xrd.tls`), so a TPC server gets the
        run's throw-away certificate; the port then speaks plain HTTP and HTTPS alike
        (XrdHttp tells them apart by the first bytes), and which one the copy uses is
        the client's protocol. Writes land in `incoming/` of the data tmpfs."""
        if not p.spec.tpc:
            return []
        if p.tls is not None:          # the run's CA already gave it a TLS identity
            return ["http.exthandler xrdtpc libXrdHttpTPC.so"]
        tls = p.tls_dir or p.workdir / "tls"
        return [f"xrd.tls {tls / 'cert.pem'} {tls / 'key.pem'}",
                f"xrd.tlsca certdir {tls / 'ca'}",
                "http.exthandler xrdtpc libXrdHttpTPC.so"]

    def argv(self, p: ServerPlan) -> list[str]:
        return daemon_argv(p)


AUTHDB = "authdb"


def authdb_text() -> str:
    """Who may do what: members of the VO `rig` (the VOMS attribute of the run's
    proxies) everything, nobody else anything."""
    return f"o {VO} / a\n"


def x509_lines(p: ServerPlan) -> list[str]:
    """`auth: x509` (checked with xrootd 5.5.3): GSI on root://, the run's CA trusted,
    the server's RSA certificate its host certificate, proxies accepted; the VOMS
    attributes read by libXrdVoms (xrootd-voms-plugins), which trusts the fake VOMS
    server through the LSC file in X509_VOMS_DIR; `sec.protbind * only gsi` refuses a
    client that does not authenticate with GSI. Over HTTPS (XrdHttp, its TLS identity
    from `xrd.tls`) the client's certificate is the proxy and libXrdHttpVOMS reads its
    attributes. The authorization database admits the VO `rig` only: a client without
    VOMS attributes of it (an https client without a certificate, one on the plain HTTP
    port) is refused (403)."""
    if p.spec.auth != "x509" or p.tls is None:
        return []
    ca = Path(p.tls.ca_file).parent
    return [f"setenv X509_VOMS_DIR = {ca / 'vomsdir'}",
            f"setenv X509_CERT_DIR = {p.tls.ca_dir}",
            "xrootd.seclib libXrdSec.so",
            f"sec.protocol gsi -certdir:{p.tls.ca_dir} -cert:{p.workdir / TLS_CERT} "
            f"-key:{p.workdir / TLS_KEY} -crl:0 -gmapopt:10 -dlgpxy:0 "
            "-vomsat:extract -vomsfun:libXrdVoms.so",
            "sec.protbind * only gsi",
            "ofs.authorize 1", f"acc.authdb {p.workdir / AUTHDB}", "acc.audit deny",
            "http.secxtractor libXrdHttpVOMS.so"]


def daemon_lines(p: ServerPlan) -> list[str]:
    """What every xrootd daemon of the rig says (an origin, an XCache): the export, its
    ports, its own admin and pid paths, XrdHttp."""
    return ["all.export / nolock",
            # no reverse DNS of clients: without a resolver every connection waits 5 s
            "xrd.network nodnr",
            f"xrd.port {p.ports['root']}",
            f"all.adminpath {p.workdir / 'admin'}",
            f"all.pidpath {p.workdir / 'run'}",
            f"xrd.protocol XrdHttp:{p.ports['http']} libXrdHttp.so"]


def daemon_argv(p: ServerPlan) -> list[str]:
    # -R: xrootd refuses to run as root; -n: a private instance name (admin paths)
    return [p.spec.binary or "xrootd", "-R", "xrootd", "-n", p.instance,
            "-c", str(p.workdir / "xrootd.cfg"), "-l", str(p.workdir / "xrootd.log")]
