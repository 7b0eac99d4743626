"""Where the CPU goes: rig-fdt against Java FDT and iperf3 on one path (issue 16).

One rig path at --rtt; in the server namespace a rig-fdt server, an iperf3 server and
(with --java-fdt) a Java FDT server; every round runs each tool's client in turn (timed,
memory to memory, server -> client, N streams).  Once data flows (1 MiB on the client's
wire, then --settle seconds), a window of --window seconds is measured on both ends:

* per thread, from /proc/PID/task/TID/schedstat and status: CPU (run) time, time spent
  runnable but waiting for a CPU, voluntary / involuntary context switches;
* `perf stat -p PID` of each end for the window: syscalls by kind (tracepoints);
* the bytes received on the client's wire over the same window (/proc/PID/net/dev).

Prints, per tool and side, medians over the rounds, per GB on the wire: CPU s, wait s,
threads that ran (> 1 % of the window), context switches, syscalls of each kind and
the bytes per data syscall.  With `--base NAME=DIR` (a `git archive` copy of the rig
package) another rig-fdt server runs that code with `python -S -P`.

    flock /tmp/rig-bench.lock .venv/bin/python bench/fdt_prof.py --rtt 0 --streams 16 \
        --bufsize 4MiB [--time 6] [--repeats 3] [--java-fdt JAR] [--base NAME=DIR]

Uses rig.process.proc and the `rig net` command (through bench/fdt.py's helpers).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fdt as fb  # noqa: E402  (bench/fdt.py)
from rig.description import units  # noqa: E402
from rig.fdt import adapter  # noqa: E402
from rig.process import nsprobe, proc  # noqa: E402

SYSCALLS = ("sendto", "recvfrom", "sendmsg", "recvmsg", "write", "read", "writev", "readv",
            "sendfile64", "epoll_wait", "epoll_pwait", "epoll_ctl", "select", "poll",
            "futex", "getsockopt", "pwrite64")
DATA_TX = ("sendto", "sendmsg", "write", "writev", "sendfile64")
DATA_RX = ("recvfrom", "recvmsg", "read", "readv")


def threads(pid: int) -> dict[int, dict]:
    """Per thread of pid: run ns, runqueue wait ns, voluntary / involuntary switches."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            run, wait, _ = (int(x) for x in
                            Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
            st = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        vol = int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", st).group(1))   # type: ignore[union-attr]
        inv = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", st).group(1))  # type: ignore[union-attr]
        out[int(tid)] = dict(run=run, wait=wait, vol=vol, inv=inv, comm=comm)
    return out


def descendants(pid: int) -> list[int]:
    """pid and its descendants (the client may be a launcher's child)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for tid in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else ():
            try:
                todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except OSError:
                pass
    return pids


def perf_stat(pid: int, seconds: float, into: dict) -> None:
    evs = ["raw_syscalls:sys_enter", *(f"syscalls:sys_enter_{s}" for s in SYSCALLS)]
    r = proc.run(["perf", "stat", "-x,", "-e", ",".join(evs), "-p", str(pid), "--",
                  "sleep", f"{seconds:g}"], timeout=seconds + 20)
    for line in r.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            into[parts[2].rpartition("sys_enter_")[2] or parts[2]] = int(parts[0])


def diff(a: dict[int, dict], b: dict[int, dict], window: float) -> dict:
    run = wait = vol = inv = 0
    active = 0
    for tid, t1 in b.items():
        t0 = a.get(tid, dict(run=0, wait=0, vol=0, inv=0))
        d = {k: t1[k] - t0[k] for k in ("run", "wait", "vol", "inv")}
        run, wait, vol, inv = run + d["run"], wait + d["wait"], vol + d["vol"], inv + d["inv"]
        if d["run"] > 0.01 * window * 1e9:
            active += 1
    return dict(run_s=run / 1e9, wait_s=wait / 1e9, vol=vol, inv=inv, active=active)


def profile(tool: str, srv_pid: int, cli_pid: int, a, out: dict, stop: threading.Event) -> None:
    """Wait for data on the client's wire, then measure one window on both ends."""
    def rx() -> int:
        return fb.rx_bytes(Path(f"/proc/{cli_pid}/net/dev").read_text())
    ino = os.stat(f"/run/netns/{a.cns}").st_ino
    try:
        while os.stat(f"/proc/{cli_pid}/ns/net").st_ino != ino:
            if stop.wait(0.02):
                return
        base = rx()
        while rx() - base < (1 << 20):
            if stop.wait(0.02):
                return
        if stop.wait(a.settle):
            return
        pids = {"sender": [srv_pid], "receiver": descendants(cli_pid)}
        t0 = {side: {p: threads(p) for p in ps} for side, ps in pids.items()}
        b0, w0 = rx(), time.monotonic()
        counts: dict[str, dict] = {side: {} for side in pids}
        ths = [threading.Thread(target=perf_stat, args=(ps[-1] if side == "receiver" else ps[0],
                                                        a.window, counts[side]))
               for side, ps in pids.items()]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        b1, w1 = rx(), time.monotonic()
        gb = (b1 - b0) / 1e9
        out["gbps"] = (b1 - b0) * 8 / (w1 - w0) / 1e9
        for side, ps in pids.items():
            agg: dict = dict(run_s=0.0, wait_s=0.0, vol=0, inv=0, active=0)
            for p in ps:
                d = diff(t0[side][p], threads(p), w1 - w0)
                for k in agg:
                    agg[k] += d[k]
            c = counts[side]
            tx = sum(c.get(s, 0) for s in DATA_TX)
            rxc = sum(c.get(s, 0) for s in DATA_RX)
            out[side] = dict(cpu=agg["run_s"] / gb, wait=agg["wait_s"] / gb,
                             active=agg["active"], vol=agg["vol"] / gb, inv=agg["inv"] / gb,
                             sys=c.get("raw_syscalls:sys_enter", c.get("sys_enter", 0)) / gb,
                             kb_per_call=(b1 - b0) / 1024 / (tx if side == "sender" else rxc)
                             if (tx if side == "sender" else rxc) else 0.0,
                             calls={k: v / gb for k, v in c.items() if v})
    except (OSError, AttributeError):
        return


def client_argv(tool: str, a) -> tuple[list[str], float]:
    o = fb.omit_s(a, a.rtt)
    if tool == "iperf3":
        return (["iperf3", "-c", a.addr, "-p", str(a.ports[tool]), "-P", str(a.streams), "-R",
                 "-t", f"{a.time:g}", "-O", f"{o:g}", *fb._opt("-w", a.bufsize)], a.time + 60)
    if tool == "java":
        return (fb.java_argv(a.java_fdt, ["-c", a.addr, "-p", str(a.ports[tool]), "-P",
                                          str(a.streams), "-nettest", "-pull",
                                          *fb._opt("-ss", a.bufsize)]), fb.JAVA_START_S + a.time)
    return ([*adapter.tool_argv(), "get", "--streams", str(a.streams), "--port",
             str(a.ports[tool]), *fb._opt("--bufsize", a.bufsize), "--timeout",
             f"{a.time + 60:g}", "--time", f"{a.time:g}", "--omit", f"{o:g}", a.addr],
            a.time + 90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt", type=float, default=0.0)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--bufsize", default="4MiB")
    ap.add_argument("--time", type=float, default=6.0)
    ap.add_argument("--omit", type=float, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--java-fdt", default=None)
    ap.add_argument("--base", action="append", default=[])
    ap.add_argument("--tools", default=None)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    a.bufsize = None if a.bufsize == "auto" else units.parse_size(a.bufsize)
    bases = dict(b.split("=", 1) if "=" in b else ("base", b) for b in a.base)
    a.ports = {"fdt": fb.FDT_PORT, "iperf3": fb.IPERF_PORT, "java": fb.JAVA_PORT}
    for i, bname in enumerate(bases):
        a.ports[bname] = fb.FDT_PORT + 1 + i
    tools = a.tools.split(",") if a.tools else \
        ["fdt", *bases, "iperf3", *(["java"] if a.java_fdt else [])]
    name = f"fdtprof{os.getpid()}"
    path = fb.net_up(name, a.rtt, a.backend)
    sns, a.cns, a.addr = path["server_ns"], path["client_ns"], path["server_addr"]
    work = Path(tempfile.mkdtemp(prefix="rig-fdt-prof-"))
    services: dict[str, proc.Service] = {}
    res: dict[str, list[dict]] = {t: [] for t in tools}
    try:
        with fb.signals_as_exceptions():
            specs: list[tuple[str, list[str], dict | None]] = [
                ("iperf3", ["iperf3", "-s", "-B", a.addr, "-p", str(a.ports["iperf3"])], None),
                ("fdt", adapter.server_argv(str(work), a.addr, a.ports["fdt"],
                                            bufsize=a.bufsize), None)]
            for bname, bdir in bases.items():
                argv = adapter.server_argv(str(work), a.addr, a.ports[bname], bufsize=a.bufsize)
                argv[1:1] = ["-S", "-P"]
                specs.append((bname, argv, {"PYTHONPATH": bdir}))
            if a.java_fdt:
                specs.append(("java", fb.java_argv(a.java_fdt, ["-p", str(a.ports["java"])]),
                              None))
            for tname, argv, env in specs:
                if tname not in tools:
                    continue
                svc = proc.Service(argv, netns=sns, env=env, log_path=work / f"{tname}.log",
                                   name=tname)
                services[tname] = svc.start()
                nsprobe.wait_tcp(sns, a.addr, a.ports[tname], timeout=20, what=tname,
                                 alive=svc.alive)
            for rep in range(a.repeats):
                for tool in tools:
                    argv, timeout = client_argv(tool, a)
                    if tool in bases:      # the client runs the same base code
                        argv[1:1] = ["-S", "-P"]
                    out: dict = {}
                    stop = threading.Event()
                    ths: list[threading.Thread] = []
                    srv_pid = services[tool].pid or 0

                    def begin(pid: int, tool: str = tool, out: dict = out,
                              stop: threading.Event = stop, ths: list = ths,
                              srv_pid: int = srv_pid) -> None:
                        th = threading.Thread(target=profile,
                                              args=(tool, srv_pid, pid, a, out, stop))
                        th.start()
                        ths.append(th)
                    env = {"PYTHONPATH": bases[tool]} if tool in bases else None
                    try:
                        proc.run(argv, netns=a.cns, timeout=timeout, on_start=begin, env=env)
                    finally:
                        stop.set()
                        for th in ths:
                            th.join()
                    res[tool].append(out)
                    print(f"rep {rep} {tool}: {out}", file=sys.stderr, flush=True)
    finally:
        for s in services.values():
            s.stop()
        fb.net_down(name)
        shutil.rmtree(work, ignore_errors=True)
    print(f"RTT {a.rtt:g} ms, N={a.streams}, buffers {fb._buf(a.bufsize)}, window "
          f"{a.window:g} s after data + {a.settle:g} s, {a.repeats} rounds, medians, per GB")
    for tool in tools:
        runs = [r for r in res[tool] if "sender" in r]
        if not runs:
            print(f"{tool}: no window measured")
            continue
        rates = [r["gbps"] for r in runs]
        print(f"{tool}: {statistics.median(rates):.2f} Gbit/s "
              f"[{', '.join(f'{x:.2f}' for x in rates)}]")
        for side in ("sender", "receiver"):
            def med(k: str, side: str = side, runs: list = runs) -> float:
                return statistics.median(r[side][k] for r in runs)
            keys = sorted({k for r in runs for k in r[side]["calls"]})
            calls = " ".join(
                f"{k}={statistics.median(r[side]['calls'].get(k, 0) for r in runs):.0f}"
                for k in keys if k != "raw_syscalls:sys_enter")
            print(f"   {side:8s} CPU {med('cpu'):.3f} s/GB, runnable-waiting {med('wait'):.3f}"
                  f" s/GB, threads running {med('active'):.0f}, switches vol {med('vol'):.0f}"
                  f" inv {med('inv'):.0f}, syscalls {med('sys'):.0f}, "
                  f"{med('kb_per_call'):.0f} KiB per data call; {calls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
