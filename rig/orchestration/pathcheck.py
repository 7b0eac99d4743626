"""Path validation: does the path have the configured RTT and what capacity does it carry?

`ping` gives RTT mean/min/max/stddev and echo loss; a short `iperf3 -R` (server sends,
as in a download) gives goodput, retransmits and the sender's srtt. Parsers are pure
and tested on captured output. Must not import orchestration or reports.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from rig.process import proc
from rig.services.tools.iperf3 import parse_iperf3

_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PKT = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


@dataclass
class PingStats:
    count: int
    received: int
    min_ms: float | None
    mean_ms: float | None
    max_ms: float | None
    stddev_ms: float | None

    @property
    def loss(self) -> float:
        return 1.0 - self.received / self.count if self.count else 1.0


def parse_ping(stdout: str) -> PingStats:
    m = _PKT.search(stdout)
    if not m:
        raise ValueError("ping printed no summary")
    sent, got = int(m.group(1)), int(m.group(2))
    r = _RTT.search(stdout)
    vals = [float(x) for x in r.groups()] if r else [None] * 4
    return PingStats(sent, got, vals[0], vals[1], vals[2], vals[3])


def ping_argv(addr: str, count: int, interval_s: float) -> list[str]:
    # -i below 0.2 s needs root, which the rig has; -W bounds a lost reply's wait
    return ["ping", "-n", "-q", "-c", str(count), "-i", f"{interval_s:g}", "-W", "2", addr]


def iperf3_argv(addr: str, port: int, streams: int, seconds: float) -> list[str]:
    return ["iperf3", "-c", addr, "-p", str(port), "-J", "--get-server-output", "-R", "-P", str(streams),
            "-t", f"{seconds:g}", "--connect-timeout", "5000"]


def rtt_flag(configured_ms: float | None, measured_ms: float | None, *,
             abs_ms: float, rel: float, stddev_ms: float = 0.0, count: int = 1) -> str | None:
    """Why the step is flagged, or None: |measured - configured| > max(abs,
    rel*configured, 3 standard errors of the mean). The last term only matters with
    configured jitter: 10 pings with 2 ms jitter cannot pin a mean to 0.3 ms."""
    if configured_ms is None:
        return None
    if measured_ms is None:
        return "no RTT measured (ping lost every echo)"
    tol = max(abs_ms, rel * configured_ms, 3.0 * (stddev_ms or 0.0) / max(count, 1) ** 0.5)
    if abs(measured_ms - configured_ms) > tol:
        return (f"RTT {measured_ms:.3f} ms vs configured {configured_ms:.3f} ms "
                f"(tolerance {tol:.3f} ms)")
    return None


def validate_path(*, client_ns: str | None, server_addr: str, iperf_port: int,
                  configured_rtt_ms: float | None, v, rate_bps: float | None = None,
                  host=None, rundir: str | None = None) -> dict:
    """Run ping and iperf3 from the client side (on `host` when the client is remote);
    return a validations row (partial)."""
    started = time.time()
    pr = proc.run(ping_argv(server_addr, v.ping_count, v.ping_interval_s), netns=client_ns,
                  timeout=v.ping_count * (v.ping_interval_s + 2.0) + 10, host=host,
                  rundir=rundir)
    try:
        ping = parse_ping(pr.stdout)
    except ValueError:
        ping = PingStats(v.ping_count, 0, None, None, None, None)
    ir = proc.run(iperf3_argv(server_addr, iperf_port, v.iperf_streams, v.iperf_seconds),
                  netns=client_ns, timeout=v.iperf_seconds + 30, host=host, rundir=rundir)
    ip = parse_iperf3(ir.stdout, ir.returncode)
    reasons = []
    flag = rtt_flag(configured_rtt_ms, ping.mean_ms, abs_ms=v.rtt_tolerance_ms,
                    rel=v.rtt_tolerance_rel, stddev_ms=ping.stddev_ms or 0.0,
                    count=ping.received)
    if flag:
        reasons.append(flag)
    if ip.error:
        reasons.append(f"iperf3: {ip.error}")
    bps = ip.extra.get("receiver_bps")
    if rate_bps and bps and bps > rate_bps * 1.05:
        reasons.append(f"iperf3 {bps / 1e9:.3f} Gbit/s exceeds the configured rate")
    return {
        "rtt_ms_measured": ping.mean_ms, "rtt_ms_min": ping.min_ms, "rtt_ms_max": ping.max_ms,
        "rtt_ms_stddev": ping.stddev_ms, "ping_count": ping.count, "ping_loss": ping.loss,
        "iperf_bps": bps, "iperf_streams": v.iperf_streams,
        "iperf_retransmits": ip.extra.get("retransmits"), "iperf_srtt_ms": ip.extra.get("srtt_ms"),
        "flagged": bool(reasons), "flag_reason": "; ".join(reasons) or None, "started_at": started,
        "raw": json.dumps({"ping": pr.stdout[-2000:], "iperf3_argv": ir.argv,
                           "iperf3_error": ip.error}),
    }
