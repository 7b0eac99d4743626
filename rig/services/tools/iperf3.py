"""iperf3: memory-to-memory TCP from the path's iperf3 server (reverse mode, `-R`), the
rig's reference for what the path can carry."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rig.description import schema as S
from rig.description.limits import MAX_STREAMS
from rig.description.tuningspec import CC_NAMES
from rig.services.tools import BUFFER, Capabilities, ClientTool, Job, Parsed, register

if TYPE_CHECKING:
    from rig.description.scenario import ClientSpec, FileSpec
    from rig.services.servers import ServerPlan


@dataclass(frozen=True)
class Iperf3Options:
    """iperf3's own client keys (its `duration:` is a client key of every tool)."""
    buffer: int | None = S.spec(BUFFER, None)                       # -w
    # this client's connections' congestion control (-C), whatever tuning's default
    congestion: str | None = S.spec(S.optional(S.choice(*CC_NAMES)), None)


@register
class Iperf3(ClientTool):
    name = "iperf3"
    caps = Capabilities(max_streams=MAX_STREAMS, needs_file=False, uses_iperf_servers=True)
    options = Iperf3Options

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        # one iperf3 server serves one test at a time: instance i uses the i-th server
        addr, port = iperf
        return Job(c, streams, addr=addr, port=port + instance, timeout_s=c.duration_s + 30)

    def argv(self, job: Job) -> list[str]:
        o: Iperf3Options = job.client.options
        buf = ["-w", str(o.buffer)] if o.buffer else []
        # -C travels to the server in the test's parameters: in reverse mode (-R) the
        # sending server's sockets use it (end.sender_tcp_congestion says what was used)
        buf += ["-C", o.congestion] if o.congestion else []
        return [job.client.binary or "iperf3", "-c", job.addr, "-p", str(job.port), "-J",
                "--get-server-output", "-R", "-P", str(job.streams),
                "-t", f"{job.client.duration_s:g}", "--connect-timeout", "5000", *buf]

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        return parse_iperf3(stdout, returncode)


BACKGROUND_S = 86400     # a competing flow runs until stopped (TERM: iperf3 prints its JSON)


def background_argv(addr: str, port: int, streams: int, congestion: str | None,
                    rate_bps: float | None) -> list[str]:
    """A competing flow (`background:`): iperf3 -R until stopped; -b is per stream."""
    return ["iperf3", "-c", addr, "-p", str(port), "-J", "-R", "-P", str(streams),
            "-t", str(BACKGROUND_S), "--connect-timeout", "5000",
            *(["-C", congestion] if congestion else []),
            *(["-b", str(int(rate_bps / streams))] if rate_bps else [])]


def parse_background(text: str) -> dict:
    """What a stopped background iperf3 said (its -J document): bytes and seconds the
    client received, the sender's congestion control; {"error": ...} when unreadable."""
    import json
    try:
        d = json.loads(text[text.index("{"):text.rindex("}") + 1])
        end = d.get("end") or {}
        got = end.get("sum_received") or {}
        if d.get("error") and not got:
            return {"error": str(d["error"])[:300]}
        return {"bytes": int(got["bytes"]), "seconds": float(got["seconds"]),
                "congestion_used": end.get("sender_tcp_congestion")}
    except (ValueError, KeyError, TypeError):
        return {"error": (text.strip().splitlines() or ["no output"])[-1][:300]}


def parse_iperf3(stdout: str, returncode: int = 0) -> Parsed:
    """iperf3 -J: received bytes/seconds, retransmits, mean sender srtt over streams."""
    try:
        d = json.loads(stdout)
    except ValueError:
        return Parsed(bytes=None, error="iperf3 printed no JSON")
    if not isinstance(d, dict):
        return Parsed(bytes=None, error="iperf3 JSON is not an object")
    if d.get("error"):
        return Parsed(bytes=None, error=str(d["error"])[:300])
    end = d.get("end", {})
    recv = end.get("sum_received") or {}
    sent = end.get("sum_sent") or {}
    send_end = (d.get("server_output_json") or {}).get("end", {})
    srtts = _sender_rtts(end) or _sender_rtts(send_end)
    extra = {"retransmits": sent.get("retransmits"),
             "srtt_ms": (sum(srtts) / len(srtts) / 1000.0) if srtts else None,
             "receiver_bps": recv.get("bits_per_second"),
             "sender_cpu": end.get("cpu_utilization_percent"),
             "sender_cc": end.get("sender_tcp_congestion") or send_end.get("sender_tcp_congestion"),
             "srtt_max_ms": _max_rtt_ms(end) or _max_rtt_ms(send_end)}
    if not recv:
        return Parsed(bytes=None, error="iperf3: no received summary")
    return Parsed(bytes=int(recv.get("bytes", 0)), seconds=float(recv.get("seconds", 0.0)),
                  error=None if returncode == 0 else f"exit {returncode}", extra=extra)


def _max_rtt_ms(end: dict) -> float | None:
    """The largest srtt (ms) any stream's sender saw (iperf3's max_rtt, in us)."""
    rtts = [float((s.get("sender") or {}).get("max_rtt") or 0) for s in end.get("streams", [])]
    return max(rtts) / 1000.0 if rtts and max(rtts) > 0 else None


def _sender_rtts(end: dict) -> list[float]:
    """Mean srtt (us) of each stream, as the sending side saw it; in reverse mode (-R)
    only the server's own JSON (--get-server-output) has it, the client reports 0."""
    out = []
    for s in end.get("streams", []):
        snd = s.get("sender") or {}
        if snd.get("sender", True) and snd.get("mean_rtt"):
            out.append(float(snd["mean_rtt"]))
    return out
