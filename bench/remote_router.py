"""The router role on a remote host, measured between three sshd hosts in namespaces
(tests/sshhost.py three_hosts: dtn2 -- rtr -- dtn1, routed through rtr):

1. `engine`: the wall time of applying and removing the userspace emulation (engine
   start until it answers, TBF, NFQUEUE rules; then the reverse) on rtr through SSH
   (LinkSite.host) against the same namespace driven from here (`ip netns exec`), N
   each, alternating.
2. `runs`: scenarios/three-hosts.example.yaml (xrdcp -S4 and curl on dtn2, xrootd and
   nginx on dtn1, 20 ms on rtr) against the same scenario on a local emulated path
   (client-router-server namespaces, userspace engine), alternating, ROUNDS each: ping
   RTT of every validation and the per-client throughput, medians.

    flock /tmp/rig-bench.lock .venv/bin/python bench/remote_router.py [N] [ROUNDS] [SIZE] [REPEATS]

`end` mode: the router role on an end host (scenarios/end-router.example.yaml, the
engine on dtn1, one veth pair dtn1 -- dtn2 added to the three hosts) against the third
host (rtr) and a local emulated path, the three alternating, ROUNDS each; and the
engine's apply/remove on dtn1's path interface through SSH (with a 2 Gbit/s rate: TBF
and the IFB redirect included) against the third host's:

    flock /tmp/rig-bench.lock .venv/bin/python bench/remote_router.py end [N] [ROUNDS] [SIZE] [REPEATS]
"""
from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sshhost import three_hosts  # noqa: E402
from test_remote_router import _scenario  # noqa: E402

import yaml  # noqa: E402

from rig.description.profile import Direction, LinkProfile  # noqa: E402
from rig.process import proc  # noqa: E402
from rig.realization.emul.base import LinkSite  # noqa: E402
from rig.realization.emul.userspace import UserspaceBackend  # noqa: E402


def engine_cost(t, n: int, tmp: Path) -> dict[str, list[float]]:
    r = t.router
    d = Direction(delay_s=0.010, rate_bps=2e9)
    prof = LinkProfile(forward=d, reverse=d)
    host = r.host("rtr", control_path=str(tmp / "ctl-rtr"), rundir_base="/dev/shm")
    master = proc.open_master(host)
    prefix = "rig" + r.prefix[3:]            # a prefix of the test's own lease
    common = dict(path="bench", prefix=prefix, to_client_if=t.client_link.a_dev,
                  to_server_if=t.server_link.b_dev, client_net="10.0.0.0/30",
                  server_net="10.0.0.4/30", queue_base=4000)
    sites = {"remote (ssh)": LinkSite(router_ns="", workdir=Path(f"/dev/shm/{prefix}/bench"),
                                      host=host, **common),
             "local (ip netns exec)": LinkSite(router_ns=r.ns, workdir=tmp / "local",
                                               **common)}
    out: dict[str, list[float]] = {}
    try:
        out = apply_remove_times(sites, n, tmp, prof)
    finally:
        proc.run(["rm", "-rf", f"/dev/shm/{prefix}"], timeout=20)
        master.stop()
    return out


def apply_remove_times(sites: dict, n: int, tmp: Path, prof) -> dict[str, list[float]]:
    """Wall of the userspace engine's apply and remove on each site, n rounds alternating."""
    out: dict[str, list[float]] = {f"{k} {w}": [] for k in sites for w in ("apply", "remove")}
    for _ in range(n):
        for label, site in sites.items():
            be = UserspaceBackend(local_logs=tmp / "logs")
            t0 = time.monotonic()
            be.apply(site, prof)
            t1 = time.monotonic()
            be.remove(site)
            t2 = time.monotonic()
            out[f"{label} apply"].append(t1 - t0)
            out[f"{label} remove"].append(t2 - t1)
    return out


def local_copy(tmp: Path, remote_yaml: Path) -> Path:
    d = yaml.safe_load(remote_yaml.read_text())
    d.pop("hosts")
    p = d["paths"][0]
    for k in ("server_host", "client_host", "server_addr", "router_host", "router_ifaces"):
        p.pop(k)
    p["backend"] = "userspace"
    d["topology"] = "client-router-server"
    d["name"] = "three-hosts-local"
    f = tmp / "local.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


def run_once(f: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(f), "--out", str(out)],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode:
        raise SystemExit(r.stderr[-2500:])
    c = sqlite3.connect(out / "results.sqlite")
    tput: dict[str, list[float]] = {}
    for client, bps, ok in c.execute("SELECT client, throughput_bps, ok FROM transfers"):
        assert ok, (out, client)
        tput.setdefault(client, []).append(bps / 1e9)
    pings = [x for (x,) in c.execute("SELECT rtt_ms_measured FROM validations")]
    late = [x for (x,) in c.execute("SELECT emulation_late FROM engine_stats")]
    for (why,) in c.execute("SELECT emulation_late_reason FROM engine_stats "
                            "WHERE emulation_late"):
        print(f"  {out.name}: EMULATION LATE: {why}")
    return {"tput": tput, "ping": pings, "late": late}


def end_engine_cost(t, link, n: int, tmp: Path) -> dict[str, list[float]]:
    """Apply/remove of the userspace emulation through SSH: on dtn1 as an end host (one
    interface, rules in INPUT/OUTPUT, TBF + IFB) and on rtr as a third host."""
    d = Direction(delay_s=0.010, rate_bps=2e9, loss=0.001)
    prof = LinkProfile(forward=Direction(delay_s=0.010, rate_bps=2e9), reverse=d)
    hs = {"end host": t.server.host("dtn1", control_path=str(tmp / "ctl-dtn1"),
                                    rundir_base="/dev/shm"),
          "third host": t.router.host("rtr", control_path=str(tmp / "ctl-rtr"),
                                      rundir_base="/dev/shm")}
    masters = [proc.open_master(h) for h in hs.values()]
    prefix = "rig" + t.router.prefix[3:]
    sites = {"end host": LinkSite(path="bench", prefix=prefix, router_ns="",
                                  to_client_if=link.a_dev, to_server_if=link.a_dev,
                                  client_net=link.a_addr, server_net=link.a_addr,
                                  queue_base=4000, workdir=Path(f"/dev/shm/{prefix}/bench"),
                                  host=hs["end host"], end="server", ifb=f"{prefix}-9ifb"),
             "third host": LinkSite(path="bench", prefix=prefix, router_ns="",
                                    to_client_if=t.client_link.a_dev,
                                    to_server_if=t.server_link.b_dev, client_net="10.0.0.0/30",
                                    server_net="10.0.0.4/30", queue_base=4002,
                                    workdir=Path(f"/dev/shm/{prefix}/bench3"),
                                    host=hs["third host"])}
    out: dict[str, list[float]] = {}
    try:
        out = apply_remove_times(sites, n, tmp, prof)
    finally:
        proc.run(["rm", "-rf", f"/dev/shm/{prefix}"], timeout=20)
        for m in masters:
            m.stop()
    return out


def end_scenario(tmp: Path, t, link, *, size: str, repeats: int) -> Path:
    """scenarios/end-router.example.yaml on dtn1 -- dtn2 (the engine on dtn1), shaped as
    the three-host scenario of this bench (no rate, no tuning)."""
    d = yaml.safe_load(Path(__file__).resolve().parent.parent.joinpath(
        "scenarios/end-router.example.yaml").read_text())
    for name, h in (("dtn1", t.server), ("dtn2", t.client)):
        d["hosts"][name].update(ssh=f"root@{h.addr}", identity=str(h.identity),
                                known_hosts=str(h.known_hosts),
                                rundir=f"/dev/shm/rig-bench-end/{name}")
    d["paths"][0].update(server_addr=link.a_addr, router_iface=link.a_dev)
    d["files"] = [{"name": "f256M", "size": size}]
    d["sweep"] = {"repeats": repeats}
    d["tuning"] = {}
    d["validation"] = {"ping_count": 20, "iperf_duration": "3s", "iperf_streams": 2}
    d["transfer_timeout"] = "60s"
    f = tmp / "end-router.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


def report(label: str, rs: list[dict], rounds: int, size: str) -> None:
    pings = [p for r in rs for p in r["ping"]]
    print(f"{label}: ping RTT median {statistics.median(pings):.3f} ms, min "
          f"{min(pings):.3f}, max {max(pings):.3f} (n={len(pings)} validations "
          f"of 20 pings, {rounds} runs); EMULATION LATE steps "
          f"{sum(x for r in rs for x in r['late'])}/{sum(len(r['late']) for r in rs)}")
    for client in rs[0]["tput"]:
        v = [x for r in rs for x in r["tput"][client]]
        print(f"  {client}: median {statistics.median(v):.3f} Gbit/s, min "
              f"{min(v):.3f}, max {max(v):.3f} (n={len(v)}, {size})")


def main_end(args: list[str]) -> None:
    from sshhost import link_hosts
    n = int(args[0]) if args else 5
    rounds = int(args[1]) if len(args) > 1 else 3
    size = args[2] if len(args) > 2 else "256MiB"
    repeats = int(args[3]) if len(args) > 3 else 3
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with three_hosts(tmp / "hosts") as t, link_hosts(t.server, t.client) as link:
            if n:
                for k, v in end_engine_cost(t, link, n, tmp).items():
                    print(f"engine {k}: median {statistics.median(v):.3f} s, "
                          f"min {min(v):.3f}, max {max(v):.3f} (n={len(v)})")
            three = (t.server, t.client, t.router, t.client_link, t.server_link)
            remote = _scenario(tmp, three, iperf_s=3, repeats=repeats, size=size)
            d = yaml.safe_load(remote.read_text())      # not the test's base: its fixture
            for name, h in d["hosts"].items():           # removes that when it ends
                h["rundir"] = f"/dev/shm/rig-bench-end/three-{name}"
            remote.write_text(yaml.safe_dump(d, sort_keys=False))
            runs = {"end host (dtn1)": end_scenario(tmp, t, link, size=size, repeats=repeats),
                    "third host (rtr)": remote, "local router": local_copy(tmp, remote)}
            got: dict[str, list[dict]] = {k: [] for k in runs}
            try:
                for i in range(rounds):
                    for j, (label, f) in enumerate(runs.items()):
                        got[label].append(run_once(f, tmp / f"run{j}-{i}"))
            finally:
                proc.run(["rm", "-rf", "/dev/shm/rig-bench-end"], timeout=20)
            for label, rs in got.items():
                if rs:
                    report(label, rs, rounds, size)


def main() -> None:
    if sys.argv[1:2] == ["end"]:
        return main_end(sys.argv[2:])
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    size = sys.argv[3] if len(sys.argv) > 3 else "256MiB"
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with three_hosts(tmp / "hosts") as t:
            if n:
                for k, v in engine_cost(t, n, tmp).items():
                    print(f"engine {k}: median {statistics.median(v):.3f} s, "
                          f"min {min(v):.3f}, max {max(v):.3f} (n={len(v)})")
            three = (t.server, t.client, t.router, t.client_link, t.server_link)
            remote = _scenario(tmp, three, iperf_s=3, repeats=repeats, size=size)
            local = local_copy(tmp, remote)
            got: dict[str, list[dict]] = {"remote router": [], "local router": []}
            for i in range(rounds):
                for label, f in (("remote router", remote), ("local router", local)):
                    got[label].append(run_once(f, tmp / f"{label[:5]}-{i}"))
            for label, rs in got.items():
                report(label, rs, rounds, size)


if __name__ == "__main__":
    main()
