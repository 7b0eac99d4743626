"""Issue 42 item 3: the native engine (tools/rig-emul-engine) against the Python engine,
side by side in one run, alternating (the order swaps every repeat), on one
client—router—server path; both with the kernel arrival stamps and the wire audit
(tcx eBPF). The measurement of each (engine, RTT, repeat) is bench/engine_stamps.py's
`one`: idle ping and a 20 Mbit/s stream's srtt, then iperf3 -P 8 for --secs with a ping
beside it, the audit's early packets and p99, the engine's CPU. Each repeat also runs
iperf3 -P 8 with no emulation at all (the raw veth path, 0 ms), the throughput reference.
Prints a markdown table of medians over --repeats (and every sample with --json).

    make helpers    # builds tools/rig-emul-engine
    flock /tmp/rig-bench.lock .venv/bin/python bench/native_engine.py [--repeats 3]
        [--rtts 10 50 120] [--secs 5] [--pings 50] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from rig.orchestration.run import signals_as_exceptions
from rig.realization import netns
from rig.realization.emul.choose import make_backend
from rig.realization.emul.engine import native

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_stamps  # noqa: E402
from emulation import iperf3_json, median, tune  # noqa: E402

ENGINES = ("python", "native")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rtts", type=float, nargs="+", default=[10.0, 50.0, 120.0])
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--pings", type=int, default=50)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if native.path() is None:
        print(f"bench: {native.NAME} is not built: {native.BUILD_HINT}", file=sys.stderr)
        return 2
    engine_stamps.VARIANTS = {e: "" for e in ENGINES}    # default timing for both
    be = make_backend("userspace")
    prefix = netns.new_prefix()
    workdir = netns.STATE_DIR / prefix
    netns.write_state(prefix, {"kind": "run", "pid": os.getpid(),
                               "what": "bench/native_engine.py"})
    samples: list[dict] = []
    raw: list[float] = []
    try:
        with signals_as_exceptions(), netns.path_net(prefix, "bench", 0, workdir=workdir) as net:
            tune(net)
            for r in range(a.repeats):
                j = iperf3_json(net, ["-P", "8", "-t", str(a.secs)], a.secs, "raw -P8")
                raw.append(j["end"]["sum_received"]["bits_per_second"] / 1e9)
                print(json.dumps({"raw_veth_gbps": raw[-1]}), flush=True)
                for rtt in a.rtts:
                    order = list(ENGINES) if r % 2 == 0 else list(reversed(ENGINES))
                    for e in order:
                        os.environ["RIG_ENGINE"] = e
                        s = engine_stamps.one(net, be, e, rtt, a)
                        samples.append(s)
                        print(json.dumps(s), flush=True)
    finally:
        os.environ.pop("RIG_ENGINE", None)
        netns.drop_state(prefix)
        shutil.rmtree(workdir, ignore_errors=True)
    rawm = median(raw)
    for s in samples:
        if "loaded" in s:
            s["loaded"]["x_raw"] = s["loaded"]["gbps"] / rawm
    engine_stamps.KEYS.append(("x_raw", "-P8 / raw veth", "{:.2f}"))
    print(f"\nmedians of {a.repeats} repeats, python/native alternating (kernel "
          f"{Path('/proc/sys/kernel/osrelease').read_text().strip()}); raw veth -P8 "
          f"(no emulation, 0 ms): {rawm:.2f} Gbit/s (samples {', '.join(f'{x:.2f}' for x in raw)})")
    print(engine_stamps.table(samples, a.rtts).replace("| old | new |", "| python | native |"))
    if a.json:
        a.json.write_text(json.dumps({"raw_veth_gbps": raw, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
