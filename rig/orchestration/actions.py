"""The run plan as data: typed actions with their commands, host and dependencies.

`rig.orchestration.plan.build_plan` makes a `Plan` from a scenario; `rig plan` prints it
(`Plan.lines`) and `rig run` executes the same actions in the same order
(rig.orchestration.run), timing each into the `actions` table (docs/results-format.md).
Pure: no process is started here.
"""
from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass
from typing import Any

from rig.description.scenario.paths import LOCAL
from rig.errors import printable

# what a plan's names start with: the run's own prefix is leased at run time
PREFIX = "rig0000"

# where a run's wall time goes (the report's time budget): each kind's phase
PHASES = {"prepare": "setup", "tune": "setup", "hosts": "setup", "data": "setup",
          "pinning": "setup", "path": "setup", "endpoint": "setup", "tls": "setup", "servers": "setup",
          "emulate": "emulation", "check": "checks", "group": "transfers",
          "background": "transfers",
          "teardown": "teardown", "note": "none"}


def fmt(argv: tuple[str, ...] | list[str], env: dict | tuple | None = None) -> str:
    """One line safe to paste into a shell: every token, env keys too, through shlex.quote
    (keys are identifiers once loaded; quoting them anyway keeps a bad one inert)."""
    pairs = env.items() if isinstance(env, dict) else (env or ())
    pre = " ".join(f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in pairs)
    return (pre + " " if pre else "") + shlex.join(argv)


def comment(text: str) -> str:
    """A `# ...` line whose text cannot end the comment (no newline reaches the shell)."""
    return "# " + printable(text)


@dataclass(frozen=True)
class Item:
    """One printed line of an action: a command (argv, its environment, the host it runs
    on, a trailing note) or, with no argv, a line of text (a `#` comment, already led by
    its `@host ` where it shows one)."""
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    host: str = LOCAL
    note: str = ""
    text: str = ""

    def line(self) -> str:
        if not self.argv:
            return self.text
        at = "" if self.host == LOCAL else f"@{self.host} "
        return at + fmt(self.argv, self.env) + self.note


def cmd(argv: list[str] | tuple[str, ...], host: str = LOCAL, env: dict | None = None,
        note: str = "") -> Item:
    return Item(tuple(argv), tuple((env or {}).items()), host, note)


def text(line: str) -> Item:
    return Item(text=line)


@dataclass(frozen=True)
class Action:
    """One thing a run does. `id` is unique in the plan and names it in the `actions`
    table; `kind` names its kind there (its type, a subclass in rig.orchestration.acts,
    executes it); `deps` are the ids it needs done first; `step` is the sweep step's
    index, `group` the group's within it."""
    id: str
    kind: str
    items: tuple[Item, ...] = ()
    host: str = LOCAL
    deps: tuple[str, ...] = ()
    path: str | None = None
    step: int | None = None
    group: int | None = None

    @property
    def phase(self) -> str:
        return PHASES[self.kind]

    @property
    def runs(self) -> bool:
        """Executed by `rig run` (a note only informs)."""
        return self.kind != "note"

    def execute(self, ctx: Any, stack: contextlib.ExitStack) -> None:
        """What `rig run` does for it, over the run context: each kind is a subclass in
        its own module of rig.orchestration.acts, which also renders its items."""
        raise AssertionError(f"no executor for action {self.id} ({self.kind})")

    def argvs(self) -> list[tuple[str, ...]]:
        return [i.argv for i in self.items if i.argv]


@dataclass(frozen=True)
class Plan:
    header: tuple[str, ...]
    actions: tuple[Action, ...]

    def lines(self) -> list[str]:
        return list(self.header) + [i.line() for a in self.actions for i in a.items]

    def described(self) -> list[str]:
        """`rig plan --actions`: each action's id (as stored in the `actions` table),
        kind, phase, host, what it belongs to and what it needs, then its lines."""
        out = list(self.header)
        for a in self.actions:
            where = "" if a.path is None else f" path={a.path}"
            where += "" if a.step is None else f" step={a.step}"
            where += "" if a.group is None else f" group={a.group}"
            out.append(f"[{a.id}] {a.kind} ({a.phase}) on {a.host}{where}"
                       f" after {', '.join(a.deps) or '-'}")
            out += ["    " + i.line() for i in a.items]
        return out

    def executed(self) -> list[Action]:
        return [a for a in self.actions if a.runs]

    def check(self) -> None:
        """Ids unique, every dependency an earlier action (a plan is a topological order)."""
        seen: set[str] = set()
        for a in self.actions:
            assert a.id not in seen, f"action {a.id} twice"
            missing = [d for d in a.deps if d not in seen]
            assert not missing, f"action {a.id} needs {missing}, not before it"
            seen.add(a.id)
