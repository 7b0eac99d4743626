"""Issue 42: the engine with kernel arrival stamps and the send gate ("new") against the
engine as it was ("old": RIG_ENGINE_TIMING stamp=0,lead=0: kernel stamps only when some
socket asked for receive timestamps, otherwise stamped at the read; released at the
decision), side by side in one run, alternating, on one client—router—server path.

Both run with the wire audit (tcx egress, independent of the engine): for "old" the
ingress program writes only the audit's mark, not skb->tstamp. Per RTT (10, 50, 120 ms)
and repeat, for each engine in turn (the order swaps every repeat):
  idle    ping (--pings at 20 ms), a 20 Mbit/s iperf3 stream's mean srtt (TCP RTT)
  loaded  iperf3 -P 8 for --secs with the same ping beside it; the -P 8 mean srtt
and from the audit of each phase: packets released early (< 0 on the wire), mean and
p99 lateness per direction; the engine's CPU share under load and per Gbit/s.
Prints a markdown table of medians over --repeats (and every sample with --json).

    flock /tmp/rig-bench.lock .venv/bin/python bench/engine_stamps.py [--repeats 3]
        [--rtts 10 50 120] [--secs 6] [--pings 100] [--json out.json]
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

from rig.description.linkstats import EmulStats, Lateness, lateness_bin
from rig.description.profile import LinkProfile
from rig.orchestration.run import signals_as_exceptions
from rig.realization import netns
from rig.realization.emul.choose import make_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulation import iperf3_json, median, ping, tune  # noqa: E402

VARIANTS = {"old": "stamp=0,lead=0", "new": ""}


def wire(st: EmulStats, prev: EmulStats) -> dict:
    """The audit between two snapshots: early packets, mean per round trip, worst p99."""
    d = st.since(prev)
    ws: list[Lateness] = [x.wire for x in d.directions if x.wire is not None and x.wire.count]
    if not ws:
        return {}
    return {"pkts": sum(w.count for w in ws),
            "early": sum(sum(w.hist[:lateness_bin(0.0)]) for w in ws),
            "mean_rt_ms": sum(w.mean_s for w in ws) * 1e3,
            "p99_ms": max((w.p99_s or 0.0) for w in ws) * 1e3,
            "eng_mean_rt_ms": sum(x.lateness.mean_s for x in d.directions
                                  if x.lateness and x.lateness.count) * 1e3,
            "read_stamped": sum(int(x.extra.get("read_stamped", 0)) for x in d.directions)}


def cpu_s(st: EmulStats) -> float:
    return (st.cpu_user_s or 0.0) + (st.cpu_sys_s or 0.0)


def one(net, be, variant: str, rtt_ms: float, a) -> dict:
    os.environ["RIG_ENGINE_TIMING"] = VARIANTS[variant]
    rtt = rtt_ms / 1e3
    be.apply(net.site, LinkProfile.symmetric(rtt))
    out: dict = {"variant": variant, "rtt_ms": rtt_ms}
    try:
        time.sleep(0.5)
        s0 = be.stats(net.site)
        out["arrival_stamp"] = s0.extra.get("arrival_stamp")
        p = ping(net, a.pings, 0.02)
        j = iperf3_json(net, ["-P", "1", "-b", "20M", "-t", "3"], 3, "idle tcp")
        rtts = [s["sender"]["mean_rtt"] / 1e3 for s in j["end"]["streams"] if "sender" in s]
        s1 = be.stats(net.site)
        out["idle"] = {"ping_avg_err_ms": p["avg_ms"] - rtt_ms,
                       "ping_min_err_ms": p["min_ms"] - rtt_ms,
                       "tcp_err_ms": sum(rtts) / len(rtts) - rtt_ms, **wire(s1, s0)}
        box: dict = {}

        def pings() -> None:
            time.sleep(1.5)
            box["ping"] = ping(net, a.pings, 0.02)
        t = threading.Thread(target=pings)
        t0 = time.monotonic()
        t.start()
        j = iperf3_json(net, ["-P", "8", "-t", str(a.secs)], a.secs, "-P8")
        t.join()
        s2 = be.stats(net.site)
        wall = time.monotonic() - t0
        end = j["end"]
        rtts = [s["sender"]["mean_rtt"] / 1e3 for s in end["streams"] if "sender" in s]
        gbps = end["sum_received"]["bits_per_second"] / 1e9
        cpu = (cpu_s(s2) - cpu_s(s1)) / wall
        p = box.get("ping", {"avg_ms": float("nan"), "min_ms": float("nan")})
        out["loaded"] = {"ping_avg_err_ms": p["avg_ms"] - rtt_ms,
                         "ping_min_err_ms": p["min_ms"] - rtt_ms,
                         "tcp_err_ms": sum(rtts) / len(rtts) - rtt_ms, "gbps": gbps,
                         "cpu": cpu, "cpu_per_10g": cpu / max(gbps, 1e-9) * 10,
                         **wire(s2, s1)}
    finally:
        be.remove(net.site)
    return out


KEYS = [("ping_avg_err_ms", "ping avg err ms", "{:+.3f}"),
        ("ping_min_err_ms", "ping min err ms", "{:+.3f}"),
        ("tcp_err_ms", "TCP srtt err ms", "{:+.3f}"),
        ("early", "early pkts (audit)", "{:.0f}"),
        ("pkts", "audited pkts", "{:.0f}"),
        ("mean_rt_ms", "wire lateness/RT ms", "{:.3f}"),
        ("eng_mean_rt_ms", "engine's own/RT ms", "{:.3f}"),
        ("p99_ms", "wire p99 <= ms", "{:.3g}"),
        ("read_stamped", "stamped at read", "{:.0f}"),
        ("gbps", "-P8 Gbit/s", "{:.2f}"),
        ("cpu", "engine CPU (cores)", "{:.2f}"),
        ("cpu_per_10g", "CPU per 10 Gbit/s", "{:.2f}")]


def table(samples: list[dict], rtts: list[float]) -> str:
    lines = ["| RTT | load | metric | old | new |", "|---|---|---|---|---|"]
    for rtt in rtts:
        for phase in ("idle", "loaded"):
            for key, name, fmt in KEYS:
                cells = []
                for v in VARIANTS:
                    xs = [s[phase][key] for s in samples if s["variant"] == v
                          and s["rtt_ms"] == rtt and key in s.get(phase, {})
                          and s[phase][key] == s[phase][key]]
                    cells.append(fmt.format(median(xs)) if xs else "-")
                if cells != ["-", "-"]:
                    lines.append(f"| {rtt:g} ms | {phase} | {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rtts", type=float, nargs="+", default=[10.0, 50.0, 120.0])
    ap.add_argument("--secs", type=int, default=6)
    ap.add_argument("--pings", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    be = make_backend("userspace")
    prefix = netns.new_prefix()
    workdir = netns.STATE_DIR / prefix
    netns.write_state(prefix, {"kind": "run", "pid": os.getpid(),
                               "what": "bench/engine_stamps.py"})
    samples: list[dict] = []
    try:
        with signals_as_exceptions(), netns.path_net(prefix, "bench", 0, workdir=workdir) as net:
            tune(net)
            for r in range(a.repeats):
                for rtt in a.rtts:
                    order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
                    for v in order:
                        s = one(net, be, v, rtt, a)
                        samples.append(s)
                        print(json.dumps(s), flush=True)
    finally:
        netns.drop_state(prefix)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nmedians of {a.repeats} repeats, old/new alternating "
          f"(kernel {Path('/proc/sys/kernel/osrelease').read_text().strip()})")
    print(table(samples, a.rtts))
    if a.json:
        a.json.write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
