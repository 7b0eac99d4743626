"""IP address literals as URLs, listen directives and messages write them.

An IPv6 literal carries colons, so wherever a port or a path follows it, it is written
in brackets: ``root://[2001:db8::10]:1094//f``, nginx ``listen [2001:db8::10]:8090``,
Apache ``Listen [2001:db8::10]:8090``, sshd ``ListenAddress [::1]:2222``, scp
``user@[::1]:f``. Names and IPv4 literals are written as they are.
"""
from __future__ import annotations

import functools
import ipaddress


@functools.lru_cache(maxsize=1024)
def family(addr: str) -> int:
    """4 or 6 for an IP literal; 0 for anything else (a host name). A plan asks it of
    the same few addresses for every URL it writes: parsed once each."""
    try:
        return ipaddress.ip_address(addr.strip("[]")).version
    except ValueError:
        return 0


def host(addr: str) -> str:
    """The address as the host part of a URL (or of host:port)."""
    return f"[{addr}]" if family(addr) == 6 and not addr.startswith("[") else addr


def hostport(addr: str, port: int | str) -> str:
    return f"{host(addr)}:{port}"
