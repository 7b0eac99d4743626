"""CPU sets as cgroups (rig.realization.cgroups): a process started into one has every
thread pinned there; the cgroup goes with the run, and `rig clean` removes a dead run's
(and only the cgroups carrying its prefix)."""
import os
import sys
import time

import pytest

from rig.orchestration import clean
from rig.process import proc
from rig.realization import cgroups, netns

# threads started before and after the move into the cgroup; prints when all run
THREADS = ("import threading, time, sys\n"
           "ts = [threading.Thread(target=time.sleep, args=(60,), daemon=True) for _ in range(4)]\n"
           "[t.start() for t in ts]\nprint('up', flush=True)\ntime.sleep(60)\n")


def test_names_carry_the_run_prefix_and_nothing_else():
    assert cgroups.cgroup_name("rig1a2b", "wan-one/x y") == "rig1a2b-wan-one_x_y"
    assert cgroups.NAME_RE.match("rig1a2b-client-c1").group(1) == "rig1a2b"
    for other in ("rig1a2b", "system.slice", "rigXYZW-a", "docker-rig1a2b-a"):
        assert cgroups.NAME_RE.match(other) is None


def _hier():
    h = cgroups.detect()
    if h is None:
        pytest.skip("no cpuset cgroup hierarchy here (taskset pins instead)")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    return h


def _thread_cpus(pid: int) -> list[str]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        for line in open(f"/proc/{pid}/task/{tid}/status"):
            if line.startswith("Cpus_allowed_list:"):
                out.append(line.split(":", 1)[1].strip())
    return out


@pytest.mark.netns
def test_every_thread_of_a_process_started_in_a_cgroup_is_pinned(tmp_path):
    h = _hier()
    prefix = netns.new_prefix()
    d = cgroups.make(h, cgroups.cgroup_name(prefix, "t"), "1")
    try:
        assert (d / "cpuset.cpus").read_text().strip() == "1"
        log = tmp_path / "out.log"
        svc = proc.Service([sys.executable, "-c", THREADS], log_path=log, cgroup=d).start()
        try:
            proc.wait_until(lambda: "up" in log.read_text(), timeout=20, what="threads")
            assert cgroups.pids(d) == [svc.pid]
            cpus = _thread_cpus(svc.pid)
            assert len(cpus) == 5 and set(cpus) == {"1"}, cpus
        finally:
            svc.stop()
    finally:
        assert cgroups.drop(d)
    assert not d.exists()


@pytest.mark.netns
def test_rig_clean_removes_a_dead_runs_cgroup_and_its_processes_only():
    h = _hier()
    dead, other = netns.new_prefix(), netns.new_prefix()
    d = cgroups.make(h, cgroups.cgroup_name(dead, "srv"), "0")
    keep = cgroups.make(h, cgroups.cgroup_name(other, "srv"), "0")
    svc = proc.Service(["sleep", "60"], cgroup=d).start()
    try:
        lines: list[str] = []
        clean.clean(say=lines.append, prefixes={dead})
        assert not d.exists(), lines
        assert any(f"removed cgroup {d} (killed 1 process(es) inside)" in x for x in lines)
        deadline = time.monotonic() + 10
        while svc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not svc.alive()
        assert keep.is_dir()          # another prefix: not swept
    finally:
        svc.stop()
        cgroups.drop(keep)
        cgroups.drop(d)
    assert not keep.exists()


def test_a_cgroup2_cpuset_is_enabled_in_the_parent_and_written(tmp_path, monkeypatch):
    """cgroup v2 (not on this host, whose cpuset is v1): `+cpuset` in the root's
    subtree_control when missing, then cpuset.cpus and the root's effective mems."""
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    (tmp_path / "cpuset.mems.effective").write_text("0\n")
    d = cgroups.make(cgroups.Hierarchy("cgroup2", tmp_path), "rig1a2b-srv", "1")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpuset"
    assert (d / "cpuset.cpus").read_text() == "1" and (d / "cpuset.mems").read_text() == "0"
    assert d == tmp_path / "rig1a2b-srv"


def test_detect_prefers_a_cgroup2_cpuset_then_v1_then_none(tmp_path, monkeypatch):
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    v1.mkdir()
    (v1 / "cpuset.cpus").write_text("0-1")
    mounts = [(str(v2), "cgroup2", "rw"), (str(v1), "cgroup", "rw,cpuset")]
    monkeypatch.setattr(cgroups, "_mounts", lambda: mounts)
    (v2 / "cgroup.controllers").write_text("hugetlb")
    assert cgroups.detect() == cgroups.Hierarchy("cgroup1", v1)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory")
    assert cgroups.detect() == cgroups.Hierarchy("cgroup2", v2)
    monkeypatch.setattr(cgroups, "_mounts", lambda: [(str(v2), "cgroup2", "rw")])
    (v2 / "cgroup.controllers").write_text("memory")
    assert cgroups.detect() is None
