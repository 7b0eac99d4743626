"""Is a comparison of two runs meaningful? Their metadata, side by side.

Checked: kernel, host (hostname, machine, CPUs), emulation backend of each path (as
resolved, and as stored with the transfers), version of every tool, tuning, and the
scenario's hash (sha256 of its text). A difference is *set by the scenario* when it follows
from a change of the scenario itself (tuning and the scenario hash: the rig stores the
scenario's own tuning); every other difference is the *environment* drifting, which the
scenario does not sweep: kernel, host, backends, tool versions. `rig compare` names all of
them at the top; under --strict an environment difference is bad input (exit 2) unless
the user expected it (--expect NAME, e.g. --expect kernel, --expect tools.xrdcp).

Pure Python: reads the stored environment table only.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable

from rig.report.model import Run


@dataclass(frozen=True)
class MetaDiff:
    name: str            # kernel, host.hostname, backend.lfn, tools.xrdcp, tuning.x, scenario
    base: Any
    cand: Any
    by_scenario: bool    # follows from a change of the scenario (intended)

    def line(self) -> str:
        why = " (set by the scenario)" if self.by_scenario else ""
        return f"{self.name}: {short(self.base)} -> {short(self.cand)}{why}"


def short(v: Any) -> str:
    if v is None:
        return "(not recorded)"
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s if len(s) <= 60 else s[:57] + "..."


def scenario_hash(env: dict) -> str | None:
    text = env.get("scenario_text")
    if not isinstance(text, str):
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _backends(run: Run) -> dict[str, Any]:
    """path -> backend: as resolved at setup (env backends), else from the transfers."""
    stored = run.env.get("backends")
    out: dict[str, Any] = dict(stored) if isinstance(stored, dict) else {}
    for p in run.points:
        vals = p.settings.get("backend") or set()
        if p.key.path not in out and vals:
            out[p.key.path] = next(iter(vals)) if len(vals) == 1 else sorted(map(str, vals))
    return out


def _dict(env: dict, key: str) -> dict:
    v = env.get(key)
    return v if isinstance(v, dict) else {}


def _pairs(base: Run, cand: Run) -> Iterable[tuple[str, Any, Any, bool]]:
    be, ce = base.env, cand.env
    yield "kernel", be.get("kernel"), ce.get("kernel"), False
    for k in ("hostname", "machine", "cpus"):
        yield f"host.{k}", be.get(k), ce.get(k), False
    bb, cb = _backends(base), _backends(cand)
    for path in sorted(set(bb) & set(cb)):        # paths in one run only: not compared
        yield f"backend.{path}", bb[path], cb[path], False
    bt, ct = _dict(be, "tools"), _dict(ce, "tools")
    for tool in sorted(set(bt) | set(ct)):
        yield f"tools.{tool}", bt.get(tool), ct.get(tool), False
    btu, ctu = _dict(be, "tuning"), _dict(ce, "tuning")
    for k in sorted(set(btu) | set(ctu)):
        yield f"tuning.{k}", btu.get(k), ctu.get(k), True
    yield "scenario", scenario_hash(be), scenario_hash(ce), True


def metadata_diffs(base: Run, cand: Run) -> list[MetaDiff]:
    """Every checked field that differs; a field recorded in neither run is skipped."""
    return [MetaDiff(n, b, c, s) for n, b, c, s in _pairs(base, cand)
            if b != c and not (b is None and c is None)]


def unexpected(diffs: list[MetaDiff], expect: Iterable[str] = ()) -> list[MetaDiff]:
    """Environment differences the user did not name with --expect (a name or its
    prefix: --expect tools covers every tool, --expect backend every path)."""
    names = tuple(expect)
    return [d for d in diffs if not d.by_scenario and not any(
        d.name == e or d.name.startswith(e + ".") for e in names)]
