"""Send-buffer evidence for rig-fdt against iperf3 (issue 16): `ss -tinm` on the senders.

One rig path at --rtt; in the server namespace an iperf3 server and rig-fdt servers:
"fdt" runs this checkout's code, and each `--base [NAME=]DIR` ("base" without NAME)
runs the rig package found in DIR (e.g. `git archive HEAD rig | tar -x -C DIR`) with
`python -S -P`, so several versions of the sender meet the same path.  Each round runs,
in turn, `rig-fdt get --time T` against each server and `iperf3 -R -t T`, and samples
`ss -tinm` on the sending sockets (server side) every --every seconds.  Prints, per
tool, the median steady rate, CPU s/GB of the sender (server) and of the receiver
(client) and, per sample time, the mean over the streams of skmem tb (send buffer),
w (queued), cwnd, notsent, and the final busy / sndbuf_limited / rwnd_limited share.

    flock /tmp/rig-bench.lock .venv/bin/python bench/fdt_ss.py --rtt 120 --streams 4 \
        [--bufsize auto|4MiB] [--time 6] [--repeats 3] [--base [NAME=]DIR ...] [--raw FILE]

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

PORTS = {"fdt": fb.FDT_PORT, "iperf3": fb.IPERF_PORT}
FIELDS = {"tb": r"skmem:\([^)]*\btb(\d+)", "w": r"skmem:\([^)]*\bw(\d+)",
          "cwnd": r"\bcwnd:(\d+)", "notsent": r"\bnotsent:(\d+)",
          "unacked": r"\bunacked:(\d+)", "busy": r"\bbusy:(\d+)ms",
          "sndbuf_limited": r"\bsndbuf_limited:(\d+)ms", "rwnd_limited": r"\brwnd_limited:(\d+)ms"}


def sample(ns: str, port: int) -> list[dict]:
    """One `ss -tinm` of the established sockets with local port `port`."""
    r = proc.run(["ss", "-tinmH", "state", "established", f"( sport = :{port} )"],
                 netns=ns, timeout=5)
    socks, cur = [], ""
    for line in r.stdout.splitlines():
        if not line.startswith((" ", "\t")):
            if cur:
                socks.append(cur)
            cur = line
        else:
            cur += " " + line
    if cur:
        socks.append(cur)
    out = []
    for text in socks:
        d = {k: int(m.group(1)) if (m := re.search(p, text)) else 0 for k, p in FIELDS.items()}
        if d["busy"] or d["tb"]:
            out.append(d)
    return out


def sampler(ns: str, port: int, every: float, stop: threading.Event, t0: float,
            into: list, raw) -> None:
    while not stop.wait(every):
        socks = sample(ns, port)
        t = time.monotonic() - t0
        if raw is not None:
            raw.write(f"{t:.2f} {port} {socks}\n")
        # the control connection of rig-fdt carries no data: keep the data streams
        socks = [s for s in socks if s["unacked"] > 1 or s["busy"] > 100]
        if socks:
            into.append((t, socks))


def strace(pid: int | None, seconds: float, tool: str) -> None:
    """Syscalls of the sending server between 3 s and 3 + seconds, to fdt-ss-TOOL.strace."""
    time.sleep(3.0)
    proc.run(["timeout", "-s", "INT", f"{seconds:g}", "strace", "-f", "-tt", "-T", "-o",
              f"fdt-ss-{tool}.strace", "-e", "trace=sendto,write,sendfile,select,pselect6,"
              "epoll_wait,epoll_pwait,poll,ppoll", "-p", str(pid)], timeout=seconds + 10)


def run_tool(tool: str, ns: str, addr: str, a) -> dict:
    o = fb.omit_s(a, a.rtt)
    if tool == "iperf3":
        m = fb._iperf3(["iperf3", "-c", addr, "-p", str(PORTS[tool]), "-P", str(a.streams),
                           "-R", "-t", f"{a.time:g}", "-O", f"{o:g}",
                           *fb._opt("-w", a.bufsize), "-J"], ns, a.time + 60)
        gb = m["bytes"] / 1e9
        return dict(gbps=m["gbps"], srv=(m["server_cpu_s"] or 0) / gb, cli=m["cpu_s"] / gb)
    argv = [*adapter.tool_argv(), "get", "--streams", str(a.streams), "--port", str(PORTS[tool]),
            *fb._opt("--bufsize", a.bufsize), "--timeout", f"{a.time + 60:g}", "--time",
            f"{a.time:g}", "--omit", f"{o:g}", addr]
    r = proc.run(argv, netns=ns, timeout=a.time + 90)
    res = adapter.parse(r.stdout, r.stderr)
    gb = res["bytes"] / 1e9
    srv = (res["server_cpu_user_s"] or 0) + (res["server_cpu_sys_s"] or 0)
    return dict(gbps=(res.get("steady_throughput_bps") or 0) / 1e9, srv=srv / gb,
                cli=(r.cpu_user_s + r.cpu_sys_s) / gb)


def summary(samples: list, t_marks: list[float]) -> list[str]:
    lines = []
    for mark in t_marks:
        near = min(samples, key=lambda s: abs(s[0] - mark), default=None)
        if near is None:
            continue
        t, socks = near
        mean = {k: statistics.mean(s[k] for s in socks) for k in ("tb", "w", "cwnd", "notsent")}
        lines.append(f"t={t:4.1f}s n={len(socks)} tb={mean['tb'] / 2**20:5.2f}MiB "
                     f"w={mean['w'] / 2**20:5.2f}MiB cwnd={mean['cwnd']:6.0f} "
                     f"notsent={mean['notsent'] / 2**10:7.0f}KiB")
    if samples:
        socks = samples[-1][1]
        busy = sum(s["busy"] for s in socks) or 1
        lines.append(f"last: sndbuf_limited {sum(s['sndbuf_limited'] for s in socks) / busy:.0%}"
                     f" rwnd_limited {sum(s['rwnd_limited'] for s in socks) / busy:.0%} of busy")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt", type=float, default=120.0)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--bufsize", default="auto")
    ap.add_argument("--time", type=float, default=6.0)
    ap.add_argument("--omit", type=float, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--base", action="append", default=[],
                    help="[NAME=]DIR: a directory holding a rig package to compare (repeatable)")
    ap.add_argument("--tools", default=None, help="comma list of fdt, the base NAMEs, iperf3")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--raw", default=None, help="append every ss sample to this file")
    ap.add_argument("--strace", type=float, default=0.0,
                    help="first round: strace each server's sending calls for S seconds from 3 s")
    a = ap.parse_args()
    a.bufsize = None if a.bufsize == "auto" else units.parse_size(a.bufsize)
    bases = dict(b.split("=", 1) if "=" in b else ("base", b) for b in a.base)
    for i, bname in enumerate(bases):
        PORTS[bname] = fb.FDT_PORT + 1 + i
    tools = a.tools.split(",") if a.tools else ["fdt", *bases, "iperf3"]
    name = f"fdtss{os.getpid()}"
    path = fb.net_up(name, a.rtt, a.backend)
    sns, cns, addr = path["server_ns"], path["client_ns"], path["server_addr"]
    work = Path(tempfile.mkdtemp(prefix="rig-fdt-ss-"))
    services: list[proc.Service] = []
    raw = open(a.raw, "a") if a.raw else None
    rates: dict[str, list[float]] = {t: [] for t in tools}
    cpus: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
    series: dict[str, list] = {t: [] for t in tools}
    try:
        with fb.signals_as_exceptions():
            specs: list[tuple[str, list[str], dict | None]] = [("iperf3", ["iperf3", "-s", "-B", addr, "-p", str(PORTS["iperf3"])], None)]
            specs.append(("fdt", adapter.server_argv(str(work), addr, PORTS["fdt"],
                                                     bufsize=a.bufsize), None))
            for bname, bdir in bases.items():
                argv = adapter.server_argv(str(work), addr, PORTS[bname], bufsize=a.bufsize)
                argv[1:1] = ["-S", "-P"]    # not the checkout's rig from the cwd
                specs.append((bname, argv, {"PYTHONPATH": bdir}))
            for tname, argv, env in specs:
                svc = proc.Service(argv, netns=sns, env=env, log_path=work / f"{tname}.log",
                                   name=tname)
                services.append(svc.start())
                nsprobe.wait_tcp(sns, addr, PORTS[tname], timeout=20, what=tname, alive=svc.alive)
            for rep in range(a.repeats):
                for tool in tools:
                    stop, got = threading.Event(), list[tuple]()
                    th = threading.Thread(target=sampler, args=(sns, PORTS[tool], a.every, stop,
                                                                time.monotonic(), got, raw))
                    th.start()
                    st = None
                    if a.strace and rep == 0:
                        svc = next(x for x in services if x.name == tool)
                        st = threading.Thread(target=strace, args=(svc.pid, a.strace, tool))
                        st.start()
                    try:
                        m = run_tool(tool, cns, addr, a)
                    finally:
                        stop.set()
                        th.join()
                        if st is not None:
                            st.join()
                    rates[tool].append(m["gbps"])
                    cpus[tool].append((m["srv"], m["cli"]))
                    series[tool].append(got)
                    print(f"rep {rep} {tool}: {m['gbps']:.3f} Gbit/s, CPU s/GB sender "
                          f"{m['srv']:.3f} receiver {m['cli']:.3f}", file=sys.stderr, flush=True)
    finally:
        for s in services:
            s.stop()
        fb.net_down(name)
        shutil.rmtree(work, ignore_errors=True)
        if raw is not None:
            raw.close()
    print(f"RTT {a.rtt:g} ms, N={a.streams}, buffers {fb._buf(a.bufsize)}, {a.time:g} s runs,"
          f" {a.repeats} rounds, backend {path.get('backend')}")
    marks = [0.5, 1, 2, 3, 4, 6, a.time]
    for tool in tools:
        r = rates[tool]
        srv, cli = [c[0] for c in cpus[tool]], [c[1] for c in cpus[tool]]
        print(f"{tool}: median {statistics.median(r):.3f} Gbit/s  "
              f"[{', '.join(f'{x:.3f}' for x in r)}]  CPU s/GB sender "
              f"{statistics.median(srv):.3f} [{', '.join(f'{x:.2f}' for x in srv)}] receiver "
              f"{statistics.median(cli):.3f} [{', '.join(f'{x:.2f}' for x in cli)}]")
        for line in summary(series[tool][len(series[tool]) // 2], sorted(set(marks))):
            print("   " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
