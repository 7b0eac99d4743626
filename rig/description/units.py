"""Unit parsing at the boundary: '50ms' -> 0.05 s, '10gbit' -> 1e10 bit/s,
'256MiB' -> bytes, '1.5%' -> 0.015.

Every result is a finite number. Units are case-exact where case changes the meaning
(`Mib` is mebibits, not `MiB`; `b` is a bit, `B` a byte). Every dimensioned quantity
(duration, size, rate) needs its unit: a bare number, a YAML number or a string of
digits, is refused unless it is 0 (zero in any unit); fractions (`0.5%`, or 0.005) have
none. Rates are bits per second: `*bps` (tc reads `mbps` as megaBYTES per second) is
refused with the spelling to use instead.

Pure functions; raise ValueError with a short reason, callers add file/key context.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterator

_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
_MAX_TEXT = 64        # longer than any quantity anyone writes

_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
         "min": 60.0, "m": 60.0, "h": 3600.0}
_RATE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}   # any case, as tc
_SIZE = {"": 1, "B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE_HINT = "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB"
_EXP = {"k": 3, "m": 6, "g": 9, "t": 12}


def _show(unit: str) -> str:
    """A unit as quoted in a message: short, whatever the input."""
    return repr(unit if len(unit) <= 12 else unit[:11] + "…")


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("number is not finite (too large, inf or nan)")
    return x


def _split(text: object, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"expected a {what}")
    if isinstance(text, int):
        try:
            return _finite(float(text)), ""
        except OverflowError:
            raise ValueError("number is not finite (too large, inf or nan)") from None
    if isinstance(text, float):
        return _finite(text), ""
    if not isinstance(text, str):
        raise ValueError(f"expected a {what}")
    if len(text) > _MAX_TEXT:
        raise ValueError(f"too long for a {what}")
    m = re.fullmatch(_NUM + r"\s*([A-Za-zµ%]*)", text.strip())
    if not m:
        raise ValueError(f"not a {what}")
    return _finite(float(m.group(1))), m.group(2)


def parse_duration(text: object, *, bare_unit: str | None = None) -> float:
    """Return seconds. The unit is required (a bare 0 is zero in any unit), unless
    `bare_unit` says what a bare number is in (rig-fdt's options, as iperf3's)."""
    value, unit = _split(text, "duration like '50ms'")
    if not unit and bare_unit is None:
        _bare(value, "s")
        return 0.0
    unit = unit or bare_unit or "s"
    if unit not in _TIME:
        if unit.lower() in _TIME:
            raise ValueError(f"time units are lower-case: write {unit.lower()!r}")
        raise ValueError(f"unknown time unit {_show(unit)} (use ns, us, ms, s, min)")
    return _finite(value * _TIME[unit])


def _bare(value: float, example: str) -> None:
    """A bare number (no unit) is refused unless it is zero: the rule for every
    dimensioned quantity, in a scenario, a topology, a tuning file and on the command line."""
    if value != 0:
        raise ValueError(f"give a unit, e.g. '{_num(value)}{example}' (a bare number is refused)")


def _num(value: float) -> str:
    return f"{value:g}"


def parse_rate(text: object) -> float:
    """Return bits per second. The unit is required: kbit, mbit, gbit, tbit (any case)."""
    value, unit = _split(text, "rate like '10gbit'")
    key = unit.lower()
    if key == "":
        raise ValueError(f"a bare number is ambiguous (tc reads bytes/s): add a unit, "
                         f"e.g. '{_num(value)}mbit'")
    if key.endswith("bps") and key[:-3] in ("", "k", "m", "g", "t"):
        raise ValueError(f"unit {_show(unit)} is ambiguous (tc reads 'mbps' as megaBYTES "
                         f"per second): write '{_num(value)}{key[:-3]}bit' for bits per second")
    if key in ("k", "m", "g", "t"):
        raise ValueError(f"give the whole unit: write '{_num(value)}{key}bit'")
    if key not in _RATE:
        raise ValueError(f"unknown rate unit {_show(unit)} (use kbit, mbit, gbit, tbit)")
    return _finite(value * _RATE[key])


def _size_hint(unit: str) -> str:
    low = unit.lower()
    if low in ("kib", "mib", "gib", "tib"):
        right = low[0].upper() + "iB"
        why = "mebibits" if low == "mib" else "bits"
        return f"{_show(unit)} would be {why}: write {right!r} (size units are case-exact)"
    if low in ("kb", "mb", "gb", "tb", "k", "m", "g", "t"):
        dec = "kB" if low[0] == "k" else low[0].upper() + "B"
        return (f"{_show(unit)} is ambiguous: write {dec!r} (10^{_EXP[low[0]]} bytes) or "
                f"{low[0].upper() + 'iB'!r} (2^{_EXP[low[0]] // 3 * 10}); size units are case-exact")
    if unit == "b":
        return "'b' is a bit: write 'B' for bytes"
    return f"unknown size unit {_show(unit)} (use {_SIZE_HINT})"


def parse_size(text: object, *, bare_unit: str | None = None) -> int:
    """Return bytes. The unit is required (B for bytes; a bare 0 is zero in any unit),
    unless `bare_unit` says what a bare number is in (rig-fdt's options, as FDT's)."""
    value, unit = _split(text, "size like '256MiB'")
    if not unit and bare_unit is None:
        _bare(value, "B")
        return 0
    unit = unit or bare_unit or "B"
    if unit not in _SIZE:
        raise ValueError(_size_hint(unit))
    result = _finite(value * _SIZE[unit])
    if result != int(result):
        raise ValueError("size must be a whole number of bytes")
    return int(result)


def parse_fraction(text: object) -> float:
    """'1.5%' -> 0.015. A bare number other than 0 is refused: 0.5 meant as 0.5 % would
    be 50 % loss (the trap netem's own syntax sets), so the unit is written, as for RTTs."""
    if isinstance(text, str) and text.strip().startswith("-") or \
            isinstance(text, (int, float)) and not isinstance(text, bool) and text < 0:
        raise ValueError("must be between 0% and 100%: not negative")
    value, unit = _split(text, "percentage like '0.5%'")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise ValueError(f"unknown unit {_show(unit)} (write a percentage like '0.5%')")
    elif value != 0:
        raise ValueError(f"a bare number is ambiguous: write a percentage, "
                         f"'{_show_pct(value)}' for {value:g} as a fraction or '{value:g}%'")
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0% and 100%")
    return value


def _show_pct(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def fmt_rate(bps: float) -> str:
    for unit, scale in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.4g}{unit}"
    return f"{bps:.4g}bit"


# Throughput units a report, its CSVs and the console can show (scenario `report.unit`):
# bits per second in one unit, and the suffix of a CSV column in that unit.
THROUGHPUT_UNITS: dict[str, float] = {"Gbit/s": 1e9, "Mbit/s": 1e6, "GB/s": 8e9,
                                      "MB/s": 8e6, "MiB/s": 8 * 2**20}
THROUGHPUT_SUFFIX: dict[str, str] = {"Gbit/s": "gbps", "Mbit/s": "mbitps", "GB/s": "gbyteps",
                                     "MB/s": "mbyteps", "MiB/s": "mibyteps"}
DEFAULT_THROUGHPUT_UNIT = "Gbit/s"


# The unit a report is being drawn in (rig.report.render sets it for the whole page: its
# prose, verdicts and secondary tables say throughputs in the run's one unit, issue 41).
_UNIT: contextvars.ContextVar[str] = contextvars.ContextVar("rig_throughput_unit",
                                                            default=DEFAULT_THROUGHPUT_UNIT)


def current_unit() -> str:
    """The throughput unit of the report being drawn (default Gbit/s)."""
    return _UNIT.get()


@contextlib.contextmanager
def throughput_unit(unit: str) -> Iterator[str]:
    """Within the block, prose and tables say throughputs in `unit`."""
    if unit not in THROUGHPUT_UNITS:
        unit = DEFAULT_THROUGHPUT_UNIT
    tok = _UNIT.set(unit)
    try:
        yield unit
    finally:
        _UNIT.reset(tok)


def column(name: str) -> str:
    """A CSV column named for Gbit/s (`..._gbps`, `..._gbit_s`) renamed for the current
    unit (`_mbyteps`, ...); unchanged in the default unit."""
    u = _UNIT.get()
    if u == DEFAULT_THROUGHPUT_UNIT:
        return name
    return name.replace("gbit_s", THROUGHPUT_SUFFIX[u]).replace("gbps", THROUGHPUT_SUFFIX[u])


def in_unit(bps: float | None, unit: str | None = None) -> float:
    """A throughput in bit/s expressed in `unit` (one of THROUGHPUT_UNITS; None: the
    current one); None -> 0."""
    return (bps or 0.0) / THROUGHPUT_UNITS[unit or _UNIT.get()]


def show_throughput(bps: float, unit: str | None = None, digits: int = 4) -> str:
    """'4.82 Gbit/s': a throughput in bit/s as shown on the console and in prose (in
    `unit`, else the current one)."""
    u = unit or _UNIT.get()
    return f"{in_unit(bps, u):.{digits}g} {u}"
