"""End-to-end, reduced scenarios/tls-concurrency.yaml: xrdcp roots:// (all streams and
control only), davix-get and curl over HTTPS from XrdHttp and nginx, wget from Apache
(mod_ssl), trusting only the
run's CA; every transfer moves the whole file; server CPU recorded; the TLS cost table
is written; the CA and keys are gone afterwards."""
import json
from pathlib import Path

import pytest

from rig.realization import netns
from rig.results.store import Store
from rigrun import rig_run

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/tls-small.yaml"
FILE_BYTES = 32 << 20


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tls") / "run"
    prefix = rig_run(SCEN, out, timeout=900).prefix
    assert not (netns.STATE_DIR / prefix).exists()      # CA, keys, configs removed
    return out


def test_every_tls_mode_moved_the_whole_file(run_dir, require_tools):
    require_tools("xrootd", "xrdcp", "davix-get", "curl", "nginx", "apache2", "wget",
                  "openssl")
    rows = Store.open(run_dir).transfers()
    # 2 RTTs x concurrency (1 + 4) x (xrdcp 3 modes + davix, curl, curl-nginx,
    # wget-apache 2 + 1)
    assert len(rows) == 2 * 5 * (3 + 2 + 2 + 2 + 1 + 2)
    bad = [(r.client, r.tls, r.error) for r in rows if not r.ok]
    assert not bad
    assert all(r.bytes == FILE_BYTES for r in rows)
    modes = {}
    for r in rows:
        modes.setdefault(r.client, set()).add(r.tls)
        argv = json.loads(r.argv)
        assert "-k" not in argv and "--insecure" not in argv
        if r.tls == "off":
            assert r.url.startswith(("root://", "http://"))
        elif r.tool == "xrdcp":
            assert r.url.startswith("roots://")
            assert ("--tlsnodata" in argv) == (r.tls == "control")
            assert json.loads(r.env)["X509_CERT_DIR"].endswith("/tls/certs")
        else:
            assert r.url.startswith("https://")
    assert modes == {"xrdcp": {"off", "control", "all"}, "davix-get": {"off", "all"},
                     "curl": {"off", "all"}, "curl-nginx": {"off", "all"},
                     "davix-nginx-tls": {"all"}, "wget-apache": {"off", "all"}}


def test_server_cpu_recorded_and_tls_costs_the_server_more(run_dir):
    rows = Store.open(run_dir).transfers()
    assert all(r.server_cpu_user_s is not None and r.server_cpu_sys_s >= 0 for r in rows)

    def per_gb(sel):
        cpu = sum(r.server_cpu_user_s + r.server_cpu_sys_s for r in sel)
        return cpu / (sum(r.bytes for r in sel) / 1e9)
    http = [r for r in rows if r.tool in ("curl", "davix-get")]
    off = per_gb([r for r in http if r.tls == "off"])
    on = per_gb([r for r in http if r.tls == "all"])
    # encrypting costs the server: measured 0.6-0.9 s/GB with TLS vs 0-0.3 without
    assert on > 1.3 * off and on > 0.1, (on, off)


def test_tls_cost_report(run_dir):
    text = (run_dir / "tls_cost.md").read_text()
    assert "all_server_cpu_s_per_gb" in text and "control_gbit_s" in text
    assert (run_dir / "tls_cost.png").stat().st_size > 10_000
    # 2 RTTs x 2 concurrencies x 5 clients with TLS (xrdcp, davix-get, curl, curl-nginx,
    # wget-apache)
    assert len((run_dir / "tls_cost.csv").read_text().splitlines()) == 1 + 2 * 2 * 5
