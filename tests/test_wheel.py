"""A publishable install (issue 41 item 6): a wheel and an sdist built with the standard
build frontend (`python -m build`, without isolation: the test virtualenv's setuptools),
the wheel installed into a clean virtualenv with only its core requirements, and
`rig --version` and `rig doctor` run from there. The core must not need the extras:
doctor names each missing one with the command that installs it.

Needs the package registry (PyPI) for the clean virtualenv's requirements, as CI has.
Slow (about a minute): left out of make test-fast."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from rig import __version__
from rig import extras

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent


def _run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{argv[:4]} exit {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def test_the_wheel_installs_into_a_clean_virtualenv_and_runs_doctor(tmp_path):
    dist, src = tmp_path / "dist", tmp_path / "src"
    # from a copy of the source: setuptools writes build/ and *.egg-info beside setup.cfg,
    # and a stale build/ would put old modules in the wheel
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "reports", "*.egg-info", "__pycache__", ".*_cache",
        ".hypothesis", "rig-replay-http"))
    _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist",
          "--outdir", str(dist), str(src)], timeout=600)
    wheels = list(dist.glob("hep_rig-*.whl"))
    sdists = list(dist.glob("hep[-_]rig-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    assert __version__ in wheels[0].name

    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "rig/cli.py" in names and "rig/packages.py" in names and "rig/extras.py" in names
    assert not any(n.startswith("tests/") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheels[0]).read(meta).decode()
    assert "Name: hep-rig" in text
    req = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    core = [r for r in req if "extra ==" not in r]
    assert sorted(r.split()[1].split(">")[0].lower() for r in core) == ["matplotlib", "numpy",
                                                                         "pyyaml"]
    for x in extras.EXTRAS:
        assert f"Provides-Extra: {x}" in text
    with tarfile.open(sdists[0]) as t:
        members = t.getnames()
    assert any(m.endswith("/setup.cfg") for m in members)
    assert any(m.endswith("/README.md") for m in members)

    venv = tmp_path / "clean"
    _run(["python3", "-m", "venv", str(venv)], timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([str(venv / "bin/pip"), "install", "-q", str(wheels[0])], timeout=900, env=env)
    r = _run([str(venv / "bin/rig"), "--version"], timeout=60, env=env, cwd=tmp_path)
    assert __version__ in r.stdout
    r = _run([str(venv / "bin/rig"), "doctor"], timeout=120, env=env, cwd=tmp_path)
    out = r.stdout
    assert "distribution" in out and "kernel netem" in out
    # the extras are not in the clean install, and doctor says how to add each
    for x, (mod, _) in extras.EXTRAS.items():
        assert f"MISSING {mod} ({extras.hint(x)})" in out, out
    # the installed rig is the wheel's, not this checkout's
    r = _run([str(venv / "bin/python"), "-c", "import rig; print(rig.__file__)"], timeout=60,
             env=env, cwd=tmp_path)
    assert str(venv) in r.stdout
