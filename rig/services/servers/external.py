"""external: an endpoint the rig does not start (a site's own xrootd, dCache, EOS, an
HTTP/WebDAV door), named by its URL (rig.description.endpoint). It listens on no port of
the rig's, writes no configuration and never runs: its plan exists so that a client's
job names its URL like any server's (the path's far end routes on to it:
rig.realization.gateway)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rig.netaddr import hostport
from rig.services.servers import ServerKind, ServerPlan, register

if TYPE_CHECKING:
    from rig.description.endpoint import Endpoint


@register
class External(ServerKind):
    kind = "external"
    ports = {}     # listens on nothing of the rig's
    logs = ()

    def argv(self, p: ServerPlan) -> list[str]:
        raise AssertionError("an external endpoint is never started by the rig")

    def url(self, p: ServerPlan, protocol: str, relpath: str, tls: bool = False) -> str:
        ep = p.spec.endpoint
        assert ep is not None, "an external server has its url (schema)"
        return ep.file_url(relpath)


STAT_TIMEOUT_S = 30.0
# xrdfs fails fast on a refused connection, as xrdcp does (rig.services.tools.xrdcp)
XRDFS_ENV = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "5",
             "XRD_REQUESTTIMEOUT": "20", "XRD_STREAMTIMEOUT": "20",
             "XRD_TIMEOUTRESOLUTION": "1"}


def stat_argv(ep: "Endpoint", relpath: str, proxy: str = "") -> list[str]:
    """Ask the endpoint for a file's size, reading nothing of it: `xrdfs stat` for
    root(s)://, an HTTP HEAD (curl -I) for http(s) and dav(s). `proxy`: the X.509 proxy
    its clients present (a path; xrdfs is given it in its environment: `stat_env`)."""
    if ep.protocol == "root":
        return ["xrdfs", f"{ep.scheme}://{hostport(ep.host, ep.port)}", "stat",
                ep.file_path(relpath)]
    cert = ["--cert", proxy, "--key", proxy] if proxy else []
    return ["curl", "-sS", "-f", "-I", *cert, "--max-time", f"{STAT_TIMEOUT_S - 5:g}",
            ep.file_url(relpath)]


def stat_env(ep: "Endpoint", proxy: str = "") -> dict[str, str] | None:
    """The environment of `stat_argv` (None: the rig's own)."""
    if ep.protocol != "root":
        return None
    from rig.services.tools.xrdcp import gsi_env_of
    return {**XRDFS_ENV, **(gsi_env_of(proxy) if proxy else {})}


def parse_stat(protocol: str, stdout: str) -> int | None:
    """The size a stat answered (None: it named none)."""
    key = "Size:" if protocol == "root" else "content-length:"
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].lower() == key.lower() and words[1].isdigit():
            return int(words[1])
    return None
