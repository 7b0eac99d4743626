"""Caching-mode replays over TLS (issue 26 item 4), tests/data/scenarios/replay-tls-small.yaml:
XrdCl over roots://, libdavix and libcurl over https:// to XrdHttp, nginx and Apache, each
with and without TLS. Every replay reads the bytes of its plan (checksum against the file)
through the real library, trusting only the run's CA."""
import json
from pathlib import Path

import pytest

from rig.realization import netns

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/replay-tls-small.yaml"


def test_every_replay_library_reads_over_tls(tmp_path, require_tools, run_rig):
    require_tools("xrootd", "nginx", "apache2", "openssl")
    from rig.services.replay import http_helper
    assert http_helper.path() is not None, "rig-replay-http not built (make install)"
    st = run_rig(SCEN, tmp_path / "run")
    rows = st.transfers()
    bad = [(x.client, x.tls, x.error) for x in rows if not x.ok]
    assert not bad, bad
    assert sorted((x.client, x.tls) for x in rows) == sorted(
        (c, t) for c in ("storage-xrootd", "app-davix-nginx", "lazy-curl-apache",
                         "app-davix-xrootd") for t in ("off", "all"))
    for x in rows:
        scheme = x.url.split("://")[0]
        want = {("xrootd", "off"): "root", ("xrootd", "all"): "roots"}.get(
            (x.read_library, x.tls), "https" if x.tls == "all" else "http")
        assert scheme == want, (x.client, x.url)
        argv = json.loads(x.argv)
        if x.tls == "all":
            assert "--ca-dir" in argv and "-k" not in argv and "--insecure" not in argv
        extra = json.loads(x.extra)
        assert extra["checksum"] == extra["expected_checksum"]
        assert x.requests >= 1 and x.bytes > 0
    prefix = st.environment()["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
