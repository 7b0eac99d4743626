"""Per-point verdicts of `rig compare`: regressed / improved / same / undecided.

How the decision is made (after Perfherder's "significant AND above a magnitude", Pinpoint's
"same / different / unknown, run more repeats", and benchstat's per-point interval):

  effect     change of the geometric mean throughput, candidate vs baseline, with its 95 %
             interval, from a t on log throughput. The noise of a point is its pooled
             variance of log throughput shrunk toward the noise of the whole grid
             (empirical Bayes, Smyth 2004: limma's moderated t): a sweep measures many
             points with similar relative noise, and 3-5 repeats alone estimate it badly.
             The prior is estimated from the grid; when the points' noise differs a lot,
             its weight (d0) is small and the test is the per-point t. With fewer than
             3 tested points there is no prior: Welch's t per point.
  regressed  drop of at least `floor` (magnitude floor, default 5 %) AND significant after
             Holm's correction over every tested point (family-wise 5 %)
  improved   the same, upwards
  same       the 90 % interval lies inside +-`margin` (equivalence margin, default 5 %;
             two one-sided tests at 5 %), and the point is neither of the above
  undecided  neither: `needed` says about how many repeats a side would decide it if the
             change and noise stay as measured (normal approximation; the significance
             level is Bonferroni's 5 %/m, never looser than Holm's); also every point with
             fewer than 3 successful repeats on a side (its noise: the grid's when other
             points were tested, else its own with 2 repeats a side; one repeat: none,
             so no number). `undecided_line` sums them up for the summary.
  failed     every candidate repeat failed while most baseline repeats succeeded
  no-baseline  the baseline never succeeded

Pure Python; imports only rig.report.stats.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from rig.errors import InputError
from rig.report.stats import Prior, holm, moderated_log, noise_prior, pooled_log_variance

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE          # family-wise error over all tested pairs (Holm)
EQUIVALENCE_CONFIDENCE = 0.90   # TOST at 5 %: the 90 % interval inside the margin
MIN_REPEATS = 3                 # fewer successful repeats on a side: undecided
MAX_NEEDED = 100                # beyond this, "more than 100 repeats"
MARGIN = 0.05
FLOOR = 0.05

REGRESSION, IMPROVEMENT, SAME = "regressed", "improved", "same"
FAILED, NO_BASELINE, UNDECIDED = "failed", "no-baseline", "undecided"
STATUSES = (REGRESSION, FAILED, IMPROVEMENT, SAME, UNDECIDED, NO_BASELINE)


@dataclass(frozen=True)
class Draft:
    """What decide() needs of a pair: successful repeats and failure counts."""
    base: Sequence[float]
    cand: Sequence[float]
    base_failed: int = 0
    cand_failed: int = 0


@dataclass(frozen=True)
class Decision:
    status: str
    change: float
    low: float | None = None            # 95 % interval of the change
    high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    needed: int | None = None           # undecided: repeats a side that would decide it
    why: str = ""                       # undecided: one phrase


def geo_change(base: Sequence[float], cand: Sequence[float]) -> float:
    lb = sum(math.log(v) for v in base) / len(base)
    lc = sum(math.log(v) for v in cand) / len(cand)
    return math.expm1(lc - lb)


def repeats_needed(change: float, sigma: float, *, floor: float, margin: float,
                   tests: int, have: int = 0) -> int | None:
    """Repeats a side after which the change (log scale) would be called regressed /
    improved (|d| >= floor, significant at ALPHA / tests) or same (|d| plus the 90 %
    half-width < margin), if change and per-repeat noise sigma stay as measured. None:
    no number of repeats (|d| sits between margin and floor, or is exactly 0 at sigma 0)."""
    d = abs(math.log1p(change))
    nd = statistics.NormalDist()
    best: float | None = None
    if d >= math.log1p(floor) and d > 0:
        z = nd.inv_cdf(1 - ALPHA / (2 * max(1, tests)))
        best = 2 * (z * sigma / d) ** 2
    room = min(-math.log1p(-margin), math.log1p(margin)) - d
    if room > 0:
        z = nd.inv_cdf(0.5 + EQUIVALENCE_CONFIDENCE / 2)
        n = 2 * (z * sigma / room) ** 2
        best = n if best is None else min(best, n)
    if best is None:
        return None
    return max(MIN_REPEATS, have + 1, math.ceil(best))


def _untested(d: Draft, floor: float, margin: float, prior: Prior | None,
              tests: int) -> Decision:
    if not d.base:
        return Decision(NO_BASELINE, math.nan)
    if not d.cand:      # failed everywhere: a regression unless the baseline was flaky
        ok = len(d.base) > d.base_failed
        return Decision(FAILED if ok else UNDECIDED, -1.0,
                        why="" if ok else "the baseline failed as often as it worked")
    change = geo_change(d.base, d.cand)
    sigma = None
    if prior is not None:              # the grid's noise, from the points tested
        sigma = math.sqrt(prior.s0sq)
    elif min(len(d.base), len(d.cand)) >= 2:     # no point tested: its own spread
        sigma = math.sqrt(pooled_log_variance(list(d.base), list(d.cand))[0])
    needed = None
    if sigma is not None:
        needed = repeats_needed(change, sigma, floor=floor, margin=margin, tests=tests,
                                have=min(len(d.base), len(d.cand)))
    return Decision(UNDECIDED, change, needed=needed,
                    why=f"fewer than {MIN_REPEATS} successful repeats on a side")


def decide(drafts: Sequence[Draft], floor: float = FLOOR,
           margin: float = MARGIN) -> list[Decision]:
    """Verdict of every pair; the Holm family (and the noise prior) is every pair with
    >= 3 successful repeats a side."""
    tested = [i for i, d in enumerate(drafts)
              if len(d.base) >= MIN_REPEATS and len(d.cand) >= MIN_REPEATS]
    pooled = [pooled_log_variance(list(drafts[i].base), list(drafts[i].cand))
              for i in tested]
    prior = noise_prior([v for v, _ in pooled], [df for _, df in pooled])
    tests = [moderated_log(list(drafts[i].base), list(drafts[i].cand), prior, CONFIDENCE)
             for i in tested]
    eq = [moderated_log(list(drafts[i].base), list(drafts[i].cand), prior,
                        EQUIVALENCE_CONFIDENCE) for i in tested]
    adjusted = holm([w.p for w in tests])
    out: dict[int, Decision] = {}
    for i, w, e, p_holm, (var, _) in zip(tested, tests, eq, adjusted, pooled):
        if p_holm <= ALPHA and abs(w.change) >= floor - 1e-12:
            status = REGRESSION if w.change < 0 else IMPROVEMENT
        elif -margin < e.low and e.high < margin:
            status = SAME
        else:
            status = UNDECIDED
        needed, why = None, ""
        if status == UNDECIDED:
            sigma = _shrunk_sigma(var, len(drafts[i].base) + len(drafts[i].cand) - 2, prior)
            needed = repeats_needed(w.change, sigma, floor=floor, margin=margin,
                                    tests=len(tested),
                                    have=min(len(drafts[i].base), len(drafts[i].cand)))
            why = _why(w.change, floor, margin)
        out[i] = Decision(status, w.change, w.low, w.high, w.p, p_holm, needed, why)
    # an untested point, repeated until it is tested, joins the family (Bonferroni's m)
    family = max(len(tested), sum(1 for d in drafts if d.base and d.cand))
    for i, d in enumerate(drafts):
        if i not in out:
            out[i] = _untested(d, floor, margin, prior, family)
    return [out[i] for i in range(len(drafts))]


def _shrunk_sigma(var: float, dg: int, prior: Prior | None) -> float:
    if prior is None:
        return math.sqrt(var)
    if math.isinf(prior.d0):
        return math.sqrt(prior.s0sq)
    return math.sqrt((prior.d0 * prior.s0sq + dg * var) / (prior.d0 + dg))


def _why(change: float, floor: float, margin: float) -> str:
    if abs(change) >= floor:
        return "moved, but not beyond the noise"
    return f"not shown to be within +-{margin:.0%}"


def needed_text(needed: int | None, status: str, why: str) -> str:
    """What an undecided verdict says, for tables."""
    if status != UNDECIDED:
        return ""
    if needed is None:
        return why or "more repeats alone will not decide it"
    more = f"> {MAX_NEEDED}" if needed > MAX_NEEDED else f"~{needed}"
    return f"{why}; {more} repeats a side would decide it"


def undecided_line(points: Sequence[tuple[str, float, int | None, int, str]],
                   floor: float = FLOOR) -> str | None:
    """The summary's word on the undecided points, from each point's (status, change,
    needed, fewest successful repeats on a side, why): how many repeats a side would
    decide how many of them if change and noise stay as measured (as a change: it moved
    by the floor or more; else as the same), how many need more than MAX_NEEDED, and
    that one repeat gives no spread to judge by. None: nothing undecided."""
    und = [(c, n, few, why) for st, c, n, few, why in points if st == UNDECIDED]
    if not und:
        return None
    ok = sorted((n, abs(c) >= floor) for c, n, _, _ in und if n is not None and n <= MAX_NEEDED)
    far = sum(1 for _, n, _, _ in und if n is not None and n > MAX_NEEDED)
    bare = sum(1 for _, n, few, _ in und if n is None and few == 1)
    stuck = [why for _, n, few, why in und if n is None and few != 1]
    parts = []
    if ok:
        top, half = ok[-1][0], ok[(len(ok) - 1) // 2][0]
        moved = sum(1 for _, m in ok if m)
        how = ", ".join(t for t in (f"{len(ok) - moved} as the same" if moved < len(ok) else "",
                                    f"{moved} as a change" if moved else "") if t)
        if len(ok) == 1:
            how = "as a change" if moved else "as the same"
        if half * 2 <= top:
            how += f"; {sum(1 for n, _ in ok if n <= half)} of them by {half}"
        which = ("it" if len(und) == 1 else "all of them" if len(ok) == len(und)
                 else f"{len(ok)} of them")
        parts.append(f"about {top} repeats a side would decide {which} ({how}) if change and "
                     f"noise stay as measured (sweep.repeats: {top} in both runs)")
    if far:
        parts.append(f"{far} would need more than {MAX_NEEDED} (noise large against the "
                     "change)")
    if bare:
        what = "one repeat" if bare == len(und) else f"{bare} with one repeat on a side"
        parts.append(f"{what} gives no spread to judge by: at least {MIN_REPEATS} successful "
                     f"repeats a side (sweep.repeats: {MIN_REPEATS}) before "
                     + ("anything" if bare == len(und) else "they") + " can be decided")
    if stuck:
        parts.append(f"{len(stuck)} that more repeats alone will not decide "
                     f"({'; '.join(sorted(set(stuck)))})")
    return f"{len(und)} undecided: " + "; ".join(parts)


def check_bounds(floor: Any, margin: Any) -> None:
    """floor and margin are fractions in (0, 1), floor <= margin (else a change between
    them could never be decided)."""
    for key, v in (("floor", floor), ("margin", margin)):
        if not (isinstance(v, (int, float)) and 0 < v < 1):
            raise InputError("must be a fraction between 0 and 1", key=key, value=v)
    if floor > margin:
        raise InputError(f"the magnitude floor must not exceed the equivalence margin "
                         f"({margin}): a change between them could never be decided",
                         key="floor", value=floor)
