"""Points the rig itself spoiled: never an explanation, never compared with a study.

A point is a **rig artefact** when
  - a path check of one of its steps was flagged (RTT off, capacity short, loss off:
    the path was not the one the step is labelled with);
  - the engine was late during its own transfers: judged per group where the rows
    carry the engine's timing over their group (extra.engine_late), else over its step's
    whole transfers phase (EMULATION LATE; runs from before issue 38's per-group timing,
    or rows without it);
  - its verdict is emulator-limited (the engine's own statistics).
(A server that does not answer as the one named, e.g. nginx on Apache's port, never gets
this far: the run refuses a port another process listens on before it starts.)
The report shows them first and counts them apart (rig.report.against).

Pure: reads a loaded Run and its verdicts. Must not import matplotlib, rig.realization,
rig.process, rig.services.
"""
from __future__ import annotations

from typing import Any, Mapping

from rig.description.steps import shown_step
from rig.report.model import Run
from rig.report.verdict import step_flags

ARTEFACT_VERDICTS = ("emulator-limited",)
STEP_FLAGS = ("path validation", "emulation late")


def _reasons_by_step(run: Run) -> tuple[dict[int, list[str]], set[int]]:
    """(path-check reasons per shown step, shown steps whose transfers phase was late)."""
    out: dict[int, list[str]] = {}
    checks: dict[int, list[str]] = {}
    for v in run.validations:
        if v.flagged:
            checks.setdefault(shown_step(v.step), []).append(
                f"{v.phase}: {(v.flag_reason or 'no reason stored')[:100]}")
    for s, reasons in checks.items():
        out.setdefault(s, []).append(f"path check flagged ({'; '.join(reasons)})")
    return out, set(step_flags(run).get("emulation late", ()))


def artefacts(run: Run, verdicts: Mapping[Any, Any]) -> dict[Any, str]:
    """Per point Key: why the rig spoiled it (the first reasons); absent: a clean point."""
    by_step, late_steps = _reasons_by_step(run)
    out: dict[Any, str] = {}
    for p in run.points:
        why: list[str] = []
        for s in sorted(p.steps):
            rs = list(by_step.get(shown_step(s), ()))
            if s in p.engine_untimed_steps or s not in p.engine_late_groups:
                if shown_step(s) in late_steps:
                    rs.append("the engine was late during the transfers")
            elif late := p.engine_late_groups[s]:
                rs.append(f"the engine was late during this point's own transfers ({late[0]})")
            if rs:
                why.append(f"step {shown_step(s)}: {', '.join(rs)}")
        v = verdicts.get(p.key)
        if getattr(v, "kind", None) in ARTEFACT_VERDICTS:
            why.append(f"emulator-limited ({str(getattr(v, 'detail', ''))[:100]})")
        if why:
            out[p.key] = "; ".join(dict.fromkeys(why))
    return out
