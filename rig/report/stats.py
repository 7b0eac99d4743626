"""Small-sample statistics for `rig compare`, in pure Python (no scipy):

  t_cdf, t_ppf        Student's t distribution, through the regularized incomplete beta
                      function (continued fraction, as in Numerical Recipes' betacf)
  welch_log           Welch's t on log throughput: the change of the geometric mean, its
                      interval and two-sided p-value; keeps its coverage at 3 repeats,
                      where a percentile bootstrap does not (it never sees more spread
                      than the 3 values it resamples)
  holm                Holm's step-down adjustment: family-wise error over many points

Must not import anything from rig but errors: it is used by comparisons and tests alone.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

_EPS = 1e-15
_TINY = 1e-300


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            step = d * c
            h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0) or not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc({a}, {b}, {x}): need a, b > 0 and 0 <= x <= 1")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail P(|T| >= |t|) of Student's t with df > 0 degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    tail = t_sf2(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)
                    - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(t * t / df))


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t: Newton steps kept inside a bisection bracket."""
    if not 0.0 < q < 1.0 or not df > 0:
        raise ValueError(f"t_ppf({q}, {df}): need 0 < q < 1 and df > 0")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, hi * 2.0
    t = statistics.NormalDist().inv_cdf(q)
    t = t if lo < t < hi else (lo + hi) / 2
    for _ in range(100):
        err = t_cdf(t, df) - q
        if err > 0:
            hi = t
        else:
            lo = t
        if abs(err) < 1e-14 or hi - lo < 1e-12 * max(1.0, hi):
            break
        nxt = t - err / _t_pdf(t, df)
        t = nxt if lo < nxt < hi else (lo + hi) / 2
    return t


@dataclass(frozen=True)
class Welch:
    change: float        # exp(mean log cand - mean log base) - 1: change of geometric means
    low: float           # interval of `change` at the requested confidence
    high: float
    p: float             # two-sided p-value of "no change"
    df: float


def welch_log(base: list[float], cand: list[float], confidence: float = 0.95) -> Welch:
    """Welch's unequal-variance t on log(throughput); needs >= 2 positive values a side."""
    if len(base) < 2 or len(cand) < 2:
        raise ValueError("Welch's t needs at least 2 values on each side")
    lb, lc = [math.log(v) for v in base], [math.log(v) for v in cand]
    d = statistics.fmean(lc) - statistics.fmean(lb)
    vb, vc = statistics.variance(lb) / len(lb), statistics.variance(lc) / len(lc)
    se2 = vb + vc
    if se2 <= 0.0:                    # no spread at all: the difference is exact
        return Welch(math.expm1(d), math.expm1(d), math.expm1(d), 0.0 if d else 1.0,
                     math.inf)
    se = math.sqrt(se2)
    df = se2 * se2 / (vb * vb / (len(lb) - 1) + vc * vc / (len(lc) - 1))
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    return Welch(math.expm1(d), math.expm1(d - half), math.expm1(d + half),
                 t_sf2(d / se, df), df)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: reject where adjusted <= alpha keeps
    the chance of any false rejection among all of them <= alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


# --- moderated t: noise shared across the points of a grid (Smyth 2004, limma) ---------

def digamma(x: float) -> float:
    """psi(x) for x > 0: recurrence up to 6, then the asymptotic series."""
    out = 0.0
    while x < 6.0:
        out -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    return out + math.log(x) - 0.5 / x - f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f / 240)))


def trigamma(x: float) -> float:
    """psi'(x) for x > 0: recurrence up to 6, then the asymptotic series."""
    out = 0.0
    while x < 6.0:
        out += 1.0 / (x * x)
        x += 1.0
    f = 1.0 / (x * x)
    return out + 1 / x + f / 2 + f / x * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f / 30)))


def trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (y > 0): bisection in log x (trigamma is decreasing)."""
    lo, hi = math.log(1e-8), math.log(1e8)
    for _ in range(200):
        mid = (lo + hi) / 2
        if trigamma(math.exp(mid)) > y:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


@dataclass(frozen=True)
class Prior:
    """Scaled inverse chi-square prior of the per-point noise variance: s0sq with d0
    degrees of freedom (d0 = inf: every point has the same noise, s0sq)."""
    d0: float
    s0sq: float


def noise_prior(variances: list[float], dfs: list[float]) -> Prior | None:
    """Empirical-Bayes prior of the noise (Smyth 2004, eqs. 6-7): from the log sample
    variances of >= 3 points; None with fewer (no sharing: plain per-point tests)."""
    pts = [(v, d) for v, d in zip(variances, dfs) if v > 0 and d > 0]
    if len(pts) < 3:
        return None
    e = [math.log(v) - digamma(d / 2) + math.log(d / 2) for v, d in pts]
    mean = statistics.fmean(e)
    excess = (statistics.variance(e) - statistics.fmean([trigamma(d / 2) for _, d in pts]))
    if excess <= 0:
        return Prior(math.inf, math.exp(mean))
    d0 = 2 * trigamma_inverse(excess)
    return Prior(d0, math.exp(mean + digamma(d0 / 2) - math.log(d0 / 2)))


def moderated_log(base: list[float], cand: list[float], prior: Prior | None,
                  confidence: float = 0.95) -> Welch:
    """Change of the geometric mean with its interval and p-value, from the pooled
    variance of log throughput shrunk toward the grid's prior (limma's moderated t);
    without a prior: Welch's t. Needs >= 2 positive values a side."""
    if prior is None:
        return welch_log(base, cand, confidence)
    if len(base) < 2 or len(cand) < 2:
        raise ValueError("the moderated t needs at least 2 values on each side")
    lb, lc = [math.log(v) for v in base], [math.log(v) for v in cand]
    d = statistics.fmean(lc) - statistics.fmean(lb)
    dg = len(lb) + len(lc) - 2
    s2 = (statistics.variance(lb) * (len(lb) - 1) + statistics.variance(lc) * (len(lc) - 1)) / dg
    if math.isinf(prior.d0):
        s2, df = prior.s0sq, math.inf
    else:
        s2, df = (prior.d0 * prior.s0sq + dg * s2) / (prior.d0 + dg), prior.d0 + dg
    se = math.sqrt(s2 * (1 / len(lb) + 1 / len(lc)))
    q = 0.5 + confidence / 2.0
    if math.isinf(df):
        half, p = statistics.NormalDist().inv_cdf(q) * se, 2 * statistics.NormalDist().cdf(-abs(d / se))
    else:
        half, p = t_ppf(q, df) * se, t_sf2(d / se, df)
    return Welch(math.expm1(d), math.expm1(d - half), math.expm1(d + half), p, df)


def pooled_log_variance(base: list[float], cand: list[float]) -> tuple[float, int]:
    """(pooled sample variance of log throughput, its degrees of freedom)."""
    lb, lc = [math.log(v) for v in base], [math.log(v) for v in cand]
    dg = len(lb) + len(lc) - 2
    return ((statistics.variance(lb) * (len(lb) - 1) + statistics.variance(lc) * (len(lc) - 1))
            / dg, dg)
