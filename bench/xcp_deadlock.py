"""How often does `xrdcp -y K` (XrdCl extreme copy) deadlock, per file size?

XrdCl before 5.9.2 (Debian 12: 5.5.3) takes two sources' locks in opposite order when
they steal work from each other (XCpSrc::Steal, xrootd/xrootd#2619); the copy then
hangs after its logins. On an idle machine the window is a few instructions wide, so
`--widen-us N` preloads bench/xcp/widen.c, which sleeps N µs between Steal's two locks
(the lock order is untouched: it only makes the existing race likely). Each round runs
one `rig run` per size (alternating), `--repeats` transfers each, the bench lock held
per `rig run` only; the rig ends a deadlocked copy after ~3 s (rig/process/deadlock.py)
and its row says so. Prints, per size: transfers, ok, deadlocked, other failures.

    .venv/bin/python bench/xcp_deadlock.py --sizes 16MiB 8MiB --rounds 4 --repeats 25 \
        --widen-us 10000 [--sources 4] [--json out.json]

Needs root, xrootd, xrdcp, iperf3 and a C compiler (for --widen-us > 0).
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rig.process import proc  # noqa: E402
from rig.results.store import Store  # noqa: E402

LOCK = "/tmp/rig-bench.lock"


def scenario(size: str, sources: int, repeats: int, env: dict[str, str]) -> str:
    envs = ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items())
    return f"""name: xcp-deadlock
topology: client-router-server
paths:
  - {{name: wan, kind: emulated, rtt: [20ms], backend: auto}}
files:
  - {{name: f, size: {size}}}
servers:
  - {{name: origin, kind: xrootd}}
clients:
  - {{name: xrdcp-y{sources}, tool: xrdcp, sources: {sources}, file: f, env: {{{envs}}}}}
sweep: {{repeats: {repeats}, concurrency: [1]}}
validation: {{ping_count: 5, iperf_duration: 1s, iperf_streams: 1}}
transfer_timeout: 60s
"""


def one_run(work: Path, tag: str, text: str) -> list[dict]:
    f = work / f"{tag}.yaml"
    f.write_text(text)
    out = work / tag
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = proc.run([sys.executable, "-m", "rig", "run", str(f), "--out", str(out)],
                     timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"rig run {tag}: exit {r.returncode}: {r.stderr[-500:]}")
    return [dataclasses.asdict(row) for row in Store.open(out).transfers()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["16MiB", "8MiB"])
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--widen-us", type=int, default=10000)
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the run folders")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xcp-deadlock-", dir="/tmp"))
    work.chmod(0o755)
    env: dict[str, str] = {}
    if a.widen_us > 0:
        so = work / "widen.so"
        proc.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so),
                  str(REPO / "bench" / "xcp" / "widen.c"), "-ldl"], timeout=120, check=True)
        env = {"LD_PRELOAD": str(so), "WIDEN_US": str(a.widen_us)}
    tally = {s: {"transfers": 0, "ok": 0, "deadlocked": 0, "other": [], "ok_s": []}
             for s in a.sizes}
    try:
        for rnd in range(a.rounds):
            for size in a.sizes:
                rows = one_run(work, f"r{rnd}-{size}",
                               scenario(size, a.sources, a.repeats, env))
                t = tally[size]
                for row in rows:
                    t["transfers"] += 1
                    if row["ok"]:
                        t["ok"] += 1
                        t["ok_s"].append(row["duration_s"])
                    elif (row["error"] or "").startswith("deadlocked"):
                        t["deadlocked"] += 1
                    else:
                        t["other"].append(row["error"])
                print(f"round {rnd + 1} {size}: {json.dumps({k: v for k, v in t.items() if k != 'ok_s'})}",
                      flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nxrdcp -y {a.sources}, 20 ms, widen {a.widen_us} us, {a.rounds} rounds x "
          f"{a.repeats} repeats per size (sizes alternating)")
    print("| size | transfers | ok | deadlocked | other failures | median ok s |")
    print("|---|---|---|---|---|---|")
    for size, t in tally.items():
        s = sorted(t["ok_s"])
        med = f"{s[len(s) // 2]:.3f}" if s else "-"
        print(f"| {size} | {t['transfers']} | {t['ok']} | {t['deadlocked']} | "
              f"{len(t['other'])} {sorted(set(t['other']))} | {med} |")
    if a.json:
        Path(a.json).write_text(json.dumps(tally, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
