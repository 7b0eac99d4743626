"""davix-get (libdavix): HTTP(S) downloads, one stream. davix-get 0.8 has no --cacert:
the run's CA is given as a hashed directory (--capath)."""
from __future__ import annotations

from rig.services.tools import Capabilities, ClientTool, Job, register


@register
class DavixGet(ClientTool):
    name = "davix-get"
    caps = Capabilities(servers=frozenset({"xrootd", "nginx"}), protocols=("http",),
                        timed_by_written_bytes=True, tls=frozenset({"all"}))
    version_argv = ["davix-get", "--version"]

    def argv(self, job: Job) -> list[str]:
        ca = ["--capath", job.ca_dir] if job.tls != "off" else []
        return [job.client.binary or "davix-get", "--retry", "0", "--conn-timeout", "5",
                "--timeout", str(int(job.timeout_s)), *ca, job.url, job.dest]
