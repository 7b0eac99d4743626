"""wget (GNU Wget): HTTP(S) downloads, one stream, as seed 000 compared it with curl and
davix. HTTPS trusts the run's CA only (--ca-certificate replaces the system bundle).

No wgetrc (`--no-config`), no HSTS database (`--no-hsts`: wget would write ~/.wget-hsts),
no proxy, no retry. wget prints its progress to stderr in the C locale (LC_ALL=C: plain
quotes); dots of 1 MiB keep that short. The data phase is timed like the other HTTP
fetchers, from the bytes the process wrote (/proc/PID/io); wget's own figures (bytes saved,
its download time) are kept in the row's extra.
"""
from __future__ import annotations

import re

from rig.services.tools import HTTP_FETCHER, DestDir, ClientTool, Job, Parsed, last_line, register

_SAVED = re.compile(r"saved \[(\d+)(?:/(\d+))?\]")
_STATUS = re.compile(r"awaiting response\.\.\. (\d{3})")
# the last progress line ends with `100% <rate>=<time>`: 0.3s, 12s, 1m 5s, 2h 3m
_TIME = re.compile(r"=((?:\d+h)?\s*(?:\d+m)?\s*(?:[\d.]+s)?)\s*$", re.M)
_ERROR = re.compile(r"^(?:\S+ \S+ ERROR .*|.*failed: .*|wget: .*)$", re.M)


@register
class Wget(ClientTool):
    name = "wget"
    caps = HTTP_FETCHER
    options = DestDir
    verify = "kept"          # no end-to-end option: a kept file, checksummed after the group

    def argv(self, job: Job) -> list[str]:
        ca = [f"--ca-certificate={job.ca_file}"] if job.tls != "off" else []
        return [job.client.binary or "wget", "--no-config", "--no-hsts", "--no-proxy",
                "--tries=1", "--connect-timeout=5", f"--read-timeout={int(job.timeout_s)}",
                "--progress=dot:giga", *ca, "-O", job.dest, job.url]

    def env(self, job: Job) -> dict[str, str]:
        return {"LC_ALL": "C", **job.client.env}

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        return parse_wget(stderr, returncode)


def wget_seconds(text: str) -> float | None:
    """wget's duration (`0.3s`, `12s`, `1m 5s`, `2h 3m`) in seconds."""
    parts = re.findall(r"([\d.]+)([hms])", text)
    if not parts:
        return None
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def parse_wget(stderr: str, returncode: int) -> Parsed:
    """Bytes saved, wget's own time of the data phase, the HTTP status, or the error."""
    status = _STATUS.findall(stderr)
    extra: dict = {"http_code": int(status[-1]) if status else None}
    saved = _SAVED.search(stderr)
    times = _TIME.findall(stderr)
    seconds = wget_seconds(times[-1]) if times else None
    extra["wget_seconds"] = seconds
    if returncode == 0 and saved:
        return Parsed(bytes=int(saved.group(1)), seconds=seconds, extra=extra)
    errs = _ERROR.findall(stderr)
    err = (errs[-1] if errs else last_line(stderr)) or f"exit {returncode}"
    return Parsed(bytes=int(saved.group(1)) if saved else None, seconds=seconds,
                  error=err.strip()[:300], extra=extra)
