"""Overhead of the caching replay's HTTP client: the native helper (libdavix, libcurl:
tools/rig-replay-http) against the old Python http.client path, on loopback (0 ms),
alternating, medians of the repeats.

Starts nginx (by the rig's own server adapter) on 127.0.0.1 over a generated ROOT file
and runs `python -m rig.services.replay` with `--http-engine helper` and `python`
alternately for each plan. Per run it reads the replay's own wall and CPU (replay phase
only) and the client process tree's CPU (wait4, start-up and planning included).

    flock /tmp/rig-bench.lock .venv/bin/python bench/replay_http.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from rig.description.rootfile import generate
from rig.description.scenario.clients import ServerSpec
from rig.process import proc
from rig.services.servers import ServerPlan
from rig.services.servers.start import start_server

MiB = 1 << 20
CASES = [("storage", "davix"), ("application", "davix"), ("lazy-download", "davix"),
         ("lazy-download", "curl")]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _once(url: str, path: Path, mode: str, lib: str, engine: str, fraction: float) -> dict:
    r = proc.run([sys.executable, "-m", "rig.services.replay", "--url", url, "--file", str(path),
                  "--mode", mode, "--library", lib, "--branches", str(fraction),
                  "--http-engine", engine, "--timeout", "120"], timeout=180, check=True)
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["checksum"] == d["expected_checksum"], d
    d["tree_cpu_s"] = r.cpu_user_s + r.cpu_sys_s
    return d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=32 * MiB)
    ap.add_argument("--fraction", type=float, default=1.0)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rig-bench-replay-"))
    os.chmod(base, 0o755)
    srv = None
    try:
        data = base / "data"
        data.mkdir(mode=0o755)
        src = generate.ensure(generate.FileSpec(size_bytes=a.size, n_branches=50,
                                                cluster_bytes=2 * MiB, seed=1), base / "cache")
        path = data / "f.root"
        shutil.copyfile(src, path)
        os.chmod(path, 0o644)
        sp = ServerPlan(ServerSpec("benchreplay", "nginx"), None, "127.0.0.1",
                        {"http": _port()}, base / "srv", data)
        srv = start_server(sp)
        url = sp.url("http", "f.root")
        print(f"file {path.stat().st_size} bytes, nginx on loopback, {a.repeats} repeats "
              f"alternating helper/python, branches {a.fraction:.0%}")
        print("| plan | library | requests | engine | wall s (median) | wall per request ms | "
              "replay CPU s | CPU per request ms | process tree CPU s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for mode, lib in CASES:
            runs: dict[str, list[dict]] = {"helper": [], "python": []}
            for _ in range(a.repeats):
                for engine in ("helper", "python"):
                    runs[engine].append(_once(url, path, mode, lib, engine, a.fraction))
            for engine, rs in runs.items():
                n = rs[0]["requests"]
                wall = statistics.median(r["wall_s"] for r in rs)
                cpu = statistics.median(r["cpu_user_s"] + r["cpu_sys_s"] for r in rs)
                tree = statistics.median(r["tree_cpu_s"] for r in rs)
                print(f"| {mode} | {lib} | {n} | {engine} | {wall:.4f} | {1e3 * wall / n:.3f} | "
                      f"{cpu:.4f} | {1e3 * cpu / n:.3f} | {tree:.3f} |")
                print(f"<!-- {mode} {lib} {engine} walls "
                      f"{[round(r['wall_s'], 4) for r in rs]} -->")
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
