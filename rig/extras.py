"""The rig's optional Python parts (setup.cfg's extras, issue 41 item 6): what each one
is for, a one-line error naming the extra to install when a scenario needs a missing one,
and what `rig doctor` prints.

The core (PyYAML, matplotlib, numpy) runs every scenario without a ROOT file, a header
capture or a replay over root://. Pure: imports only the module asked for.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from rig.errors import RigError

DIST = "hep-rig"       # the distribution's name on PyPI (`rig` is another project's)

# extra -> (module it brings, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "rootfile": ("uproot", "ROOT files (a client's rootfile: read plan, generated ROOT files)"),
    "capture": ("scapy", "reading header captures (a client's capture: headers)"),
    "replay": ("XRootD", "caching-mode replays over root:// (XRootD's Python bindings)"),
}


def hint(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]'"


def require(extra: str, module: str | None = None) -> ModuleType:
    """Import the extra's module (or one of its submodules), else one line naming the
    extra, what needs it and how to install it."""
    top, what = EXTRAS[extra]
    try:
        return importlib.import_module(module or top)
    except ImportError as e:
        raise RigError(f"{what} need {top}, which is not installed ({e}): {hint(extra)}"
                       ) from None


def status() -> dict[str, bool]:
    """Each extra: is its module importable (found, not imported)."""
    return {x: importlib.util.find_spec(m) is not None for x, (m, _) in EXTRAS.items()}
