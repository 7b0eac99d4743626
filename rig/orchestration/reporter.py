"""What a run tells the person watching it, and the log of every command it executed.

Progress lines go to a callable (stderr by default) and carry done/total and, once a
few groups have run, an estimate of the time left. `OUT/commands.log` gets one line
per process the run starts (time, namespace wrapper included, environment it set),
through rig.process.proc's echo hook, so a run can be replayed by hand.

Orchestration layer: must not import matplotlib or reports.
"""
from __future__ import annotations

import shlex
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Callable, TextIO

from rig.process import proc

Say = Callable[[str], None]

# the command line's -q (-1: no progress lines) and -v (1: each command too, as it starts)
_verbosity = 0


def set_verbosity(level: int) -> None:
    global _verbosity
    _verbosity = level


def verbosity() -> int:
    return _verbosity


def stderr_say(msg: str) -> None:
    if _verbosity >= 0:
        print(msg, file=sys.stderr, flush=True)


def fmt_eta(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """done/total of transfer groups and the time left. Each group has a kind (its client
    and TLS mode: a storage replay of 46 s and a 1 s download are not alike); the time
    left is, over the groups still to run, the mean time of their kind so far, or of every
    group where their kind has not run yet (steps differ in RTT, so it stays rough)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic,
                 kinds: Iterable[Hashable] = ()) -> None:
        self.total, self.done, self.clock = total, 0, clock
        self.t0 = self.last = clock()
        self.left: Counter = Counter(kinds)
        self.spent: dict[Hashable, list[float]] = {}

    def advance(self, kind: Hashable = None) -> str:
        self.done += 1
        now = self.clock()
        elapsed, took, self.last = now - self.t0, now - self.last, now
        if kind is not None:
            self.spent.setdefault(kind, []).append(took)
            if self.left[kind] > 0:
                self.left[kind] -= 1
        text = f"{self.done}/{self.total}"
        if 0 < self.done < self.total and elapsed > 0:
            text += f", ~{fmt_eta(self.eta(elapsed))} left"
        return text

    def eta(self, elapsed: float) -> float:
        mean = elapsed / self.done
        known = sum(self.left.values())
        if not known:                          # no kinds given: the mean per group
            return mean * (self.total - self.done)
        by_kind = sum(n * (statistics.fmean(self.spent[k]) if k in self.spent else mean)
                      for k, n in self.left.items() if n)
        # groups the kinds did not list (there should be none) at the mean
        return by_kind + mean * max(0, self.total - self.done - known)


class Reporter:
    def __init__(self, say: Say = stderr_say) -> None:
        self.say = say
        self.progress: Progress | None = None
        self._log: TextIO | None = None
        self._lock = threading.Lock()
        self._t0 = time.time()

    def start(self, total_groups: int, kinds: Iterable[Hashable] = ()) -> None:
        self.progress = Progress(total_groups, kinds=kinds)

    def group_done(self, kind: Hashable = None) -> str:
        return self.progress.advance(kind) if self.progress else ""

    # --- commands.log --------------------------------------------------------------
    def open_command_log(self, path: Path) -> None:
        self._log = path.open("a", encoding="utf-8")
        proc.set_echo(self.command)

    def command(self, argv: list[str], env: dict | None = None) -> None:
        if self._log is None:
            return
        pre = " ".join(f"{shlex.quote(str(k))}={shlex.quote(str(v))}"
                       for k, v in (env or {}).items())
        line = f"{time.time() - self._t0:10.3f}  {(pre + ' ') if pre else ''}{shlex.join(argv)}\n"
        if _verbosity > 0:
            print(f"+ {line[12:]}", end="", file=sys.stderr, flush=True)
        with self._lock:
            try:
                self._log.write(line)
                self._log.flush()
            except OSError as e:     # a full disk must never stop a command (teardown!)
                self._lost(e)

    def _lost(self, e: OSError) -> None:
        """commands.log cannot be written any more: said once, then no longer written."""
        log, self._log = self._log, None
        self.say(f"commands.log not written from here on ({e.strerror or e})")
        if log is not None:
            try:
                log.close()
            except OSError:
                pass

    def close(self) -> None:
        proc.set_echo(None)
        with self._lock:
            if self._log is not None:
                try:
                    self._log.close()
                except OSError as e:
                    self.say(f"commands.log not complete ({e.strerror or e})")
                self._log = None
