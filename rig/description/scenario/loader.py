"""Loading a scenario: the file read strictly (rig.description.safeyaml), every section
checked against its schema, the study's reference attached, then the rules across sections.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rig.description import reference, schema as S
from rig.description.scenario.document import Scenario
from rig.description.scenario.rules import _cross_check
from rig.description.scenario.topologies import _read


def load(path: str | Path) -> Scenario:
    p = Path(path)
    data, text = _read(p)
    return parse(data, source=str(p), text=text)


def parse(data: Any, *, source: str, text: str = "") -> Scenario:
    ctx = S.Ctx(source)
    sc = dataclasses.replace(S.load(ctx, data, Scenario), source=source, text=text)
    if sc.reproduces is not None:
        sc = dataclasses.replace(sc, reference=reference.load(
            reference.resolve(source, sc.reproduces)))
    return _cross_check(ctx, sc)
