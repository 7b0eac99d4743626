"""Does the userspace engine release packets before their deadline? (issue 31 item 2)

On one client—router—server path at --rtt (default 50 ms), with the engine's default
timing (RIG_ENGINE_TIMING unset, or as set by the caller):
  idle    --pings pings at --ping-interval (10 ms); ping's minimum / mean RTT
  loaded  the same ping beside `iperf3 -P4 -R` (--secs)
and, over each, the engine's own release-time vs deadline histogram: how many releases
were early (lateness < 0) and how many more than 50 us early, per direction. A round
trip can never be shorter than the path: ping min < RTT means something left early
(the engine's records show whether the engine saw it).

    flock /tmp/rig-bench.lock .venv/bin/python bench/early_release.py [--rtt 50]
        [--pings 1000] [--repeats 1] [--json out.json]

Must not import reports or matplotlib.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulation import iperf3_json, ping, tune  # noqa: E402

from rig.description.linkstats import LATENESS_EDGES_S, EmulStats  # noqa: E402
from rig.description.profile import LinkProfile  # noqa: E402
from rig.orchestration.run import signals_as_exceptions  # noqa: E402
from rig.realization import netns  # noqa: E402
from rig.realization.emul.userspace import UserspaceBackend  # noqa: E402


def early(st: EmulStats) -> dict:
    """Per direction: releases, early ones (< 0), more than 50 us early, most early."""
    out = {}
    n0 = LATENESS_EDGES_S.index(0.0) + 1          # bins below 0
    n50 = LATENESS_EDGES_S.index(-50e-6) + 1      # bins below -50 us
    for d in st.directions:
        lt = d.lateness
        if lt is None:
            continue
        out[d.direction] = {"released": lt.count, "early": sum(lt.hist[:n0]),
                            "early_50us": sum(lt.hist[:n50]),
                            "min_ms": None if getattr(lt, "min_s", None) is None
                            else lt.min_s * 1e3,                      # type: ignore[attr-defined]
                            "mean_ms": lt.mean_s * 1e3, "max_ms": lt.max_s * 1e3,
                            "hist": list(lt.hist)}
    return out


def one(net, be, a) -> dict:
    be.apply(net.site, LinkProfile.symmetric(a.rtt / 1e3))
    try:
        s0 = be.stats(net.site)
        idle = ping(net, a.pings, a.ping_interval)
        s1 = be.stats(net.site)
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(ping=ping(net, a.pings, a.ping_interval)))
        t.start()
        iperf3_json(net, ["-R", "-P", "4", "-t", str(a.secs)], a.secs, "-P4 -R")
        t.join()
        s2 = be.stats(net.site)
    finally:
        be.remove(net.site)
    return {"rtt_ms": a.rtt, "idle_ping": idle, "idle_engine": early(s1.since(s0)),
            "loaded_ping": box["ping"], "loaded_engine": early(s2.since(s1))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt", type=float, default=50.0, help="ms")
    ap.add_argument("--pings", type=int, default=1000)
    ap.add_argument("--ping-interval", type=float, default=0.01)
    ap.add_argument("--secs", type=int, default=12, help="iperf3 seconds (>= the pings)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    be = UserspaceBackend(bypass_passthrough=False)
    prefix = netns.new_prefix()
    workdir = netns.STATE_DIR / prefix
    netns.write_state(prefix, {"kind": "run", "pid": os.getpid(), "what": "bench/early_release.py"})
    samples: list[dict] = []
    try:
        with signals_as_exceptions(), netns.path_net(prefix, "bench", 0, workdir=workdir) as net:
            tune(net)
            raw = ping(net, 200, 0.01)
            for _ in range(a.repeats):
                s = one(net, be, a)
                samples.append(s)
                print(json.dumps({k: v for k, v in s.items()}), flush=True)
    finally:
        netns.drop_state(prefix)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"raw path RTT min {raw['min_ms']:.3f} avg {raw['avg_ms']:.3f} ms")
    for s in samples:
        for k in ("idle", "loaded"):
            e = s[f"{k}_engine"]
            print(f"{k}: ping min {s[f'{k}_ping']['min_ms']:.3f} avg {s[f'{k}_ping']['avg_ms']:.3f} ms"
                  f" (path {s['rtt_ms']:g} ms); engine early/>50us early/released: "
                  + ", ".join(f"{d} {v['early']}/{v['early_50us']}/{v['released']}"
                              f" min {v['min_ms'] if v['min_ms'] is None else round(v['min_ms'], 3)} ms"
                              for d, v in e.items()))
    if a.json:
        a.json.write_text(json.dumps({"raw": raw, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
