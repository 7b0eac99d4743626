"""Time and peak RSS of refusing damaged ROOT files (issue 31 item 6; the bound is
<= 2 s and <= 300 MB for any file of <= 100 MB).

Generates a ~100 MB file with the rig's generator (300 branches, 20 MiB clusters), makes
each damage class of tests/test_rootfile_damage.py from it, and runs `rig plan FILE
--mode lazy-download` on each in a fresh subprocess: wall time (including Python and
uproot start-up) and the child's own peak RSS (VmHWM).  Usage: .venv/bin/python bench/rootfile_damage.py [DIR]
"""
from __future__ import annotations

import os
import shutil
import sys
import subprocess
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rig.description.rootfile import generate  # noqa: E402
from test_rootfile_damage import DAMAGE  # noqa: E402


# the child reports its own VmHWM: wait4's ru_maxrss would include this parent's RSS at
# the spawn (Linux keeps the pre-exec high-water mark), and the parent holds the 100 MB
# file it just damaged
_WRAP = """
import os, sys
from rig.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
finally:
    hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    open(os.environ["RIG_BENCH_HWM"], "w").write(hwm)
sys.exit(rc)
"""


def _run(p: Path) -> tuple[int, float, float]:
    """(exit status, wall s, the child's own peak RSS in MB)."""
    hwm = Path(str(p) + ".hwm")
    argv = [sys.executable, "-c", _WRAP, "plan", str(p), "--mode", "lazy-download"]
    t0 = time.monotonic()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=600,
                       env=dict(os.environ, RIG_BENCH_HWM=str(hwm)))
    wall = time.monotonic() - t0
    kb = int(hwm.read_text()) if hwm.exists() else -1
    hwm.unlink(missing_ok=True)
    return r.returncode, wall, kb / 1024


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
