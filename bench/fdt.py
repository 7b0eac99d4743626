"""Benchmark of rig-fdt against iperf3 -P N and xrdcp -S N through rig paths (issue 4).

For each RTT a path is built with `rig net up` (client, router and server namespaces,
emulation by the rig's backend) and removed with `rig net down`; `--loopback` measures
on 127.0.0.1 in the root namespace instead.  The server namespace runs a rig-fdt server,
an iperf3 server and an xrootd serving the same random file (in the page cache).  For
each N the tools run in turn, `--repeats` times, interleaved:

* fdt:         rig-fdt get f.bin /dev/null -- the file, rate over the data phase;
* fdt-mem:     rig-fdt get --time T --omit O -- timed memory to memory, steady rate;
* iperf3:      iperf3 -R -t T -O O -- the same timed run, server -> client;
* iperf3-file: iperf3 -F f.bin -- iperf3's own file source (read + send), client -> server;
* xrdcp:       xrdcp -S min(N,15) root://.../f.bin /dev/null -- wall time;
* java:        with --java-fdt JAR only: Java FDT -nettest -pull -P N (server -> client,
               memory to memory), stopped after ~T s of data; its rate is measured on
               the wire (WireMeter: the client namespace's interface rx bytes), since
               Java's own running average keeps falling after the data stops.

Same N and, for rig-fdt and iperf3, the same socket buffers (--bufsize / -w).  CPU is
the client process
tree's user+sys from wait4 (rig.process.proc), i.e. the receiving side (iperf3-file: the
sending side), divided by the GB moved.  Run it alone:

    flock /tmp/rig-bench.lock .venv/bin/python bench/fdt.py [--rtts 0,20,120]
        [--streams 1,4,8,16] [--tools fdt,fdt-mem,iperf3,iperf3-file,xrdcp]
        [--size 1GiB] [--bufsize 4MiB] [--time 10] [--omit S] [--repeats 3]
        [--loopback] [--json rows.json] [--java-fdt /path/to/fdt.jar]

The JAR is a lab's own Java FDT build; the project never ships or downloads one.
Uses rig.process.proc, rig.process.nsprobe and the `rig net` command; never imports reports.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rig.description import units  # noqa: E402
from rig.process import nsprobe, proc  # noqa: E402
from rig.fdt import adapter  # noqa: E402
from rig.orchestration.run import signals_as_exceptions  # noqa: E402

FDT_PORT, IPERF_PORT, XRD_PORT, JAVA_PORT = 54321, 5201, 1094, 54331
JAVA_START_S = 6.0            # JVM start, handshake, streams: margin before data flows
LOOPBACK_OFFSET = 10000       # the root namespace may already hold the default ports
XRD_ENV = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "5",
           "XRD_REQUESTTIMEOUT": "60", "XRD_STREAMTIMEOUT": "30", "XRD_TIMEOUTRESOLUTION": "1"}
RIG = [sys.executable, "-m", "rig.cli"] if not shutil.which("rig") else ["rig"]


def _rig_argv() -> list[str]:
    exe = Path(sys.executable).with_name("rig")
    return [str(exe)] if exe.exists() else RIG


def net_up(name: str, rtt_ms: float, backend: str) -> dict:
    r = proc.run([*_rig_argv(), "net", "up", "--name", name, "--rtt", f"{rtt_ms:g}ms",
                  "--backend", backend], timeout=120, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def net_down(name: str) -> None:
    proc.run([*_rig_argv(), "net", "down", "--name", name], timeout=120)


def make_file(dirpath: Path, size: int) -> Path:
    path = dirpath / "f.bin"
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 << 20)
            f.write(os.urandom(n))
            left -= n
    path.chmod(0o644)
    with open(path, "rb") as f:                    # warm the page cache for every tool
        while f.read(16 << 20):
            pass
    return path


def xrootd_config(datadir: Path, workdir: Path, port: int) -> str:
    return "\n".join([f"oss.localroot {datadir}", "all.export / nolock", "xrd.network nodnr",
                      f"xrd.port {port}", f"all.adminpath {workdir / 'admin'}",
                      f"all.pidpath {workdir / 'run'}", "xrootd.trace off", "xrd.trace off", ""])


def start_servers(ns: str | None, addr: str, datadir: Path, workdir: Path,
                  bufsize: int | None, java_jar: str | None = None) -> list[proc.Service]:
    xw = workdir / "xrootd"
    xw.mkdir(parents=True)
    (xw / "xrootd.cfg").write_text(xrootd_config(datadir, xw, XRD_PORT))
    shutil.chown(xw, "xrootd", "xrootd")
    specs = [
        ("fdt", adapter.server_argv(str(datadir), addr, FDT_PORT, bufsize=bufsize), FDT_PORT),
        ("iperf3", ["iperf3", "-s", "-B", addr, "-p", str(IPERF_PORT)], IPERF_PORT),
        ("xrootd", ["xrootd", "-R", "xrootd", "-n", f"fdtbench{os.getpid()}", "-c",
                    str(xw / "xrootd.cfg"), "-l", str(xw / "xrootd.log")], XRD_PORT),
    ]
    if java_jar:
        specs.append(("java", java_argv(java_jar, ["-p", str(JAVA_PORT)]), JAVA_PORT))
    services: list[proc.Service] = []
    try:
        for name, argv, port in specs:
            svc = proc.Service(argv, netns=ns, log_path=workdir / f"{name}.log", name=name)
            services.append(svc.start())
            nsprobe.wait_tcp(ns, addr, port, timeout=20, what=f"{name} server",
                             alive=svc.alive)
    except BaseException:
        for s in services:
            s.stop()
        raise
    return services


def run_fdt(ns, addr, n, a, rtt_ms) -> dict:
    """The 1 GiB file, page cache -> network -> /dev/null; rate over the data phase."""
    argv = adapter.client_argv(addr, FDT_PORT, "f.bin", "/dev/null", streams=n,
                               block_bytes=None, bufsize=a.bufsize, timeout_s=a.timeout)
    r = proc.run(argv, netns=ns, timeout=a.timeout + 30)
    res = adapter.parse(r.stdout, r.stderr)
    if res["bytes"] != a.size:
        raise RuntimeError(f"rig-fdt moved {res['bytes']} of {a.size} bytes")
    return _fdt_row(res, r, res["data_throughput_bps"])


def run_fdt_mem(ns, addr, n, a, rtt_ms) -> dict:
    """Timed memory to memory (FDT -nettest, iperf3 -t): steady rate after --omit."""
    omit = omit_s(a, rtt_ms)
    argv = [*adapter.tool_argv(), "get", "--streams", str(n), "--port", str(FDT_PORT),
            *_opt("--bufsize", a.bufsize), "--timeout", f"{a.time + 60:g}", "--time",
            f"{a.time:g}", "--omit", f"{omit:g}", addr]
    r = proc.run(argv, netns=ns, timeout=a.time + 90)
    res = adapter.parse(r.stdout, r.stderr)
    if not res.get("steady_throughput_bps"):
        raise RuntimeError("rig-fdt reported no steady rate")
    return _fdt_row(res, r, res["steady_throughput_bps"])


def _fdt_row(res: dict, r: proc.Result, bps: float) -> dict:
    return dict(bytes=res["bytes"], gbps=bps / 1e9, seconds=res["seconds"],
                setup_s=res["setup_s"], wall_s=r.wall_s, cpu_s=r.cpu_user_s + r.cpu_sys_s,
                server_cpu_s=(res["server_cpu_user_s"] or 0) + (res["server_cpu_sys_s"] or 0))


def _iperf3(argv: list[str], ns, timeout: float) -> dict:
    r = proc.run(argv, netns=ns, timeout=timeout)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"iperf3 exit {r.returncode}: {r.tail(200)}") from None
    got = doc.get("end", {}).get("sum_received")
    if not got:
        raise RuntimeError(f"iperf3: {doc.get('error')}")
    seconds = float(got["seconds"])
    remote = doc["end"].get("cpu_utilization_percent", {}).get("remote_total")
    return dict(bytes=int(got["bytes"]), gbps=float(got["bits_per_second"]) / 1e9,
                seconds=seconds, wall_s=r.wall_s, cpu_s=r.cpu_user_s + r.cpu_sys_s,
                server_cpu_s=None if remote is None else remote / 100 * seconds)


def run_iperf3(ns, addr, n, a, rtt_ms) -> dict:
    """iperf3 -R -t T -O OMIT: the same timed memory-to-memory run, server -> client."""
    return _iperf3(["iperf3", "-c", addr, "-p", str(IPERF_PORT), "-P", str(n), "-R",
                    "-t", f"{a.time:g}", "-O", f"{omit_s(a, rtt_ms):g}",
                    *_opt("-w", a.bufsize), "-J"], ns, a.time + 60)


def run_iperf3_file(ns, addr, n, a, rtt_ms) -> dict:
    """iperf3 -F f.bin (client -> server): iperf3's own file source, read() + send().

    Each iperf3 stream opens the file and reads from offset 0 until the streams have
    sent the file's size in total, so with N > 1 they all read the first 1/N of it.
    """
    return _iperf3(["iperf3", "-c", addr, "-p", str(IPERF_PORT), "-P", str(n), "-F",
                    str(a.datafile), *_opt("-w", a.bufsize), "-J"], ns, a.timeout)


def run_xrdcp(ns, addr, n, a, rtt_ms) -> dict:
    argv = ["xrdcp", "-f", "--nopbar", "-S", str(min(n, 15)),
            f"root://{addr}:{XRD_PORT}//f.bin", "/dev/null"]
    r = proc.run(argv, netns=ns, timeout=a.timeout, env=XRD_ENV)
    if not r.ok:
        raise RuntimeError(f"xrdcp exit {r.returncode}: {r.tail(200)}")
    return dict(bytes=a.size, gbps=a.size * 8 / r.wall_s / 1e9, seconds=r.wall_s,
                wall_s=r.wall_s, cpu_s=r.cpu_user_s + r.cpu_sys_s, server_cpu_s=None)


def java_argv(jar: str, args: list[str]) -> list[str]:
    return ["java", "-jar", jar, "-noupdates", "-silent", *args]


class WireMeter:
    """Bytes received on the wire by a namespace, sampled every INTERVAL_S.

    Reads /proc/PID/net/dev of the measured process (that file shows the process's own
    network namespace), once the process is in the namespace `ns` (after `ip netns
    exec` has switched).  Sums rx_bytes of every interface but lo.  The counts are L2
    bytes of the received frames, headers included.
    """
    INTERVAL_S = 0.05

    def __init__(self, ns: str | None) -> None:
        self.ns_ino = os.stat(f"/run/netns/{ns}").st_ino if ns else \
            os.stat("/proc/self/ns/net").st_ino
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self, pid: int) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino != self.ns_ino:
                    continue
                text = Path(f"/proc/{pid}/net/dev").read_text()
            except OSError:
                return
            self.samples.append((time.monotonic(), rx_bytes(text)))

    def steady(self, omit: float, min_bytes: int = 1 << 20) -> dict:
        """Data phase: from the first sample after which min_bytes more arrived, to the
        last growth.  Rate over the data phase after `omit` seconds."""
        return wire_rate(self.samples, omit, min_bytes)


def rx_bytes(net_dev: str) -> int:
    """Sum of rx_bytes over every interface but lo in a /proc/net/dev text."""
    total = 0
    for line in net_dev.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() != "lo" and rest.split():
            total += int(rest.split()[0])
    return total


def wire_rate(samples: list[tuple[float, int]], omit: float, min_bytes: int) -> dict:
    """(time, cumulative rx bytes) samples -> data start/end, bytes and steady rate."""
    if len(samples) < 2:
        raise RuntimeError("no wire samples")
    base = samples[0][1]
    start = next((i for i, (_, b) in enumerate(samples) if b - base >= min_bytes), None)
    if start is None:
        raise RuntimeError("no data on the wire")
    start = max(0, start - 1)
    last = samples[-1][1]
    end = next(i for i, (_, b) in enumerate(samples) if b == last)
    t0 = samples[start][0]
    steady = next((i for i in range(start, end + 1) if samples[i][0] - t0 >= omit), None)
    if steady is None or samples[end][0] - samples[steady][0] <= 0:
        raise RuntimeError("data phase shorter than the omitted start")
    s0, s1 = samples[steady], samples[end]
    return dict(start_t=t0, end_t=s1[0], bytes=last - samples[start][1],
                seconds=s1[0] - t0, bps=(s1[1] - s0[1]) * 8 / (s1[0] - s0[0]))


def proc_cpu_s(pid: int) -> float:
    """user + system seconds of a live process (all its threads) from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_java(ns, addr, n, a, rtt_ms) -> dict:
    """Java FDT -nettest -pull: server -> client memory to memory, on the wire.

    Runs until JAVA_START_S + --time, then is stopped (TERM); the wire samples give the
    data phase and its steady rate after the omitted start.  Client CPU: the tree's
    rusage; server CPU: the long-lived Java server's /proc stat before and after.
    """
    server = a.java_server
    argv = java_argv(a.java_fdt, ["-c", addr, "-p", str(JAVA_PORT), "-P", str(n),
                                  "-nettest", "-pull", *_opt("-ss", a.bufsize)])
    meter = WireMeter(ns)
    srv0 = proc_cpu_s(server.pid)
    t_start = time.monotonic()
    try:
        r = proc.run(argv, netns=ns, timeout=JAVA_START_S + a.time, on_start=meter.start)
    finally:
        meter.stop()
    srv = proc_cpu_s(server.pid) - srv0
    if not r.timed_out and not r.ok:
        raise RuntimeError(f"java fdt exit {r.returncode}: {r.tail(200)}")
    w = meter.steady(omit_s(a, rtt_ms))
    return dict(bytes=w["bytes"], gbps=w["bps"] / 1e9, seconds=w["seconds"],
                setup_s=w["start_t"] - t_start, wall_s=r.wall_s,
                cpu_s=r.cpu_user_s + r.cpu_sys_s, server_cpu_s=srv)


TOOLS = {"fdt": run_fdt, "fdt-mem": run_fdt_mem, "iperf3": run_iperf3,
         "iperf3-file": run_iperf3_file, "xrdcp": run_xrdcp, "java": run_java}
DEFAULT_TOOLS = ("fdt", "fdt-mem", "iperf3", "iperf3-file", "xrdcp")


def _opt(flag: str, bufsize: int | None) -> list[str]:
    """A tool's buffer flag, or nothing for autotuning (--bufsize auto)."""
    return [] if bufsize is None else [flag, str(bufsize)]


def _buf(bufsize: int | None) -> str:
    return "autotuned" if bufsize is None else f"{bufsize / 2**20:g} MiB"


def omit_s(a, rtt_ms: float) -> float:
    """Leave out slow start: --omit, or by default max(1 s, 20 RTT) (a 4 MiB window
    opens from 10 segments in about 9 RTT)."""
    return a.omit if a.omit is not None else max(1.0, 20 * rtt_ms / 1e3)


def measure_one(tool: str, ns, addr, n: int, a, rtt_ms: float) -> dict:
    try:
        m = TOOLS[tool](ns, addr, n, a, rtt_ms)
    except (RuntimeError, ValueError, KeyError, proc.RigError) as e:
        return {"error": str(e)[:200]}
    m["cpu_s_per_gb"] = m["cpu_s"] / (m["bytes"] / 1e9)
    return m


def sweep_rtt(rtt_ms: float, a, rows: list[dict]) -> None:
    """Every N, repeats interleaved across the tools (so drifts hit them alike)."""
    name = f"fdtbench{os.getpid()}r{rtt_ms:g}"
    path = {"client_ns": None, "server_ns": None, "server_addr": "127.0.0.1",
            "backend": "loopback"} if a.loopback else net_up(name, rtt_ms, a.backend)
    workdir = Path(tempfile.mkdtemp(prefix="rig-fdt-bench-w-"))
    workdir.chmod(0o755)                           # xrootd runs as user xrootd
    services: list[proc.Service] = []
    ns, addr = path["client_ns"], path["server_addr"]

    def record(tool: str, n: int, rep: int) -> None:
        m = measure_one(tool, ns, addr, n, a, rtt_ms)
        row = dict(rtt_ms=rtt_ms, backend=path.get("backend"), tool=tool, streams=n,
                   repeat=rep, **m)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if a.json:                                 # as they land: a crash loses nothing
            Path(a.json).write_text(json.dumps(rows, indent=1))

    try:
        services = start_servers(path["server_ns"], addr, a.datafile.parent, workdir,
                                 a.bufsize, a.java_fdt)
        a.java_server = next((s for s in services if s.name == "java"), None)
        for n in a.streams:
            for rep in range(a.repeats):
                for tool in a.tools:
                    record(tool, n, rep)
    finally:
        for s in services:
            s.stop()
        if not a.loopback:
            net_down(name)
        shutil.rmtree(workdir, ignore_errors=True)


def stats(rows: list[dict]) -> dict:
    """(rtt, N, tool) -> {median, best, cpu (median s/GB), n, errors}."""
    out: dict = {}
    for r in rows:
        d = out.setdefault((r["rtt_ms"], r["streams"], r["tool"]),
                           {"gbps": [], "cpu": [], "errors": 0, "seconds": [], "wall_s": []})
        if "gbps" in r:
            d["gbps"].append(r["gbps"])
            d["seconds"].append(r["seconds"])
            d["wall_s"].append(r["wall_s"])
            d["cpu"].append(r["cpu_s_per_gb"])
            if r.get("server_cpu_s") is not None:
                d.setdefault("srv", []).append(r["server_cpu_s"] / (r["bytes"] / 1e9))
        else:
            d["errors"] += 1
    for d in out.values():
        d["median"] = statistics.median(d["gbps"]) if d["gbps"] else None
        d["best"] = max(d["gbps"]) if d["gbps"] else None
        d["cpu_med"] = statistics.median(d["cpu"]) if d["cpu"] else None
        d["srv_med"] = statistics.median(d["srv"]) if d.get("srv") else None
    return out


def table(rows: list[dict], a) -> str:
    st = stats(rows)
    java = "java" in a.tools
    out = ["| RTT ms | N | fdt mem | iperf3 | mem / iperf3 | fdt file | iperf3 -F"
           " | file / iperf3 -F | file / iperf3 | xrdcp -S | file / xrdcp"
           " | CPU s/GB: fdt file | fdt mem | iperf3 | iperf3 -F | xrdcp |"
           + (" java (wire) | mem / java | java data s | java wall s | java CPU s/GB |"
              if java else ""),
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
           + ("---|---|---|---|---|" if java else "")]
    for rtt in a.rtts:
        for n in a.streams:
            g = {t: st.get((rtt, n, t), {}) for t in TOOLS}
            out.append(
                f"| {rtt:g} | {n} | {_g(g['fdt-mem'])} | {_g(g['iperf3'])}"
                f" | {_r(g['fdt-mem'], g['iperf3'])} | {_g(g['fdt'])} | {_g(g['iperf3-file'])}"
                f" | {_r(g['fdt'], g['iperf3-file'])} | {_r(g['fdt'], g['iperf3'])}"
                f" | {_g(g['xrdcp'])} ({min(n, 15)}) | {_r(g['fdt'], g['xrdcp'])}"
                f" | {_c(g['fdt'])} | {_c(g['fdt-mem'])} | {_c(g['iperf3'])}"
                f" | {_c(g['iperf3-file'])} | {_c(g['xrdcp'])} |"
                + (_java_cells(g) if java else ""))
    return "\n".join(out) + ("\n(Gbit/s, median of the repeats [best]; ratios of medians;"
                             " CPU: the client's, median s per GB)")


def _java_cells(g: dict) -> str:
    j = g.get("java", {})
    return (f" {_g(j)} | {_r(g['fdt-mem'], j)} | {_med(j, 'seconds')} | {_med(j, 'wall_s')}"
            f" | {_c(j)} |")


def _med(m: dict, key: str) -> str:
    vals = m.get(key)
    return f"{statistics.median(vals):.1f}" if vals else "-"


def cpu_table(rows: list[dict], a) -> str:
    """Both ends: CPU seconds per GB, client (receiver) + server (sender), medians."""
    st = stats(rows)
    tools = ("fdt", "fdt-mem", "iperf3") + (("java",) if "java" in a.tools else ())
    out = ["| RTT ms | N | " + " | ".join(f"{t} client + server" for t in tools) + " |",
           "|---|---|" + "---|" * len(tools)]
    for rtt in a.rtts:
        for n in a.streams:
            cells = []
            for t in tools:
                m = st.get((rtt, n, t), {})
                c, v = m.get("cpu_med"), m.get("srv_med")
                cells.append("-" if c is None else
                             f"{c:.2f} + {v:.2f} = {c + v:.2f}" if v is not None else f"{c:.2f}")
            out.append(f"| {rtt:g} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + ("\n(s per GB; server: rig-fdt's own rusage, iperf3's remote"
                             " cpu_utilization_percent x seconds, Java FDT's /proc stat"
                             " over the run per GB on the wire)")


def _r(x: dict, y: dict) -> str:
    return f"{x['median'] / y['median']:.2f}" if x.get("median") and y.get("median") else "-"


def _g(m: dict) -> str:
    if not m:
        return "-"
    if m.get("median") is None:
        return "err"
    err = f" ({m['errors']} err)" if m["errors"] else ""
    return f"{m['median']:.2f} [{m['best']:.2f}]{err}"


def _c(m: dict) -> str:
    return f"{m['cpu_med']:.2f}" if m.get("cpu_med") is not None else "-"


def window_check(rows: list[dict], a) -> list[str]:
    """Per RTT > 0: each N's steady rate against N x window / RTT.

    window = iperf3 N=1's steady rate x RTT (the window the kernel really granted for
    these socket buffers).  iperf3 at the same N is the witness of what the path and
    the CPUs allow: where it reaches 85 % of N x window / RTT the point is
    window-limited, otherwise the path (or the machine) is the limit.
    """
    st = stats(rows)
    lines = []
    for rtt in (r for r in a.rtts if r > 0):
        one = st.get((rtt, 1, "iperf3"), {}).get("median")
        if not one:
            continue
        window = one * 1e9 / 8 * rtt / 1e3
        lines.append(f"{rtt:g} ms: window {window / 2**20:.2f} MiB (iperf3 N=1 x RTT;"
                     f" socket buffers {_buf(a.bufsize)})")
        for n in a.streams:
            ideal = n * window * 8 / (rtt / 1e3) / 1e9
            ref = st.get((rtt, n, "iperf3"), {}).get("median")
            kind = "?" if not ref else \
                ("window-limited" if ref >= 0.85 * ideal else "path-limited")
            parts = []
            for tool in ("fdt-mem", "fdt", "iperf3", "java"):
                med = st.get((rtt, n, tool), {}).get("median")
                if med:
                    parts.append(f"{tool} {med:.3f} = {med / ideal:.2f}x")
            lines.append(f"  N={n}: N*window/RTT {ideal:.3f} Gbit/s ({kind}): "
                         + ", ".join(parts))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtts", default="0,20,120")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--tools", default=None,
                    help=f"default {','.join(DEFAULT_TOOLS)} (and java with --java-fdt)")
    ap.add_argument("--size", default="1GiB", help="the file (fdt, iperf3-file, xrdcp)")
    ap.add_argument("--bufsize", default="4MiB", help="socket buffers, or auto (autotuning)")
    ap.add_argument("--time", type=float, default=10.0,
                    help="seconds of each timed run (fdt-mem, iperf3)")
    ap.add_argument("--omit", type=float, default=None,
                    help="seconds left out of timed runs (default max(1, 20 RTT))")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--loopback", action="store_true", help="127.0.0.1, no rig path (0 ms)")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--java-fdt", metavar="JAR", help="a Java FDT fdt.jar: adds tool java")
    a = ap.parse_args()
    if a.tools is None:
        a.tools = ",".join(DEFAULT_TOOLS + (("java",) if a.java_fdt else ()))
    a.rtts = [float(x) for x in a.rtts.split(",")]
    a.streams = [int(x) for x in a.streams.split(",")]
    a.tools = a.tools.split(",")
    if bad := [t for t in a.tools if t not in TOOLS]:
        ap.error(f"unknown tool {bad[0]!r} (choose from {', '.join(TOOLS)})")
    if "java" in a.tools and not a.java_fdt:
        ap.error("tool java needs --java-fdt JAR")
    if a.java_fdt and not Path(a.java_fdt).is_file():
        ap.error(f"--java-fdt: no such file {a.java_fdt}")
    if a.java_fdt:
        a.java_fdt = str(Path(a.java_fdt).resolve())
    a.size = units.parse_size(a.size)
    a.bufsize = None if a.bufsize == "auto" else units.parse_size(a.bufsize)
    if a.loopback:
        a.rtts = [0.0]
        global FDT_PORT, IPERF_PORT, XRD_PORT, JAVA_PORT
        FDT_PORT, IPERF_PORT, XRD_PORT, JAVA_PORT = (p + LOOPBACK_OFFSET for p in
                                                     (FDT_PORT, IPERF_PORT, XRD_PORT, JAVA_PORT))
    datadir = Path(tempfile.mkdtemp(prefix="rig-fdt-bench-d-"))
    datadir.chmod(0o755)
    rows: list[dict] = []
    t0 = time.monotonic()
    try:
        a.datafile = make_file(datadir, a.size)
        with signals_as_exceptions():          # SIGTERM unwinds and tears down as Ctrl-C
            for rtt in a.rtts:
                sweep_rtt(rtt, a, rows)
    except KeyboardInterrupt:
        print(f"bench/fdt.py: interrupted after {len(rows)} runs; all torn down",
              file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(datadir, ignore_errors=True)
    print(f"file {a.size / 2**30:g} GiB, bufsize {_buf(a.bufsize)}, timed runs"
          f" {a.time:g} s, {a.repeats} repeats, "
          f"{'loopback' if a.loopback else 'rig path, backend ' + a.backend}, "
          f"{time.monotonic() - t0:.0f} s")
    print(table(rows, a))
    print()
    print(cpu_table(rows, a))
    for line in window_check(rows, a):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
