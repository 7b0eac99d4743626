"""davix-get (libdavix): HTTP(S) downloads, one stream. davix-get 0.8 has no --cacert:
the run's CA is given as a hashed directory (--capath)."""
from __future__ import annotations

from rig.services.tools import HTTP_FETCHER, ClientTool, Job, register


@register
class DavixGet(ClientTool):
    """One whole-file GET; libdavix retries are off so a failure shows at once."""
    name = "davix-get"
    caps = HTTP_FETCHER

    def argv(self, job: Job) -> list[str]:
        ca = ["--capath", job.ca_dir] if job.tls != "off" else []
        return [job.client.binary or "davix-get", "--retry", "0", "--conn-timeout", "5",
                "--timeout", str(int(job.timeout_s)), *ca, job.url, job.dest]
