"""Pure judgement helpers for the netem VM results (unit-tested in test_netem_vm.py)."""
from __future__ import annotations

import math
import statistics

UDP_WIRE_OVERHEAD = 42      # Ethernet 14 + IPv4 20 + UDP 8 bytes per datagram
TCP_MSS = 1448              # payload of a full-size segment with timestamps (MTU 1500)
TCP_FRAME = 1514            # its Ethernet frame as TBF counts it


def _log_pmf(k: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_bounds(n: int, p: float, alpha: float = 1e-3) -> tuple[int, int]:
    """[lo, hi] holding Binomial(n, p) with probability >= 1 - alpha (alpha/2 per tail)."""
    if not 0 < p < 1 or n <= 0:
        raise ValueError("need n > 0 and 0 < p < 1")
    pmf = [math.exp(_log_pmf(k, n, p)) for k in range(n + 1)]
    lo, acc = 0, 0.0
    while acc + pmf[lo] <= alpha / 2:
        acc += pmf[lo]
        lo += 1
    hi, acc = n, 0.0
    while acc + pmf[hi] <= alpha / 2:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


def udp_wire_bps(payload_bps: float, payload_len: int) -> float:
    return payload_bps * (payload_len + UDP_WIRE_OVERHEAD) / payload_len


def tcp_wire_bps(goodput_bps: float) -> float:
    return goodput_bps * TCP_FRAME / TCP_MSS


def rtt_summary(rtts_ms: list[float]) -> dict:
    x = sorted(rtts_ms)
    n = len(x)
    return {"n": n, "mean_ms": statistics.fmean(x), "median_ms": statistics.median(x),
            "p10_ms": x[n // 10], "p90_ms": x[(9 * n) // 10], "min_ms": x[0], "max_ms": x[-1],
            "stdev_ms": statistics.pstdev(x)}


def netem_stats(qdiscs: dict, dev: str) -> dict:
    """The netem entry of `tc -s -j qdisc show dev DEV` as stored by guest.py."""
    for q in qdiscs.get(dev, []):
        if q.get("kind") == "netem":
            return q
    raise KeyError(f"no netem qdisc on {dev}")


_NETEM_COUNTS = ("seen", "released", "dropped_unattributed", "dropped_rate_limiter", "bytes")


def netem_run_totals(stats: list[dict]) -> dict[str, dict[str, int]]:
    """Per direction, what netem counted over a whole `rig run`, from its engine_stats rows
    (the stored EmulStats JSON, in the order taken; `bytes` from the netem entry of the
    stored `tc -s -j` digest). netem's counters run from the qdisc's creation and survive
    `tc qdisc replace` between steps, so each row holds the run so far; a counter that
    went down means the qdisc was rebuilt (a recovered step): the rows before it are
    added in (pure)."""
    totals: dict[str, dict[str, int]] = {}
    last: dict[str, dict[str, int]] = {}
    for s in stats:
        for d in s.get("directions") or []:
            name = d["direction"]
            q = next((x for x in (d.get("extra") or {}).get("qdiscs", [])
                      if x.get("kind") == "netem"), {})
            cur = {k: int((q if k == "bytes" else d).get(k) or 0) for k in _NETEM_COUNTS}
            prev = last.get(name)
            tot = totals.setdefault(name, dict.fromkeys(_NETEM_COUNTS, 0))
            reset = prev is not None and cur["seen"] < prev["seen"]
            for k in _NETEM_COUNTS:
                tot[k] += cur[k] if prev is None or reset else max(0, cur[k] - prev[k])
            last[name] = cur
    return totals
