"""What remote execution costs per command: wall time seen here and CPU (user+sys)
spent here by ssh, for `true` run locally, remotely through the run's ControlMaster,
and remotely with a fresh connection each time. The remote host is sshd in a namespace
(tests/sshhost.py), so the network adds ~0.1 ms; on a real WAN add one RTT per command.

    flock /tmp/rig-bench.lock .venv/bin/python bench/remote_cost.py [N]
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sshhost import ssh_host  # noqa: E402

from rig.process import proc  # noqa: E402


def measure(n: int, **kw) -> tuple[float, float, float]:
    walls, remote_cpu = [], []
    for _ in range(n):
        t0 = time.monotonic()
        r = proc.run(["true"], timeout=30, **kw)
        walls.append(time.monotonic() - t0)
        assert r.ok, r.stderr
        remote_cpu.append(r.cpu_user_s + r.cpu_sys_s)
    return statistics.median(walls), max(walls), statistics.median(remote_cpu)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as d, ssh_host(Path(d)) as h:
        mux = h.host(control_path=f"/tmp/rig-ctl-{h.prefix}")
        master = proc.open_master(mux)
        plain = h.host()
        try:
            for label, kw in (("local", {}), ("remote, ControlMaster", {"host": mux}),
                              ("remote, new connection", {"host": plain})) * 2:
                import resource
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                med, worst, rcpu = measure(n, **kw)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                here = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / n
                print(f"{label:<26} wall median {med * 1e3:7.1f} ms  max {worst * 1e3:7.1f} ms"
                      f"  local CPU/cmd {here * 1e3:6.1f} ms  (n={n})")
        finally:
            master.stop()
            Path(f"{mux.control_path}.log").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
