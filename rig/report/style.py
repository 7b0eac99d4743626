"""The one place where client configurations get their display name, colour, marker
and line style, so that "xrdcp-S4" looks the same in every chart of every run.

Known configuration names have fixed styles; any other name gets a colour from its tool's
family and a shade and marker chosen by a stable hash of the name (zlib.crc32, never
Python's salted hash()), so it too is stable across charts, runs and machines.

Pure data: must not import matplotlib, realization, services or process supervision.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Style:
    color: str
    marker: str
    linestyle: str = "-"


# Colour families per tool: the first shade is the tool's plain configuration.
FAMILIES: dict[str, tuple[str, ...]] = {
    "xrdcp": ("#1f5fa8", "#4a90d9", "#0b3563", "#7fb3e8", "#2c7fb8"),
    "davix-get": ("#2e8b3a", "#5cbf5c", "#155d27", "#98d98e", "#41ab5d"),
    "curl": ("#e6750a", "#f5a142", "#a84f00", "#fdc77f", "#d95f0e"),
    "fdt": ("#7b3fa0", "#a679c7", "#4d1f6b", "#cbb1e0", "#8c6bb1"),
    "iperf3": ("#555555", "#888888", "#222222", "#aaaaaa", "#666666"),
    "other": ("#b8860b", "#c0392b", "#17becf", "#e377c2", "#8c564b"),
}
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")

# Fixed styles for the configurations the shipped scenarios use.
KNOWN: dict[str, Style] = {
    "xrdcp": Style("#1f5fa8", "o"),
    "xrdcp-S4": Style("#4a90d9", "s"),
    "xrdcp-S8": Style("#0b3563", "D"),
    "xrdcp-S16": Style("#2c7fb8", "P"),
    "xrdcp-tls": Style("#7fb3e8", "v", "--"),
    "davix-get": Style("#2e8b3a", "^"),
    "curl": Style("#e6750a", "v"),
    "fdt": Style("#7b3fa0", "D"),
    "fdt-2": Style("#a679c7", "<"),
    "fdt-8": Style("#7b3fa0", "D"),
    "fdt-15": Style("#4d1f6b", ">"),
    "iperf3": Style("#555555", "x"),
}

# One chart's client configurations: distinct colours from a qualitative palette
# (matplotlib's tab10 without its grey, which the reference lines use), in the chart's sort
# order, so a run's first four clients get blue, orange, green and red; past its end the
# colours come round again with the next line style, so no two series of a chart look alike.
PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                            "#8c564b", "#e377c2", "#bcbd22", "#17becf")
LINESTYLES: tuple[str, ...] = ("-", "--", "-.", ":")


def distinct_styles(names: list[str]) -> dict[str, Style]:
    """name -> Style for the series of one chart, in the order given (sort_key order
    keeps a run's charts alike): colour i of PALETTE, the configuration's own marker
    where it has one, line styles cycling once the palette is used up."""
    out: dict[str, Style] = {}
    for i, name in enumerate(dict.fromkeys(names)):
        marker = KNOWN[name].marker if name in KNOWN else MARKERS[i % len(MARKERS)]
        out[name] = Style(PALETTE[i % len(PALETTE)], marker,
                          LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)])
    return out


# Reference lines (what the network allows), shared by every chart.
PATH_RATE = Style("#000000", "", "-")
CAPACITY = Style("#444444", "x", "--")
WINDOW_LINESTYLE = ":"
BASELINE_LINESTYLE = "--"
REGRESSION_COLOR = "#c0392b"
IMPROVED_COLOR = "#2e8b3a"
NEUTRAL_COLOR = "#7f7f7f"
UNDECIDED_COLOR = "#d68910"          # rig compare: moved, but too few repeats to tell


def family(name: str, tool: str | None = None) -> str:
    """Tool family of a configuration: from its tool when known, else from its name."""
    for cand in (tool or "", name):
        low = cand.lower()
        for fam in FAMILIES:
            if fam != "other" and (low == fam or low.startswith(fam)):
                return fam
        if low.startswith("davix"):
            return "davix-get"
    return "other"


def style_for(name: str, tool: str | None = None) -> Style:
    """Stable style of a client configuration (or any series) name."""
    if name in KNOWN:
        return KNOWN[name]
    shades = FAMILIES[family(name, tool)]
    h = zlib.crc32(name.encode())
    return Style(shades[h % len(shades)], MARKERS[(h >> 8) % len(MARKERS)])


_STREAM_SUFFIX = re.compile(r"[-_ ]?(?:S|s|P|p)?\d+$")


def base_name(name: str) -> str:
    """'xrdcp-S4' -> 'xrdcp', 'fdt-8' -> 'fdt': used to join configurations that differ
    only by their stream count into one line of a streams chart."""
    stripped = _STREAM_SUFFIX.sub("", name)
    return stripped or name


def sort_key(name: str) -> tuple[int, str, int]:
    """Order clients by family, then name, with numeric suffixes in numeric order."""
    fams = list(FAMILIES)
    m = re.search(r"(\d+)$", name)
    return (fams.index(family(name)), base_name(name), int(m.group(1)) if m else 0)

# "Against the study" charts: the study's series over the rig's, one colour per series.
STUDY_LINESTYLE = "--"
STUDY_ALPHA = 0.8
# one colour per row of a study's table, in row order (hash shades can collide)
SERIES_CYCLE: tuple[str, ...] = ("#1f5fa8", "#e6750a", "#2e8b3a", "#7b3fa0", "#c0392b",
                                 "#17becf", "#8c564b", "#555555", "#b8860b", "#e377c2")
