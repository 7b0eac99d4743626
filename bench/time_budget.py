"""Where the wall time of stored runs went (issue 25), from their `actions` tables.

    sudo flock /tmp/rig-bench.lock .venv/bin/rig run scenarios/quick.yaml --out /tmp/q1
    .venv/bin/python bench/time_budget.py /tmp/q1 [/tmp/q2 ...]

Per run: the phases (rig.results.budget), and the client processes' own time
(concurrency-1 transfers' duration_s summed) against the wall.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rig.results.budget import budget, budget_rows, summary
from rig.results.store import Store


def main(dirs: list[str]) -> int:
    for d in dirs:
        st = Store.open(Path(d))
        try:
            rows, transfers = st.actions(), st.transfers()
        finally:
            st.close()
        b = budget(rows)
        if b is None:
            print(f"{d}: no actions table (a run from before issue 25)")
            continue
        print(d, "\n ", summary(b))
        for r in budget_rows(b):
            print("   ", *r)
        spans = sum(t.duration_s or 0 for t in transfers if t.concurrency == 1)
        print(f"    client processes (concurrency 1, summed): {spans:.2f} s = "
              f"{100 * spans / b.wall_s:.1f} % of wall")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
