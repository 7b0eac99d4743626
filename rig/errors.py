"""Typed errors and exit codes shared by every layer.

Must not import anything else from rig: every module may raise these.
"""
from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    OK = 0
    ERROR = 1          # the run could not proceed (environment, tool failure)
    BAD_INPUT = 2      # invalid scenario, option or directory
    REGRESSION = 1     # `rig compare`: something regressed


class RigError(Exception):
    """A failure the CLI reports as one line with exit status ERROR."""

    exit_status = ExitStatus.ERROR


class InputError(RigError):
    """Bad user input: names the file, the key path and the offending value."""

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, message: str, *, file: str | None = None,
                 key: str | None = None, value: object = None,
                 has_value: bool = False) -> None:
        self.file, self.key, self.value = file, key, value
        self.has_value = has_value or value is not None
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        head = ": ".join(p for p in (self.file, self.key) if p)
        text = f"{head}: {self.message}" if head else self.message
        if self.has_value:
            text += f" (got {self.value!r})"
        return text


class InputErrors(InputError):
    """Several defects found at once (e.g. a results folder): one line each."""

    MAX_LINES = 20

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, file=first.file, key=first.key, value=first.value,
                         has_value=first.has_value)

    def lines(self) -> list[str]:
        out = [str(e) for e in self.errors[:self.MAX_LINES]]
        if len(self.errors) > self.MAX_LINES:
            out.append(f"{self.errors[0].file}: ... and {len(self.errors) - self.MAX_LINES}"
                       f" more defect(s)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines()) if hasattr(self, "errors") else super().__str__()


class StepAborted(RigError):
    """The current sweep step cannot be measured honestly (e.g. emulator died)."""
