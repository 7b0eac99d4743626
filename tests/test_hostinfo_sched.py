"""The preemption model and cpuidle driver `rig doctor` prints and every run stores
(hostinfo.scheduling): on a non-preemptible kernel a SCHED_FIFO engine's wake-up waits
for an endpoint's syscall on its CPU (bench/README.md, "Session 7")."""
from __future__ import annotations

import gzip

from rig.orchestration import hostinfo


def test_preemption_in_force_boot_parameter_then_build_default(tmp_path) -> None:
    dbg, cmd = tmp_path / "preempt", tmp_path / "cmdline"
    cfg, gz = tmp_path / "config", tmp_path / "config.gz"
    dbg.write_text("none voluntary (full) lazy\n")
    cmd.write_text("console=ttyS0 preempt=voluntary quiet\n")
    cfg.write_text("CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\n"
                   "CONFIG_PREEMPTION=y\nCONFIG_PREEMPT_DYNAMIC=y\n")
    with gzip.open(gz, "wt") as f:
        f.write("CONFIG_PREEMPT_VOLUNTARY=y\n")
    args = {"debugfs": str(dbg), "cmdline": str(cmd), "configs": (str(cfg),)}
    assert hostinfo.preemption(**args) == "full"                      # what is in force
    args["debugfs"] = str(tmp_path / "absent")
    assert hostinfo.preemption(**args) == "voluntary (boot parameter)"
    cmd.write_text("console=ttyS0 nopreempt_here=1\n")
    assert hostinfo.preemption(**args) == "none (build default, dynamic)"
    args["configs"] = (str(tmp_path / "absent"), str(gz))
    assert hostinfo.preemption(**args) == "voluntary (build default)"
    args["configs"] = (str(tmp_path / "absent"),)
    assert hostinfo.preemption(**args) is None


def test_scheduling_is_stored_with_the_host_summary(monkeypatch) -> None:
    monkeypatch.setattr(hostinfo, "tool_versions", dict)      # no tool processes here
    monkeypatch.setattr(hostinfo, "sysctls", dict)
    monkeypatch.setattr(hostinfo, "preemption", lambda: "lazy")
    sch = hostinfo.summary()["scheduling"]
    assert set(sch) == {"preemption", "cpuidle_driver", "guest_halt_poll_ns"}
    assert sch["preemption"] == "lazy"
