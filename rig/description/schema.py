"""A small strict schema checker for YAML documents: unknown keys are errors, units are
parsed once here, every error names the file, the key path and the bad value.

Every number a parser returns is finite and inside the range rig.description.limits states.

Pure; imports only rig.errors, rig.description.limits and rig.description.units.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import ipaddress
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from rig.description import limits as L, units
from rig.errors import InputError, printable

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
    """Where we are in a document, to build error messages. A child keeps its parent and
    key; its path (`a.b[0].c`) is spelt out only when asked, for an error: a document
    walks hundreds of keys per error it finds."""
    __slots__ = ("file", "_parent", "_key", "_path")

    def __init__(self, file: str, path: str = "") -> None:
        self.file = file
        self._parent: Ctx | None = None
        self._key: str | int | None = None
        self._path: str | None = path

    def child(self, key: str | int) -> "Ctx":
        c = Ctx.__new__(Ctx)
        c.file, c._parent, c._key, c._path = self.file, self, key, None
        return c

    @property
    def path(self) -> str:
        if self._path is None:
            assert self._parent is not None, "a Ctx without a path has a parent"
            up, key = self._parent.path, self._key
            if isinstance(key, int):
                self._path = f"{up}[{key}]"
            else:
                key = printable(str(key), 40) or "''"   # a key can be anything YAML holds
                self._path = f"{up}.{key}" if up else key
        return self._path

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
            raise ctx.child(str(key)).error(f"unknown key ({_known(str(key), fields)})",
                                            data[key])
    out: dict[str, Any] = {}
    for key, f in fields.items():
        if key in data:
            out[key] = call(ctx.child(key), f.parse, data[key])
        elif f.default is _MISSING:
            raise ctx.child(key).error("required key is missing")
        else:
            out[key] = f.default
    return out


# --- a document section declared once, as a dataclass ------------------------------
EMPTY = object()   # default of a nested section: a missing key reads as an empty mapping


KNOWN_CHARS = 160     # a longer list of known keys would not fit an error's one line


# words a user of tc, Mininet or iperf3 writes for a key the scenario names otherwise
SYNONYMS = {"bandwidth": "rate", "bw": "rate", "delay": "rtt", "latency": "rtt",
            "capacity": "rate", "drop": "loss", "packet_loss": "loss", "parallel": "streams",
            "threads": "streams", "size_bytes": "size", "repeat": "repeats",
            "repetitions": "repeats", "congestion": "congestion_control", "cc": "congestion_control"}


def _known(key: str, fields: dict) -> str:
    """The keys a section knows, for an unknown key's error: the key it means where the
    word is a common synonym (bandwidth -> rate), all of them when they are few, else the
    closest to the one given (docs/scenarios.md lists them all)."""
    names = sorted(fields)
    meant = SYNONYMS.get(key.strip().lower())
    if meant in names:
        return f"did you mean {meant}?"
    known = ", ".join(names)
    if len(known) <= KNOWN_CHARS:
        return f"known: {known}"
    close = difflib.get_close_matches(key[:100], names, n=3)
    return (f"closest known: {', '.join(close)}" if close
            else f"none of its {len(names)} known keys, e.g. {', '.join(names[:6])}")


def spec(parse: Parser, default: Any = _MISSING, *, key: str | None = None,
         doc: str | None = None, example: Any = None) -> Any:
    """A dataclass field read from the document: its YAML `key` (default: the field's
    name), the parser that checks and converts the value, and the default when the
    key is absent (none: required; EMPTY: a nested section parsed from {}). `doc` and
    `example` are for the key reference (docs/scenario-reference.md) where the comment
    beside the field and the parser's own description do not say enough."""
    md = {"parse": parse, "key": key, "default": default, "doc": doc, "example": example}
    if default is _MISSING or default is EMPTY:
        return dataclasses.field(metadata=md)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=md)
    return dataclasses.field(default=default, metadata=md)


@functools.cache
def _doc_fields(cls: type) -> dict[str, tuple[str, Field]]:
    """YAML key -> (attribute, Field) of every field a document section declares
    (a class's fields never change: computed once per class, read only)."""
    out = {}
    for f in dataclasses.fields(cls):
        if "parse" in f.metadata:
            out[f.metadata["key"] or f.name] = (f.name, Field(f.metadata["parse"],
                                                              f.metadata["default"]))
    return out


_MERGED: dict[type, tuple[dict, dict, dict]] = {}


def _fields_of(cls: type) -> tuple[dict[str, tuple[str, Field]], dict[str, Field]]:
    """A section's keys: key -> (attribute, Field), and key -> Field; its own and its
    `extra_fields()`, merged again only when extra_fields() gives another mapping (the
    tools' keys change only as tools register)."""
    fields = _doc_fields(cls)
    extra = getattr(cls, "extra_fields", None)
    if extra is None:
        return fields, _plain_fields(cls)
    more = extra()
    hit = _MERGED.get(cls)
    if hit is not None and hit[0] is more:
        return hit[1], hit[2]
    merged = {**fields, **{k: v for k, v in more.items() if k not in fields}}
    plain = {k: f for k, (_, f) in merged.items()}
    _MERGED[cls] = (more, merged, plain)
    return merged, plain


@functools.cache
def _plain_fields(cls: type) -> dict[str, Field]:
    return {k: f for k, (_, f) in _doc_fields(cls).items()}


def load(ctx: Ctx, data: Any, cls: type) -> Any:
    """Check a mapping against the fields `cls` declares with `spec` and build it.

    A class may define `checked(cls, ctx, values) -> values` (a classmethod) for what
    one field cannot say alone: checks across fields, values derived from others; it
    gets and returns a dict of attribute -> value. A class may also define
    `extra_fields(cls) -> {key: (attribute, Field)}` (a classmethod): keys it reads
    besides its own fields (a client's tool options, declared by the tools), whose
    values `checked` folds into the fields it has."""
    fields, plain = _fields_of(cls)
    d = check_mapping(ctx, data, plain)
    values = {}
    for k, (attr, f) in fields.items():
        v = d[k]
        if v is EMPTY:
            v = call(ctx.child(k), f.parse, {})
        values[attr] = v
    checked = getattr(cls, "checked", None)
    if checked is not None:
        values = checked(ctx, values)
    return cls(**values)


def section(cls: type) -> Parser:
    """Parser of a nested section declared by dataclass `cls`."""
    @with_ctx
    def p(ctx: Ctx, v: Any) -> Any:
        return load(ctx, v, cls)
    return described(p, type="section", cls=cls)


def call(ctx: Ctx, parse: Parser, value: Any) -> Any:
    """Apply a parser; turn its ValueError/TypeError into an error at ctx."""
    try:
        if getattr(parse, "wants_ctx", False):
            return parse(ctx, value)  # type: ignore[call-arg]
        return parse(value)
    except InputError:
        raise
    except (ValueError, TypeError) as e:
        raise ctx.error(str(e) or "invalid value", value) from None


def with_ctx(fn: Callable[[Ctx, Any], Any]) -> Parser:
    fn.wants_ctx = True  # type: ignore[attr-defined]
    return fn  # type: ignore[return-value]


# --- what a parser accepts, said for the key reference -------------------------------
def described(parse: Any, **what: Any) -> Any:
    """Attach to a parser what it accepts, for the key reference: `type` (integer,
    duration, size, choice, list, section, ...), `lo`/`hi`, `choices` (or a function
    giving them), `item` (a list's parser), `cls` (a section's dataclass), `text`."""
    parse.info = {**getattr(parse, "info", {}), **what}
    return parse


def describe(**what: Any) -> Callable[[Any], Any]:
    """`described` as a decorator."""
    return lambda parse: described(parse, **what)


def info(parse: Any) -> dict[str, Any]:
    """What `described` attached to a parser ({}: nothing)."""
    return getattr(parse, "info", {})


def list_of(parse: Parser, *, min_len: int = 1, scalar_ok: bool = True,
            max_len: int | None = None) -> Parser:
    @with_ctx
    def p(ctx: Ctx, v: Any) -> list:
        if scalar_ok and not isinstance(v, list):
            v = [v]
        if not isinstance(v, list):
            raise ctx.error("expected a list", v)
        if len(v) < min_len:
            raise ctx.error(f"needs at least {min_len} item(s)", v)
        if max_len is not None and len(v) > max_len:
            raise ctx.error(f"at most {max_len} item(s) (has {len(v)})")
        return [call(ctx.child(i), parse, x) for i, x in enumerate(v)]
    return described(p, type="list", item=parse, min_len=min_len, max_len=max_len,
                     scalar_ok=scalar_ok)


def optional(parse: Parser) -> Parser:
    @with_ctx
    def p(ctx: Ctx, v: Any) -> Any:
        return None if v is None else call(ctx, parse, v)
    return described(p, **info(parse), optional=True, inner=parse)


def choice(*options: str) -> Parser:
    def p(v: Any) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return v
    return described(p, type="choice", choices=options)


def integer(lo: int | None = None, hi: int | None = None) -> Parser:
    def p(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError("expected a whole number")
        if lo is not None and v < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and v > hi:
            raise ValueError(f"must be <= {hi}")
        return v
    return described(p, type="integer", lo=lo, hi=hi)


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0," + str(L.MAX_NAME_CHARS - 1) + "}")


def name(v: Any) -> str:
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise ValueError("expected a name of letters, digits, '_', '.', '+', '-' "
                         f"(max {L.MAX_NAME_CHARS})")
    return v


def text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected text")
    if len(v) > L.MAX_TEXT_CHARS:
        raise ValueError(f"longer than {L.MAX_TEXT_CHARS} characters")
    if "\0" in v:
        raise ValueError("contains a NUL character")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:      # a lone surrogate ("\ud800"): YAML's escapes allow it
        raise ValueError("contains a lone surrogate (not a Unicode character)") from None
    return v


def path_text(v: Any) -> str:
    """A file system path given to a program (a binary): one printable line."""
    v = text(v)
    if not v or not v.isprintable():
        raise ValueError("expected a path on one line without control characters")
    if not v.strip():
        raise ValueError("expected a path, got only blanks")
    return v


def ns_name(v: Any) -> str:
    """An existing network namespace's name, as `ip netns` accepts it (a file name
    under /run/netns: no '/', not '.' or '..')."""
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", v) \
            or ".." in v:
        raise ValueError("expected a namespace name of letters, digits, '_', '.', '-' "
                         "(max 64, no '/' or '..')")
    return v


def host_cpus() -> set[int]:
    """CPUs this process may run on (a CPU set naming others is refused)."""
    return set(os.sched_getaffinity(0))


def cpu_set(v: Any) -> str:
    """A CPU list as taskset -c and cpuset.cpus read it ("0", "0-1", "0,2-3"), every CPU
    one the host has; returned normalized."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str) or not re.fullmatch(r"\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?)*", v):
        raise ValueError("expected a CPU list like '0', '0-1' or '0,2-3'")
    cpus: set[int] = set()
    for part in v.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if a > b:
            raise ValueError(f"range {part} runs backwards")
        cpus |= set(range(a, b + 1))
    have = host_cpus()
    if not cpus <= have:
        raise ValueError(f"this host has no CPU {fmt_cpus(cpus - have)} (has {fmt_cpus(have)})")
    return fmt_cpus(cpus)


def fmt_cpus(cpus: set[int]) -> str:
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def ip_address(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, str) or len(v) > 64:
        raise ValueError("expected an IP address like 192.0.2.1 or 2001:db8::1")
    try:
        return str(ipaddress.ip_address(v))
    except ValueError:
        raise ValueError("expected an IP address like 192.0.2.1 or 2001:db8::1") from None


def env_key(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", v):
        raise ValueError("an environment variable name is letters, digits and '_', "
                         "not starting with a digit")
    return v


def env_value(v: Any) -> str:
    """Text or a number, as the variable's value."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ValueError("expected text or a number")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("number is not finite")
    if isinstance(v, int) and abs(v) >= 10**18:
        raise ValueError("number too large")
    return text(str(v))


def fmt_s(seconds: float) -> str:
    for unit, scale in (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return f"{seconds / scale:g}{unit}"
    return f"{seconds * 1e6:g}us"


def fmt_list(values: Any, fmt: Callable[[Any], str] = str) -> str:
    """A swept list as a scenario writes it, for a message: [1, 8], [off, all]."""
    return "[" + ", ".join(fmt(v) for v in values) + "]"


def fmt_pct(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def fmt_size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale:g}{unit}"
    return f"{n:g}B"


def duration_in(lo: float = 0.0, hi: float = L.MAX_DURATION_S, *,
                whole: bool = False) -> Parser:
    """A duration in seconds within lo..hi (0 < lo means: must be > 0)."""
    def p(v: Any) -> float:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0:
            raise ValueError("give a unit, e.g. '50ms'")
        s = units.parse_duration(v)
        if s < 0:
            raise ValueError("must be >= 0")
        if lo > 0 and s <= 0:
            raise ValueError("must be > 0")
        if 0 < s < max(lo, L.MIN_NONZERO_S):
            raise ValueError(f"must be 0 or at least {fmt_s(max(lo, L.MIN_NONZERO_S))}")
        if s > hi:
            raise ValueError(f"must be at most {fmt_s(hi)}")
        if whole and s != int(s):
            raise ValueError("must be a whole number of seconds")
        return s
    return described(p, type="duration", lo=lo, hi=hi, whole=whole)


_duration = duration_in()
_positive_duration = duration_in(L.MIN_NONZERO_S)


def duration(v: Any) -> float:
    """Seconds, 0 .. one day."""
    return _duration(v)


def positive_duration(v: Any) -> float:
    return _positive_duration(v)


def rate(v: Any) -> float:
    """Bits per second within rig.description.limits' MIN_RATE_BPS..MAX_RATE_BPS."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        n = f"{v:g}" if math.isfinite(v) and abs(v) < 1e15 else "10"
        raise ValueError(f"give a unit, e.g. '{n}mbit' or '{n}gbit' (a bare number is refused)")
    r = units.parse_rate(v)
    if not L.MIN_RATE_BPS <= r <= L.MAX_RATE_BPS:
        raise ValueError(f"must be within {units.fmt_rate(L.MIN_RATE_BPS)}.."
                         f"{units.fmt_rate(L.MAX_RATE_BPS)}")
    return r


def size_in(lo: int = 1, hi: int = L.MAX_SIZE) -> Parser:
    def p(v: Any) -> int:
        n = units.parse_size(v)
        if n <= 0:
            raise ValueError("must be > 0")
        if not lo <= n <= hi:
            raise ValueError(f"must be within {fmt_size(lo)}..{fmt_size(hi)}")
        return n
    return described(p, type="size", lo=lo, hi=hi)


_size = size_in()


def size(v: Any) -> int:
    """Bytes, 1 B .. 1 TiB."""
    return _size(v)


def fraction(v: Any) -> float:
    return units.parse_fraction(v)


def unique_names(ctx: Ctx, items: list, what: str) -> None:
    seen: set[str] = set()
    for i, it in enumerate(items):
        if it.name in seen:
            raise ctx.child(i).child("name").error(f"duplicate {what} name", it.name)
        seen.add(it.name)


for _p, _t in ((boolean, "boolean"), (name, "name"), (text, "text"), (path_text, "path"),
               (ns_name, "namespace"), (cpu_set, "cpus"), (ip_address, "address"),
               (env_key, "text"), (env_value, "text")):
    described(_p, type=_t)
described(duration, **info(_duration))
described(positive_duration, **info(_positive_duration))
described(rate, type="rate", lo=L.MIN_RATE_BPS, hi=L.MAX_RATE_BPS)
described(size, **info(_size))
described(fraction, type="fraction", lo=0.0, hi=1.0)
