"""The fault tier's pure parts: a full output folder becomes one OutputFull with the
reserve given back, commands.log never stops a command, a signal during teardown is
deferred, and fault messages are one line."""
import os
import signal
import sqlite3

import pytest

from rig.errors import OutputFull
from rig.orchestration import faults
from rig.orchestration.reporter import Reporter
from rig.results.store import RESERVE, RESERVE_BYTES, Store, ValidationRow


def _row(**kw):
    return ValidationRow(**{"run_id": "r", "step": 0, "phase": "fault", "path": "p",
                            "backend": "userspace", "flagged": True, "flag_reason": "x", **kw})


def test_a_full_database_is_output_full_and_gives_back_the_reserve(tmp_path):
    st = Store.create(tmp_path / "results.sqlite", "r", reserve=True)
    assert (tmp_path / RESERVE).stat().st_size == RESERVE_BYTES
    st.add_validation(_row())
    pages = st.conn.execute("PRAGMA page_count").fetchone()[0]
    st.conn.execute(f"PRAGMA max_page_count = {pages}")    # the disk is full now
    with pytest.raises(OutputFull, match=r"output folder .* is full \(database or disk is full"):
        for _ in range(2000):
            st.add_validation(_row(flag_reason="y" * 4000))
    assert not (tmp_path / RESERVE).exists()
    st.finish()
    assert sqlite3.connect(tmp_path / "results.sqlite").execute(
        "SELECT count(*) FROM validations").fetchone()[0] >= 1     # rows before: kept


def test_store_without_reserve_leaves_no_file(tmp_path):
    Store.create(tmp_path / "results.sqlite", "r").finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_a_full_commands_log_is_said_once_and_never_raises(tmp_path):
    said = []
    rep = Reporter(said.append)
    rep.open_command_log(tmp_path / "commands.log")
    rep._log = open("/dev/full", "w")        # every write: ENOSPC
    rep.command(["ip", "netns", "del", "x"])
    rep.command(["ip", "netns", "del", "y"])
    rep.close()
    assert len(said) == 1 and said[0].startswith("commands.log not written from here on")


def test_a_signal_during_teardown_waits_for_its_end():
    said = []
    with faults.signals_as_exceptions(said.append) as sig:
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            os.kill(os.getpid(), signal.SIGTERM)
        sig.deferring = True
        os.kill(os.getpid(), signal.SIGTERM)      # handled, not raised
        assert sig.deferred == signal.SIGTERM
    assert said == ["signal 15 during teardown: finishing the teardown first"]


def test_fault_messages_are_one_line():
    assert faults.one_line("engine died:\n  pm qos\n\nstopped") == "engine died: pm qos stopped"
    assert len(faults.one_line("x" * 1000)) == 300
    assert faults.describe_exit(-9) == "killed by SIGKILL"
    assert faults.describe_exit(3) == "exit 3"
