"""End-to-end, tests/data/scenarios/disk-small.yaml: xrootd and nginx serve a file from
a disk folder (storage: disk) through a 0 ms and a 20 ms path; each step has its storage
check (dd, cold) beside its network check, every transfer moves the whole file, the
report has the storage table, and the folder goes with the run. Then the run killed
while it serves from disk: SIGTERM removes the folder itself, SIGKILL + `rig clean` does."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultrig import end_run

from rig.realization import netns
from rig.results.store import Store
from rigrun import rig_run

pytestmark = pytest.mark.e2e
SCENARIO = Path(__file__).resolve().parent / "data/scenarios/disk-small.yaml"
FILE_BYTES = 256 << 20


def _folder(prefix: str) -> Path:
    return Path("/var/tmp") / f"{prefix}-data"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("disk") / "run"
    r = rig_run(SCENARIO, out, timeout=900)
    assert "storage check: f256M sequential read" in r.stderr
    prefix = r.prefix
    assert not _folder(prefix).exists()
    return out


def test_served_from_disk_with_a_storage_check_per_step(run_dir, require_tools):
    require_tools("xrdcp", "curl", "nginx", "dd")
    st = Store.open(run_dir)
    rows = st.transfers()
    assert len(rows) == 2 * 2 * 2                 # 2 RTTs x 2 clients x 2 repeats
    assert not [(r.client, r.error) for r in rows if not r.ok]
    assert all(r.bytes == FILE_BYTES for r in rows)
    checks = [v for v in st.validations() if v.phase == "storage"]
    assert sorted(v.step for v in checks) == [0, 1] and \
        {v.storage_file for v in checks} == {"f256M"}
    # a cold read of 64 MiB from a disk: above 1 MB/s whatever the machine
    assert all(v.storage_bps and v.storage_bps > 8e6 for v in checks), checks
    assert all(not v.flagged for v in checks)
    assert all(json.loads(v.raw)["cached_bps"] > 8e6 for v in checks)   # read again, warm
    env = st.environment()["storage"]
    assert env["folder"].startswith("/var/tmp/rig") and env["written"]["f256M"]["bytes"] == \
        FILE_BYTES and env["written"]["f256M"]["seconds"] > 0
    assert {v.step for v in st.validations() if v.phase == "before"} == {0, 1}
    assert (run_dir / "storage_check.md").is_file()
    html = (run_dir / "report.html").read_text()
    assert "Storage check beside the network check" in html


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_while_serving_from_disk_leaves_nothing(tmp_path, require_tools, sig):
    require_tools("xrdcp")
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(SCENARIO),
                          "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    prefix = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None:
            st = next((s for s in netns.read_states().values() if s.get("pid") == p.pid), None)
            if st and st.get("disk_data") and (Path(st["disk_data"]) / "f256M").is_file():
                prefix = st["prefix"]
                break
            time.sleep(0.05)
        assert prefix, f"the run never made its disk folder (exit {p.poll()})"
        assert st["disk_data"] == str(_folder(prefix))
        time.sleep(1.0)
    finally:
        end_run(p, sig)
    if sig == signal.SIGKILL:
        assert _folder(prefix).is_dir()               # the kill left it
        r = subprocess.run([sys.executable, "-m", "rig", "clean"], capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        assert f"removed {_folder(prefix)}" in r.stdout + r.stderr
    else:
        assert p.returncode != 0
    assert not _folder(prefix).exists()
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
