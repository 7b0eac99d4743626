"""A run's X.509 users (issue 40 item 3): a user certificate signed by the run's CA
(rig.realization.tls), a fake VOMS server's certificate, and the proxies the scenario's
`credential:` values name, each made with `voms-proxy-fake` (voms-clients) carrying a
VOMS attribute of the VO `rig`:

  valid     the user's proxy, 12 h, RFC 3820, VOMS FQAN /rig
  expired   the same user's, valid from 2 h ago for 1 h (the AC too)
  foreign   a proxy of a user of another CA ("rig foreign CA"), which no server trusts
  missing   a path where no proxy is: the client presents none

Everything lies in the run's tls/ directory (removed with the run's work directory, by
`rig clean` after a SIGKILL): x509/ (0700) holds keys and proxies, each 0600; vomsdir/
holds the LSC file by which xrootd's VOMS extractor (libXrdVoms) trusts the fake VOMS
server's attribute certificates (X509_VOMS_DIR).

The argv builders are pure (`rig plan` prints them); `make` runs them through
rig.process.proc. Must not import services, orchestration or reports.
"""
from __future__ import annotations

from pathlib import Path

from rig.process import proc
from rig.realization import tls

VO = "rig"
FQAN = f"/{VO}/Role=NULL/Capability=NULL"
USER_SUBJECT = "/O=rig/CN=rig user"
VOMS_SUBJECT = "/O=rig/CN=rig-voms"
VOMS_URI = "rig-voms:15000"           # named in the AC only; no VOMS server runs
FOREIGN_SUBJECT = "/CN=rig foreign CA"
MADE = ("valid", "expired", "foreign", "missing")
PROXY_TIMEOUT_S = 30.0


def x509_dir(ca_dir: Path) -> Path:
    return ca_dir / "x509"


def proxy_path(ca_dir: Path, which: str) -> Path:
    """Where the proxy a rig-made `credential:` value names lies (`missing`: nowhere)."""
    return x509_dir(ca_dir) / f"proxy-{which}.pem"


def vomsdir(ca_dir: Path) -> Path:
    return ca_dir / "vomsdir"


def lsc_text(ca_subject: str = "/CN=rig run CA") -> str:
    """The LSC file: the VOMS server's subject, then its issuer's."""
    return f"{VOMS_SUBJECT}\n{ca_subject}\n"


def proxy_argv(d: Path, user: str, certdir: Path, out: Path, expired: bool = False,
               voms: Path | None = None) -> list[str]:
    """voms-proxy-fake: an RFC proxy of `user` (d/user.pem, .key) with an AC of VO `rig`
    signed by the fake VOMS server (voms/voms.pem, voms defaulting to d); `expired`:
    valid 1 h from 2 h ago."""
    v = voms or d
    when = (["-hours", "1", "-vomslife", "1", "-pastproxy", "7200", "-pastac", "7200"]
            if expired else ["-hours", "12"])
    return ["voms-proxy-fake", "-q", "-rfc", "-cert", str(d / f"{user}.pem"),
            "-key", str(d / f"{user}.key"), "-certdir", str(certdir),
            "-hostcert", str(v / "voms.pem"), "-hostkey", str(v / "voms.key"),
            "-voms", VO, "-uri", VOMS_URI, "-fqan", FQAN, *when, "-out", str(out)]


def plan_argvs(ca_dir: Path) -> list[list[str]]:
    """The commands `make` runs, as `rig plan` prints them (after the run's CA's)."""
    d, ca = x509_dir(ca_dir), tls.Ca(ca_dir, ca_dir / "ca.pem", ca_dir / "ca.key",
                                     ca_dir / "certs")
    f = d / "foreign"
    fca = tls.Ca(f, f / "ca.pem", f / "ca.key", f / "certs")
    return [tls.csr_argv(d, "user", True, USER_SUBJECT), tls.sign_argv(ca, d, "user"),
            tls.csr_argv(d, "voms", True, VOMS_SUBJECT), tls.sign_argv(ca, d, "voms"),
            proxy_argv(d, "user", ca.hashed_dir, proxy_path(ca_dir, "valid")),
            proxy_argv(d, "user", ca.hashed_dir, proxy_path(ca_dir, "expired"), True),
            tls.ca_argv(f, True, FOREIGN_SUBJECT), tls.hash_argv(fca.cert),
            tls.csr_argv(f, "user", True, USER_SUBJECT), tls.sign_argv(fca, f, "user"),
            proxy_argv(f, "user", fca.hashed_dir, proxy_path(ca_dir, "foreign"), voms=d)]


def _proxy(argv: list[str]) -> None:
    proc.run(argv, timeout=PROXY_TIMEOUT_S, check=True)
    out = Path(argv[-1])
    out.chmod(0o600)


def make(ca: tls.Ca) -> Path:
    """The run's users and their proxies beside `ca` (its tls/ directory); returns x509/."""
    d = x509_dir(ca.dir)
    d.mkdir(mode=0o700)
    tls.client_cert(ca, d, "user", USER_SUBJECT)
    tls.client_cert(ca, d, "voms", VOMS_SUBJECT)
    _proxy(proxy_argv(d, "user", ca.hashed_dir, proxy_path(ca.dir, "valid")))
    _proxy(proxy_argv(d, "user", ca.hashed_dir, proxy_path(ca.dir, "expired"), True))
    # the same user name under a CA the servers do not trust; its fake VOMS server is the
    # run's (the proxy is refused before its AC is read)
    f = d / "foreign"
    fca = tls.make_ca(f, rsa=True, subject=FOREIGN_SUBJECT)
    fca.dir.chmod(0o700)
    tls.client_cert(fca, f, "user", USER_SUBJECT)
    _proxy(proxy_argv(f, "user", fca.hashed_dir, proxy_path(ca.dir, "foreign"), voms=d))
    for f in d.rglob("*"):          # keys, proxies, certificates: the run's user only
        if f.is_file():
            f.chmod(0o600)
    # xrootd (another user) reads the LSC file: the VOMS server's subject and issuer
    lsc = vomsdir(ca.dir) / VO
    lsc.mkdir(parents=True, mode=0o755)
    vomsdir(ca.dir).chmod(0o755)
    (lsc / "rig-voms.lsc").write_text(lsc_text())
    (lsc / "rig-voms.lsc").chmod(0o644)
    return d
