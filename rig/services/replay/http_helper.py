"""The native HTTP replay helper `rig-replay-http` (tools/rig-replay-http/): the plan's
requests are made by libdavix (DavPosix pread / preadVec, as CMSSW's DavixAdaptor) or
libcurl (Range GETs), not by Python.

This module finds the helper, writes a plan as the JSON it reads and runs it through
rig.process.proc (argv, deadline). Services layer: no orchestration, results or reports.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from rig.description.rootfile.plan import Plan
from rig.description.libraries import HTTP_LIBRARIES
from rig.errors import RigError

NAME = "rig-replay-http"
REPO_BUILD = Path(__file__).resolve().parents[3] / "tools" / NAME / NAME
LIBRARIES = HTTP_LIBRARIES


def path() -> str | None:
    """The helper to run: $RIG_REPLAY_HTTP when set (only it), else the Makefile's build
    in the checkout, else one on PATH; None when none is built."""
    env = os.environ.get("RIG_REPLAY_HTTP")
    for cand in [env] if env else [str(REPO_BUILD)]:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None if env else shutil.which(NAME)


MISSING = (f"needs the native helper {NAME} (libdavix/libcurl), which is not built: "
           "run `make install` (or `make -C tools/rig-replay-http` after installing "
           "davix-dev libcurl4-openssl-dev zlib1g-dev pkg-config g++)")


def plan_json(plan: Plan) -> str:
    """What the helper reads: {"version": 1, "rounds": [[window, [[off, len], ...], ...]]}."""
    rounds = [[r.window, *[[list(x) for x in q.ranges] for q in r.requests]] for r in plan.rounds]
    return json.dumps({"version": 1, "mode": plan.mode, "rounds": rounds}, separators=(",", ":"))


def run(plan: Plan, url: str, library: str, *, timeout: float,
        shadow_dir: str | None = None, ca_dir: str | None = None,
        ca_file: str | None = None) -> dict:
    """Replay `plan` against `url` with the helper; its JSON answer (wall_s, open_s,
    http_requests, bytes_received, cpu_user_s, cpu_sys_s, checksum, round_s, ...).
    `shadow_dir`: the bytes go into an unlinked shadow file there (lazy-download).
    https://: libdavix trusts `ca_dir` (hashed), libcurl `ca_file`, nothing else."""
    from rig.process import proc
    exe = path()
    if exe is None:
        raise RigError(f"replay: library {library} {MISSING}")
    if library not in LIBRARIES:
        raise RigError(f"replay: the helper speaks {', '.join(LIBRARIES)} (got {library!r})")
    with tempfile.NamedTemporaryFile("w", prefix="rig-replay-plan-", suffix=".json") as fh:
        fh.write(plan_json(plan))
        fh.flush()
        shadow = ["--shadow", shadow_dir] if shadow_dir else []
        ca = [*(["--capath", ca_dir] if ca_dir else []), *(["--cafile", ca_file] if ca_file
                                                           else [])]
        r = proc.run([exe, "--library", library, "--url", url, "--plan", fh.name,
                      "--timeout", f"{timeout:g}", *shadow, *ca], timeout=timeout + 10)
    if not r.ok:
        why = "deadline passed" if r.timed_out else (r.stderr.strip().splitlines() or
                                                      [f"exit {r.returncode}"])[-1]
        raise RigError(f"replay: {NAME} failed: {why}")
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RigError(f"replay: {NAME} printed no JSON ({r.stdout[-200:]!r})") from None
    if not isinstance(out, dict):
        raise RigError(f"replay: {NAME} printed {out!r}")
    return out
