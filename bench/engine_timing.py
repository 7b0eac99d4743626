"""Does the userspace engine keep time on this small busy VM? Each timing idea on/off.

For each variant of the engine's timing (rig/realization/emul/engine/server.py `Timing`,
set through RIG_ENGINE_TIMING) and each RTT, on one client—router—server path:
  idle    ping (--pings at --ping-interval, 10 ms) through the engine; the engine's own lateness over it
  loaded  the same ping while iperf3 -P8 -R carries data through the path (--secs); the
          iperf3 throughput; the engine's lateness, CPU and run-queue wait over it
Variants run alternately (variant order rotates each repeat) so drift of this shared
machine falls on all of them; the table gives medians over --repeats and the JSON every
sample. The engine is restarted per variant and RTT (its counters start at zero).

    flock /tmp/rig-bench.lock .venv/bin/python bench/engine_timing.py [--repeats 3]
        [--rtts 10 20 60 120] [--variants base spin ...] [--secs 6] [--json out.json]

Goals (issue 11): loaded ping mean within max(0.3 ms, 1 %) of the RTT (+ the raw path's
own RTT); idle p99 lateness <= 1 ms; throughput at 120 ms not below `base` (today's).
Must not import reports or matplotlib.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulation import iperf3_json, median, ping, tune  # noqa: E402

from rig.description.linkstats import EmulStats, rtt_tolerance_s  # noqa: E402
from rig.description.profile import LinkProfile  # noqa: E402
from rig.orchestration.run import signals_as_exceptions  # noqa: E402
from rig.realization import netns  # noqa: E402
from rig.realization.emul.userspace import UserspaceBackend  # noqa: E402

VARIANTS = {
    "base": "spin_us=0,comp=1,rt=0,rt_all=0",       # the engine before issue 11
    "nocomp": "spin_us=0,comp=0,rt=0,rt_all=0",     # without adaptive wake-up compensation
    "spin": "spin_us=150,comp=1,rt=0,rt_all=0",     # wake early, finish the wait busy
    "rt": "spin_us=0,comp=1,rt=1,rt_all=0",         # releases from a SCHED_FIFO timer thread
    "spin+rt": "spin_us=150,comp=1,rt=1,rt_all=0",
    "rtall": "spin_us=0,comp=1,rt_all=1",   # the whole engine at SCHED_FIFO
    "spin+rtall": "spin_us=150,comp=1,rt_all=1",
    # session 4: ideas beside rtall (which takes the endpoints' CPU on 2 cores)
    "batch": "spin_us=0,comp=1,rt_all=1,batch_us=400",   # release all due within 0.4 ms
    "hold": "spin_us=0,comp=1,rt_all=1,hold_us=200",     # read every 0.2 ms while busy
    "batch+hold": "spin_us=0,comp=1,rt_all=1,batch_us=400,hold_us=200",
    "pin": "spin_us=0,comp=1,rt_all=1,cpu=1",            # engine pinned to CPU 1
    # batch+hold with both windows grown with the RTT tolerance (x4 at 120 ms)
    "scaled": "spin_us=0,comp=1,rt_all=1,batch_us=400,hold_us=200,scale=1",
    # session 6: scaled, plus the wake-up -> send lag learned and counted (the default)
    "lag": "spin_us=0,comp=1,rt_all=1,batch_us=400,hold_us=200,scale=1,lag=1",
    # session 7: lag, plus a PM QoS request for idle-exit latency 0 (the default)
    "qos": "spin_us=0,comp=1,rt_all=1,batch_us=400,hold_us=200,scale=1,lag=1,qos=1,twin_us=0",
    # session 8: qos, plus a standby waker 150 us behind the engine, off its CPU
    "twin": "spin_us=0,comp=1,rt_all=1,batch_us=400,hold_us=200,scale=1,lag=1,qos=1,"
            "twin_us=150",
}


def lateness(st: EmulStats, rtt_s: float) -> dict:
    lat = [d.lateness for d in st.directions if d.lateness and d.lateness.count]
    tol = rtt_tolerance_s(rtt_s)
    shares = [x.share_over(tol) for x in lat]
    busy = st.run_s if st.run_s is not None else (st.cpu_user_s or 0) + (st.cpu_sys_s or 0)
    return {"late_rtt_ms": sum(x.mean_s for x in lat) * 1e3,
            "p50_ms": max((x.p50_s or 0) for x in lat) * 1e3 if lat else None,
            "p99_ms": max((x.p99_s or 0) for x in lat) * 1e3 if lat else None,
            "max_ms": max(x.max_s for x in lat) * 1e3 if lat else None,
            "share_over_tol": max((s[0] for s in shares if s), default=None),
            "cpu": busy / st.wall_s if st.wall_s else None,
            "run_wait_ms": st.run_wait_s * 1e3 if st.run_wait_s is not None else None,
            "rt": st.extra.get("timing", {}).get("rt"),
            "dropped_queue": sum(d.dropped_queue or 0 for d in st.directions),
            "nfq_dropped": sum((d.nfq_queue_dropped or 0) + (d.nfq_user_dropped or 0)
                               for d in st.directions),
            "seen": sum(d.seen for d in st.directions)}


def one(net, be, variant: str, rtt_ms: float, a) -> dict:
    # every knob explicit: a later change of Timing's defaults must not move a variant
    os.environ["RIG_ENGINE_TIMING"] = ("batch_us=0,hold_us=0,cpu=-1,scale=0,lag=0,qos=0,"
                                       + VARIANTS[variant])
    be.apply(net.site, LinkProfile.symmetric(rtt_ms / 1e3))
    try:
        s0 = be.stats(net.site)
        idle = ping(net, a.pings, a.ping_interval)
        s1 = be.stats(net.site)
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(ping=ping(net, a.pings, a.ping_interval)))
        time.sleep(0)
        t.start()
        j = iperf3_json(net, ["-R", "-P", "8", "-t", str(a.secs)], a.secs, "-P8 -R")
        t.join()
        s2 = be.stats(net.site)
    finally:
        be.remove(net.site)
    return {"variant": variant, "rtt_ms": rtt_ms,
            "idle_ping_ms": idle["avg_ms"], "idle": lateness(s1.since(s0), rtt_ms / 1e3),
            "loaded_ping_ms": box["ping"]["avg_ms"],
            "loaded": lateness(s2.since(s1), rtt_ms / 1e3),
            "gbps": j["end"]["sum_received"]["bits_per_second"] / 1e9,
            "send_lag_us": (s2.extra.get("send_lag_s") or 0.0) * 1e6,
            "wake_comp_us": (s2.extra.get("wake_compensation_s") or 0.0) * 1e6,
            "retransmits": j["end"].get("sum_sent", {}).get("retransmits")}


def table(samples: list[dict], raw_ms: float, variants: list[str], rtts: list[float]) -> str:
    head = ("| RTT ms | variant | n | idle ping err ms | idle p50/p99/max lateness ms | "
            "loaded ping err ms | loaded late/RTT ms | loaded p99 ms | loaded >tol | "
            "engine CPU | run-queue wait ms | Gbit/s (-P8) | retransmits | queue drops |")
    out = [head, "|" + "---|" * 14]
    for r in rtts:
        for v in variants:
            xs = [s for s in samples if s["variant"] == v and s["rtt_ms"] == r]
            if not xs:
                continue
            m = lambda f, xs=xs: median([f(s) for s in xs if f(s) is not None]  # noqa: E731
                                        or [float("nan")])
            out.append(
                f"| {r:g} | {v} | {len(xs)} | {m(lambda s, r=r: s['idle_ping_ms'] - r - raw_ms):+.3f} | "
                f"{m(lambda s: s['idle']['p50_ms']):.3g}/{m(lambda s: s['idle']['p99_ms']):.3g}/"
                f"{m(lambda s: s['idle']['max_ms']):.3g} | "
                f"{m(lambda s, r=r: s['loaded_ping_ms'] - r - raw_ms):+.3f} | "
                f"{m(lambda s: s['loaded']['late_rtt_ms']):.3f} | "
                f"{m(lambda s: s['loaded']['p99_ms']):.3g} | "
                f"{m(lambda s: s['loaded']['share_over_tol']):.2%} | "
                f"{m(lambda s: s['loaded']['cpu']):.0%} | "
                f"{m(lambda s: s['loaded']['run_wait_ms']):.0f} | "
                f"{m(lambda s: s['gbps']):.2f} | {m(lambda s: s.get('retransmits')):.0f} | "
                f"{m(lambda s: s['loaded'].get('dropped_queue')):.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rtts", type=float, nargs="+", default=[10, 20, 60, 120])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--secs", type=int, default=6)
    ap.add_argument("--pings", type=int, default=200)
    ap.add_argument("--ping-interval", type=float, default=0.01,
                    help="seconds between pings (the path check's default: 0.05)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    be = UserspaceBackend(bypass_passthrough=False)
    prefix = netns.new_prefix()
    workdir = netns.STATE_DIR / prefix
    netns.write_state(prefix, {"kind": "run", "pid": os.getpid(), "what": "bench/engine_timing.py"})
    samples: list[dict] = []
    try:
        with signals_as_exceptions(), netns.path_net(prefix, "bench", 0, workdir=workdir) as net:
            tune(net)
            raw_ms = ping(net, a.pings, 0.01)["avg_ms"]
            for rep in range(a.repeats):
                order = a.variants[rep % len(a.variants):] + a.variants[:rep % len(a.variants)]
                for rtt in a.rtts:
                    for v in order:
                        s = one(net, be, v, rtt, a)
                        samples.append(s)
                        print(json.dumps(s), flush=True)
    finally:
        netns.drop_state(prefix)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"raw path RTT {raw_ms:.3f} ms (subtracted); medians of {a.repeats} repeats")
    print(table(samples, raw_ms, a.variants, a.rtts))
    if a.json:
        a.json.write_text(json.dumps({"raw_ms": raw_ms, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
