"""Readiness probes inside a network namespace without spawning a process.

A short-lived thread joins the namespace with setns(2) (which affects only the calling
thread), tries a TCP connect, and ends. Must not import anything above rig.process.proc.
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
import time

from rig.errors import RigError

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _in_ns(ns: str | None, fn):
    box: dict = {}

    def body() -> None:
        try:
            if ns:
                fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns failed")
                finally:
                    os.close(fd)
            box["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["e"] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


def tcp_open(ns: str | None, addr: str, port: int, timeout: float = 0.5) -> bool:
    def attempt() -> bool:
        try:
            with socket.create_connection((addr, port), timeout=timeout):
                return True
        except OSError:
            return False
    return _in_ns(ns, attempt)


def wait_tcp(ns: str | None, addr: str, port: int, *, timeout: float, what: str,
             alive=None) -> float:
    """Poll until addr:port accepts inside ns; return seconds waited. `alive()` False
    means the server died: fail at once with its name."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if tcp_open(ns, addr, port):
            return time.monotonic() - t0
        if alive is not None and not alive():
            raise RigError(f"{what}: exited before listening on {addr}:{port}")
        time.sleep(0.05)
    raise RigError(f"{what}: not listening on {addr}:{port} within {timeout:g}s")


def port_free(ns: str | None, addr: str, port: int) -> bool:
    def attempt() -> bool:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        try:
            s.bind((addr, port))
            return True
        except OSError:
            return False
        finally:
            s.close()
    return _in_ns(ns, attempt)
