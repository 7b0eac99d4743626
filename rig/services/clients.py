"""Client adapters: one per tool, in an explicit registry. Each builds argv and the
environment for a Job (pure) and parses the tool's output (pure, tested on captured
output under tests/data/). Running them is the orchestration's job.

Must not import orchestration or reports.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Protocol

from ..scenario import ClientSpec

# xrdcp 5.5 retries a refused connection for ~8 minutes by default; fail fast instead.
XRD_FAIL_FAST = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "5",
                 "XRD_REQUESTTIMEOUT": "60", "XRD_STREAMTIMEOUT": "30",
                 "XRD_TIMEOUTRESOLUTION": "1"}


@dataclass(frozen=True)
class Job:
    """One client process to run."""
    client: ClientSpec
    streams: int
    url: str = ""                # for file fetchers
    addr: str = ""               # for iperf3 / fdt
    port: int = 0
    relpath: str = ""
    file_bytes: int = 0
    timeout_s: float = 600.0
    dest: str = "/dev/null"


@dataclass
class Parsed:
    bytes: int | None
    seconds: float | None = None    # the tool's own measure of the data phase, if any
    error: str | None = None
    extra: dict = field(default_factory=dict)


class ClientAdapter(Protocol):
    tool: str

    def argv(self, job: Job) -> list[str]: ...
    def env(self, job: Job) -> dict[str, str]: ...
    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed: ...


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class Xrdcp:
    tool = "xrdcp"

    def argv(self, job: Job) -> list[str]:
        extra = ["-S", str(job.streams)] if job.streams > 1 else []
        return [job.client.binary or "xrdcp", "--force", "--nopbar", *extra, job.url, job.dest]

    def env(self, job: Job) -> dict[str, str]:
        env = dict(XRD_FAIL_FAST)
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
        return Parsed(bytes=None, error=(m.group(0) if m else _last_line(stderr))[:300]
                      or f"exit {returncode}")


class DavixGet:
    tool = "davix-get"

    def argv(self, job: Job) -> list[str]:
        return [job.client.binary or "davix-get", "--retry", "0", "--conn-timeout", "5",
                "--timeout", str(int(job.timeout_s)), job.url, job.dest]

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode == 0:
            return Parsed(bytes=None)
        return Parsed(bytes=None, error=_last_line(stderr)[:300] or f"exit {returncode}")


class Curl:
    tool = "curl"

    def argv(self, job: Job) -> list[str]:
        return [job.client.binary or "curl", "--silent", "--show-error", "--fail",
                "--connect-timeout", "5", "--max-time", str(int(job.timeout_s)),
                "--output", job.dest, "--write-out", "%{json}", job.url]

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        try:
            d = json.loads(_last_line(stdout))
        except ValueError:
            return Parsed(bytes=None, error=_last_line(stderr)[:300] or "no curl json output")
        keep = {k: d.get(k) for k in ("http_code", "size_download", "speed_download",
                                      "time_connect", "time_starttransfer", "time_total")}
        err = None
        if returncode != 0 or d.get("http_code") != 200:
            err = d.get("errormsg") or f"HTTP {d.get('http_code')}"
        seconds = float(d["time_total"]) if d.get("time_total") is not None else None
        return Parsed(bytes=int(d.get("size_download") or 0), seconds=seconds, error=err,
                      extra=keep)


class Iperf3:
    tool = "iperf3"

    def argv(self, job: Job) -> list[str]:
        buf = ["-w", str(job.client.buffer)] if job.client.buffer else []
        return [job.client.binary or "iperf3", "-c", job.addr, "-p", str(job.port), "-J",
                "--get-server-output", "-R", "-P", str(job.streams), "-t", f"{job.client.duration_s:g}",
                "--connect-timeout", "5000", *buf]

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        return parse_iperf3(stdout, returncode)


def parse_iperf3(stdout: str, returncode: int = 0) -> Parsed:
    """iperf3 -J: received bytes/seconds, retransmits, mean sender srtt over streams."""
    try:
        d = json.loads(stdout)
    except ValueError:
        return Parsed(bytes=None, error="iperf3 printed no JSON")
    if d.get("error"):
        return Parsed(bytes=None, error=str(d["error"])[:300])
    end = d.get("end", {})
    recv = end.get("sum_received") or {}
    sent = end.get("sum_sent") or {}
    srtts = _sender_rtts(end) or _sender_rtts((d.get("server_output_json") or {}).get("end", {}))
    extra = {"retransmits": sent.get("retransmits"),
             "srtt_ms": (sum(srtts) / len(srtts) / 1000.0) if srtts else None,
             "receiver_bps": recv.get("bits_per_second"),
             "sender_cpu": end.get("cpu_utilization_percent")}
    if not recv:
        return Parsed(bytes=None, error="iperf3: no received summary")
    return Parsed(bytes=int(recv.get("bytes", 0)), seconds=float(recv.get("seconds", 0.0)),
                  error=None if returncode == 0 else f"exit {returncode}", extra=extra)


def _sender_rtts(end: dict) -> list[float]:
    """Mean srtt (us) of each stream, as the sending side saw it; in reverse mode (-R)
    only the server's own JSON (--get-server-output) has it, the client reports 0."""
    out = []
    for s in end.get("streams", []):
        snd = s.get("sender") or {}
        if snd.get("sender", True) and snd.get("mean_rtt"):
            out.append(float(snd["mean_rtt"]))
    return out


class Fdt:
    tool = "fdt"

    def argv(self, job: Job) -> list[str]:
        from ..fdt import adapter
        return adapter.client_argv(job.addr, job.port, job.relpath, job.dest,
                                   streams=job.streams, block_bytes=job.client.block,
                                   bufsize=job.client.buffer, timeout_s=job.timeout_s)

    def env(self, job: Job) -> dict[str, str]:
        return dict(job.client.env)

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        from ..fdt import adapter
        try:
            d = adapter.parse(stdout, stderr)
        except ValueError as e:
            return Parsed(bytes=None, error=(_last_line(stderr) or str(e))[:300])
        err = None if returncode == 0 else (_last_line(stderr)[:300] or f"exit {returncode}")
        return Parsed(bytes=int(d["bytes"]), seconds=float(d["seconds"]), error=err,
                      extra={k: v for k, v in d.items() if k not in ("bytes", "seconds")})


REGISTRY: dict[str, ClientAdapter] = {a.tool: a for a in
                                      (Xrdcp(), DavixGet(), Curl(), Iperf3(), Fdt())}


def adapter(tool: str) -> ClientAdapter:
    return REGISTRY[tool]
