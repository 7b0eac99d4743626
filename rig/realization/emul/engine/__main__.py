"""Process entry: `python -m rig.realization.emul.engine --queues F R --control SOCK --profile JSON`.

With `--native BIN` the data path is the native engine (tools/rig-emul-engine, engine/native.py):
this process loads the eBPF stamp and audit programs (bpf.py; they need only the bpf()
syscall) and execs BIN with the same arguments and the audit maps' descriptors, so the
programs' links belong to the native engine and die with it.

Runs inside the router namespace (started by rig.realization.emul.userspace through rig.process.proc).
Exit status 0 on SIGTERM/SIGINT, 1 when the queues cannot be bound.
Must not import anything above rig.realization.emul.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rig.description.profile import LinkProfile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rig.realization.emul.engine")
    ap.add_argument("--queues", type=int, nargs=2, required=True, metavar=("FWD", "REV"),
                    help="NFQUEUE numbers of the forward and reverse direction")
    ap.add_argument("--control", type=Path, required=True, help="unix socket to create")
    ap.add_argument("--profile", type=Path, required=True, help="LinkProfile as JSON")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stamp-ifs", nargs=2, default=None, metavar=("CLIENT_IF", "SERVER_IF"),
                    help="the router's interfaces towards the client and the server: "
                    "arrival stamps and the wire audit in the kernel (tcx eBPF)")
    ap.add_argument("--native", default=None, metavar="BIN",
                    help="exec the native engine BIN (tools/rig-emul-engine) for the data path")
    a = ap.parse_args(argv)
    if a.native:
        return exec_native(a)
    from rig.realization.emul.engine.server import Engine      # after argparse: --help works without netlink
    try:
        profile = LinkProfile.from_dict(json.loads(a.profile.read_text()))
        engine = Engine(tuple(a.queues), profile, a.control, seed=a.seed,
                        stamp_ifs=tuple(a.stamp_ifs) if a.stamp_ifs else None)
    except (OSError, ValueError, KeyError) as e:
        print(f"engine: cannot start: {e}", file=sys.stderr, flush=True)
        return 1
    asyncio.run(engine.run())
    return 0


def exec_native(a: argparse.Namespace) -> int:
    """Load the stamp/audit programs here, then become the native engine (never returns
    unless the exec fails)."""
    import os
    argv = [a.native, "--queues", str(a.queues[0]), str(a.queues[1]),
            "--control", str(a.control), "--profile", str(a.profile)]
    if a.seed is not None:
        argv += ["--seed", str(a.seed)]
    if a.stamp_ifs:
        from rig.realization.emul.engine import bpf
        from rig.realization.emul.engine.server import Timing
        argv += ["--stamp-ifs", *a.stamp_ifs]
        stamp = Timing.from_env().stamp
        try:
            st = bpf.Stamper(tuple(a.stamp_ifs), stamp=stamp)
            for fd in st.fds:
                os.set_inheritable(fd, True)     # the links must outlive the exec
            argv += ["--bpf-maps", str(st.cfg), str(st.stats)]
            if not stamp:
                argv += ["--stamp-note", "kernel NFQA stamp when some socket asked for one, "
                         "else read time (stamp=0); audited at tcx-egress"]
        except (OSError, ValueError) as e:
            argv += ["--stamp-note", "kernel NFQA stamp when some socket asked for one, else "
                     f"read time (tcx unavailable: {e}); no wire audit"]
    print(f"engine: exec native {a.native}", flush=True)
    try:
        os.execv(a.native, argv)
    except OSError as e:
        print(f"engine: cannot start: native engine {a.native}: {e}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
