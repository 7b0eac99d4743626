"""Path validation: does the path have the configured RTT and what capacity does it carry?

`ping` gives RTT mean/min/max/stddev and echo loss; `iperf3 -R` (server sends, as in a
download) gives goodput, retransmits and the sender's srtt. Parsers are pure and tested
on captured output. Must not import orchestration or reports.

Capacity is measured past slow start: iperf3 runs max(iperf_duration, 40 x RTT) after an
omitted start of max(1 s, 15 x RTT) (`-O`). In the rig's own namespaces (RTT >= 1 ms) the TCP buffer
ceilings (tcp_rmem/tcp_wmem, per namespace) are raised to CAPACITY_BUFFER for that run
only and the scenario's put back before any transfer, so autotuning does not limit it;
elsewhere the socket buffers are as large as the host allows (`-w` net.core.{r,w}mem_max
when that exceeds what autotuning would reach). A result that still sits at the streams x
window / RTT bound is a window, not a capacity, stored as "not measured" (capacity_bps NULL,
capacity_note why). Where the omitted start was short of the ramp (a fast path at a long
RTT: 8 streams reached 19.7 Gbit/s through the engine at 120 ms only in their third
second), the measured seconds still in slow start (each far below the rest) are left out
and the capacity is the mean of those after them (raw.ramp_seconds_dropped says how many);
with fewer than two seconds left it is "not measured" too.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any, Iterator

from rig.process import proc
from rig.realization import tuning
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


OMIT_RTTS = 15          # slow start (BBR startup, cubic) is over within ~15 RTTs here
LONG_RTTS = 40          # then measure for >= 40 RTTs
WINDOW_NEAR = 0.85      # goodput at >= 85 % of streams x window / RTT: the window limited it
W_ADVERTISED = 1.3      # a `-w W` run carries up to ~1.3 W per stream (measured, see below)
CAPACITY_GOAL_BPS = 20e9    # streams enough that the windows allow this (or 2 x the rate)
MAX_CAPACITY_STREAMS = 32
CAPACITY_BUFFER = 256 * 2**20   # tcp_rmem/tcp_wmem max in the rig's namespaces, capacity run only
BUFFER_KEYS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
RAMPING = 0.5           # first measured second below half the rest's median: slow start
IW_BYTES = 10 * 1448    # initial window the ramp starts from


def iperf3_argv(addr: str, port: int, streams: int | str, seconds: float, *, omit: int = 0,
                window: int | str | None = None) -> list[str]:
    return (["iperf3", "-c", addr, "-p", str(port), "-J", "--get-server-output", "-R",
             "-P", str(streams), "-t", f"{seconds:g}", "--connect-timeout", "5000"]
            + (["-O", str(omit)] if omit else []) + (["-w", str(window)] if window else []))


def capacity_timing(rtt_ms: float | None, min_seconds: float) -> tuple[int, int]:
    """(seconds measured, seconds omitted) for a capacity run at this RTT."""
    rtt = (rtt_ms or 0.0) / 1e3
    return (max(math.ceil(min_seconds), math.ceil(LONG_RTTS * rtt)),
            max(1, math.ceil(OMIT_RTTS * rtt)))


def capacity_window(autotune_window: int | None, core_rmem: int | None,
                    core_wmem: int | None) -> tuple[int | None, int | None]:
    """(largest per-stream window the run can use, `-w` to pass or None): the host-wide
    socket buffer limit when it beats the namespace's autotuning maximum, else
    autotuning. The kernel doubles a SO_RCVBUF request but advertises only part of it
    (measured here: -P4 -w 16MiB carried 5.8 Gbit/s at 120 ms, 1.3 x 4 x 16 MiB / RTT,
    twice: 5.88 and 5.67 in one quick run), so a `-w W` window counts as 1.3 W."""
    host = min(core_rmem, core_wmem) if core_rmem and core_wmem else None
    if host and (autotune_window is None or W_ADVERTISED * host > autotune_window):
        return int(W_ADVERTISED * host), host
    return autotune_window, None


def capacity_streams(streams: int, window: int | None, rtt_ms: float | None,
                     rate_bps: float | None = None) -> int:
    """Streams for the capacity run: the scenario's, or more when its windows could not
    carry CAPACITY_GOAL_BPS (2 x the rate on a rate-limited path) at this RTT, so that a
    window-bound host still measures the path (at most MAX_CAPACITY_STREAMS)."""
    if not window or not rtt_ms or rtt_ms < 1.0:
        return streams
    goal = min(CAPACITY_GOAL_BPS, 2 * rate_bps) if rate_bps else CAPACITY_GOAL_BPS
    need = math.ceil(goal * rtt_ms / 1e3 / (window * 8))
    return max(streams, min(need, MAX_CAPACITY_STREAMS))


def window_limited(bps: float | None, streams: int, window: int | None,
                   rtt_ms: float | None) -> str | None:
    """Why a goodput is no capacity (it sits at the window bound), or None."""
    if not bps or not window or not rtt_ms or rtt_ms < 1.0:
        return None
    bound = streams * window * 8 / (rtt_ms / 1e3)
    if bps >= WINDOW_NEAR * bound:
        return (f"not measured: iperf3 {bps / 1e9:.3g} Gbit/s is {bps / bound:.0%} of its "
                f"window bound {streams}x{window / 2**20:.3g} MiB/{rtt_ms:g} ms = "
                f"{bound / 1e9:.3g} Gbit/s")
    return None


def capacity_buffers(current: dict[str, str | None]) -> dict[str, str]:
    """The sysctls that raise a namespace's tcp_rmem/tcp_wmem maximum to CAPACITY_BUFFER
    (min and default kept); keys already that large, or unreadable, are left out."""
    out = {}
    for k in BUFFER_KEYS:
        parts = (current.get(k) or "").split()
        if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) < CAPACITY_BUFFER:
            out[k] = f"{parts[0]} {parts[1]} {CAPACITY_BUFFER}"
    return out


@contextlib.contextmanager
def large_buffers(namespaces: tuple[str, ...]) -> Iterator[None]:
    """Raise the TCP buffer ceilings of the rig's own namespaces for the capacity run and
    put the previous values (the scenario's tuning) back afterwards, also on error."""
    done: list[tuple[str, dict[str, str]]] = []
    try:
        for ns in namespaces:
            now = tuning.read(BUFFER_KEYS, ns)
            want = capacity_buffers(now)
            done.append((ns, {k: v for k, v in now.items() if k in want and v}))
            tuning.write_ns(ns, want)
        yield
    finally:
        for ns, old in reversed(done):
            tuning.write_ns(ns, old)


def ramp_s(rtt_ms: float) -> float:
    """How long slow start can take at this RTT: doubling per round trip from the
    initial window to CAPACITY_GOAL_BPS x RTT (1.7 s at 120 ms, 0.24 s at 20 ms)."""
    rtt = rtt_ms / 1e3
    return rtt * math.log2(max(2.0, CAPACITY_GOAL_BPS / 8 * rtt / IW_BYTES))


def ramp_seconds(intervals_bps: list[float], rtt_ms: float | None, omit_s: float) -> int:
    """How many of the measured (not omitted) per-second rates are still slow start:
    leading seconds each below RAMPING x the median of those after it. Only where the
    omitted start was shorter than twice the ramp could take: past that, a rise is this
    shared machine's noise (seen: 9.2 -> 13.1 Gbit/s between the halves of a 3 s run at
    10 ms), not slow start, whose rate doubles every round trip, so a second still in it
    sits far below the rest."""
    if not rtt_ms or rtt_ms < 1.0 or omit_s >= 2 * ramp_s(rtt_ms):
        return 0
    n = 0
    while len(intervals_bps) - n >= 2 and \
            intervals_bps[n] < RAMPING * statistics.median(intervals_bps[n + 1:]):
        n += 1
    return n


def still_ramping(intervals_bps: list[float], rtt_ms: float | None,
                  omit_s: float) -> str | None:
    """Why a capacity run is no capacity because slow start lasted (nearly) all of it:
    fewer than two measured seconds after it, or None (rig.orchestration.pathcheck.
    ramp_seconds)."""
    n = ramp_seconds(intervals_bps, rtt_ms, omit_s)
    if not n or len(intervals_bps) - n >= 2:
        return None
    first, rest = intervals_bps[0], statistics.median(intervals_bps[1:])
    return (f"not measured: iperf3 still in slow start ({first / 1e9:.3g} Gbit/s in "
            f"the first measured second, then {rest / 1e9:.3g})")


def _intervals(stdout: str) -> list[float]:
    try:
        ivs = json.loads(stdout).get("intervals") or []
        return [float(i["sum"]["bits_per_second"]) for i in ivs
                if not i["sum"].get("omitted")]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


WINDOW_KEYS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_adv_win_scale")


def capacity_shown(client_ns: str | None, own_ns: tuple[str, ...], addr: str, port: int,
                   streams: int, rtt_ms: float | None, min_seconds: float,
                   local: bool = True) -> list[tuple[list[str], str]]:
    """The commands a capacity run executes, in order, as `rig plan` shows them (argv,
    note): values known only then as placeholders (validate_path runs them)."""
    secs, omit = capacity_timing(rtt_ms, min_seconds)
    big = own_ns if local and rtt_ms is not None and rtt_ms >= 1.0 else ()
    out: list[tuple[list[str], str]] = []
    for ns in big:                         # large_buffers
        out += [(tuning.read_argv(ns, k), "") for k in BUFFER_KEYS]
        out += [(tuning.write_argv(ns, k, f"<min and default kept> {CAPACITY_BUFFER}"),
                 "   # where below it") for k in BUFFER_KEYS]
    if local and client_ns:                # _window_here
        out += [(tuning.read_argv(client_ns, k), "") for k in WINDOW_KEYS]
    p: Any = streams if rtt_ms is None or rtt_ms < 1.0 or not local else "<streams>"
    out.append((iperf3_argv(addr, port, p, secs, omit=omit),
                "" if p == streams else f"   # -P {streams}, more where the windows "
                f"cannot carry {CAPACITY_GOAL_BPS / 1e9:g} Gbit/s"))
    if local:
        out.append((iperf3_argv(addr, port, p, secs, omit=omit, window="<window>"),
                    "   # instead, where net.core.{r,w}mem_max beats the namespace's "
                    "tcp_rmem"))
    for ns in reversed(big):
        out += [(tuning.write_argv(ns, k, "<before>"), "   # the scenario's again")
                for k in BUFFER_KEYS]
    return out


def _window_here(client_ns: str | None) -> tuple[int | None, int | None]:
    ns = tuning.read(WINDOW_KEYS, client_ns)
    host = tuning.read(["net.core.rmem_max", "net.core.wmem_max"], None)
    rmem = ns.get("net.ipv4.tcp_rmem")
    scale = ns.get("net.ipv4.tcp_adv_win_scale")
    auto = tuning.window_bytes(int(rmem.split()[2]) if rmem else None,
                               int(scale) if scale else None)
    def num(k: str) -> int | None:
        v = host.get(k)
        return int(v) if v else None
    return capacity_window(auto, num("net.core.rmem_max"), num("net.core.wmem_max"))


def rtt_flag(configured_ms: float | None, measured_ms: float | None, *,
             abs_ms: float, rel: float, stddev_ms: float = 0.0, count: int = 1,
             jittered: bool = True) -> str | None:
    """Why the step is flagged, or None: |measured - configured| > max(abs,
    rel*configured, 3 standard errors of the mean). The last term is for configured
    jitter (`jittered`): 10 pings with 2 ms jitter cannot pin a mean to 0.3 ms. Without
    jitter it is left out: there one slow echo (seen: a 120 ms step's 22 ms outlier,
    stddev 5.2 ms) would widen the tolerance to 3.5 ms and hide the very delay it adds."""
    if configured_ms is None:
        return None
    if measured_ms is None:
        return "no RTT measured (ping lost every echo)"
    se = 3.0 * (stddev_ms or 0.0) / max(count, 1) ** 0.5 if jittered else 0.0
    tol = max(abs_ms, rel * configured_ms, se)
    if abs(measured_ms - configured_ms) > tol:
        return (f"RTT {measured_ms:.3f} ms vs configured {configured_ms:.3f} ms "
                f"(tolerance {tol:.3f} ms)")
    return None


def rtt_independent(profile) -> bool:
    """Whether a path's capacity is the same at every RTT of its sweep: nothing on it
    but a delay line and a rate. The delay line is sized to the bandwidth-delay product
    at each RTT (netem `limit`, the engine's queue: Direction.bdp_packets), so neither
    caps a longer round trip; loss (Mathis: rate ~ 1/(RTT sqrt(p))), duplication,
    jitter and a configured queue all make it depend on the RTT."""
    if profile is None:
        return False
    return all(not (d.mean_loss or d.duplicate or d.jitter_s or d.queue_pkts is not None)
               for d in (profile.forward, profile.reverse))


def delayed(profile) -> bool:
    """Does the emulation hold packets at all? A step without delay is forwarded by the
    kernel alone with the userspace engine (no NFQUEUE rule for it): measured here,
    quick.yaml's 0 ms capacity was 38-51 Gbit/s against 15-20 at 20-120 ms through the
    engine, so the two never share a capacity (netem, which keeps its qdisc at 0 ms, is
    treated alike; not measured)."""
    return profile is not None and (profile.forward.delay_s > 0 or profile.reverse.delay_s > 0)


def capacity_source(steps, step, policy: str) -> int | None:
    """The index of the step whose capacity run serves `step` (validation.capacity:
    once), or None: `step` runs its own. Under `once` a path whose capacity does not
    depend on the RTT (rtt_independent) measures at its first delayed step, and at a step
    without delay of its own (`delayed`); the path's other steps reuse the figure of the
    first one of their kind."""
    if policy != "once" or not rtt_independent(step.profile):
        return None
    first = min(s.index for s in steps if s.path_index == step.path_index
                and delayed(s.profile) == delayed(step.profile))
    return None if first == step.index else first


RECHECK_PAUSE_S = 1.0


def _ping_until_held(client_ns, server_addr, configured_rtt_ms, v, jitter_ms, host,
                     rundir) -> tuple[Any, PingStats, str | None, list[dict]]:
    """Ping the path; while its RTT is off (rtt_flag), ping again after a pause, up to
    `v.rtt_rechecks` more times. Returns the last ping (its process result, stats and
    flag) and every attempt (mean, min, max ms, flag), the last included: a ping off
    once and on the RTT at the next is a transient (a shared host's steal, cross traffic
    on a real loop) that the row keeps; one off every time flags the step."""
    attempts: list[dict] = []
    for n in range(1 + max(0, getattr(v, "rtt_rechecks", 0))):
        if n:
            time.sleep(RECHECK_PAUSE_S)
        pr = proc.run(ping_argv(server_addr, v.ping_count, v.ping_interval_s),
                      netns=client_ns, timeout=v.ping_count * (v.ping_interval_s + 2.0) + 10,
                      host=host, rundir=rundir)
        try:
            ping = parse_ping(pr.stdout)
        except ValueError:
            ping = PingStats(v.ping_count, 0, None, None, None, None)
        flag = rtt_flag(configured_rtt_ms, ping.mean_ms, abs_ms=v.rtt_tolerance_ms,
                        rel=v.rtt_tolerance_rel, stddev_ms=ping.stddev_ms or 0.0,
                        count=ping.received, jittered=jitter_ms > 0)
        attempts.append({"mean_ms": ping.mean_ms, "min_ms": ping.min_ms,
                         "max_ms": ping.max_ms, "flag": flag})
        if not flag or ping.mean_ms is None:
            break
    return pr, ping, flag, attempts


def retaken(raw: str | None) -> str | None:
    """What a row's earlier pings said, when its ping was taken again (None if not)."""
    try:
        attempts = json.loads(raw or "{}").get("ping_attempts") or []
    except (ValueError, AttributeError):
        return None
    if len(attempts) < 2:
        return None
    off = ", ".join(f"{a['mean_ms']:.3f}" for a in attempts[:-1] if a.get("mean_ms") is not None)
    return f"ping taken {len(attempts)} times (earlier means {off} ms off the RTT)"


def validate_path(*, client_ns: str | None, server_addr: str, iperf_port: int,
                  configured_rtt_ms: float | None, v, rate_bps: float | None = None,
                  jitter_ms: float = 0.0, host=None, rundir: str | None = None,
                  own_ns: tuple[str, ...] = (), ping_only: str | None = None,
                  reused: tuple[int, float] | None = None, escalate: str | None = None,
                  never_capacity: bool = False) -> dict:
    """Run ping and iperf3 from the client side (on `host` when the client is remote);
    return a validations row (partial). `own_ns`: the rig's own client and server
    namespaces, whose buffer ceilings the capacity run may raise (never the host's).
    `ping_only`: why this check runs no iperf3 (its capacity_note), unless the ping flags
    the step or `escalate` says why it must run anyway (the engine late meanwhile);
    `reused`: (step number, bps) of the capacity run that serves this step instead.
    `never_capacity`: no iperf3 at all, flagged or not (an external endpoint: no iperf3
    server runs at a far end the rig does not own)."""
    started = time.time()
    started_mono = time.monotonic()
    pr, ping, flag, attempts = _ping_until_held(
        client_ns, server_addr, configured_rtt_ms, v, jitter_ms, host, rundir)
    reasons = []
    if flag:
        reasons.append(flag)
    escalated = (flag and "the ping flagged the step") or escalate
    if ping_only and (never_capacity or not escalated):
        return {
            "rtt_ms_measured": ping.mean_ms, "rtt_ms_min": ping.min_ms,
            "rtt_ms_max": ping.max_ms, "rtt_ms_stddev": ping.stddev_ms,
            "ping_count": ping.count, "ping_loss": ping.loss, "iperf_bps": None,
            "iperf_streams": None, "capacity_bps": reused[1] if reused else None,
            "capacity_note": None if reused else f"not measured: {ping_only}",
            "iperf_retransmits": None, "iperf_srtt_ms": None, "flagged": bool(reasons),
            "flag_reason": "; ".join(reasons) or None, "started_at": started,
            "raw": json.dumps({"ping": pr.stdout[-2000:], "capacity_run": False,
                               "ping_attempts": attempts,
                               "capacity_from_step": reused[0] if reused else None,
                               "ping_s": round(time.monotonic() - started_mono, 3)})}
    secs, omit = capacity_timing(configured_rtt_ms, v.iperf_seconds)
    t0 = time.monotonic()
    # at ~0 ms no window limits the run: leave the scenario's buffers (larger ones only
    # queue more in the stack there)
    long_path = configured_rtt_ms is not None and configured_rtt_ms >= 1.0
    with large_buffers(own_ns if host is None and long_path else ()):
        # the window the capacity run may use: this host's limits (a remote client: its own)
        window, w_arg = _window_here(client_ns) if host is None else (None, None)
        streams = capacity_streams(v.iperf_streams, window, configured_rtt_ms, rate_bps)
        ir = proc.run(iperf3_argv(server_addr, iperf_port, streams, secs, omit=omit,
                                  window=w_arg), netns=client_ns, timeout=secs + omit + 30,
                      host=host, rundir=rundir)
    iperf_s = time.monotonic() - t0
    ip = parse_iperf3(ir.stdout, ir.returncode)
    if ip.error:
        reasons.append(f"iperf3: {ip.error}")
    bps = ip.extra.get("receiver_bps")
    if rate_bps and bps and bps > rate_bps * 1.05:
        reasons.append(f"iperf3 {bps / 1e9:.3f} Gbit/s exceeds the configured rate")
    ivs = _intervals(ir.stdout)
    rtt_for_window = ping.mean_ms if ping.mean_ms is not None else configured_rtt_ms
    ramp = ramp_seconds(ivs, rtt_for_window, omit)
    cap = statistics.fmean(ivs[ramp:]) if ramp and len(ivs) - ramp >= 2 else bps
    note = ("not measured: iperf3 failed" if not bps else
            still_ramping(ivs, rtt_for_window, omit)
            or window_limited(cap or bps, streams, window, rtt_for_window))
    return {
        "rtt_ms_measured": ping.mean_ms, "rtt_ms_min": ping.min_ms, "rtt_ms_max": ping.max_ms,
        "rtt_ms_stddev": ping.stddev_ms, "ping_count": ping.count, "ping_loss": ping.loss,
        "iperf_bps": bps, "iperf_streams": streams,
        "capacity_bps": None if note else cap, "capacity_note": note,
        "iperf_retransmits": ip.extra.get("retransmits"), "iperf_srtt_ms": ip.extra.get("srtt_ms"),
        "flagged": bool(reasons), "flag_reason": "; ".join(reasons) or None, "started_at": started,
        "raw": json.dumps({"ping": pr.stdout[-2000:], "ping_attempts": attempts,
                           "iperf3_argv": ir.argv,
                           "iperf3_error": ip.error, "iperf3_window_bytes": window,
                           "iperf3_intervals_gbps": [round(x / 1e9, 3) for x in ivs],
                           "ramp_seconds_dropped": ramp, "capacity_run": True,
                           "capacity_run_because": escalated if ping_only else None,
                           "capacity_s": round(iperf_s, 3),
                           "ping_s": round(t0 - started_mono, 3)}),
    }
