"""Unit parsing at the boundary: '50ms' -> 0.05 s, '10gbit' -> 1e10 bit/s,
'256MiB' -> bytes, '1.5%' -> 0.015.

Pure functions; raise ValueError with a short reason, callers add file/key context.
"""
from __future__ import annotations

import re

_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"

_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
         "min": 60.0, "m": 60.0, "h": 3600.0}
_RATE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
         "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
         "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SIZE = {"b": 1, "": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
         "t": 1e12, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _split(text: object, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"expected a {what}")
    if isinstance(text, (int, float)):
        return float(text), ""
    if not isinstance(text, str):
        raise ValueError(f"expected a {what}")
    m = re.fullmatch(_NUM + r"\s*([A-Za-zµ%]*)", text.strip())
    if not m:
        raise ValueError(f"not a {what}")
    return float(m.group(1)), m.group(2)


def parse_duration(text: object, *, default_unit: str = "s") -> float:
    """Return seconds. Bare numbers are in `default_unit`."""
    value, unit = _split(text, "duration like '50ms'")
    unit = unit or default_unit
    if unit not in _TIME:
        raise ValueError(f"unknown time unit {unit!r} (use ns, us, ms, s, min)")
    return value * _TIME[unit]


def parse_rate(text: object) -> float:
    """Return bits per second. Bare numbers are bit/s."""
    value, unit = _split(text, "rate like '10gbit'")
    key = unit.lower()
    if key == "":
        return value
    if key not in _RATE:
        raise ValueError(f"unknown rate unit {unit!r} (use kbit, mbit, gbit, tbit)")
    return value * _RATE[key]


def parse_size(text: object) -> int:
    """Return bytes. Bare numbers are bytes."""
    value, unit = _split(text, "size like '256MiB'")
    key = unit.lower()
    if key not in _SIZE:
        raise ValueError(f"unknown size unit {unit!r} (use B, KiB, MiB, GiB, kB, MB, GB)")
    result = value * _SIZE[key]
    if result != int(result):
        raise ValueError("size must be a whole number of bytes")
    return int(result)


def parse_fraction(text: object) -> float:
    """'1.5%' -> 0.015; bare numbers are fractions (0.015)."""
    value, unit = _split(text, "percentage like '0.5%'")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise ValueError(f"unknown unit {unit!r} (use % or a fraction)")
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0% and 100%")
    return value
