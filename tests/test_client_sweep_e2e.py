"""End-to-end: a path's own MTU is set on its links, and a client's own paths and sweep
decide where and how often it runs (seed 000's iperf3 at MTU 9000 beside 1500)."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.results.store import Store

pytestmark = pytest.mark.e2e


def test_path_mtu_and_client_sweep_in_a_real_run(tmp_path, require_tools):
    require_tools("iperf3", "curl", "xrootd")
    sc = {
        "name": "mtu-sweep-e2e",
        "paths": [{"name": "std", "rtt": ["0ms"], "backend": "none"},
                  {"name": "jumbo", "rtt": ["0ms"], "backend": "none", "mtu": 9000}],
        "files": [{"name": "f", "size": "8MiB"}],
        "servers": [{"name": "x", "kind": "xrootd"}],
        "clients": [{"name": "ip", "tool": "iperf3", "duration": "1s", "paths": ["jumbo"],
                     "sweep": {"concurrency": [2]}},
                    {"name": "c", "tool": "curl", "file": "f", "paths": ["std"],
                     "sweep": {"repeats": 2}}],
        "validation": {"ping_count": 3, "iperf_duration": "1s", "iperf_streams": 1},
        "sampling": {"tcp_info": "off"},
        "transfer_timeout": "60s",
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(path), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    st = Store.open(out)
    rows = {(t.path, t.client, t.concurrency, t.repeat, t.instance)
            for t in st.transfers() if t.ok}
    assert rows == {("jumbo", "ip", 2, 0, 0), ("jumbo", "ip", 2, 0, 1),
                    ("std", "c", 1, 0, 0), ("std", "c", 1, 1, 0)}
    log = Path(out / "commands.log").read_text()
    mtus = {ln.split(" mtu ")[1].split()[0] for ln in log.splitlines()
            if " link set " in ln and " mtu " in ln}
    assert mtus == {"1500", "9000"}
