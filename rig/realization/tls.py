"""A run's throw-away certificate authority and its server certificates.

Realization state like a namespace: made in the run's work directory (which the run
removes on success, error and SIGTERM, and `rig clean` removes after a SIGKILL), never
installed anywhere else. Clients trust only this CA: a PEM file (curl --cacert) and a
directory holding it under its OpenSSL subject hash (xrdcp X509_CERT_DIR, davix --capath).

The argv builders are pure (`rig plan` prints them); `make_ca` and `server_cert` run
`openssl` through rig.process.proc. Must not import services, orchestration or reports.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from rig.process import proc

OPENSSL_TIMEOUT_S = 30.0
DAYS = "2"                      # a run's certificates need not outlive it
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
# X.509 authentication (rig.realization.x509) needs RSA: voms-proxy-fake 2.1 signs a proxy
# with SHA-1 when the user certificate is ECDSA-signed, which OpenSSL 3 refuses ("ca md
# too weak"), and xrootd 5.5's GSI reads RSA keys; a run with `auth: x509` makes its CA,
# its authenticating servers' certificates and its users' RSA
_RSA = ["-newkey", "rsa:2048", "-nodes"]


def _key(rsa: bool) -> list[str]:
    return _RSA if rsa else _CURVE


@dataclass(frozen=True)
class Ca:
    dir: Path                   # the run's tls/ directory
    cert: Path                  # ca.pem
    key: Path                   # ca.key (never leaves this directory)
    hashed_dir: Path            # certs/<hash>.0 -> the CA, for X509_CERT_DIR / --capath


def ca_argv(d: Path, rsa: bool = False, subject: str = "/CN=rig run CA") -> list[str]:
    return ["openssl", "req", "-x509", *_key(rsa), "-keyout", str(d / "ca.key"),
            "-out", str(d / "ca.pem"), "-days", DAYS, "-subj", subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign"]


def csr_argv(d: Path, name: str, rsa: bool = False, subject: str = "") -> list[str]:
    return ["openssl", "req", *_key(rsa), "-keyout", str(d / f"{name}.key"),
            "-out", str(d / f"{name}.csr"), "-subj", subject or f"/CN={name}"]


def san(name: str, addr: str) -> str:
    """subjectAltName for the server's address and name. The address is also given as a
    DNS entry: xrdcp 5.5 matches a roots:// host against DNS entries only ("hostname
    not in SAN extension" with the IP entry alone)."""
    ip = ipaddress.ip_address(addr)
    return f"subjectAltName=IP:{ip},DNS:{ip},DNS:{name}"


def sign_argv(ca: Ca, d: Path, name: str) -> list[str]:
    return ["openssl", "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(ca.cert),
            "-CAkey", str(ca.key), "-CAcreateserial", "-out", str(d / f"{name}.pem"),
            "-days", DAYS, "-extfile", str(d / f"{name}.ext")]


def hash_argv(cert: Path) -> list[str]:
    return ["openssl", "x509", "-hash", "-noout", "-in", str(cert)]


def _openssl(argv: list[str]) -> str:
    return proc.run(argv, timeout=OPENSSL_TIMEOUT_S, check=True).stdout


def make_ca(d: Path, rsa: bool = False, subject: str = "/CN=rig run CA") -> Ca:
    """A new CA in `d` (created; mode 0700: it holds private keys)."""
    d.mkdir(parents=True, mode=0o700)
    _openssl(ca_argv(d, rsa, subject))
    ca = Ca(d, d / "ca.pem", d / "ca.key", d / "certs")
    ca.hashed_dir.mkdir(mode=0o755)
    h = _openssl(hash_argv(ca.cert)).strip()
    (ca.hashed_dir / f"{h}.0").write_bytes(ca.cert.read_bytes())
    # servers running as another user (xrootd) read the CA directory too
    d.chmod(0o711)
    ca.cert.chmod(0o644)
    return ca


def server_cert(ca: Ca, name: str, addr: str, rsa: bool = False) -> tuple[str, str]:
    """A certificate signed by `ca` for `name` and `addr`, and its key, as PEM text
    (the server's start writes them into its workdir, the key 0600). `rsa`: an RSA key
    (a server that authenticates X.509 clients with GSI)."""
    d = ca.dir
    _openssl(csr_argv(d, name, rsa))
    (d / f"{name}.ext").write_text(
        f"{san(name, addr)}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl(sign_argv(ca, d, name))
    return (d / f"{name}.pem").read_text(), (d / f"{name}.key").read_text()


def client_cert(ca: Ca, d: Path, name: str, subject: str) -> tuple[Path, Path]:
    """An RSA certificate signed by `ca` for a user (or a fake VOMS server) in `d`, and
    its key (0600): rig.realization.x509."""
    _openssl(csr_argv(d, name, rsa=True, subject=subject))
    (d / f"{name}.key").chmod(0o600)
    (d / f"{name}.ext").write_text(CLIENT_EXT)
    _openssl(sign_argv(ca, d, name))
    return d / f"{name}.pem", d / f"{name}.key"


CLIENT_EXT = ("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
              "keyUsage=critical,digitalSignature,keyEncipherment\n")
