"""http-tpc: HTTP third-party copy, pull mode (default) or push, as WLCG sites run it
(seed 002).

The client sends `COPY <destination URL>` with a `Source:` header naming the file on
the source server; the destination (XrdHttpTPC) pulls it with its own libcurl and
streams performance markers back, ending with `success: Created` or `failure: ...`.
No data passes through the client, so the transfer is timed by the process (the
request ends when the destination has the file) and its bytes are the file's once the
destination says success. Sent with curl, whose COPY request XrdHttpTPC 5.5 answers.
With TLS (`tls: all`, or `sweep.tls`) both legs are HTTPS: the COPY goes to the
destination's HTTPS port trusting only the run's CA (`--cacert`), and the `Source:` URL
is the source's HTTPS endpoint, which the destination verifies against the same CA
(its `xrd.tlsca`); nothing disables verification.

Push (`tpc_mode: push`, FTS's other mode): the COPY goes to the source with a
`Destination:` header naming the destination's incoming/ URL; the source's XrdHttpTPC
sends the file there with an HTTP PUT (the destination needs to accept writes, not
third-party copy), answering with the same markers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rig.description import schema as S
from rig.services.tools import Capabilities, ClientTool, Job, Parsed, last_line, register

INCOMING = "incoming"        # the destination writes below this folder of its data dir


@dataclass(frozen=True)
class HttpTpcOptions:
    """http-tpc's own client key: the destination pulls (default) or the source pushes."""
    tpc_mode: str | None = S.spec(S.optional(S.choice("pull", "push")), None)


@register
class HttpTpc(ClientTool):
    name = "http-tpc"
    caps = Capabilities(servers=frozenset({"xrootd"}), protocols=("http",),
                        third_party=True, tls=frozenset({"all"}))
    options = HttpTpcOptions
    # the destination's copy (incoming/), checksummed by the rig after the group when the
    # destination is on this host
    verify = "destination"
    version_argv = ["curl", "--version"]

    def job(self, c: Any, streams: int, instance: int, *, server: Any, file: Any,
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        assert server is not None and file is not None
        dest = f"{INCOMING}/{c.name}-{instance}"     # overwritten by the next group
        stored = str(server.datadir / dest) if server.host is None else ""
        if tls == "off":
            return Job(c, streams, url=server.url(c.protocol, dest), relpath=file.name,
                       file_bytes=file.size, timeout_s=timeout_s, stored=stored)
        assert server.tls is not None, "TLS asked of a server started without certificates"
        return Job(c, streams, url=server.url(c.protocol, dest, tls=True), relpath=file.name,
                   file_bytes=file.size, timeout_s=timeout_s, tls=tls,
                   ca_file=server.tls.ca_file, ca_dir=server.tls.ca_dir, stored=stored)

    def argv(self, job: Job) -> list[str]:
        ca = ["--cacert", job.ca_file] if job.tls != "off" else []
        return [job.client.binary or "curl", "--silent", "--show-error", "--fail", *ca,
                "--connect-timeout", "5", "--max-time", str(int(job.timeout_s)),
                *(("--request", "COPY", "--header", f"Destination: {job.url}",
                   "--header", "Overwrite: T", job.source_url)
                  if job.client.options.tpc_mode == "push" else
                  ("--request", "COPY", "--header", f"Source: {job.source_url}",
                   "--header", "Overwrite: T", job.url))]

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        marks = [int(m) for m in re.findall(r"Stripe Bytes Transferred:\s*(\d+)", stdout)]
        remote = re.findall(r"RemoteConnections:\s*(\S+)", stdout)
        extra = {"perf_markers": len(marks), "remote": sorted(set(remote)),
                 "tpc_mode": job.client.options.tpc_mode or "pull"}
        end = last_line(stdout)
        if returncode == 0 and end.startswith("success"):
            return Parsed(bytes=job.file_bytes, extra=extra)
        err = (end if end.startswith("failure") else last_line(stderr)) or f"exit {returncode}"
        return Parsed(bytes=max(marks) if marks else None, error=err[:300], extra=extra)
