"""curl: HTTP(S) downloads, one stream; `-w '%{json}'` gives size, times and speed.
HTTPS trusts the run's CA only (--cacert replaces the system bundle)."""
from __future__ import annotations

import json

import dataclasses

from typing import Any

from rig.services.tools import (DEST_SLOT, HTTP_FETCHER, HTTP_WRITERS, URL_SLOT, ClientTool,
                                FetchSet, Job, Parsed, each_file_argv, last_line,
                                one_invocation, presents, register)

# what curl's `-w '%{json}'` says of one file of a set
SET_KEYS = ("http_code", "size_download", "num_connects", "time_connect", "time_appconnect",
            "time_starttransfer", "time_total")


@register
class Curl(ClientTool):
    name = "curl"
    caps = dataclasses.replace(HTTP_FETCHER, upload=HTTP_WRITERS, auth=frozenset({"x509"}),
                               many_files="one")
    options = FetchSet
    verify = "kept"          # no end-to-end option: a kept file, checksummed after the group

    def argv(self, job: Job) -> list[str]:
        ca = ["--cacert", job.ca_file] if job.tls != "off" else []
        if presents(job):        # a proxy file holds its key after the certificates
            ca += ["--cert", job.proxy, "--key", job.proxy]
        if job.members:
            # a set: every URL in one invocation (`--config` list: url/output pairs), one
            # connection reused from file to file; `-w` prints a JSON line per file.
            # `reuse: false`: one curl per file (eachfile)
            base = [job.client.binary or "curl", "--silent", "--show-error", "--fail", *ca,
                    "--connect-timeout", "5", "--max-time", str(int(job.timeout_s)),
                    "--write-out", r"%{json}\n"]
            if one_invocation(job):
                return [*base, "--config", job.list_file]
            return each_file_argv(job, [*base, "--output", DEST_SLOT, URL_SLOT])
        put = ["--upload-file", job.src] if job.direction == "upload" else []
        return [job.client.binary or "curl", "--silent", "--show-error", "--fail", *ca,
                "--connect-timeout", "5", "--max-time", str(int(job.timeout_s)), *put,
                "--output", job.dest, "--write-out", "%{json}", job.url]

    def set_list(self, job: Job) -> str:
        if not one_invocation(job):
            return super().set_list(job)
        import os
        return "".join(f'url = "{u}"\noutput = "{os.path.join(job.dest, os.path.basename(r))}"\n'
                       for u, r, _ in job.members)

    def file_record(self, out: str) -> dict[str, Any]:
        """One file's `-w` JSON: its new connections, their TCP and TLS handshake times
        (curl's timers from this file's start: time_connect; time_appconnect minus
        time_connect), its time to first byte (time_starttransfer) and HTTP status."""
        try:
            d = json.loads(out)
        except ValueError:
            return {}
        if not isinstance(d, dict):
            return {}
        k = {key: d.get(key) for key in SET_KEYS}
        new = int(k["num_connects"] or 0)
        tc, ta = float(k["time_connect"] or 0), float(k["time_appconnect"] or 0)
        return {"http_code": k["http_code"], "size": k["size_download"], "connects": new,
                "connect_s": tc if new else 0.0,
                "tls_s": max(0.0, ta - tc) if new and ta else 0.0,
                "ttfb_s": k["time_starttransfer"], "total_s": k["time_total"]}

    def parse_set(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if not one_invocation(job):
            p = super().parse_set(stdout, stderr, returncode, job)
        else:
            recs = [self.file_record(ln) for ln in stdout.splitlines() if ln.strip()]
            recs = [r for r in recs if r]
            err = None if returncode == 0 else (last_line(stderr)[:300] or f"exit {returncode}")
            if err is None and len(recs) != len(job.members):
                err = f"{len(recs)} of {len(job.members)} files fetched"
            p = Parsed(bytes=None, error=err, extra={"files": recs})
        for i, r in enumerate(p.extra["files"]):     # the first file refused, named
            if r.get("http_code") not in (200, None) and i < len(job.members):
                p.error = f"file {job.members[i][1]}: HTTP {r['http_code']}"
                break
        return p

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
