"""A run's throw-away TLS identity: one self-signed certificate for the addresses of
the servers that need one, kept in the run's state directory (removed with it, and by
`rig clean` after a SIGKILL), trusted through a hashed CA directory of its own.

Today XrdHttp 5.5 needs one before it loads its third-party-copy handler; the TLS work
of issue #10 (a per-run CA with server certificates signed by it) replaces this.
Must not import services, orchestration or reports.
"""
from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from rig.process import proc

TIMEOUT_S = 60.0


def self_signed_argv(cert: Path, key: Path, addrs: list[str], days: int = 2) -> list[str]:
    san = ",".join(f"IP:{a}" for a in addrs)
    return ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
            "-keyout", str(key), "-out", str(cert), "-days", str(days),
            "-subj", "/CN=rig-throwaway", "-addext", f"subjectAltName={san}"]


def make_identity(tls_dir: Path, addrs: list[str], owner: str | None = None) -> Path:
    """tls_dir/{cert.pem,key.pem,ca/<hash>.0}; the key readable by `owner` only."""
    if tls_dir.exists():
        shutil.rmtree(tls_dir)
    (tls_dir / "ca").mkdir(parents=True)
    cert, key = tls_dir / "cert.pem", tls_dir / "key.pem"
    proc.run(self_signed_argv(cert, key, sorted(set(addrs))), timeout=TIMEOUT_S, check=True)
    h = proc.run(["openssl", "x509", "-hash", "-noout", "-in", str(cert)],
                 timeout=TIMEOUT_S, check=True).stdout.strip()
    shutil.copyfile(cert, tls_dir / "ca" / f"{h}.0")
    os.chmod(key, 0o600)
    if owner:
        pw = pwd.getpwnam(owner)
        for p in (tls_dir, tls_dir / "ca", cert, key, tls_dir / "ca" / f"{h}.0"):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    return tls_dir
