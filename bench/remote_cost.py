"""What remote execution and remote accounting cost per command: wall time seen here,
CPU (user+sys) spent here by ssh, and CPU spent on the remote host by sshd and the rig's
agent (python3) there, for:
  - `true` run locally, remotely through the run's ControlMaster, and remotely with a
    fresh connection each time (every remote client and server process pays this once);
  - the agent's `cpu` op (a remote server's CPU, read twice per transfer group) and its
    `sysctl` read (a remote client's tuning, read once per step), through the master.
The remote host is sshd in a namespace (tests/sshhost.py), so the network adds ~0.1 ms;
on a real WAN add one RTT per command. The remote CPU is the growth of sshd's process
tree (its per-connection children are reaped by it: their CPU lands in its cutime).
Labels run in turn, the whole set twice, medians over N each.

    flock /tmp/rig-bench.lock .venv/bin/python bench/remote_cost.py [N]
"""
from __future__ import annotations

import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sshhost import ssh_host  # noqa: E402

from rig.process import cputree, proc  # noqa: E402


def _cpu(sample: cputree.CpuSample | None) -> float:
    return sample.user_s + sample.sys_s if sample else 0.0


def measure(n: int, one: Callable[[], None], sshd_pid: int | None) -> dict:
    walls = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r0 = _cpu(cputree.tree_cpu(sshd_pid)) if sshd_pid else 0.0
    for _ in range(n):
        t0 = time.monotonic()
        one()
        walls.append(time.monotonic() - t0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r1 = _cpu(cputree.tree_cpu(sshd_pid)) if sshd_pid else 0.0
    here = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / n
    return {"wall": statistics.median(walls), "max": max(walls), "here": here,
            "remote": (r1 - r0) / n}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as d, ssh_host(Path(d)) as h:
        mux = h.host(control_path=f"/tmp/rig-ctl-{h.prefix}")
        master = proc.open_master(mux)
        plain = h.host()
        rundir = f"/dev/shm/{h.prefix}-b"
        srv = proc.Service(["sleep", "600"], host=mux, rundir=rundir, ident="srv").start()
        end = time.monotonic() + 10
        while not Path(rundir, "pids", "srv.json").exists():
            assert time.monotonic() < end, "the remote service did not start"
            time.sleep(0.05)

        def run(**kw) -> Callable[[], None]:
            def one() -> None:
                r = proc.run(["true"], timeout=30, **kw)
                assert r.ok, r.stderr
            return one

        def op(spec: dict) -> Callable[[], None]:
            return lambda: proc.remote_op(mux, spec, timeout=30) and None

        cases = (("local true", run(), None),
                 ("remote true, ControlMaster", run(host=mux), h.sshd.pid),
                 ("remote true, new connection", run(host=plain), h.sshd.pid),
                 ("agent cpu op (server CPU)", op({"op": "cpu", "rundir": rundir,
                                                   "ids": ["srv"]}), h.sshd.pid),
                 ("agent sysctl read (tuning)", op({"op": "sysctl", "read": [
                     "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem"]}), h.sshd.pid))
        try:
            for rnd in (1, 2):
                for label, one, pid in cases:
                    m = measure(n, one, pid)
                    print(f"round {rnd}  {label:<28} wall median {m['wall'] * 1e3:7.1f} ms "
                          f" max {m['max'] * 1e3:7.1f} ms  CPU/cmd here {m['here'] * 1e3:6.1f} ms"
                          f"  remote {m['remote'] * 1e3:6.1f} ms  (n={n})", flush=True)
        finally:
            srv.stop()
            proc.remote_op(mux, {"op": "clean", "rundir": rundir}, timeout=30)
            master.stop()
            Path(f"{mux.control_path}.log").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
