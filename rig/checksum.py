"""adler32, the WLCG default checksum, as XRootD and FTS write it (8 lowercase hex digits),
and the verdict on a transfer's bytes (issue 40 item 6).

Every file the rig makes has its adler32 taken once, as it is made
(rig.realization.data), and kept for the run (Context.file_adler32, the run's
environment `file_adler32`); each download is then checked against that value, never
against the served copy's own (a served file damaged after it was made would agree with
itself). How each client's bytes are checked is its tool's `verify` (rig.services.tools).

Pure: no processes, no orchestration.
"""
from __future__ import annotations

import zlib

CHUNK = 4 << 20
ALGO = "adler32"


def hexdigest(value: int) -> str:
    return f"{value & 0xffffffff:08x}"


def of_file(path: str, chunk: int = CHUNK) -> str:
    """XRootD's checksum of a file (zlib's adler32), as 8 hex digits."""
    a = 1
    with open(path, "rb") as f:
        while b := f.read(chunk):
            a = zlib.adler32(b, a)
    return hexdigest(a)


def normal(value: str | None) -> str | None:
    """A checksum as a tool or a server prints it (`1A2B3C4D`, `0x1a2b3c4d`, `1a2b3c4`)
    in the rig's form, or None when it is not one."""
    if value is None:
        return None
    v = value.strip().lower()
    v = v[2:] if v.startswith("0x") else v
    if not v or len(v) > 8 or any(c not in "0123456789abcdef" for c in v):
        return None
    return v.rjust(8, "0")


def mismatch(got: str | None, want: str) -> str | None:
    """The failure reason of a transfer whose bytes have adler32 `got` where `want` was
    made, or None when they agree."""
    g = normal(got)
    if g == normal(want):
        return None
    return f"{ALGO} mismatch: got {g or got or 'nothing'}, want {want}"
