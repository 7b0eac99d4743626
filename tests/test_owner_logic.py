"""Who owns a `rig net up` path (rig/process/owner.py), on a fake /proc (issue 31.1).

Each fake process has what the logic reads: stat, exe, cmdline, maps, fd/, fdinfo/ and
cgroup. A forked subshell shares its parent's exe, cmdline and load address; an exec'd
child of the same program has another load address.
"""
import os
from pathlib import Path

import pytest

from rig.orchestration import clean
from rig.process import owner


class FakeProc:
    def __init__(self, root: Path) -> None:
        self.root = root / "proc"
        self.cg = root / "cgroup"
        self.root.mkdir()
        self.cg.mkdir()

    def add(self, pid: int, comm: str, ppid: int, *, exe: str = "/usr/bin/bash",
            argv: tuple[str, ...] = ("bash", "script.sh"), base: str = "55d0c1a2b000",
            start: int | None = None, session: int = 0, tty: int = 0,
            fds: dict[int, tuple[str, int]] | None = None, cgroup: str = "0::/") -> None:
        d = self.root / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "fdinfo").mkdir()
        rest = ["S", str(ppid), str(pid), str(session), str(tty)] + ["0"] * 14 \
            + [str(start if start is not None else 1000 + pid), "0", "0"]
        (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
        os.symlink(exe, d / "exe")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "maps").write_text(f"{base}-{base[:-3]}fff r--p 00000000 fe:01 12 {exe}\n")
        (d / "cgroup").write_text(cgroup + "\n")
        for fd, (target, flags) in (fds or {}).items():
            os.symlink(target, d / "fd" / str(fd))
            (d / "fdinfo" / str(fd)).write_text(f"pos:\t0\nflags:\t0{flags:o}\n")

    def find(self, pid: int) -> owner.Owner:
        return owner.find(pid, self.root, self.cg)


@pytest.fixture
def fake(tmp_path: Path) -> FakeProc:
    f = FakeProc(tmp_path)
    f.add(1, "process_api", 0, exe="/process_api", argv=("/process_api",), base="400000")
    f.add(50, "sshd", 1, exe="/usr/sbin/sshd", argv=("sshd: root@pts/0",), base="5600000")
    return f


def _who(o: owner.Owner) -> tuple[str, int | None]:
    return o.how, (o.proc.pid if o.proc else None)


def test_the_subshell_of_a_command_substitution_is_skipped_for_its_script(fake):
    fake.add(100, "bash", 50)                                   # the script
    fake.add(101, "bash", 100)                                  # j=$( ... 2>/dev/null)
    fake.add(102, "python3", 101, exe="/usr/bin/python3.11", argv=("rig",), base="7f00")
    assert _who(fake.find(102)) == ("parent", 100)


def test_a_bash_exec_d_by_a_bash_is_an_owner_not_a_subshell(fake):
    fake.add(100, "bash", 50, argv=("bash",))                   # typed `bash` in a shell
    fake.add(101, "bash", 100, argv=("bash",), base="55e911111000")   # exec'd: other base
    fake.add(102, "python3", 101, exe="/usr/bin/python3.11", argv=("rig",), base="7f00")
    assert _who(fake.find(102)) == ("parent", 101)


def test_interactive_use_owns_by_the_shell_that_typed_it(fake):
    fake.add(100, "bash", 50, argv=("-bash",), session=100, tty=34816)
    fake.add(102, "python3", 100, exe="/usr/bin/python3.11", argv=("rig",), base="7f00")
    assert _who(fake.find(102)) == ("parent", 100)


@pytest.mark.parametrize("chain", [["sudo"], ["sudo", "sudo"], ["timeout", "sudo"],
                                   ["setsid"], ["flock"], ["nohup"]])
def test_wrappers_and_subshells_are_skipped_together(fake, chain):
    fake.add(100, "bash", 50)
    fake.add(101, "bash", 100)                                  # $( ) subshell
    pid = 101
    for i, comm in enumerate(chain):
        fake.add(110 + i, comm, pid, exe=f"/usr/bin/{comm}", argv=(comm, "x"), base=f"6{i}000")
        pid = 110 + i
    fake.add(102, "python3", pid, exe="/usr/bin/python3.11", argv=("rig",), base="7f00")
    assert _who(fake.find(102)) == ("parent", 100)


def test_an_orphan_is_owned_by_the_shell_reading_its_stdout(fake):
    # j=$(setsid -f rig net up ...): setsid forked and exited, the rig was reparented to
    # PID 1; the script still reads the rig's stdout
    fake.add(100, "bash", 50, fds={0: ("/dev/null", 0), 4: ("pipe:[777]", 0)})
    fake.add(101, "cat", 100, exe="/usr/bin/cat", argv=("cat",), base="61000",
             fds={0: ("pipe:[777]", 1)})                       # a writer: not the reader
    fake.add(102, "python3", 1, exe="/usr/bin/python3.11", argv=("rig",), base="7f00",
             fds={1: ("pipe:[777]", 1)})
    assert _who(fake.find(102)) == ("stdout reader", 100)


def test_an_orphan_on_a_terminal_is_owned_by_the_terminal_s_session_leader(fake, monkeypatch):
    fake.add(100, "bash", 50, argv=("-bash",), session=100, tty=34816)
    fake.add(101, "vim", 100, exe="/usr/bin/vim", argv=("vim",), base="62000",
             session=100, tty=34816)                           # same tty, not the leader
    fake.add(102, "python3", 1, exe="/usr/bin/python3.11", argv=("rig",), base="7f00",
             fds={1: ("/dev/pts/0", 1)})
    monkeypatch.setattr(owner, "_tty_dev", lambda pid, proc: 34816)
    assert _who(fake.find(102)) == ("terminal", 100)


def test_a_rig_started_by_a_systemd_unit_is_owned_by_the_unit(fake):
    unit = "/system.slice/run-u7.service"
    cg = fake.cg / unit.lstrip("/")
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text("102\n")
    fake.add(102, "python3", 1, exe="/usr/bin/python3.11", argv=("rig",), base="7f00",
             fds={1: ("socket:[9]", 1)}, cgroup=f"0::{unit}")
    o = fake.find(102)
    assert (o.how, o.cgroup) == ("unit", str(cg))
    st = dict(kind="net", name="lab", **owner.record_owner(o))
    assert owner.state_alive(st) is True
    assert clean.judge(st) == (True, "net up 'lab', owner unit run-u7.service alive",
                               "use rig net down --name lab, or rig clean --force")
    (cg / "cgroup.procs").write_text("")                        # the unit stopped
    assert owner.state_alive(st) is False and not clean.judge(st)[0]
    (cg / "cgroup.procs").unlink()
    cg.rmdir()                                                  # and systemd removed it
    assert owner.state_alive(st) is False
    assert clean.judge(st)[1] == "net up 'lab', owner unit run-u7.service gone"


def test_a_systemd_manager_parent_counts_as_an_orphan(fake):
    # systemd-run --user: the rig's parent is the user's service manager, never an owner
    fake.add(60, "systemd", 1, exe="/usr/lib/systemd/systemd", argv=("systemd", "--user"),
             base="63000")
    unit = "/user.slice/user-0.slice/user@0.service/app.slice/run-u3.service"
    (fake.cg / unit.lstrip("/")).mkdir(parents=True)
    (fake.cg / unit.lstrip("/") / "cgroup.procs").write_text("102\n")
    fake.add(102, "python3", 60, exe="/usr/bin/python3.11", argv=("rig",), base="7f00",
             cgroup=f"0::{unit}")
    assert fake.find(102).how == "unit"


def test_an_orphan_with_nothing_to_go_by_is_owned_by_no_one(fake):
    fake.add(102, "python3", 1, exe="/usr/bin/python3.11", argv=("rig",), base="7f00",
             fds={1: ("/tmp/log", 1)}, cgroup="0::/")
    o = fake.find(102)
    assert o.how == "none" and o.proc is None
    rec = owner.record_owner(o)                                 # PID 1: until rig net down
    assert rec["owner_pid"] == 1 and rec["owner_how"] == "none"


def test_is_fork_needs_exe_cmdline_and_base_all_equal(fake):
    fake.add(100, "bash", 50)
    fake.add(101, "bash", 100)
    fake.add(103, "bash", 100, argv=("bash", "other.sh"))
    fake.add(104, "bash", 100, base="55d0c1a2c000")
    i = {p: owner.info(p, fake.root) for p in (100, 101, 103, 104)}
    assert owner.is_fork(i[101], i[100], fake.root)
    assert not owner.is_fork(i[103], i[100], fake.root)
    assert not owner.is_fork(i[104], i[100], fake.root)


def test_stat_gives_session_and_terminal():
    line = "4242 (a b) c) S 17 4242 4240 34816 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 987654 1 2"
    i = owner.parse_stat(line)
    assert (i.session, i.tty, i.start) == (4240, 34816, 987654)

