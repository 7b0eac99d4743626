"""Copy a real run's results.sqlite for the tests, without its bulk: tcp_samples and
capture rows are deleted, the file vacuumed; every transfer, validation, engine and
environment row stays as measured.

    .venv/bin/python bench/strip_run.py RUN_DIR tests/data/compare/lfn-real
"""
from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path


def main(run_dir: str, out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "results.sqlite"
    shutil.copyfile(Path(run_dir) / "results.sqlite", db)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t in ("tcp_samples", "capture_flows", "thread_samples"):
        if t in tables:
            con.execute(f"DELETE FROM {t}")
    con.commit()
    con.execute("VACUUM")
    con.close()
    print(f"{db}: {db.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
