"""Client side of the engine's control channel: one JSON request per line on a unix
socket, one JSON answer per line. Blocking, with a deadline on every call.

Must not import asyncio or the engine's server (the rig process uses this).
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

from rig.errors import RigError


class ControlError(RigError):
    pass


def request(path: Path, req: dict, *, timeout: float = 2.0) -> dict:
    """Send one request, return the answer's payload; raise ControlError on any failure."""
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
    try:
        ans = json.loads(buf)
    except ValueError as e:
        raise ControlError(f"engine control {path}: bad answer {buf[:80]!r}") from e
    if not ans.get("ok"):
        raise ControlError(f"engine control {path}: {ans.get('error', 'refused')}")
    return ans


def ping(path: Path, *, timeout: float = 2.0) -> int:
    return int(request(path, {"op": "ping"}, timeout=timeout)["pid"])


def stats(path: Path, *, timeout: float = 2.0) -> dict:
    return request(path, {"op": "stats"}, timeout=timeout)["stats"]


def configure(path: Path, profile: dict, *, timeout: float = 5.0) -> None:
    request(path, {"op": "configure", "profile": profile}, timeout=timeout)
