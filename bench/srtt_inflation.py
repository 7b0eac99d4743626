"""RTT inflation per transfer of a stored run (seed 004, E37: "BBR kept RTT inflation < 5 ms").

    python bench/srtt_inflation.py reports/RUN/ [--csv out.csv]

For each transfer: the sending side's srtt, from the rig's tcp_info samples of its data
connection (the connection that acknowledged the most bytes; iperf3's control connection
carries none), minus the step's validated ping RTT (the path check before the transfers,
no load on the path). Samples while the connection is still in slow start (ssthresh not
yet set) are left out, as the verdicts leave slow start out; a transfer's inflation is
given as the median and the 95th percentile of what is left, and its mean. iperf3 rows also
carry iperf3's own view (extra.srtt_ms: mean of the sender's srtt, extra.srtt_max_ms), shown
beside for a cross-check. Alongside: cwnd and packets in flight after slow start against the
bandwidth-delay product of the validated capacity and the ping RTT, so a standing queue of
about (in flight - BDP) packets reads off directly.

Reads results.sqlite only (no root, no network).
"""
from __future__ import annotations

import argparse
import csv
import json
import sqlite3
import statistics
import sys
from pathlib import Path

SSTHRESH_INFINITE = 0x7FFFFFFF


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def rows(db: Path) -> list[dict]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    ping = {(r["step"], r["path"]): (r["rtt_ms_measured"], r["capacity_bps"] or r["iperf_bps"])
            for r in con.execute("SELECT step, path, rtt_ms_measured, capacity_bps, iperf_bps "
                                 "FROM validations WHERE phase = 'before'")}
    out = []
    for t in con.execute("SELECT rowid, step, path, client, rtt_ms_configured, repeat, "
                         "throughput_bps, extra, rate_bps_configured FROM transfers WHERE ok = 1 "
                         "ORDER BY rowid"):
        conns = con.execute("SELECT conn, MAX(bytes_acked) AS b FROM tcp_samples "
                            "WHERE transfer_id = ? GROUP BY conn ORDER BY b DESC",
                            (t["rowid"],)).fetchall()
        if not conns:
            continue
        ss = con.execute("SELECT srtt_us, ssthresh_segs, cwnd_segs, in_flight_pkts, mss_bytes "
                         "FROM tcp_samples WHERE transfer_id = ? AND conn = ? ORDER BY t_s",
                         (t["rowid"], conns[0]["conn"])).fetchall()
        steady = [s for s in ss if s["ssthresh_segs"] not in (None, SSTHRESH_INFINITE)
                  and s["srtt_us"]]
        base, cap = ping.get((t["step"], t["path"]), (None, None))
        if not steady or base is None:
            continue
        infl = [s["srtt_us"] / 1e3 - base for s in steady]
        extra = json.loads(t["extra"] or "{}")
        mss = steady[-1]["mss_bytes"] or 1448
        bdp = (cap or t["rate_bps_configured"] or 0) / 8 * base / 1e3 / mss
        out.append({
            "client": t["client"], "path": t["path"], "rtt_ms": t["rtt_ms_configured"],
            "repeat": t["repeat"] + 1, "mbps": round((t["throughput_bps"] or 0) / 1e6, 1),
            "ping_ms": round(base, 2), "samples": len(steady),
            "infl_median_ms": round(statistics.median(infl), 1),
            "infl_p95_ms": round(_pct(infl, 0.95), 1),
            "infl_mean_ms": round(statistics.fmean(infl), 1),
            "iperf_srtt_infl_ms": (round(extra["srtt_ms"] - base, 1)
                                   if extra.get("srtt_ms") is not None else None),
            "iperf_srtt_max_ms": extra.get("srtt_max_ms"),
            "cc": extra.get("sender_cc"),
            "bdp_pkts": round(bdp),
            "cwnd_median": round(statistics.median(s["cwnd_segs"] for s in steady)),
            "in_flight_median": round(statistics.median(s["in_flight_pkts"] or 0
                                                         for s in steady)),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (holds results.sqlite)")
    ap.add_argument("--csv", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    db = a.run / "results.sqlite"
    if not db.is_file():
        print(f"srtt_inflation: {db}: no results.sqlite", file=sys.stderr)
        return 2
    rs = rows(db)
    if not rs:
        print(f"srtt_inflation: {db}: no transfer with tcp_info samples", file=sys.stderr)
        return 1
    keys = list(rs[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rs:
        print("| " + " | ".join("" if r[k] is None else str(r[k]) for k in keys) + " |")
    if a.csv:
        with a.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
