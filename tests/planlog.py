"""A run's commands.log against its plan (issue 39): every command the run executed must
be one `rig plan` prints, its named placeholders filled in.

A plan command is compared token by token (shlex) with an executed one: the plan's
prefix `rig0000` stands for the run's, its first address range (198.18.0.0/24) for the
one the run leased, and a `<name>` inside a token stands for any text (a value known
only at run time). Run from the command line it prints the coverage
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
    """The commands of a commands.log, without their time column (a `# ...` line is a
    note on the command before it, e.g. the cgroup it started in: no command)."""
    out = []
    for line in log.read_text().splitlines():
        t, _, cmd = line.strip().partition("  ")
        if cmd.strip() and not cmd.lstrip("'").startswith("#"):
            out.append(cmd.strip())
    return out


PLAN_NET = "198.18.0."


def fills(commands: list[str]) -> dict[str, str]:
    """What the plan's placeholders stood for in this run: its prefix and address range
    (read off the commands that made its namespaces)."""
    text = "\n".join(commands)
    prefix = re.search(r"\b(rig[0-9a-f]{4})(?=[-/])", text)
    net = re.search(r"\baddr add (198\.1[89]\.\d+\.)\d+/", text)
    return {PREFIX: prefix.group(1) if prefix else PREFIX,
            PLAN_NET: net.group(1) if net else PLAN_NET}


def _fill(s: str, fill: dict[str, str]) -> str:
    for k, v in fill.items():
        s = s.replace(k, v)
    return s


def _token(tmpl: str, fill: dict[str, str]) -> re.Pattern[str]:
    parts, at = [], 0
    for m in _HOLE.finditer(tmpl):
        parts.append(re.escape(_fill(tmpl[at:m.start()], fill)))
        parts.append(".+?")
        at = m.end()
    parts.append(re.escape(_fill(tmpl[at:], fill)))
    return re.compile("".join(parts), re.S)


@dataclass
class Template:
    line: str
    tokens: list[re.Pattern[str]]

    def fits(self, toks: list[str]) -> bool:
        return len(toks) == len(self.tokens) and all(
            p.fullmatch(t) for p, t in zip(self.tokens, toks))


def templates(plan: Plan, fill: dict[str, str]) -> list[Template]:
    """Every command the plan prints (its argv and environment; notes left out)."""
    out, seen = [], set()
    for a in plan.actions:
        for i in a.items:
            if not i.argv:
                continue
            line = fmt(i.argv, i.env)
            if line not in seen:
                seen.add(line)
                out.append(Template(line, [_token(t, fill) for t in shlex.split(line)]))
    return out


def missing(plan: Plan, commands: list[str]) -> list[str]:
    """The executed commands no plan command matches (in their order, repeats kept)."""
    ts = templates(plan, fills(commands))
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
    miss = missing(build_plan(sc), cmds)
    for c in miss:
        print("not in the plan:", c)
    print(f"coverage: {len(cmds) - len(miss)} of {len(cmds)} executed commands are in the plan")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
