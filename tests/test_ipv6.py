"""IPv6 literals: bracketed wherever a port or a path follows (issue 29 item 2).

A real path whose server address is IPv6 plans bracketed URLs, listen directives and
scp targets; run on the host's ::1 it moves the whole file with every client kind."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rig.netaddr import family, host, hostport
from rig.results.store import Store

REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/real-loopback6.yaml"


def test_literals_are_bracketed_only_when_v6():
    assert [family(a) for a in ("::1", "2001:db8::10", "198.18.0.2", "dtn1.example.org",
                                "[::1]")] == [6, 6, 4, 0, 6]
    assert host("2001:db8::10") == "[2001:db8::10]" and host("[::1]") == "[::1]"
    assert host("198.18.0.2") == "198.18.0.2" and host("dtn1") == "dtn1"
    assert hostport("::1", 1094) == "[::1]:1094" and hostport("10.0.0.1", 80) == "10.0.0.1:80"


def _plan(text: str, tmp_path: Path) -> str:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(f)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("addr", ["::1", "2001:db8::10"])
def test_a_v6_real_path_plans_bracketed_urls_and_listen_directives(addr, tmp_path):
    out = _plan(SCEN.read_text().replace('"::1"', f'"{addr}"'), tmp_path)
    b = f"[{addr}]"
    for want in (f"'root://{b}:1094//f16M'", f"'http://{b}:8090/f16M'",
                 f"'http://{b}:8091/f16M'", f"listen {b}:8090;", f"Listen {b}:8091",
                 f"ListenAddress {b}:", f"'www-data@{b}:/run/rig/", f"iperf3 -c {addr} -p 5201"):
        assert want in out, want
    # nowhere an unbracketed literal followed by a port
    assert not re.search(rf"(?<!\[){re.escape(addr)}:\d", out), out


@pytest.mark.e2e
def test_every_client_kind_moves_the_file_over_v6_loopback(tmp_path, require_tools):
    require_tools("xrootd", "xrdcp", "davix-get", "curl", "wget", "scp", "iperf3", "nginx",
                  "apache2", "sshd")
    if not Path("/proc/net/if_inet6").exists():
        pytest.skip("this kernel has no IPv6")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(SCEN), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    st = Store.open(out)
    rows = st.transfers()
    assert sorted((x["client"], x["ok"]) for x in rows) == [
        (c, 1) for c in sorted(("xrdcp", "davix", "curl", "wget", "scp", "fdt", "iperf3"))], \
        [(x["client"], x["error"]) for x in rows]
    assert all(x["bytes"] == 16 << 20 for x in rows if x["tool"] != "iperf3")
    v = st.validations()[0]
    assert v["rtt_ms_measured"] < 5.0 and v["capacity_bps"] > 1e8, v
