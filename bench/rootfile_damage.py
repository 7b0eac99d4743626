"""Time and peak RSS of refusing damaged ROOT files (issue 31 item 6; the bound is
<= 2 s and <= 300 MB for any file of <= 100 MB).

Generates a ~100 MB file with the rig's generator (300 branches, 20 MiB clusters), makes
each damage class of tests/test_rootfile_damage.py from it, and runs `rig plan FILE
--mode lazy-download` on each in a fresh subprocess: wall time (including Python and
uproot start-up) and the child's ru_maxrss.  Usage: .venv/bin/python bench/rootfile_damage.py [DIR]
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rig.description.rootfile import generate  # noqa: E402
from test_rootfile_damage import DAMAGE  # noqa: E402


def _run(p: Path) -> tuple[int, float, float]:
    """(exit status, wall s, this child's own peak RSS in MB, from wait4)."""
    argv = [sys.executable, "-m", "rig", "plan", str(p), "--mode", "lazy-download"]
    acts = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    t0 = time.monotonic()
    pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=acts)
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), time.monotonic() - t0, ru.ru_maxrss / 1024


def main() -> None:
    d = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="rootdmg-"))
    good = d / "good.root"
    t0 = time.monotonic()
    generate.write(generate.FileSpec(size_bytes=100 * 10**6), good)
    print(f"generated {good.stat().st_size} bytes in {time.monotonic() - t0:.1f}s")
    rc, wall, rss = _run(good)
    print(f"{'undamaged':<28} rc {rc} wall {wall:6.2f} s  peak RSS {rss:6.1f} MB")
    for name, (damage, _msg) in DAMAGE.items():
        p = d / f"{name}.root"
        shutil.copy(good, p)
        damage(p)
        rc, wall, rss = _run(p)
        print(f"{name:<28} rc {rc} wall {wall:6.2f} s  peak RSS {rss:6.1f} MB")
        os.unlink(p)
    if len(sys.argv) <= 1:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
