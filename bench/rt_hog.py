"""A real-time CPU hog that outranks the userspace engine (SCHED_FIFO 20 > its 10): one
process per CPU, pinned, busy BUSY_MS then asleep IDLE_MS, for SECS seconds (the CPUs'
hogs out of phase). Used to load the machine on purpose beside `rig run` and see the
report say which steps' emulation was late (bench/README.md, "Session 7"):

    flock /tmp/rig-bench.lock sh -c '.venv/bin/python bench/rt_hog.py 3 7 100 & \
        .venv/bin/rig run scenarios/quick.yaml; kill $!'

A normal-priority hog (`python3 -c 'while True: pass'`) does not displace the engine.
Each child exits when its parent is gone, so killing the parent stops the hog.
"""
from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    busy, idle, secs = float(argv[0]) / 1e3, float(argv[1]) / 1e3, float(argv[2])
    parent = os.getpid()
    kids = []
    for cpu in sorted(os.sched_getaffinity(0)):
        pid = os.fork()
        if pid == 0:
            os.sched_setaffinity(0, {cpu})
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
            end = time.monotonic() + secs
            time.sleep(cpu * idle / 2)
            while time.monotonic() < end and os.getppid() == parent:
                t = time.monotonic() + busy
                while time.monotonic() < t:
                    pass
                time.sleep(idle)
            os._exit(0)
        kids.append(pid)
    for k in kids:
        os.waitpid(k, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
