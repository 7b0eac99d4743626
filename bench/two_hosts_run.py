"""One run of scenarios/two-hosts.example.yaml between two sshd hosts in namespaces
(tests/sshhost.py) joined by a veth pair: the example with the hosts, keys and address
substituted as tests/test_remote_two_hosts.py does, file size and repeats from the
command line. Prints the run folder and its per-client table (medians over repeats):
throughput, client CPU on dtn2, server CPU on dtn1, exit codes.

    flock /tmp/rig-bench.lock .venv/bin/python bench/two_hosts_run.py [SIZE] [REPEATS]
"""
from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from sshhost import link_hosts, ssh_host  # noqa: E402
from test_remote_two_hosts import _copy_of_example  # noqa: E402

import yaml  # noqa: E402


def table(db: Path) -> list[str]:
    c = sqlite3.connect(db)
    rows = c.execute("SELECT client, concurrency, repeat, aggregate_bps, "
                     "SUM(cpu_user_s + cpu_sys_s), SUM(server_cpu_user_s + server_cpu_sys_s), "
                     "GROUP_CONCAT(exit_code), MIN(ok), client_host, server_host "
                     "FROM transfers GROUP BY client, concurrency, repeat "
                     "ORDER BY MIN(rowid)").fetchall()
    groups: dict = {}
    for r in rows:
        groups.setdefault((r[0], r[1], r[8], r[9]), []).append(r)
    out = ["| client | on | server on | transfers | n | Gbit/s (median) | client CPU s | "
           "server CPU s | exit codes | ok |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (client, conc, ch, sh), rs in groups.items():
        med = statistics.median(r[3] or 0 for r in rs) / 1e9
        ccpu = statistics.median(r[4] or 0 for r in rs)
        scpu = [r[5] for r in rs if r[5] is not None]
        sc = f"{statistics.median(scpu):.2f}" if scpu else "n/a"
        codes = ",".join(sorted({x for r in rs for x in (r[6] or "").split(",")}))
        out.append(f"| {client} | {ch} | {sh} | {conc} | {len(rs)} | {med:.2f} | {ccpu:.2f} | "
                   f"{sc} | {codes} | {all(r[7] for r in rs)} |")
    v = c.execute("SELECT phase, rtt_ms_measured, iperf_bps FROM validations").fetchall()
    out += [f"validation {p}: ping {rtt:.3f} ms, iperf3 -P2 {bps / 1e9:.2f} Gbit/s"
            for p, rtt, bps in v]
    env = dict(c.execute("SELECT key, value_json FROM environment"))
    out.append("tuning_hosts: " + env.get("tuning_hosts", "null"))
    return out


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "256MiB"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        with ssh_host(tmp / "a") as a, ssh_host(tmp / "b") as b, link_hosts(a, b) as link:
            f = _copy_of_example(tmp, a, b, link, iperf_s=3)
            sc = yaml.safe_load(f.read_text())
            sc["files"][0]["size"] = size
            sc["sweep"] = {"repeats": repeats, "concurrency": [1, 4]}
            f.write_text(yaml.safe_dump(sc, sort_keys=False))
            out = Path(tempfile.mkdtemp(prefix="rig-two-hosts-"))
            r = subprocess.run([sys.executable, "-m", "rig", "run", str(f), "--out",
                                str(out / "run")], capture_output=True, text=True, timeout=1800)
            print(r.stderr[-2500:] if r.returncode else f"run folder {out / 'run'}")
            if r.returncode == 0:
                print("\n".join(table(out / "run" / "results.sqlite")))
                print(json.dumps(sc["tuning"]))


if __name__ == "__main__":
    main()
