"""Read a user's Mininet topology: its file imported by Debian's /usr/bin/python3 (where
the `mininet` module lives, outside the rig's virtualenv) in a child process that prints
the Topo as JSON (rig/realization/mininet_export.py). The child also keeps a broken user
file away from the rig: its errors come back as one line.

Importing this module fills rig.description.mininet's reader slot, so loading a scenario
whose topology is a Mininet Topo works wherever the realization is loaded (the CLI).
Must not import services, orchestration or reports.
"""
from __future__ import annotations

import json
from pathlib import Path

from rig.description import mininet as M
from rig.errors import RigError
from rig.process import proc

PYTHON = "/usr/bin/python3"       # Debian's, whose dist-packages hold mininet
EXPORTER = Path(__file__).with_name("mininet_export.py")
TIMEOUT_S = 20.0


def export_argv(file: Path, cls: str) -> list[str]:
    # -I: no PYTHONPATH, no user site, not the current folder: Debian's mininet only;
    # -B: no __pycache__ written beside the user's file (reading creates nothing)
    return [PYTHON, "-I", "-B", str(EXPORTER), str(file), cls]


def export(file: Path, cls: str) -> dict:
    """The Topo `cls` of `file` as the exporter prints it; M.ExportError for a problem of
    the user's file (key `mininet` or `class`), RigError when mininet is not installed."""
    if not file.is_file():
        raise M.ExportError("mininet", "no such file")
    r = proc.run(export_argv(file, cls), timeout=TIMEOUT_S)
    line = (r.stderr.strip().splitlines() or [""])[-1]
    if r.timed_out:
        raise M.ExportError("class", f"building {cls} took over {TIMEOUT_S:g} s")
    if r.returncode == 2:
        raise M.ExportError("mininet", line)
    if r.returncode == 4:
        raise M.ExportError("class", line)
    if r.returncode != 0:
        raise RigError(f"reading Mininet topology {file}: {line or f'exit {r.returncode}'}"
                       + ("" if Path(PYTHON).exists() else f" ({PYTHON} missing)"))
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        raise RigError(f"reading Mininet topology {file}: unreadable output ({e})") from e


M.use_reader(export)
