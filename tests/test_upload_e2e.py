"""Uploads end to end (issue 26): tests/data/scenarios/upload-small.yaml, every client
that can write (xrdcp, curl and davix-put to XrdHttp, nginx and Apache, scp, rig-fdt put)
beside its download, one and two at once, through a 20 ms path. Every upload's stored
copy has the sent file's size and adler32; the run leaves nothing behind."""
import json
from pathlib import Path

import pytest

from rig.realization import netns

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/upload-small.yaml"


def test_every_client_that_can_write_uploads_the_whole_file(tmp_path, require_tools, run_rig):
    require_tools("xrootd", "xrdcp", "curl", "davix-put", "nginx", "apache2", "sshd", "scp")
    st = run_rig(SCEN, tmp_path / "run")
    rows = st.transfers()
    bad = [(x.client, x.concurrency, x.error) for x in rows if not x.ok]
    assert not bad, bad
    up = [x for x in rows if x.direction == "upload"]
    assert sorted({x.client for x in up}) == sorted(
        f"{n}@upload" for n in ("xrdcp", "curl-xrootd", "davix-nginx", "curl-apache", "scp", "fdt"))
    assert len(up) == 6 * (1 + 2) and len(rows) == 13 * 3
    for x in up:
        e = json.loads(x.extra)
        assert x.bytes == 16 << 20 and e["upload_size"] == 16 << 20, (x.client, e)
        assert e["upload_adler32"] == e["source_adler32"], (x.client, e)
        assert x.throughput_bps > 1e6
    prefix = st.environment()["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
    assert not (netns.STATE_DIR / prefix).exists()
