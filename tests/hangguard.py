"""A hang guard for in-process test cases: a deadline that stops the case and names it.

Not a speed goal (those live in bench/): size it at ten times the case's idle time or
more, so a loaded machine never trips it and only a hang does (issue 43).

    with hang_guard(30, label):
        work()

raises Hung("<label>: still running after 30 s (stopped by its hang guard)") in the
case when the deadline passes. Hung is a BaseException: no `except Exception` in the
code under test swallows it, and pytest reports it as the test's failure. Main thread
only (SIGALRM, ITIMER_REAL); not nestable.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator


class Hung(BaseException):
    """A case still running at its hang guard's deadline."""


@contextlib.contextmanager
def hang_guard(seconds: float, what: str) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hung(f"{what}: still running after {seconds:g} s (stopped by its hang guard)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
