"""curl: HTTP(S) downloads, one stream; `-w '%{json}'` gives size, times and speed.
HTTPS trusts the run's CA only (--cacert replaces the system bundle)."""
from __future__ import annotations

import json

import dataclasses

from rig.services.tools import (HTTP_FETCHER, DestDir, HTTP_WRITERS, ClientTool, Job, Parsed, last_line,
                                presents, register)


@register
class Curl(ClientTool):
    name = "curl"
    caps = dataclasses.replace(HTTP_FETCHER, upload=HTTP_WRITERS, auth=frozenset({"x509"}))
    options = DestDir
    verify = "kept"          # no end-to-end option: a kept file, checksummed after the group

    def argv(self, job: Job) -> list[str]:
        ca = ["--cacert", job.ca_file] if job.tls != "off" else []
        if presents(job):        # a proxy file holds its key after the certificates
            ca += ["--cert", job.proxy, "--key", job.proxy]
        put = ["--upload-file", job.src] if job.direction == "upload" else []
        return [job.client.binary or "curl", "--silent", "--show-error", "--fail", *ca,
                "--connect-timeout", "5", "--max-time", str(int(job.timeout_s)), *put,
                "--output", job.dest, "--write-out", "%{json}", job.url]

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        try:
            d = json.loads(last_line(stdout))
        except ValueError:
            return Parsed(bytes=None, error=last_line(stderr)[:300] or "no curl json output")
        if not isinstance(d, dict):
            return Parsed(bytes=None, error="curl json output is not an object")
        up = job.direction == "upload"
        keep = {k: d.get(k) for k in ("http_code", "size_download", "speed_download",
                                      "size_upload", "speed_upload", "time_connect",
                                      "time_starttransfer", "time_total")}
        err = None
        # a PUT is answered 201 (created: nginx, Apache), 200 or 204 (XrdHttp: 200)
        if returncode != 0 or d.get("http_code") not in ((200, 201, 204) if up else (200,)):
            err = d.get("errormsg") or f"HTTP {d.get('http_code')}"
        seconds = float(d["time_total"]) if d.get("time_total") is not None else None
        return Parsed(bytes=int(d.get("size_upload" if up else "size_download") or 0),
                      seconds=seconds, error=err, extra=keep)
