"""Fetched trees are unpacked as tarfile's 'data' filter would, on every Python the rig
runs on (Debian 12's 3.11.2 lacks extractall(filter=)): regular files and directories
only, nothing outside the destination."""
import io
import tarfile

from rig.process.proc import unpack_regular


def _add(tf, name, *, kind=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
    m = tarfile.TarInfo(name)
    m.type, m.mode, m.linkname, m.size = kind, mode, link, len(data)
    m.uid = m.gid = 4242
    tf.addfile(m, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def test_only_regular_files_and_directories_land_inside(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        _add(tf, "./logs", kind=tarfile.DIRTYPE, mode=0o777)
        _add(tf, "./logs/xrootd.log", data=b"ok\n", mode=0o4777)
        _add(tf, "./run.sh", data=b"#!/bin/sh\n", mode=0o755)
        _add(tf, "./link", kind=tarfile.SYMTYPE, link="/etc/passwd")
        _add(tf, "./hard", kind=tarfile.LNKTYPE, link="logs/xrootd.log")
        _add(tf, "./fifo", kind=tarfile.FIFOTYPE)
        _add(tf, "/abs.txt", data=b"x")
        _add(tf, "../up.txt", data=b"x")
        _add(tf, "logs/../../up2.txt", data=b"x")
    buf.seek(0)
    dest = tmp_path / "d"
    dest.mkdir()
    with tarfile.open(fileobj=buf) as tf:
        unpack_regular(tf, dest)
    got = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert got == ["d", "d/logs", "d/logs/xrootd.log", "d/run.sh"]
    assert (dest / "logs/xrootd.log").read_bytes() == b"ok\n"
    assert (dest / "logs/xrootd.log").stat().st_mode & 0o7777 == 0o755   # no setuid, rwx kept
    assert (dest / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert not (tmp_path / "abs.txt").exists() and not (tmp_path / "up.txt").exists()
