"""A small strict schema checker for YAML documents: unknown keys are errors, units are
parsed once here, every error names the file, the key path and the bad value.

Pure; imports only rig.errors and rig.units.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import units
from .errors import InputError

Parser = Callable[[Any], Any]
_MISSING = object()


@dataclass(frozen=True)
class Field:
    parse: Parser
    default: Any = _MISSING

    @property
    def required(self) -> bool:
        return self.default is _MISSING


class Ctx:
    """Where we are in a document, to build error messages."""

    def __init__(self, file: str, path: str = "") -> None:
        self.file, self.path = file, path

    def child(self, key: str | int) -> "Ctx":
        if isinstance(key, int):
            return Ctx(self.file, f"{self.path}[{key}]")
        return Ctx(self.file, f"{self.path}.{key}" if self.path else key)

    def error(self, message: str, value: Any = _MISSING) -> InputError:
        if value is _MISSING:
            return InputError(message, file=self.file, key=self.path or None)
        return InputError(message, file=self.file, key=self.path or None, value=value,
                          has_value=True)


def check_mapping(ctx: Ctx, data: Any, fields: dict[str, Field]) -> dict[str, Any]:
    """Validate a mapping against `fields`; return parsed values with defaults filled."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ctx.error("expected a mapping", data)
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ctx.child(str(key)).error(f"unknown key (known: {known})", data[key])
    out: dict[str, Any] = {}
    for key, f in fields.items():
        sub = ctx.child(key)
        if key not in data:
            if f.required:
                raise sub.error("required key is missing")
            out[key] = f.default
            continue
        out[key] = call(sub, f.parse, data[key])
    return out


def call(ctx: Ctx, parse: Parser, value: Any) -> Any:
    """Apply a parser; turn its ValueError/TypeError into an error at ctx."""
    try:
        return parse(value) if not getattr(parse, "wants_ctx", False) else parse(ctx, value)
    except InputError:
        raise
    except (ValueError, TypeError) as e:
        raise ctx.error(str(e) or "invalid value", value) from None


def with_ctx(fn: Callable[[Ctx, Any], Any]) -> Parser:
    fn.wants_ctx = True  # type: ignore[attr-defined]
    return fn


def list_of(parse: Parser, *, min_len: int = 1, scalar_ok: bool = True) -> Parser:
    @with_ctx
    def p(ctx: Ctx, v: Any) -> list:
        if scalar_ok and not isinstance(v, list):
            v = [v]
        if not isinstance(v, list):
            raise ctx.error("expected a list", v)
        if len(v) < min_len:
            raise ctx.error(f"needs at least {min_len} item(s)", v)
        return [call(ctx.child(i), parse, x) for i, x in enumerate(v)]
    return p


def optional(parse: Parser) -> Parser:
    @with_ctx
    def p(ctx: Ctx, v: Any) -> Any:
        return None if v is None else call(ctx, parse, v)
    return p


def choice(*options: str) -> Parser:
    def p(v: Any) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return v
    return p


def integer(lo: int | None = None, hi: int | None = None) -> Parser:
    def p(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError("expected a whole number")
        if lo is not None and v < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and v > hi:
            raise ValueError(f"must be <= {hi}")
        return v
    return p


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


def name(v: Any) -> str:
    import re
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}", v):
        raise ValueError("expected a name of letters, digits, '_', '.', '+', '-' (max 40)")
    return v


def text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected text")
    return v


def duration(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0:
        raise ValueError("give a unit, e.g. '50ms'")
    s = units.parse_duration(v)
    if s < 0:
        raise ValueError("must be >= 0")
    return s


def positive_duration(v: Any) -> float:
    s = duration(v)
    if s <= 0:
        raise ValueError("must be > 0")
    return s


def rate(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise ValueError("give a unit, e.g. '10gbit'")
    r = units.parse_rate(v)
    if r <= 0:
        raise ValueError("must be > 0")
    return r


def size(v: Any) -> int:
    n = units.parse_size(v)
    if n <= 0:
        raise ValueError("must be > 0")
    return n


def fraction(v: Any) -> float:
    return units.parse_fraction(v)


def unique_names(ctx: Ctx, items: list, what: str) -> None:
    seen: set[str] = set()
    for i, it in enumerate(items):
        if it.name in seen:
            raise ctx.child(i).child("name").error(f"duplicate {what} name", it.name)
        seen.add(it.name)
