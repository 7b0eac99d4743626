"""xrdcp (XRootD client): root:// downloads with 1–15 streams (`-S`); roots:// with TLS
on every stream, or on the control stream only (`--tlsnodata`), trusting only the run's
CA (X509_CERT_DIR: xrdcp 5.5 reads its CA from a hashed directory, not a file)."""
from __future__ import annotations

import re

from rig.services.tools import Capabilities, ClientTool, Job, Parsed, last_line, register

# xrdcp 5.5 retries a refused connection for ~8 minutes by default; fail fast instead.
XRD_FAIL_FAST = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "5",
                 "XRD_REQUESTTIMEOUT": "60", "XRD_STREAMTIMEOUT": "30",
                 "XRD_TIMEOUTRESOLUTION": "1"}


@register
class Xrdcp(ClientTool):
    name = "xrdcp"
    caps = Capabilities(servers=frozenset({"xrootd"}), protocols=("root",), max_streams=15,
                        options=frozenset({"page_checksum"}), timed_by_written_bytes=True,
                        tls=frozenset({"control", "all"}))

    def argv(self, job: Job) -> list[str]:
        extra = ["-S", str(job.streams)] if job.streams > 1 else []
        if job.tls == "control":
            extra.append("--tlsnodata")
        return [job.client.binary or "xrdcp", "--force", "--nopbar", *extra, job.url, job.dest]

    def env(self, job: Job) -> dict[str, str]:
        env = dict(XRD_FAIL_FAST)
        if job.tls != "off":
            env["X509_CERT_DIR"] = job.ca_dir
        if job.client.page_checksum is not None:
            env["XRD_CPUSEPGWRTRD"] = "1" if job.client.page_checksum else "0"
        env.update(job.client.env)
        return env

    @staticmethod
    def page_checksum(env: dict[str, str]) -> int:
        return 0 if env.get("XRD_CPUSEPGWRTRD", "1") == "0" else 1

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode == 0:
            return Parsed(bytes=None)
        m = re.search(r"\[(ERROR|FATAL)\][^\n]*", stderr)
        return Parsed(bytes=None, error=(m.group(0) if m else last_line(stderr))[:300]
                      or f"exit {returncode}")

    def row_fields(self, job: Job, env: dict[str, str]) -> dict:
        return {"page_checksum": self.page_checksum(env)}
