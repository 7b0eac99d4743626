"""Client side of the engine's control channel: one JSON request per line on a unix
socket, one JSON answer per line. Blocking, with a deadline on every call.

Must not import asyncio or the engine's server (the rig process uses this).
"""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Callable


from rig.errors import RigError


class ControlError(RigError):
    pass


# how one request line reaches the engine and its answer line comes back: a unix socket
# here (exchange below), or the agent's `ctl` op on a remote router host
Exchange = Callable[[Path, dict, float], bytes]


def exchange(path: Path, req: dict, timeout: float) -> bytes:
    """One request line on the local unix socket, the answer line back."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
    except OSError as e:
        raise ControlError(f"engine control {path}: {e}") from e
    return buf


def request(path: Path, req: dict, *, timeout: float = 2.0,
            via: Exchange | None = None) -> dict:
    """Send one request, return the answer's payload; raise ControlError on any failure."""
    buf = (via or exchange)(path, req, timeout)
    try:
        ans = json.loads(buf)
    except ValueError as e:
        raise ControlError(f"engine control {path}: bad answer {buf[:80]!r}") from e
    if not ans.get("ok"):
        raise ControlError(f"engine control {path}: {ans.get('error', 'refused')}")
    return ans


def ping(path: Path, *, timeout: float = 2.0, via: Exchange | None = None) -> int:
    return int(request(path, {"op": "ping"}, timeout=timeout, via=via)["pid"])


def stats(path: Path, *, timeout: float = 2.0, via: Exchange | None = None) -> dict:
    return request(path, {"op": "stats"}, timeout=timeout, via=via)["stats"]


def configure(path: Path, profile: dict, *, timeout: float = 5.0,
              via: Exchange | None = None) -> None:
    request(path, {"op": "configure", "profile": profile}, timeout=timeout, via=via)
