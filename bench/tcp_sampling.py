"""Cost of sampling tcp_info (issue #15): the rig's sock_diag sampler against
`ip netns exec NS ss -tinHOe`, at N concurrent connections through a path built with
`rig net up` (rate-limited iperf3 streams, so the machine stays idle and only the
socket count matters).

    rig net up --name tcpbench --rtt 20ms
    python bench/tcp_sampling.py CLIENT_NS SERVER_NS SERVER_ADDR [--conns 32] [--seconds 10]
    rig net down --name tcpbench

Prints the sampler thread's CPU time (thread_time) per second of wall time (cores), and
the CPU (rusage of the child tree) and wall time of one `ss` sample.
"""
from __future__ import annotations

import argparse
import time

from rig.orchestration.tcpsample import GroupSampler
from rig.process import proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("client_ns")
    ap.add_argument("server_ns")
    ap.add_argument("server_addr")
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--port", type=int, default=5990)
    a = ap.parse_args()
    srv = proc.Service(["iperf3", "-s", "-1", "-p", str(a.port)], netns=a.server_ns).start()
    time.sleep(0.5)
    smp = GroupSampler(a.server_ns, a.client_ns, sender="server", interval_s=0.1).start()
    cl = proc.Service(["iperf3", "-c", a.server_addr, "-p", str(a.port), "-R", "-P",
                       str(a.conns), "-b", "10M", "-t", str(a.seconds)],
                      netns=a.client_ns).start()
    smp.track(0, cl.pid)
    t0 = time.monotonic()
    time.sleep(a.seconds / 2)
    ss_cpu, ss_wall, n = 0.0, 0.0, 10
    for _ in range(n):
        r = proc.run(["ss", "-tinHOe"], netns=a.server_ns, timeout=10)
        ss_cpu += r.cpu_user_s + r.cpu_sys_s
        ss_wall += r.wall_s
    while cl.alive() and time.monotonic() - t0 < a.seconds + 10:
        time.sleep(0.1)
    wall = time.monotonic() - t0
    smp.stop()
    cl.stop()
    srv.stop()
    conns = len(smp.series)
    print(f"sock_diag sampler: {smp.ticks} ticks over {wall:.1f} s, {conns} connections "
          f"matched, thread CPU {smp.cpu_s:.4f} s = {100 * smp.cpu_s / wall:.2f} % of one "
          f"core, {1e3 * smp.cpu_s / max(1, smp.ticks):.3f} ms per sample")
    print(f"ss -tinHOe via ip netns exec: {1e3 * ss_cpu / n:.2f} ms CPU and "
          f"{1e3 * ss_wall / n:.1f} ms wall per sample -> "
          f"{100 * ss_cpu / n * 10:.1f} % of one core at 10 samples/s")


if __name__ == "__main__":
    main()
