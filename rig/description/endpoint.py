"""External endpoints (issue 40 item 1): a server the rig does not start, named by its URL
(`servers: [{name: site, kind: external, url: root://dtn.example.org:1094//store/rig}]`).

The URL is parsed once here: its scheme (root, roots, http, https, dav, davs), host (a
name or an IP literal), port (the scheme's default when absent) and path, the base every
client's `file:` is read below. Which protocol a client tool must speak follows from the
scheme: root:// and roots:// are xrootd's (xrdcp, xrdcl), the others HTTP's (curl,
davix-get, wget); dav:// and davs:// are given to the tools as http:// and https://
(the same protocol; curl and wget know no dav scheme).

Pure; imports only rig.netaddr.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from rig.netaddr import family, hostport

SCHEMES = ("root", "roots", "http", "https", "dav", "davs")
DEFAULT_PORTS = {"root": 1094, "roots": 1094, "http": 80, "https": 443, "dav": 80, "davs": 443}
# what the tools are given: WebDAV is HTTP
TOOL_SCHEME = {"dav": "http", "davs": "https"}
MAX_URL = 512

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*")
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>\[[^\]/]*\]|[^:/]*)"
                  r"(?::(?P<port>[^/]*))?(?P<path>/.*)?")
_PATH = re.compile(r"[A-Za-z0-9._~/+@%=,-]*")


@dataclass(frozen=True)
class Endpoint:
    """A parsed endpoint URL: the text as given and its parts."""
    url: str
    scheme: str
    host: str           # a name or an IP literal (no brackets)
    port: int
    path: str           # its base directory on the endpoint, "/" at least

    @property
    def protocol(self) -> str:
        """The protocol a client tool must speak: root or http (rig.services.tools)."""
        return "root" if self.scheme in ("root", "roots") else "http"

    @property
    def tls(self) -> bool:
        return self.scheme in ("roots", "https", "davs")

    @property
    def is_address(self) -> bool:
        return family(self.host) != 0

    def file_url(self, relpath: str) -> str:
        """The URL a client fetches: `relpath` below the endpoint's path (an absolute
        `relpath` is a path on the endpoint as it is). root:// URLs keep xrootd's double
        slash before an absolute path."""
        path = relpath if relpath.startswith("/") else \
            self.path.rstrip("/") + "/" + relpath
        scheme = TOOL_SCHEME.get(self.scheme, self.scheme)
        sep = "/" if self.protocol == "root" else ""
        return f"{scheme}://{hostport(self.host, self.port)}/{sep}{path.lstrip('/')}"

    def file_path(self, relpath: str) -> str:
        """The path on the endpoint of a client's `file:`."""
        return relpath if relpath.startswith("/") else self.path.rstrip("/") + "/" + relpath


def parse(v: object) -> Endpoint:
    """An endpoint URL, or ValueError saying what is wrong with it."""
    if not isinstance(v, str):
        raise ValueError("expected a URL like root://dtn.example.org:1094//store/rig")
    if len(v) > MAX_URL or not v.isprintable() or " " in v:
        raise ValueError(f"expected a URL on one line without spaces (max {MAX_URL} "
                         "characters)")
    m = _URL.fullmatch(v)
    if m is None:
        raise ValueError("expected scheme://host[:port]/path, e.g. "
                         "root://dtn.example.org:1094//store/rig")
    scheme = m["scheme"]
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme}:// is not one of "
                         f"{', '.join(s + '://' for s in SCHEMES)}")
    host = m["host"]
    if host.startswith("["):
        host = host[1:-1]
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError("brackets hold an IPv6 address") from None
        raise ValueError("an IPv6 endpoint is not supported yet: give an IPv4 address or "
                         "a name")
    if not host:
        raise ValueError("the URL names no host")
    if family(host) == 0 and (not _HOST.fullmatch(host) or len(host) > 253
                              or host.replace(".", "").isdigit()):
        raise ValueError(f"not a host name or IPv4 address: {host}")
    port = DEFAULT_PORTS[scheme]
    if m["port"] is not None:
        if not m["port"].isdigit() or not 1 <= int(m["port"]) <= 65535:
            raise ValueError("the port is a number 1-65535")
        port = int(m["port"])
    path = m["path"] or "/"
    if scheme in ("root", "roots"):
        path = path[1:] if path.startswith("//") else path   # root://h//abs: /abs
    if not _PATH.fullmatch(path) or "/../" in path + "/" or "?" in path or "#" in path:
        raise ValueError("the path is letters, digits and ._~/+@%=,- (no query, no '..')")
    return Endpoint(v, scheme, host, port, "/" + path.lstrip("/"))


_FILE = re.compile(r"[A-Za-z0-9._~+@%=,-][A-Za-z0-9._~/+@%=,-]{0,511}|/[A-Za-z0-9._~/+@%=,-]{1,511}")


def file_ref(v: object) -> str:
    """A client's `file:`: a file of `files:` by name, or (against an external endpoint)
    a path on it, below its URL's path or absolute."""
    if not isinstance(v, str) or not _FILE.fullmatch(v) or "/../" in f"/{v}/" \
            or v.endswith("/"):
        raise ValueError("expected a file's name, or a path on an external endpoint "
                         "(letters, digits, ._~/+@%=,-; no '..')")
    return v
