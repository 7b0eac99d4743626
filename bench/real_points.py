"""Extract the measured points of a real run into a small JSON for the simulation tests
of `rig compare` and `rig history` (tests/data/compare/*.json):

    .venv/bin/python bench/real_points.py RUN_DIR tests/data/compare/quick-real.json

Keeps per point its key, every successful repeat's aggregate throughput (bits/s), the
failures, and where it was measured (kernel, backends, tool versions, load average when
extracted is not known: say it in the commit)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rig.report.model import key_order, load_run


def main(run_dir: str, out: str) -> int:
    run = load_run(Path(run_dir))
    pts = sorted(run.points, key=lambda p: key_order(p.key))
    doc = {"source": {"run_id": run.run_id, "created": run.meta.get("created"),
                      "kernel": run.env.get("kernel"), "hostname": run.env.get("hostname"),
                      "cpus": run.env.get("cpus"), "backends": run.env.get("backends"),
                      "tools": run.env.get("tools"),
                      "scenario": run.env.get("scenario_file")},
           "points": [{"path": p.key.path, "rtt_ms": p.key.rtt_ms, "client": p.key.client,
                       "streams": p.key.streams, "concurrency": p.key.concurrency,
                       "samples_bps": p.samples_bps, "failed": p.failed} for p in pts]}
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(pts)} points -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
