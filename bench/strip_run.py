"""Copy a real run's results.sqlite for the tests, without its bulk: tcp_samples,
capture and thread rows are deleted, transfers outside --clients / --streams / --rtts
too, the file vacuumed; every other row stays as measured.

    .venv/bin/python bench/strip_run.py RUN_DIR tests/data/compare/real-run \\
        [--clients a,b] [--streams 1,2,4,8] [--rtts 0,20,60,120]
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="strip_run")
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--clients")
    ap.add_argument("--streams")
    ap.add_argument("--rtts")
    a = ap.parse_args(argv)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "results.sqlite"
    shutil.copyfile(Path(a.run_dir) / "results.sqlite", db)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t in ("tcp_samples", "capture_flows", "thread_samples"):
        if t in tables:
            con.execute(f"DELETE FROM {t}")
    for col, text, conv in (("client", a.clients, str), ("streams", a.streams, int),
                            ("rtt_ms_configured", a.rtts, float)):
        if text:
            keep = [conv(x) for x in text.split(",")]
            marks = ",".join("?" * len(keep))
            con.execute(f"DELETE FROM transfers WHERE {col} NOT IN ({marks})", keep)
    con.commit()
    con.execute("VACUUM")
    n = con.execute("SELECT count(*) FROM transfers").fetchone()[0]
    con.close()
    print(f"{db}: {db.stat().st_size} bytes, {n} transfers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
