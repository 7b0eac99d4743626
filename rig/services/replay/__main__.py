"""`python -m rig.services.replay`: the replay client process (tool `replay`).

Reads the ROOT file's layout from a local path (the file the server serves), makes the
plan of one caching mode, executes it against the URL and prints one JSON line: wall_s,
requests, round_trips, bytes_useful, bytes_wire, bytes_received, cpu_user_s, cpu_sys_s
(the replay phase only), checksum and expected_checksum, transport. Exit 0 ok, 1 failed,
2 bad usage. Planning and the checksum of the local copy are outside wall_s.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from rig.errors import RigError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rig.services.replay")
    ap.add_argument("--url", required=True)
    ap.add_argument("--file", required=True, help="local path of the served ROOT file")
    ap.add_argument("--mode", required=True, choices=["application", "storage", "lazy-download"])
    ap.add_argument("--library", default="xrootd", choices=["xrootd", "davix", "curl"])
    ap.add_argument("--branches", type=float, default=1.0, help="fraction of the bytes (0..1]")
    ap.add_argument("--cache-size", type=int)
    ap.add_argument("--segment", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args(argv)
    from rig.description.rootfile import layout, plan, select
    from rig.services.replay import run
    from rig.services.tools.replay import TRANSPORT, plan_options
    try:
        t0 = time.monotonic()
        lay = layout.load(a.file)
        p = plan.make(lay, select.by_percent(lay, a.branches * 100.0, seed=a.seed), a.mode,
                      plan_options(a.mode, a.library, a.cache_size, a.segment))
        plan_s = time.monotonic() - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        r = run.replay(p, a.url, timeout=a.timeout)
        expected = run.expected_checksum(p, a.file)
    except RigError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 1
    out = {"mode": r.mode, "library": a.library, "transport": TRANSPORT[a.library],
           "wall_s": r.wall_s, "open_s": r.open_s, "requests": r.requests, "round_trips": r.round_trips,
           "bytes_useful": r.bytes_useful, "bytes_wire": r.bytes_wire,
           "bytes_received": r.bytes_received, "cpu_user_s": r.cpu_user_s,
           "cpu_sys_s": r.cpu_sys_s, "checksum": r.checksum, "expected_checksum": expected,
           "branches_read": len(p.branches), "branches_total": len(lay.branches),
           "clusters": p.clusters, "plan_s": round(plan_s, 4),
           "setup_cpu_s": round(ru.ru_utime + ru.ru_stime, 4),
           "round_s_max": max(r.round_s) if r.round_s else 0.0,
           "segments": sum(1 for x in p.rounds if x.phase == "segment")}
    print(json.dumps(out))
    return 0 if r.checksum == expected else 1


if __name__ == "__main__":
    sys.exit(main())
