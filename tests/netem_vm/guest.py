"""Runs inside the netem VM (see vm.py): drives the rig's CLI on a kernel with sch_netem
and measures what the paths do (`rig net up` profiles), then a whole `rig run` of
tests/data/scenarios/netem-run.yaml, its result folder copied to OUT/netem-run. Writes
OUT/result.json; judges nothing (the host-side tests in tests/test_netem_vm.py assert,
with checks.py).

Every command goes through rig.process.proc (argv, deadline, group kill). The VM is a world of
its own: every namespace and qdisc in it was made here.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

WORKTREE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(WORKTREE))

from rig.process import proc  # noqa: E402
from rig.services.servers.start import start_iperf3_server  # noqa: E402
from rig.orchestration.pathcheck import parse_ping  # noqa: E402

RIG = str(WORKTREE / ".venv" / "bin" / "rig")
RUN_SCENARIO = WORKTREE / "tests" / "data" / "scenarios" / "netem-run.yaml"
RUN_TIMEOUT_S = 1200     # the guest's `rig run`: a hang guard inside VM_TIMEOUT_S (1800 s),
#                          twice the 600 s it had when the whole tier took 664 s loaded
IPERF_PORT = 5201
UDP_LEN = 500                  # bytes of UDP payload per datagram (loss counts)
UDP_RATE_LEN = 1400            # for the rate check: wire frame = payload + 42
UDP_RCVBUF = "4M"             # a TCG stall of ~1 s must not overflow the receiving socket
COMMON = ["--rtt", "50ms", "--jitter", "2ms"]
PROFILES = {
    # name: (extra `rig net up` args, checks)
    "base": (["--rtt", "0ms"], ("ping",)),
    "delay": (["--rtt", "50ms"], ("ping",)),
    "loss": ([*COMMON, "--loss", "1%"], ("ping", "udp_loss")),
    "lossrate": ([*COMMON, "--loss", "1%", "--rate", "50mbit"], ("ping", "udp_loss", "udp_rate")),
    "rate": ([*COMMON, "--rate", "50mbit"], ("ping", "tcp_rate")),
}


def run(argv: list[str], timeout: float, netns: str | None = None, check: bool = True) -> proc.Result:
    r = proc.run(argv, timeout=timeout, netns=netns)
    if check and not r.ok:
        raise RuntimeError(f"{' '.join(argv)}: rc {r.returncode}"
                           f"{' (timed out)' if r.timed_out else ''}: {r.stderr[-600:]}"
                           f"{r.stdout[-600:]}")
    return r


def qdiscs(ns: str, devs: list[str]) -> dict:
    out = {}
    for dev in devs:
        r = run(["tc", "-s", "-j", "qdisc", "show", "dev", dev], 30, netns=ns, check=False)
        out[dev] = json.loads(r.stdout or "[]") if r.ok else {"error": r.stderr[-300:]}
    return out


def ping(ns: str, addr: str, count: int, interval: float) -> dict:
    argv = ["ping", "-n", "-c", str(count), "-i", f"{interval:g}", "-W", "2", addr]
    r = run(argv, count * interval + 30, netns=ns, check=False)
    st = parse_ping(r.stdout)
    times = [float(w.split("=", 1)[1]) for line in r.stdout.splitlines()
             for w in line.split() if w.startswith("time=")]
    return {"sent": st.count, "received": st.received, "min_ms": st.min_ms,
            "avg_ms": st.mean_ms, "max_ms": st.max_ms, "mdev_ms": st.stddev_ms,
            "rtts_ms": times}


def iperf3(ns: str, addr: str, extra: list[str], timeout: float) -> dict:
    argv = ["iperf3", "-c", addr, "-p", str(IPERF_PORT), "-J", "--connect-timeout", "5000",
            *extra]
    r = run(argv, timeout, netns=ns, check=False)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"{' '.join(argv)}: rc {r.returncode}: {r.stderr[-300:]} "
                           f"{r.stdout[-300:]}") from None
    if "error" in j:
        raise RuntimeError(f"{' '.join(argv)}: {j['error']}")
    # per-second receiver rates past the omitted start: a guest stall under TCG costs
    # the mean, not the median second
    ivs = [iv["sum"]["bits_per_second"] for iv in j.get("intervals", [])
           if not iv.get("sum", {}).get("omitted")]
    return {"argv": argv, "end": j.get("end", {}), "wall_s": r.wall_s, "intervals_bps": ivs}


def udp_loss(c_ns: str, addr: str, count: int, reverse: bool) -> dict:
    """count datagrams of UDP_LEN at 10 Mbit/s; reverse: server -> client (the direction
    `--loss` applies to), else client -> server (no loss configured)."""
    extra = ["-u", "-b", "10M", "-l", str(UDP_LEN), "-k", str(count), "-w", UDP_RCVBUF]
    return iperf3(c_ns, addr, extra + (["-R"] if reverse else []), 120)


def udp_rcvbuf_errors(ns: str) -> int:
    """Datagrams a namespace's sockets dropped for a full receive buffer (/proc/net/snmp)."""
    lines = [ln.split() for ln in run(["cat", "/proc/net/snmp"], 20, netns=ns).stdout.splitlines()
             if ln.startswith("Udp:")]
    return int(dict(zip(lines[0], lines[1]))["RcvbufErrors"])


def profile_run(name: str, args: list[str], checks: tuple[str, ...], opts) -> dict:
    res: dict = {"args": args, "t": {}}
    t = time.monotonic()
    up = run([RIG, "net", "up", "--name", f"vm-{name}", "--backend", "netem", *args], 120)
    res["t"]["up_s"] = time.monotonic() - t
    info = json.loads(up.stdout.strip().splitlines()[-1])
    res["up"] = info
    res["to_client_if"] = f"{info['prefix']}0rc"     # rig.realization.netns: PathNames.ifname("r", "c")
    res["to_server_if"] = f"{info['prefix']}0rs"
    c, r, s, addr = info["client_ns"], info["router_ns"], info["server_ns"], info["server_addr"]
    devs = [ln.split(":")[1].strip().split("@")[0] for ln in
            run(["ip", "-o", "link", "show"], 20, netns=r).stdout.splitlines()
            if "lo:" not in ln]
    try:
        res["qdiscs_before"] = qdiscs(r, devs)
        if "ping" in checks:
            t = time.monotonic()
            res["ping"] = ping(c, addr, opts.ping_count, opts.ping_interval)
            res["t"]["ping_s"] = time.monotonic() - t
        if set(checks) & {"udp_loss", "udp_rate", "tcp_rate"}:
            svc = start_iperf3_server(s, addr, IPERF_PORT, Path("/tmp") / f"iperf-{name}")
            try:
                t = time.monotonic()
                if "udp_loss" in checks:
                    res["udp_reverse"] = udp_loss(c, addr, opts.udp_count, reverse=True)
                    res["udp_forward"] = udp_loss(c, addr, opts.udp_count, reverse=False)
                    res["qdiscs_after_loss"] = qdiscs(r, devs)
                    res["udp_rcvbuf_errors"] = {ns: udp_rcvbuf_errors(ns) for ns in (c, s)}
                if "udp_rate" in checks:
                    res["udp_rate"] = iperf3(c, addr, ["-u", "-R", "-b", "80M", "-l",
                                                       str(UDP_RATE_LEN), "-t", "4",
                                                       "-w", UDP_RCVBUF], 120)
                if "tcp_rate" in checks:
                    res["tcp_rate"] = iperf3(c, addr, ["-R", "-t", str(opts.tcp_seconds),
                                                       "-O", "2"], 120)
                res["t"]["iperf_s"] = time.monotonic() - t
            finally:
                svc.stop()
        res["qdiscs_after"] = qdiscs(r, devs)
    finally:
        t = time.monotonic()
        down = run([RIG, "net", "down", "--name", f"vm-{name}"], 120, check=False)
        res["down_rc"] = down.returncode
        res["down_stderr"] = down.stderr[-400:]
        res["t"]["down_s"] = time.monotonic() - t
    return res


def scenario_run(out: Path) -> dict:
    """`rig run` of netem-run.yaml (backend netem) into the guest's tmpfs, then copied to
    the results share: results.sqlite is a WAL database and the share (9p, no cache) maps
    files read-only, so sqlite could not keep its -shm there."""
    dest = Path("/tmp/netem-run")
    t = time.monotonic()
    r = run([RIG, "run", str(RUN_SCENARIO), "--out", str(dest)], RUN_TIMEOUT_S, check=False)
    res = {"rc": r.returncode, "timed_out": r.timed_out, "wall_s": time.monotonic() - t,
           "stdout_tail": r.stdout[-3000:], "stderr_tail": r.stderr[-3000:]}
    if dest.is_dir():
        shutil.copytree(dest, out / "netem-run", dirs_exist_ok=True)
        res["out"] = "netem-run"
    (out / "netem-run.log").write_text(r.stdout + r.stderr)
    return res


def leftovers() -> dict:
    ns = run(["ip", "netns", "list"], 20).stdout.split()
    links = [x["ifname"] for x in json.loads(run(["ip", "-j", "link", "show"], 20).stdout)]
    qd = json.loads(run(["tc", "-j", "qdisc", "show"], 20).stdout or "[]")
    state = sorted(str(p) for p in Path("/run/rig").rglob("*") if not p.is_dir())
    # /run/netns itself stays a mount point (iproute2 binds it onto itself once): only
    # what lies below it is a namespace kept alive
    mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()
              if ln.split()[1].startswith(("/run/rig", "/run/netns/"))]
    etc_netns = sorted(p.name for p in Path("/etc/netns").iterdir()) \
        if Path("/etc/netns").is_dir() else []
    return {"netns": ns, "links": links, "qdisc_kinds": sorted({q.get("kind") for q in qd}),
            "state_files": state, "mounts": mounts, "etc_netns": etc_netns}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ping-count", type=int, default=300)
    ap.add_argument("--ping-interval", type=float, default=0.02)
    ap.add_argument("--udp-count", type=int, default=10000)
    ap.add_argument("--tcp-seconds", type=int, default=6)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--no-run", action="store_true", help="skip the netem-run.yaml `rig run`")
    opts = ap.parse_args()
    out = Path(opts.out)
    t0 = time.monotonic()
    result: dict = {"ok": False, "kernel": os.uname().release, "cpus": os.cpu_count(),
                    "opts": vars(opts), "profiles": {}, "errors": []}
    try:
        # the VM's own global limit, so iperf3 -w can give the UDP receiver a big buffer
        # (iperf3 sets SO_SNDBUF too and fails when either is capped)
        for knob in ("rmem_max", "wmem_max"):
            Path(f"/proc/sys/net/core/{knob}").write_text("16777216")
        t = time.monotonic()
        d = run([RIG, "doctor", "--json"], 120)
        result["doctor"] = json.loads(d.stdout)
        result["doctor_s"] = time.monotonic() - t
        for name in opts.profiles.split(","):
            args, checks = PROFILES[name]
            try:
                result["profiles"][name] = profile_run(name, args, checks, opts)
            except Exception:
                result["errors"].append(f"{name}: {traceback.format_exc()[-1500:]}")
        if not opts.no_run:
            result["leftovers_before_run"] = leftovers()
            try:
                result["run"] = scenario_run(out)
            except Exception:
                result["errors"].append(f"rig run: {traceback.format_exc()[-1500:]}")
        result["leftovers"] = leftovers()
        result["modules"] = sorted(ln.split()[0] for ln in
                                   Path("/proc/modules").read_text().splitlines())
        result["ok"] = not result["errors"]
    except Exception:
        result["errors"].append(traceback.format_exc()[-2000:])
    result["guest_total_s"] = time.monotonic() - t0
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
