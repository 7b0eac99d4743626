"""Process entry: `python -m rig.realization.emul.engine --queues F R --control SOCK --profile JSON`.

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
    a = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
