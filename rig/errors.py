"""Typed errors and exit codes shared by every layer.

Must not import anything from rig: every module may raise these (the lowest floor).
"""
from __future__ import annotations

import enum
import reprlib

QUOTE_CHARS = 80                  # an error message quotes at most this much of a value

_MAX_MESSAGE = 4 * QUOTE_CHARS
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, QUOTE_CHARS + 2, QUOTE_CHARS + 2


def printable(text: str, limit: int | None = None) -> str:
    """`text` on one line, control and invisible characters escaped, at most `limit`
    characters (cut with '…'): safe to print in a one-line error."""
    if (limit is None or len(text) <= limit) and text.isprintable():
        return text              # the common case, without a pass per character
    if limit is not None and len(text) > limit:
        text = text[:limit]
        cut = True
    else:
        cut = False
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if limit is not None and (cut or len(out) > limit):
        out = out[:limit - 1] + "…"
    return out


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """The repr of a value, at most `limit` characters: a 30 MB string or a huge nested
    list costs no more than a short one."""
    if isinstance(value, str):
        text = repr(value[:limit + 1])
    else:
        text = _REPR.repr(value)
    text = printable(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


MAX_LINE = 4 * QUOTE_CHARS      # one error line, all told
_MAX_WORD = 3 * QUOTE_CHARS // 2   # a run without spaces: a quoted value, or a real path


def clip(text: str, limit: int = MAX_LINE) -> str:
    """One error line fit to print: control characters escaped, every run of more than
    1.5 x QUOTE_CHARS characters without a space (a 10,000-character path or value echoed
    in a message; a real path is shorter) cut with '…', the whole at most `limit`
    characters. The one helper every command line's error printing goes through."""
    words = printable(text).split(" ")
    out = " ".join(w if len(w) <= _MAX_WORD else w[:_MAX_WORD - 1] + "…" for w in words)
    return out if len(out) <= limit else out[:limit - 1] + "…"


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
        head = ": ".join(printable(p, _MAX_WORD) for p in (self.file, self.key) if p)
        message = printable(self.message, _MAX_MESSAGE)
        text = f"{head}: {message}" if head else message
        if self.has_value:
            text += f" (got {quote(self.value)})"
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


class OutputFull(RigError):
    """The output folder's filesystem is full: nothing more can be stored."""


class StepAborted(RigError):
    """The current sweep step cannot be measured honestly (e.g. emulator died)."""
