"""Which engine runs the data path: the native one (tools/rig-emul-engine, C++ on
libnetfilter_queue/libmnl, issue 42 item 3) when it is built, else this package's Python
engine, and why.

Both take the same command line (`python -m rig.realization.emul.engine ...`: with
`--native BIN` that process loads the eBPF stamp and audit programs, bpf.py, and execs the
binary with the maps' descriptors), speak the same control protocol and report the same
statistics (rig.description.linkstats). The Python engine stays as the fallback where the
binary is not built (a checkout before `make install`, a machine without
libnetfilter-queue-dev), on a remote router host (the binary is not shipped there) and as
the reference the native engine's semantics are tested against (tests/test_engine_native.py).

RIG_ENGINE=native|python forces one (native refuses to start when it is not built);
unset or `auto`: for now the Python engine. The native engine is opt-in until the whole
e2e tier (tests/, every path's check and tolerance) has run through it on a fresh machine:
its bench and its own tests have (bench/README.md, tests/test_engine_native.py,
tests/test_userspace_netns.py), the rest of the suite has not (session 18). Must not import
anything above rig.realization.emul.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

NAME = "rig-emul-engine"
REPO_BUILD = Path(__file__).resolve().parents[4] / "tools" / NAME / NAME
ENGINES = ("auto", "native", "python")
BUILD_HINT = ("run `make install` (or `make -C tools/rig-emul-engine` after installing "
              "libnetfilter-queue-dev libmnl-dev nlohmann-json3-dev pkg-config g++)")


class EngineChoiceError(ValueError):
    pass


def path() -> str | None:
    """The native engine binary: $RIG_ENGINE_BIN when set (only it), else the Makefile's
    build in the checkout, else one on PATH; None when none is built."""
    env = os.environ.get("RIG_ENGINE_BIN")
    for cand in [env] if env else [str(REPO_BUILD)]:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None if env else shutil.which(NAME)


def choose(want: str | None = None, *, remote: bool = False) -> tuple[str | None, str]:
    """(the native binary to run, or None for the Python engine; the reason, one line).
    `want`: auto, native or python (default: $RIG_ENGINE, else auto)."""
    want = (want or os.environ.get("RIG_ENGINE") or "auto").strip().lower()
    if want not in ENGINES:
        raise EngineChoiceError(f"RIG_ENGINE: want one of {', '.join(ENGINES)} (got {want!r})")
    if want == "python":
        return None, "python (forced: RIG_ENGINE=python)"
    if remote:
        if want == "native":
            raise EngineChoiceError("RIG_ENGINE=native: a remote router host runs the Python "
                                    "engine (the native binary is not shipped there)")
        return None, "python (a remote router host: the native binary is not shipped there)"
    exe = path()
    if exe is None:
        if want == "native":
            raise EngineChoiceError(f"RIG_ENGINE=native: {NAME} is not built: {BUILD_HINT}")
        return None, f"python (the native {NAME} is not built: {BUILD_HINT})"
    if want == "auto":
        return None, (f"python (auto; the native {NAME} is built and opt-in until the whole "
                      "e2e tier has run through it: RIG_ENGINE=native)")
    return exe, "native (forced: RIG_ENGINE=native)"
