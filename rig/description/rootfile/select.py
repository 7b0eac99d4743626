"""Which branches a job reads: CMSSW IOExerciser's selection, or an explicit list.

Pure. IOExerciser (IOPool/Input/test/IOExerciser.cc, computeProducts and fill*) weighs
each product by TBranch::GetTotalSize (summed over sub-branches), sorts ascending, and
adds products until the running total reaches percent x total: it overshoots rather
than undershoots. It has no random element; the seed here only orders branches of equal
size, which std::sort leaves unspecified.
"""
from __future__ import annotations

import random

from rig.errors import InputError
from rig.description.rootfile.layout import Layout

STRATEGIES = ("smallest_first", "largest_first", "round_robin")


def by_percent(layout: Layout, percent: float, strategy: str = "smallest_first",
               seed: int = 0) -> tuple[str, ...]:
    if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 < percent <= 100:
        raise InputError("must be more than 0 and at most 100", key="read.percent",
                         value=percent, has_value=True)
    if strategy not in STRATEGIES:
        raise InputError(f"must be one of {', '.join(STRATEGIES)}", key="read.strategy",
                         value=strategy, has_value=True)
    names = [b.name for b in layout.branches]
    random.Random(seed).shuffle(names)          # ties only: the sort below is stable
    size = {b.name: b.total_bytes for b in layout.branches}
    ordered = sorted(names, key=lambda n: size[n])
    threshold = percent * sum(size.values()) / 100.0
    picked: list[str] = []
    used = 0
    lo, hi = 0, len(ordered) - 1
    small_next = True
    while used < threshold and lo <= hi:
        if strategy == "smallest_first" or (strategy == "round_robin" and small_next):
            n, lo = ordered[lo], lo + 1
        else:
            n, hi = ordered[hi], hi - 1
        picked.append(n)
        used += size[n]
        small_next = not small_next
    return tuple(picked)


def by_names(layout: Layout, names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    known = {b.name for b in layout.branches}
    if not names:
        raise InputError("must name at least one branch", key="read.branches", value=list(names),
                         has_value=True)
    for n in names:
        if n not in known:
            raise InputError(f"no such branch in {layout.tree}", key="read.branches", value=n)
    return tuple(dict.fromkeys(names))
