"""Many small files end to end (issue 40 item 7): tests/data/scenarios/small-files-e2e.yaml
run as a user runs it, with `rig run --corrupt bad`. The rig makes the sets `small` (20 x
64 KiB) and `bad` (4 x 64 KiB), takes each file's adler32, then changes one byte of
bad/00002. Real xrootd, xrdcp, curl and davix-get at 0 and 20 ms: every file of `small`
arrives intact through every client, files/s is positive, curl in one invocation opens
one TCP connection for the 20 files and one curl per file opens 20 (curl's own
num_connects); every client of `bad` fails its row naming the changed file. No speed
figure is asserted; the time to the first byte at 20 ms is asserted only at or above one
round trip (a delay the emulated path adds whatever the load)."""
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/small-files-e2e.yaml"


def test_small_files_arrive_intact_and_a_changed_one_fails_its_row(tmp_path, require_tools):
    require_tools("xrootd", "xrdcp", "curl", "davix-get")
    from rigrun import rig_run
    from rig.results.store import Store
    run = rig_run(SCEN, tmp_path / "run", timeout=300, args=("--corrupt", "bad"))
    assert "--corrupt: byte 32768 of bad/00002 changed" in run.stderr
    st = Store.open(run.out)
    try:
        rows, env = st.transfers(), st.environment()
    finally:
        st.close()
    made = env["file_adler32"]
    assert len(made) == 24 and made["small/00019"] and env["corrupted"]["file"] == "bad/00002"
    assert sorted({r.rtt_ms_configured for r in rows}) == [0.0, 20.0]
    assert len(rows) == 14
    for r in rows:
        e = json.loads(r.extra)
        if r.client.endswith("-bad"):
            assert not r.ok, r.client
            assert r.error.startswith("1 of 4 files failed their check; first: bad/00002: "
                                      "adler32 mismatch: got "), (r.client, r.error)
            assert r.error.endswith(f"want {made['bad/00002']}"), r.error
            assert r.files_per_s is None and r.aggregate_bps is None
            continue
        assert r.ok, (r.client, r.rtt_ms_configured, r.error)
        assert e["checksum"] == {"how": "kept", "algo": "adler32", "files": 20,
                                 "mismatched": 0}, (r.client, e["checksum"])
        assert r.files == 20 and r.files_per_s > 0 and r.bytes == 20 * 65536
        assert r.ttfb_s is not None and r.ttfb_s > 0, r.client
        if r.rtt_ms_configured == 20.0:     # a new connection: at least one round trip
            assert r.ttfb_s >= 0.02, (r.client, r.ttfb_s)
        if r.client == "curl":              # one invocation: the connection reused
            assert r.connections == 1, (r.rtt_ms_configured, e["files"])
            assert [f["connects"] for f in e["files"]] == [1] + [0] * 19
        elif r.client == "curl-each":       # one curl per file: a connection each
            assert r.connections == 20 and all(f["connects"] == 1 for f in e["files"])
        elif r.client == "davix-get":       # one process per file, by construction
            assert r.connections == 20 and r.connect_s_per_file is None
        else:
            assert r.connections is None    # xrdcp does not say
        assert r.tls_s_per_file is None     # plain
    assert not (run.out / "downloads").exists()
