"""bench/srtt_inflation.py: srtt minus the validated ping RTT per transfer, slow start left
out, the data connection chosen by acknowledged bytes (pure: a small results.sqlite)."""
import importlib.util
import json
import sqlite3
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_srtt_inflation", Path(__file__).resolve().parents[1] / "bench" / "srtt_inflation.py")
assert _spec and _spec.loader
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

INF = bench.SSTHRESH_INFINITE


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "results.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE validations (step, phase, path, rtt_ms_measured, capacity_bps, "
                "iperf_bps)")
    con.execute("CREATE TABLE transfers (step, path, client, rtt_ms_configured, repeat, "
                "throughput_bps, extra, rate_bps_configured, ok)")
    con.execute("CREATE TABLE tcp_samples (transfer_id, conn, t_s, srtt_us, ssthresh_segs, "
                "cwnd_segs, in_flight_pkts, mss_bytes, bytes_acked)")
    con.execute("INSERT INTO validations VALUES (0, 'before', 'p', 20.0, 2e8, 1.9e8)")
    con.execute("INSERT INTO validations VALUES (0, 'after', 'p', 90.0, 2e8, 1.9e8)")
    con.execute("INSERT INTO transfers VALUES (0, 'p', 'iperf3-bbr', 20, 0, 1.9e8, ?, 2e8, 1)",
                (json.dumps({"srtt_ms": 31.0, "srtt_max_ms": 44.0, "sender_cc": "bbr"}),))
    rows = [  # control connection: no bytes, base RTT; must be ignored
        (1, 0, 1.0, 20000, INF, 10, 0, 1448, 100),
        # data connection: slow start at 200 ms (left out), then 30 / 30 / 40 ms
        (1, 1, 0.1, 200000, INF, 100, 100, 1448, 1e5),
        (1, 1, 1.0, 30000, 300, 700, 500, 1448, 1e7),
        (1, 1, 2.0, 30000, 300, 700, 500, 1448, 2e7),
        (1, 1, 3.0, 40000, 300, 700, 500, 1448, 3e7)]
    con.executemany("INSERT INTO tcp_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return db


def test_inflation_against_the_ping_before_the_transfers(tmp_path):
    (r,) = bench.rows(_db(tmp_path))
    assert r["samples"] == 3                       # slow start and control connection out
    assert r["infl_median_ms"] == 10.0 and r["infl_p95_ms"] == 20.0
    assert r["infl_mean_ms"] == 13.3
    assert r["iperf_srtt_infl_ms"] == 11.0 and r["cc"] == "bbr"
    assert r["bdp_pkts"] == round(2e8 / 8 * 0.020 / 1448)   # validated capacity x ping
    assert r["in_flight_median"] == 500


def test_cli_refuses_a_folder_without_results(tmp_path, capsys):
    assert bench.main([str(tmp_path)]) == 2
    assert "no results.sqlite" in capsys.readouterr().err
