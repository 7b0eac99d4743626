"""Cost of per-thread CPU sampling (issue 27): the rig's sampler
(rig.orchestration.threadsample.GroupThreads) watching N "client" processes of T threads
each plus one "server" of S threads, at several rates; the goal is <= 2 % of one core at
32 concurrent transfers.

The processes are stand-ins (so the machine stays quiet and only the threads count):
`--active` threads of each wake every 20 ms (their schedstat changes at every tick, as a
transfer's working threads), the rest sleep (read every IDLE_EVERY-th tick, as the
sampler does with idle threads). The sampler's cost is one pread of schedstat per read,
a stat of each process's task directory per tick, the discovery of each thread (4 small
files) and a look for new processes every second. The default thread counts
are what a real run of scenarios/threads.yaml found: xrdcp 5.5.3 -S 15 had 12 threads
(-S 1: 10) and the xrootd server 40 (environment.thread_sampling and thread_cpu).

    python bench/thread_sampling.py [--procs 32] [--threads 12] [--server-threads 40]
                                    [--seconds 10] [--hz 10 20 50 100]

Prints per rate: ticks, threads sampled, the sampler thread's CPU (thread_time) over the
wall time in % of one core, and microseconds per tick and per thread read.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

from rig.orchestration import threadsample

CHILD = ("import threading, time, sys\n"
         "n, active = int(sys.argv[1]), int(sys.argv[2])\n"
         "def tick():\n"
         "    while True: time.sleep(0.02)\n"
         "for i in range(n - 1):\n"
         "    threading.Thread(target=tick if i < active else time.sleep,\n"
         "                     args=() if i < active else (3600,), daemon=True).start()\n"
         "print('up', flush=True)\n"
         "sys.stdin.read()\n")


def spawn(threads: int, active: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(threads), str(active)],
                         stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument("--server-threads", type=int, default=40)
    ap.add_argument("--active", type=int, default=3,
                    help="threads per process that wake every 20 ms (the rest sleep)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--hz", type=float, nargs="+", default=[10, 20, 50, 100])
    a = ap.parse_args()
    clients = [spawn(a.threads, a.active) for _ in range(a.procs)]
    server = spawn(a.server_threads, a.active)
    try:
        print(f"{a.procs} client processes x {a.threads} threads + server "
              f"{a.server_threads} threads ({a.active} of each process's waking every "
              f"20 ms, the rest asleep), {a.seconds:g} s per rate")
        print("| Hz | ticks | threads | sampler CPU s | % of one core | us per tick "
              "| us per thread read |")
        print("|---|---|---|---|---|---|---|")
        for hz in a.hz:
            cost = threadsample.Cost()
            with threadsample.group(1.0 / hz, [server.pid], client_local=True,
                                    server_local=True, cost=cost) as g:
                assert g is not None
                for i, c in enumerate(clients):
                    g.track(i, c.pid)
                time.sleep(a.seconds)
            j = cost.to_json()
            reads = j["schedstat_reads"] or 1
            print(f"| {hz:g} | {j['ticks']} | {j['threads']} | {j['cpu_s']:.4f} | "
                  f"{100 * j['cpu_share']:.2f} | {1e6 * j['cpu_s'] / max(1, j['ticks']):.0f} "
                  f"| {1e6 * j['cpu_s'] / reads:.2f} |")
    finally:
        for p in clients + [server]:
            p.kill()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
