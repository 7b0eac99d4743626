"""davix-get (libdavix): HTTP downloads, one stream."""
from __future__ import annotations

from rig.services.tools import Capabilities, ClientTool, Job, register


@register
class DavixGet(ClientTool):
    name = "davix-get"
    caps = Capabilities(servers=frozenset({"xrootd", "nginx", "apache"}), protocols=("http",),
                        timed_by_written_bytes=True)
    version_argv = ["davix-get", "--version"]

    def argv(self, job: Job) -> list[str]:
        return [job.client.binary or "davix-get", "--retry", "0", "--conn-timeout", "5",
                "--timeout", str(int(job.timeout_s)), job.url, job.dest]
