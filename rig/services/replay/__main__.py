"""`python -m rig.services.replay`: the replay client process (tool `replay`).

Reads the ROOT file's layout from a local path (the file the server serves), makes the
plan of one caching mode, executes it against the URL and prints one JSON line: wall_s,
requests, round_trips, bytes_useful, bytes_wire, bytes_received, cpu_user_s, cpu_sys_s
and cpu_wait_s (runnable but waiting for a CPU: the replay phase only), round_s and
round_bytes, checksum and expected_checksum, transport. Exit 0 ok, 1 failed, 2 bad usage. Planning and the checksum of the local copy are outside wall_s.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from rig.errors import RigError
from rig.description.libraries import READ_LIBRARIES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rig.services.replay")
    ap.add_argument("--url", required=True)
    ap.add_argument("--file", required=True, help="local path of the served ROOT file")
    ap.add_argument("--mode", required=True, choices=["application", "storage", "lazy-download"])
    ap.add_argument("--library", default="xrootd", choices=list(READ_LIBRARIES))
    ap.add_argument("--branches", type=float, default=1.0, help="fraction of the bytes (0..1]")
    ap.add_argument("--trigger-factor", type=int, default=0,
                    help="IOExerciser's trigger factor: every N-th event reads every branch "
                         "(0: off)")
    ap.add_argument("--cache-size", type=int)
    ap.add_argument("--segment", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--shadow-dir", help="lazy-download: write the segments into an unlinked "
                    "shadow file in this directory, as CMSSW's LocalCacheFile (default: "
                    "keep them in memory)")
    ap.add_argument("--ca-dir", help="https:// and roots://: the only CA trusted (hashed "
                    "directory; libdavix, XrdCl through X509_CERT_DIR)")
    ap.add_argument("--ca-file", help="https:// with libcurl: the only CA trusted (PEM)")
    ap.add_argument("--http-engine", default="helper", choices=["helper", "python"],
                    help="davix/curl: the native helper (libdavix/libcurl, default) or the "
                         "Python http.client baseline (overhead measurements, tests)")
    a = ap.parse_args(argv)
    from rig.description.rootfile import layout, plan, select
    from rig.services.replay import http_helper, run
    from rig.services.tools.replay import TRANSPORT, plan_options
    try:
        t0 = time.monotonic()
        lay = layout.load(a.file)
        p = plan.make(lay, select.by_percent(lay, a.branches * 100.0, seed=a.seed), a.mode,
                      plan_options(a.mode, a.library, a.cache_size, a.segment),
                      trigger_factor=a.trigger_factor)
        plan_s = time.monotonic() - t0
        shadow = a.shadow_dir if p.mode == "lazy-download" else None
        if shadow and any(x.phase != "segment" for x in p.rounds):
            raise RigError("replay: a shadow file holds segments only (this plan reads "
                           "the remote file too)")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        if a.library in http_helper.LIBRARIES and a.http_engine == "helper":
            h = http_helper.run(p, a.url, a.library, timeout=a.timeout, shadow_dir=shadow,
                                ca_dir=a.ca_dir, ca_file=a.ca_file)
            r = dict(wall_s=h["wall_s"], open_s=h["open_s"], bytes_received=h["bytes_received"],
                     cpu_user_s=h["cpu_user_s"], cpu_sys_s=h["cpu_sys_s"],
                     cpu_wait_s=h.get("cpu_wait_s"), checksum=h["checksum"], round_s=h["round_s"])
            extra = {"transport": TRANSPORT[a.library], "http_requests": h["http_requests"],
                     "library_version": h["library_version"]}
        else:
            rr = run.replay(p, a.url, timeout=a.timeout, shadow_dir=shadow)
            r = {k: getattr(rr, k) for k in ("wall_s", "open_s", "bytes_received", "cpu_user_s",
                                             "cpu_sys_s", "cpu_wait_s", "checksum",
                                             "round_s")}
            extra = {"transport": TRANSPORT[a.library] if a.library == "xrootd"
                     else "Python http.client (baseline, not the library)"}
        expected = run.expected_checksum(p, a.file)
    except RigError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 1
    out = {"mode": p.mode, "library": a.library, **extra,
           "wall_s": r["wall_s"], "open_s": r["open_s"], "requests": p.requests,
           "round_trips": p.round_trips,
           "bytes_useful": p.bytes_useful, "bytes_wire": p.bytes_wire,
           "bytes_received": r["bytes_received"], "cpu_user_s": r["cpu_user_s"],
           "cpu_sys_s": r["cpu_sys_s"], "cpu_wait_s": r["cpu_wait_s"],
           "checksum": r["checksum"], "expected_checksum": expected,
           "branches_read": len(p.branches), "branches_total": len(lay.branches),
           "trigger_factor": a.trigger_factor,
           "clusters": p.clusters, "plan_s": round(plan_s, 4),
           "setup_cpu_s": round(ru.ru_utime + ru.ru_stime, 4),
           "round_s_max": max(r["round_s"]) if r["round_s"] else 0.0,
           # every round's time (the physics tests read them); capped so a huge storage
           # plan does not bloat the row
           "round_s": [round(x, 6) for x in r["round_s"]] if len(r["round_s"]) <= 4096 else None,
           # the bytes each round asked of the server (wire), for the verdict's slow start
           "round_bytes": [x.wire_bytes for x in p.rounds] if len(p.rounds) <= 4096 else None,
           "segments": sum(1 for x in p.rounds if x.phase == "segment"),
           "shadow_dir": shadow}
    print(json.dumps(out))
    return 0 if r["checksum"] == expected else 1


if __name__ == "__main__":
    sys.exit(main())
