"""Benchmark of the link-emulation backend against the targets of issue 3.

Builds one client—router—server path, measures the raw path (ping, iperf3 -P1/-P8), then
for RTT 0, 10, 50, 120 ms: ping mean/min/mdev, iperf3 -P1 and -P8 with their srtt and the
engine's CPU; 1 % loss against the Mathis model (reno, one stream); a 1 Gbit/s rate.
Prints markdown tables and writes the raw numbers as JSON (--json).

Run as root, serialized with other measurements:
    flock /tmp/rig-bench.lock .venv/bin/python bench/emulation.py [--quick] [--backend auto]

Client and server namespaces get tcp_rmem/tcp_wmem maxima of 256 MiB (per-namespace
sysctls) so window limits do not hide what the emulation does at 120 ms.
Must not import reports or matplotlib.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

from rig import netns, proc
from rig.emul.profile import Direction
from rig.errors import RigError
from rig.emul.choose import make_backend
from rig.emul.profile import LinkProfile

RTTS_MS = (0, 10, 50, 120)
LOSS_RTTS_MS = (10, 50, 120)
RATE_RTTS_MS = (0, 50, 120)
PORT = 5201
MSS = 1448
BIG = "268435456"


def sh(argv: list[str], ns: str | None, timeout: float) -> str:
    return proc.run(argv, netns=ns, timeout=timeout, check=True).stdout


def tune(net) -> None:
    for ns in (net.client_ns, net.server_ns):
        sh(["sysctl", "-q", "-w", f"net.ipv4.tcp_rmem=4096 131072 {BIG}",
            f"net.ipv4.tcp_wmem=4096 16384 {BIG}"], ns, 10)


def ping(net, count: int, interval: float) -> dict:
    out = sh(["ping", "-n", "-q", "-c", str(count), "-i", str(interval), net.server_addr],
             net.client_ns, count * interval + 30)
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    return {"min_ms": float(m[1]), "avg_ms": float(m[2]), "max_ms": float(m[3]),
            "mdev_ms": float(m[4])}


def iperf(net, streams: int, secs: int, *, cc: str | None = None) -> dict:
    """Client sends (forward direction), so the client's tcp_info gives the srtt. A fresh
    one-off server per test: a server still closing the last test answers "busy"."""
    argv = ["iperf3", "-c", net.server_addr, "-p", str(PORT), "-P", str(streams),
            "-t", str(secs), "-O", "2", "-J"] + (["-C", cc] if cc else [])
    log = net.site.workdir / "iperf3-server.log"
    log.unlink(missing_ok=True)
    srv = proc.Service(["iperf3", "-s", "-1", "--forceflush", "-p", str(PORT)],
                       netns=net.server_ns, log_path=log).start()
    try:
        proc.wait_until(lambda: "listening" in srv.log_tail(), timeout=10,
                        what="iperf3 server", service=srv)
        res = proc.run(argv, netns=net.client_ns, timeout=secs + 60)
    finally:
        srv.stop()
    try:
        j = json.loads(res.stdout)
    except ValueError:
        j = {"error": res.stderr[-300:]}
    if "error" in j or not res.ok:
        raise RigError(f"iperf3 -P{streams}: exit {res.returncode}, timed out {res.timed_out}: "
                       f"{j.get('error', res.stderr[-300:])} {res.stdout[-300:]}")
    end = j["end"]
    rtts = [s["sender"]["mean_rtt"] / 1000 for s in end["streams"] if "sender" in s]
    return {"gbps": end["sum_received"]["bits_per_second"] / 1e9,
            "srtt_ms": sum(rtts) / len(rtts) if rtts else float("nan"),
            "retransmits": end["sum_sent"].get("retransmits")}


class Cpu:
    """Engine CPU share over a measurement, from its own rusage (via stats)."""

    def __init__(self, backend, site) -> None:
        self.backend, self.site = backend, site
        self.t0 = self._now()

    def _now(self) -> tuple[float, float]:
        st = self.backend.stats(self.site)
        return (st.get("cpu_user_s", 0.0) + st.get("cpu_sys_s", 0.0), time.monotonic())

    def share(self) -> float:
        c1, t1 = self._now()
        return (c1 - self.t0[0]) / max(t1 - self.t0[1], 1e-9)


def measure_rtts(net, be, secs: int, pings: int) -> list[dict]:
    rows = []
    for rtt in RTTS_MS:
        be.update(net.site, LinkProfile.symmetric(rtt / 1000))
        be.check(net.site)
        ping(net, 10, 0.01)                           # warm the wake-up compensation
        row = {"rtt_ms": rtt, "ping": ping(net, pings, 0.01)}
        for p in (1, 8):
            cpu = Cpu(be, net.site)
            row[f"p{p}"] = iperf(net, p, secs)
            row[f"p{p}"]["engine_cpu"] = cpu.share()
        be.check(net.site)
        row["stats"] = be.stats(net.site)
        rows.append(row)
        print(f"# rtt {rtt} ms done: {row['ping']} {row['p1']} {row['p8']}", file=sys.stderr)
    return rows


def measure_loss(net, be, secs: int) -> list[dict]:
    rows = []
    for rtt in LOSS_RTTS_MS:
        half = rtt / 2000
        # loss on the data direction (client -> server), none on the ACKs
        be.update(net.site, LinkProfile(forward=Direction(delay_s=half, loss=0.01),
                                        reverse=Direction(delay_s=half)))
        s0 = be.stats(net.site).get("forward", {})
        r = iperf(net, 1, secs, cc="reno")
        s1 = be.stats(net.site).get("forward", {})
        seen = s1.get("seen", 0) - s0.get("seen", 0)
        lost = s1.get("dropped_loss", 0) - s0.get("dropped_loss", 0)
        mathis = MSS * 8 / (rtt / 1000) * 1.22 / math.sqrt(0.01) / 1e9
        rows.append({"rtt_ms": rtt, "loss": lost / seen if seen else None, **r,
                     "mathis_gbps": mathis})
        print(f"# loss {rtt} ms done: {rows[-1]}", file=sys.stderr)
    return rows


def measure_rate(net, be, secs: int) -> list[dict]:
    rows = []
    for rtt in RATE_RTTS_MS:
        be.update(net.site, LinkProfile.symmetric(rtt / 1000, rate_bps=1e9))
        r = iperf(net, 4, secs)
        rows.append({"rtt_ms": rtt, **r, "target_gbps": 1.0 * 1448 / 1514})
        print(f"# rate {rtt} ms done: {rows[-1]}", file=sys.stderr)
    return rows


def table(raw: dict, rows: list[dict], loss: list[dict], rate: list[dict]) -> str:
    rr = raw["ping"]["avg_ms"]
    out = [f"raw path: ping avg {rr:.3f} ms; iperf3 -P1 {raw['p1']['gbps']:.2f} Gbit/s, "
           f"-P8 {raw['p8']['gbps']:.2f} Gbit/s", "",
           "| RTT ms | ping mean/min/mdev ms | error vs cfg+raw ms | -P1 Gbit/s (srtt ms) "
           "| -P8 Gbit/s (srtt ms) | -P8 / raw | engine CPU -P1/-P8 |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, a, b = r["ping"], r["p1"], r["p8"]
        err = p["avg_ms"] - r["rtt_ms"] - rr
        out.append(f"| {r['rtt_ms']} | {p['avg_ms']:.3f} / {p['min_ms']:.3f} / {p['mdev_ms']:.3f} "
                   f"| {err:+.3f} (target ±{max(0.3, 0.01 * r['rtt_ms']):.2f}) "
                   f"| {a['gbps']:.2f} ({a['srtt_ms']:.2f}) | {b['gbps']:.2f} ({b['srtt_ms']:.2f}) "
                   f"| {b['gbps'] / raw['p8']['gbps']:.2f} "
                   f"| {a['engine_cpu']:.0%} / {b['engine_cpu']:.0%} |")
    out += ["", "| RTT ms, 1 % loss | measured loss | reno -P1 Mbit/s | Mathis Mbit/s | ratio |",
            "|---|---|---|---|---|"]
    for r in loss:
        lm = f"{r['loss']:.4f}" if r["loss"] is not None else "n/a"
        out.append(f"| {r['rtt_ms']} | {lm} | {r['gbps'] * 1e3:.2f} | "
                   f"{r['mathis_gbps'] * 1e3:.2f} | {r['gbps'] / r['mathis_gbps']:.2f} |")
    out += ["", "| RTT ms, 1 Gbit/s rate | goodput Mbit/s (-P4) | target Mbit/s | ratio | srtt ms |",
            "|---|---|---|---|---|"]
    for r in rate:
        out.append(f"| {r['rtt_ms']} | {r['gbps'] * 1e3:.1f} | {r['target_gbps'] * 1e3:.1f} "
                   f"| {r['gbps'] / r['target_gbps']:.3f} | {r['srtt_ms']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="userspace", choices=("auto", "netem", "userspace"))
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    ap.add_argument("--bypass-passthrough", action="store_true",
                    help="let 0 ms directions skip the engine (the backend default); "
                         "off here so the 0 ms row measures the engine")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", choices=("rtt", "loss", "rate"), action="append",
                    help="run only these parts (repeatable)")
    a = ap.parse_args(argv)
    secs, lsecs, pings = (4, 6, 50) if a.quick else (10, 20, 200)
    opts = {} if a.backend == "netem" else {"bypass_passthrough": a.bypass_passthrough}
    be = make_backend(a.backend, **opts)
    prefix = netns.new_prefix()
    workdir = Path("/tmp") / f"{prefix}-bench"
    # a live run's state: a concurrent `rig clean` leaves these namespaces alone
    netns.write_state(prefix, {"kind": "run", "pid": os.getpid(), "what": "bench/emulation.py"})
    try:
        return run(a, be, prefix, workdir, secs, lsecs, pings)
    finally:
        netns.drop_state(prefix)


def run(a, be, prefix: str, workdir: Path, secs: int, lsecs: int, pings: int) -> int:
    with netns.path_net(prefix, "bench", 0, workdir=workdir) as net:
        tune(net)
        raw = {"ping": ping(net, pings, 0.01), "p1": iperf(net, 1, secs),
               "p8": iperf(net, 8, secs)}
        be.apply(net.site, LinkProfile.symmetric(0.0))
        try:
            parts = a.only or ("rtt", "loss", "rate")
            rows = measure_rtts(net, be, secs, pings) if "rtt" in parts else []
            loss = measure_loss(net, be, lsecs) if "loss" in parts else []
            rate = measure_rate(net, be, secs) if "rate" in parts else []
        finally:
            be.remove(net.site)
    print(f"backend: {be.name}; kernel: {Path('/proc/sys/kernel/osrelease').read_text().strip()}")
    print(table(raw, rows, loss, rate))
    if a.json:
        a.json.write_text(json.dumps({"backend": be.name, "raw": raw, "rtt": rows,
                                      "loss": loss, "rate": rate}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
