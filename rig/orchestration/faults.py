"""Faults from outside a run, as the run sees them: an origin server that died, the
emulation engine that stopped answering for a while, namespaces of the run deleted by
something else, a signal during teardown. Each becomes one console line and one row
(validations, phase `fault`); steps that can no longer run get a row each (phase
`not-run`) with the reason (docs/results-format.md).

Pure helpers and small probes; the run (rig.orchestration.run) decides what to do.
Must not import reports.
"""
from __future__ import annotations

import contextlib
import signal
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from rig.process import proc
from rig.realization import netns

from rig.realization.emul.userspace import STALL_S  # noqa: F401 - said in the late reason


def one_line(text: object, limit: int = 300) -> str:
    """A message (an engine's log tail, a tool's stderr) as one console line."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[:limit - 1] + "…"


def describe_exit(rc: int | None) -> str:
    if rc is None:
        return "exit status unknown"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def dead_origins(svcs: dict[str, proc.Service]) -> Iterator[tuple[str, int, str]]:
    """(origin, pid, how it ended) for each server of this host that is no longer running."""
    for origin, svc in svcs.items():
        if not svc.alive():
            yield origin, svc.pid or 0, describe_exit(svc.stop())


def gone(namespaces: Iterable[str | None]) -> list[str]:
    """The run's namespaces among these that no longer exist."""
    want = [n for n in namespaces if n]
    if not want:
        return []
    have = set(netns.list_namespaces())
    return [n for n in want if n not in have]


@dataclass
class Signals:
    """A signal that arrives while the run tears down is not raised (it would cut a
    teardown step short and leave things behind): it is remembered, said, and raised
    once the teardown finished."""
    deferring: bool = False
    deferred: int | None = None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@contextlib.contextmanager
def signals_as_exceptions(say: Callable[[str], None] | None = None) -> Iterator[Signals]:
    """SIGTERM (and SIGHUP) take the same path as Ctrl-C: KeyboardInterrupt unwinds
    every context manager, which tears down what was built. Once the teardown began
    (`deferring`), a signal is only remembered: run() raises it when the teardown is done."""
    old: dict[Any, Any] = {}
    sig = Signals()

    def handler(signum, frame):
        if sig.deferring:
            if sig.deferred is None:
                (say or _stderr)(f"signal {signum} during teardown: finishing the teardown first")
            sig.deferred = signum
            return
        raise KeyboardInterrupt() if signum == signal.SIGINT else \
            KeyboardInterrupt(f"signal {signum}")
    old[signal.SIGINT] = signal.signal(signal.SIGINT, handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        old[s] = signal.signal(s, handler)
    try:
        yield sig
    finally:
        for s, h in old.items():
            signal.signal(s, h)
