"""storage: disk (issue 26 item 5), the parts that need no root: the scenario keys and
their one-line errors, `rig run`'s room check (exit 2, nothing made), dd's summary, the
page-cache drop of one file (real files under /var/tmp, fincore as the witness), and the
storage-bound verdict and storage table from a stored run."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rig.description import scenario, storage
from rig.errors import InputError
from rig.orchestration import storagecheck
from rig.realization import diskdata
from rig.report import storage as storage_report
from rig.report.model import load_run
from rig.report.verdict import verdicts
from rig.results.store import Store, TransferRow, ValidationRow

REPO = Path(__file__).resolve().parent.parent
DISK = yaml.safe_load((REPO / "scenarios/disk-origin.yaml").read_text())


def _parse(doc: dict) -> scenario.Scenario:
    return scenario.parse(doc, source="disk.yaml")


def _with(**storage_keys) -> dict:
    doc = copy.deepcopy(DISK)
    doc["storage"] = storage_keys
    return doc


def _error(doc: dict) -> str:
    with pytest.raises(InputError) as e:
        _parse(doc)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_disk_holds_more_than_a_tmpfs():
    doc = _with(kind="disk")
    doc["files"][0]["size"] = "100GiB"
    sc = _parse(doc)
    assert sc.storage.on_disk and sc.storage.base == "/var/tmp"
    assert sc.files[0].size == 100 << 30
    doc["storage"] = {"kind": "tmpfs"}
    assert "files[0].size: files above 64GiB do not fit a tmpfs" in _error(doc)
    del doc["storage"]                                    # the default is a tmpfs
    assert "do not fit a tmpfs" in _error(doc)


@pytest.mark.parametrize("value,message", [
    ("/var/tmp/no-such-dir-rig", "storage.dir: no such directory"),
    ("/etc/hostname", "storage.dir: not a directory"),
    ("var/tmp", "storage.dir: give an absolute path"),
    ("/dev/shm", "storage.dir: is on a tmpfs (memory), not a disk"),
])
def test_a_bad_dir_is_one_line(value, message):
    if value == "/dev/shm" and storage.fs_type(value) != "tmpfs":
        pytest.skip("/dev/shm is no tmpfs here")
    assert message in _error(_with(kind="disk", dir=value))


def test_dir_is_for_disk_only_and_a_disk_is_this_host_s():
    assert "storage.dir: only for kind: disk" in _error(_with(kind="tmpfs", dir="/var/tmp"))
    assert "storage.kind: must be one of" in _error(_with(kind="ssd")) or \
        "storage.kind" in _error(_with(kind="ssd"))
    doc = yaml.safe_load((REPO / "scenarios/two-hosts.example.yaml").read_text())
    doc["storage"] = {"kind": "disk"}
    assert "storage.kind: a disk of this host only" in _error(doc)


def test_room_is_checked_when_the_run_starts(tmp_path):
    """Files beyond the free space: `rig run` says so in one line, exit 2, and makes
    nothing (no output folder, no data folder), before it asks for root."""
    free = storage.free_bytes("/var/tmp")
    doc = _with(kind="disk")
    n = min(64, free // (1 << 40) + 2)                  # 1 TiB files beyond the room
    doc["files"] = [{"name": f"f{i}", "size": "1TiB"} for i in range(n)]
    doc["clients"][0]["file"] = "f0"
    sc = _parse(doc)
    with pytest.raises(InputError) as e:
        storage.check_room(sc)
    assert "storage.dir: not enough room" in str(e.value)
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump(doc))
    before = set(os.listdir("/var/tmp"))
    r = subprocess.run([sys.executable, "-m", "rig", "run", str(f), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "storage.dir: not enough room" in lines[0], lines
    assert not (tmp_path / "out").exists()
    assert not {d for d in set(os.listdir("/var/tmp")) - before if d.endswith("-data")}
    assert storage.room_error(sc.storage, 1 << 20) is None


def test_dd_summary():
    err = ("1024+0 records in\n1024+0 records out\n"
           "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.412 s, 2.6 GB/s\n")
    assert storagecheck.parse_dd(err) == (1073741824, 0.412)
    assert storagecheck.parse_dd("512 bytes copied, 1,5 s, 341 B/s") == (512, 1.5)
    with pytest.raises(ValueError):
        storagecheck.parse_dd("dd: failed to open 'x': No such file or directory\n")
    argv = storagecheck.dd_argv(Path("/d/f"), 3 << 29)
    assert argv == ["dd", "if=/d/f", "of=/dev/null", "bs=1M", "count=1536"]


def _resident(path: Path) -> int:
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True, timeout=30, check=True)
    return int(r.stdout.split()[0])


def test_write_is_flushed_and_dropped_and_drop_cache_drops_one_file():
    """A written file is not sparse and leaves nothing in the page cache; read back it
    is cached, and drop_cache empties that file's cache and no other's."""
    base = Path(storage.DEFAULT_DIR)
    if storage.fs_type(base) in storage.MEMORY_FS:
        pytest.skip(f"{base} is a memory filesystem here")
    prefix = f"rig{os.getpid() & 0xffff:04x}"
    made: list[Path] = []
    with diskdata.disk_folder(base, prefix, record=made.append) as d:
        assert made == [d] and d.name == f"{prefix}-data" and oct(d.stat().st_mode)[-3:] == "755"
        a, b = d / "a", d / "b"
        for f in (a, b):
            diskdata.write_random(f, 24 << 20, seed=1)
        assert a.stat().st_blocks * 512 >= 24 << 20          # every block written
        assert _resident(a) <= 1 << 20                       # dropped as written
        for f in (a, b):
            with open(f, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        assert _resident(a) >= 16 << 20 and _resident(b) >= 16 << 20
        diskdata.drop_cache(a)
        assert _resident(a) <= 1 << 20
        assert _resident(b) >= 16 << 20                      # only that file
    assert not d.exists()


def _store(tmp_path: Path, storage_bps: float | None, tput_bps: float) -> Path:
    out = tmp_path / "run"
    st = Store.create(out / "results.sqlite", "r1")
    st.set_env("scenario", {"name": "disk"})
    common = dict(run_id="r1", step=0, path="wan", backend="userspace", rtt_ms_configured=0.0)
    st.add_validation(ValidationRow(**common, phase="before", flagged=False, iperf_bps=20e9,
                                    capacity_bps=20e9, rtt_ms_measured=0.05, started_at=1.0))
    st.add_validation(ValidationRow(**common, phase="storage", flagged=False, started_at=2.0,
                                    storage_bps=storage_bps, storage_file="f32G",
                                    raw=json.dumps({"cached_bps": 8e9}),
                                    storage_note=None if storage_bps else "not measured: x"))
    for rep in range(3):
        st.add_transfer(TransferRow(
            **common, client="xrdcp", tool="xrdcp", streams=1, concurrency=1, instance=0,
            repeat=rep, file_bytes=1 << 30, bytes=1 << 30, duration_s=(8 << 30) / tput_bps,
            throughput_bps=tput_bps, aggregate_bps=tput_bps, ok=True, argv=json.dumps(["x"]),
            cpu_user_s=0.2, cpu_sys_s=0.3, window_bytes=64 << 20, started_at=3.0 + rep))
    st.finish()
    return out


def test_verdict_storage_bound_and_the_table(tmp_path):
    run = load_run(_store(tmp_path, 1.6e9, 1.5e9))
    (p,) = run.points
    assert p.storage_bps == pytest.approx(1.6e9)
    v = verdicts(run)[p.key]
    assert v.kind == "storage-bound", v.text()
    assert "94% of the storage check's cold read 200 MB/s" in v.detail
    (row,) = storage_report.rows(run)
    assert (row["network_gbps"], row["storage_mbps"], row["cached_mbps"],
            row["transfers_gbps"]) == ("20", "200", "1000", "1.5")


def test_a_faster_transfer_is_not_storage_bound(tmp_path):
    run = load_run(_store(tmp_path, 0.5e9, 1.5e9))     # the check was slower: not the bound
    v = verdicts(run)[run.points[0].key]
    assert v.kind != "storage-bound" and "300% of storage" in v.text()
    run = load_run(_store(tmp_path / "n", None, 1.5e9))
    assert run.points[0].storage_bps is None
    assert storage_report.rows(run)[0]["storage_note"] == "not measured: x"
