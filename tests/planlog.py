"""A run's commands.log against its plan (issue 39): every command the run executed must
be one `rig plan` prints, its named placeholders filled in.

A plan command is compared token by token (shlex) with an executed one: the plan's
prefix `rig0000` stands for the run's, and a `<name>` inside a token stands for any text
(a value known only at run time). Run from the command line it prints the coverage
figure and what the plan missed:

    .venv/bin/python tests/planlog.py SCENARIO.yaml OUT/commands.log
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from rig.orchestration.actions import Plan, fmt
from rig.orchestration.plan import PREFIX

_HOLE = re.compile(r"<[A-Za-z_][A-Za-z0-9_ .'-]*>")


def executed(log: Path) -> list[str]:
    """The commands of a commands.log, without their time column."""
    out = []
    for line in log.read_text().splitlines():
        t, _, cmd = line.strip().partition("  ")
        if cmd.strip():
            out.append(cmd.strip())
    return out


def _token(tmpl: str, prefix: str) -> re.Pattern[str]:
    parts, at = [], 0
    for m in _HOLE.finditer(tmpl):
        parts.append(re.escape(tmpl[at:m.start()].replace(PREFIX, prefix)))
        parts.append(".+?" if m.group() != "<>" else "")
        at = m.end()
    parts.append(re.escape(tmpl[at:].replace(PREFIX, prefix)))
    return re.compile("".join(parts), re.S)


@dataclass
class Template:
    line: str
    tokens: list[re.Pattern[str]]

    def fits(self, toks: list[str]) -> bool:
        return len(toks) == len(self.tokens) and all(
            p.fullmatch(t) for p, t in zip(self.tokens, toks))


def templates(plan: Plan, prefix: str) -> list[Template]:
    """Every command the plan prints (its argv and environment; notes left out)."""
    out, seen = [], set()
    for a in plan.actions:
        for i in a.items:
            if not i.argv:
                continue
            line = fmt(i.argv, i.env)
            if line not in seen:
                seen.add(line)
                out.append(Template(line, [_token(t, prefix) for t in shlex.split(line)]))
    return out


def missing(plan: Plan, commands: list[str], prefix: str) -> list[str]:
    """The executed commands no plan command matches (in their order, repeats kept)."""
    ts = templates(plan, prefix)
    out = []
    for c in commands:
        toks = shlex.split(c)
        if not any(t.fits(toks) for t in ts):
            out.append(c)
    return out


def main(argv: list[str]) -> int:
    from rig.description import scenario
    from rig.orchestration.plan import build_plan
    sc, log = scenario.load(Path(argv[0])), Path(argv[1])
    cmds = executed(log)
    prefix = re.search(r"\brig[0-9a-f]{4}\b", " ".join(cmds))
    miss = missing(build_plan(sc), cmds, prefix.group() if prefix else PREFIX)
    for c in miss:
        print("not in the plan:", c)
    print(f"coverage: {len(cmds) - len(miss)} of {len(cmds)} executed commands are in the plan")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
