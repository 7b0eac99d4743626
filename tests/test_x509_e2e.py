"""End-to-end, X.509 proxy access (issue 40 item 3): a rig-started xrootd with `auth:
x509` (GSI on root://, a client certificate over HTTPS, VOMS attributes read by
libXrdVoms); xrdcp, davix-get and curl with the run's valid VOMS proxy move the whole
file; with an expired proxy, one of a CA the server does not trust, or none, each fails
at once with the refusal in its row, never a throughput point. The CA, keys and proxies
are gone afterwards. tests/data/scenarios/x509-small.yaml."""
import json
import shutil
from pathlib import Path

import pytest

from rig.realization import netns
from rig.results.store import Store
from rigrun import rig_run

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/x509-small.yaml"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    missing = [t for t in ("xrootd", "xrdcp", "davix-get", "curl", "openssl",
                           "voms-proxy-fake") if shutil.which(t) is None]
    assert not missing, f"missing tools (make install): {missing}"
    out = tmp_path_factory.mktemp("x509") / "run"
    prefix = rig_run(SCEN, out, timeout=300).prefix
    assert not (netns.STATE_DIR / prefix).exists()      # CA, keys, proxies removed
    return out


def test_a_valid_proxy_reads_the_whole_file_with_each_client(run_dir):
    rows = {r.client: r for r in Store.open(run_dir).transfers()}
    for name in ("xrdcp", "davix-get", "curl"):
        r = rows[name]
        assert r.ok and r.error is None and r.bytes == 1 << 20, (name, r.error)
        assert r.throughput_bps
        argv, env = json.loads(r.argv), json.loads(r.env)
        if name == "xrdcp":
            assert r.url.startswith("root://")
            assert env["X509_USER_PROXY"].endswith("/tls/x509/proxy-valid.pem")
        else:
            assert r.url.startswith("https://")
            assert argv[argv.index("--cert") + 1].endswith("/tls/x509/proxy-valid.pem")
        # the proxy is named by its path only: no PEM text in argv or env
        assert "BEGIN" not in r.argv and "BEGIN" not in r.env


@pytest.mark.parametrize("client,says", [
    ("xrdcp-expired", "credential refused (expired proxy"),
    ("xrdcp-foreign", "credential refused (proxy of a CA the server does not trust"),
    ("xrdcp-missing", "credential refused (no proxy presented"),
    ("davix-expired", "credential refused (expired proxy"),
    ("davix-foreign", "credential refused (proxy of a CA the server does not trust"),
    ("curl-expired", "credential refused (expired proxy"),
    ("curl-foreign", "credential refused (proxy of a CA the server does not trust"),
    ("curl-missing", "credential refused (no proxy presented"),
])
def test_a_refused_credential_is_a_failed_row_saying_so(run_dir, client, says):
    r = {r.client: r for r in Store.open(run_dir).transfers()}[client]
    assert not r.ok and r.throughput_bps is None and not r.bytes
    assert r.error.startswith(says), r.error
    assert "deadline" not in r.error           # refused at once, never a hang
