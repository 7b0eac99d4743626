"""davix-get (libdavix): HTTP(S) downloads, one stream; uploads with its sibling davix-put
(the same library and options). davix-get 0.8 has no --cacert: the run's CA is given as
a hashed directory (--capath).

A `count:` set of small files: davix-get takes one URL per invocation, so it runs once
per file (rig/process/eachfile.py), each file its own process and connection; libdavix's
session reuse works only inside one process (davix-get -r would list a WebDAV folder,
which not every server here answers)."""
from __future__ import annotations

import dataclasses
import os


from rig.services.tools import (DEST_SLOT, HTTP_FETCHER, HTTP_WRITERS, URL_SLOT, ClientTool,
                                DestDir, Job, each_file_argv, presents, register)


@register
class DavixGet(ClientTool):
    """One whole-file GET; libdavix retries are off so a failure shows at once."""
    name = "davix-get"
    caps = dataclasses.replace(HTTP_FETCHER, upload=HTTP_WRITERS, auth=frozenset({"x509"}),
                               many_files="each")
    options = DestDir
    verify = "kept"          # no end-to-end option: a kept file, checksummed after the group

    def argv(self, job: Job) -> list[str]:
        ca = ["--capath", job.ca_dir] if job.tls != "off" else []
        if presents(job):        # a proxy file holds its key after the certificates
            ca += ["--cert", job.proxy, "--key", job.proxy]
        opts = ["--retry", "0", "--conn-timeout", "5", "--timeout", str(int(job.timeout_s)), *ca]
        if job.direction == "upload":       # davix-put beside the davix-get `binary:` names
            b = job.client.binary
            put = os.path.join(os.path.dirname(b), "davix-put") if b else "davix-put"
            return [put, *opts, job.src, job.url]
        if job.members:
            return each_file_argv(job, [job.client.binary or "davix-get", *opts, URL_SLOT,
                                        DEST_SLOT])
        return [job.client.binary or "davix-get", *opts, job.url, job.dest]
