"""Checksums end to end (issue 40 item 6): tests/data/scenarios/checksum-small.yaml run as
a user runs it, with `rig run --corrupt bad`. The rig makes `good` and `bad`, takes each
one's adler32, then changes one byte of the served `bad`; every client that fetches a
whole file (xrdcp --cksum, curl, davix-get, wget and scp into kept files, rig-fdt
--checksum, http-tpc's destination copy) must then fail on `bad` with the mismatch in its
row and pass on `good`. No figure is asserted."""
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/checksum-small.yaml"
TOOLS = ("xrdcp", "curl", "davix", "wget", "scp", "fdt", "tpc")


def test_a_corrupted_served_file_fails_every_client(tmp_path, require_tools):
    require_tools("xrootd", "xrdcp", "curl", "davix-get", "wget", "nginx", "sshd", "scp")
    from rigrun import rig_run
    from rig.results.store import Store
    run = rig_run(SCEN, tmp_path / "run", timeout=600, args=("--corrupt", "bad"),
                  check_plan=False)
    # every command in the plan but the TPC destination's certificate, which the plan does
    # not show yet (as in test_origins_e2e)
    import planlog
    from rig.description import scenario as loader
    from rig.orchestration.plan import build_plan
    miss = planlog.missing(build_plan(loader.load(SCEN)),
                           planlog.executed(run.out / "commands.log"))
    assert all(m.startswith("openssl ") for m in miss), miss
    assert "--corrupt: byte 2097152 of bad changed" in run.stderr
    st = Store.open(run.out)
    try:
        rows, env = st.transfers(), st.environment()
    finally:
        st.close()
    made = env["file_adler32"]
    assert set(made) == {"good", "bad"}
    assert env["corrupted"]["file"] == "bad"
    assert env["corrupted"]["served_adler32"] != made["bad"]
    assert sorted(r.client for r in rows) == sorted(f"{t}-{f}" for t in TOOLS
                                                    for f in ("good", "bad"))
    for r in rows:
        e = json.loads(r.extra)["checksum"]
        assert e["want"] == made[r.client.rsplit("-", 1)[1]], (r.client, e)
        if r.client.endswith("-good"):
            assert r.ok, (r.client, r.error)
            assert e["got"] == e["want"], (r.client, e)
        else:
            assert not r.ok, r.client
            assert r.error.startswith("adler32 mismatch: got "), (r.client, r.error)
            assert r.error.endswith(f"want {made['bad']}"), (r.client, r.error)
            assert r.aggregate_bps is None
    kept = [r for r in rows if json.loads(r.extra)["checksum"]["how"] == "kept"]
    assert sorted({r.client.rsplit("-", 1)[0] for r in kept}) == ["curl", "davix", "scp",
                                                                  "wget"]
    assert not (run.out / "downloads").exists()
