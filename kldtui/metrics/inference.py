"""Inference over windows: the tests and intervals kldtui's verdicts and headline intervals use.

Every function takes window means as arrays whose last axis is the window, so one call serves a
report (shape ``(n,)``) and a simulation of thousands of suites (shape ``(trials, n)``) alike: the
simulation in ``benchmarks/verdict_simulation.py`` runs exactly this code.  Pure NumPy (no scipy);
randomness only from fixed seeds, so every figure is reproducible.  docs/STATISTICS.md says which
method is used where, and what the simulation measured for each.

* :func:`flip_inference` (:func:`flip_test`, :func:`flip_ratio_interval`) -- the **sign-flip test** of
  B - A over windows (swapping A and B inside a window is the same as flipping the sign of its
  difference) and the interval for ``mean(B) / mean(A)`` it gives when inverted (the set of ratios
  rho for which ``B - rho A`` passes that same test, over the same sign patterns, so the interval
  excludes 1 exactly when the test rejects).  Exact when the windows' ratio does not depend on window
  difficulty, whatever the distribution of the window means: all 2^n sign patterns up to
  :data:`EXACT_FLIPS_UP_TO` windows, else :data:`FLIPS` patterns drawn with a fixed seed.
* :func:`log_fit`, :func:`difficulty_dependence`, :func:`upper_spread` -- the two candidates on a
  log scale: whether their KL grows differently with window difficulty (the Pitman-Morgan test of
  equal log-scale spread), and how widely the windows spread.
* :func:`lognormal_ratio`, :func:`cox_ratio` -- ``E[B] / E[A]`` under a log-normal model of the
  window means, by a generalised pivotal quantity (calibrated at any spread) or Cox's closed form
  (more powerful where the windows spread little): they see the hardest windows' weight through the
  fitted spread even when the sample holds none of them.
* :func:`null_skewness`, :func:`windows_needed` -- how skewed B - A would be with equal means
  (log-normal model), and how many windows the sign-flip test needs at that skewness.
* :func:`mean_interval` -- the headline interval of one report's mean KL: Hall's
  skewness-corrected t, or Cox's log-normal interval when the window means spread over a wide
  range, stretched to hold the windows' own mean where it falls beside it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kldtui.metrics.interval_windows import MIN_INTERVAL_WINDOWS
from kldtui.metrics.stats import UNBOUNDED, Bounds, held_to, t_quantile, t_sf

EXACT_FLIPS_UP_TO = 12  # 4096 patterns
FLIPS = 4096  # patterns (the identity and 4095 random ones) beyond that
FLIP_SEED = 25_2026
GPQ_DRAWS = 4000
GPQ_SEED = 25_2027
# Above this log-scale spread of window means, the mean's interval is Cox's (log-normal) one.
LOG_SPREAD_COX = 0.6


@functools.lru_cache(maxsize=128)
def flip_patterns(n: int, flips: int = FLIPS) -> np.ndarray:
    """Sign patterns ``(M, n)`` of +-1, the identity first: all 2^n up to :data:`EXACT_FLIPS_UP_TO`
    windows, else the identity and ``flips - 1`` drawn with a fixed seed (read-only)."""
    if n < 1:
        raise ValueError("no windows")
    if n <= EXACT_FLIPS_UP_TO:
        pats = np.array(list(itertools.product((1.0, -1.0), repeat=n)), dtype=np.float64)
    else:
        rng = np.random.default_rng((FLIP_SEED, n) if flips == FLIPS else (FLIP_SEED, n, flips))
        pats = rng.choice(np.array([1.0, -1.0]), size=(flips, n))
        pats[0] = 1.0
    pats.setflags(write=False)
    return pats


@dataclass(frozen=True)
class FlipTest:
    """One-sided p-values of the sign-flip test of ``sum(B - A)`` (arrays over leading axes):
    ``p_worse`` for "B's mean is larger", ``p_better`` for "smaller"; ``p`` two-sided."""

    p_worse: np.ndarray
    p_better: np.ndarray

    @property
    def p(self) -> np.ndarray:
        out: np.ndarray = np.minimum(1.0, 2.0 * np.minimum(self.p_worse, self.p_better))
        return out


@dataclass(frozen=True)
class FlipInference:
    """The sign-flip test of ``B - null A`` and the intervals of ``mean(B) / mean(A)`` that invert it,
    from one set of sign patterns (:func:`flip_inference`)."""

    test: FlipTest
    intervals: list[tuple[np.ndarray, np.ndarray]]


def _pattern_sums(values: np.ndarray, pats: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.asarray(values, dtype=np.float64) @ pats.T
    return out


def _holds(d: np.ndarray, pats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each pattern, whether its sum of ``d`` is at least (``worse``) and at most (``better``) the
    observed one, the identity's; sums equal within rounding count as ties, on both sides."""
    sums = _pattern_sums(d, pats)
    obs = sums[..., :1]
    tol = 1e-12 * np.abs(d).sum(axis=-1, keepdims=True)  # the identity's own sum counts as ties
    return sums >= obs - tol, sums <= obs + tol


def flip_test(a: np.ndarray, b: np.ndarray, flips: int = FLIPS) -> FlipTest:
    """The sign-flip test of B - A over the last axis (see the module docstring); ``flips``: the
    patterns drawn beyond :data:`EXACT_FLIPS_UP_TO` windows (:func:`smallest_flip_p`)."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    worse, better = _holds(d, flip_patterns(d.shape[-1], flips))
    return FlipTest(p_worse=worse.mean(axis=-1), p_better=better.mean(axis=-1))


def smallest_flip_p(windows: int, flips: int = FLIPS) -> float:
    """The smallest two-sided p-value the sign-flip test can give over ``windows`` windows: the
    identity pattern always counts, so ``2 / 2^n`` where every pattern is used, ``2 / flips`` beyond.
    A family of verdicts whose strictest threshold is below it can name no difference at all."""
    patterns = 2 ** windows if windows <= EXACT_FLIPS_UP_TO else flips
    return min(1.0, 2.0 / patterns)


def flip_ratio_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95, flips: int = FLIPS,
                        null: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The interval for ``mean(B) / mean(A)`` from inverting the sign-flip test of ``B - rho A``
    (:func:`flip_inference` at one level)."""
    return flip_inference(a, b, (level,), flips, null).intervals[0]


def flip_ratio_intervals(a: np.ndarray, b: np.ndarray, levels: Sequence[float], flips: int = FLIPS,
                         null: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The intervals for ``mean(B) / mean(A)`` from inverting the sign-flip test of ``B - rho A``, one
    per level (:func:`flip_inference`)."""
    return flip_inference(a, b, levels, flips, null).intervals


def accepted_count(level: float, patterns: int) -> int:
    """The fewest of ``patterns`` sign patterns at least as extreme as the observed sum, in one
    direction, for which the test does not reject at ``level``: the smallest ``c`` with
    ``2 c / patterns > 1 - level``, the same comparison as a verdict's (its two-sided p-value, twice the
    one-sided one, at most ``1 - level``)."""
    alpha = 1.0 - level
    c = max(0, int(math.floor(alpha * patterns / 2.0)) - 1)
    while not 2.0 * (c / patterns) > alpha:
        c += 1
    return c


def flip_inference(a: np.ndarray, b: np.ndarray, levels: Sequence[float] = (0.95,), flips: int = FLIPS,
                   null: float = 1.0) -> FlipInference:
    """The sign-flip test of ``B - null A`` (:func:`flip_test` at ``null`` 1, the test a verdict runs)
    and, one per level, the interval for ``mean(B) / mean(A)`` that inverts that same test over the same
    patterns: the ratios ``rho`` for which neither one-sided test of ``B - rho A`` rejects at half the
    level's complement. So the interval excludes ``null`` exactly when the test's one-sided p-value, doubled,
    is at most ``1 - level``: the verdict and its interval agree, at any number of windows.

    For a pattern that flips the windows ``F``, its sum of ``B - rho A`` is at least the observed one
    exactly when ``sum_F B <= rho sum_F A``, that is (``sum_F A > 0``) when ``rho`` is at least the
    ratio ``c = sum_F B / sum_F A``: each pattern holds on one side of its own ratio, so the accepted set
    is an interval whose ends are order statistics of the patterns' ratios. (Up to
    :data:`EXACT_FLIPS_UP_TO` windows every pattern and its mirror image are used, and this is the
    interval of the two-sided test of ``|sum|`` as well; beyond, the random patterns are not closed under
    a change of sign, and an interval of the two-sided test of ``|sum|`` disagreed with the test's doubled
    one-sided p-value, which the verdict uses, near 5 %.) A pattern whose flipped ``A`` sum is 0 (the
    identity, or windows where ``A`` is 0) holds or not whatever ``rho``; at ``null`` each pattern holds
    exactly as the test counts it (its ties within rounding included). Exact for ``A >= 0`` (window means
    of KL, or ones: with ``A`` all ones and ``B`` the differences it is the interval of the mean difference,
    ``null`` 0). Ends below 0 are 0 for non-negative data."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    pats = flip_patterns(a.shape[-1], flips)
    worse, better = _holds(b - null * a if null != 0.0 else b, pats)
    test = FlipTest(p_worse=worse.mean(axis=-1), p_better=better.mean(axis=-1))
    flipped = (1.0 - pats) / 2.0  # 1 where a pattern flips a window
    fa = _pattern_sums(a, flipped)
    low = _pattern_sums(b, flipped)
    regular = fa > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        low /= np.where(regular, fa, 1.0)
    del fa
    # where the flipped A sums to 0 a pattern holds whatever rho; at the null each holds as the test says
    low[~regular & worse] = -np.inf
    low[~regular & ~worse] = np.inf
    high = low.copy()
    high[~regular & better] = np.inf
    high[~regular & ~better] = -np.inf
    low[regular & worse & (low > null)] = null
    low[regular & ~worse & (low <= null)] = np.nextafter(null, np.inf)
    high[regular & better & (high < null)] = null
    high[regular & ~better & (high >= null)] = np.nextafter(null, -np.inf)
    m = pats.shape[0]
    ks = [accepted_count(level, m) for level in levels]
    # accepted while at least k patterns hold in each direction: from the k-th smallest ratio at which
    # they hold as B larger to the k-th largest at which they hold as B smaller
    lows = np.partition(low, [k - 1 for k in ks], axis=-1)
    highs = -np.partition(-high, [k - 1 for k in ks], axis=-1)
    nonnegative = bool(np.all(a >= 0)) and bool(np.all(b >= 0))
    out = []
    for k in ks:
        lo = lows[..., k - 1]
        out.append((np.maximum(lo, 0.0) if nonnegative else lo, highs[..., k - 1]))
    return FlipInference(test, out)


@dataclass(frozen=True)
class LogFit:
    """Means and covariance of the log window means of A (x) and B (y), ``n - 1`` in the divisor."""

    mean_x: np.ndarray
    mean_y: np.ndarray
    var_x: np.ndarray
    var_y: np.ndarray
    cov: np.ndarray
    windows: int
    # sample variance (n - 1) of each window's influence on the log-normal estimate of log E[B] / E[A]:
    # (d - mean d) + ((y - mean y)^2 - (x - mean x)^2) / 2, d = y - x; the spread of that estimate measured
    # on the windows themselves, without assuming their logs are normal (:func:`sandwich_ratio`)
    var_influence: np.ndarray

    @property
    def log_ratio(self) -> np.ndarray:
        """The log-normal model's estimate of ``log(E[B] / E[A])``: ``mean(y - x) + (s_y^2 - s_x^2) / 2``."""
        out: np.ndarray = self.mean_y - self.mean_x + (self.var_y - self.var_x) / 2.0
        return out

    @property
    def spread(self) -> np.ndarray:
        """The log-scale spread of window difficulty: sd of ``(log A + log B) / 2``."""
        out: np.ndarray = np.sqrt(np.maximum((self.var_x + self.var_y + 2 * self.cov) / 4.0, 0.0))
        return out


def log_fit(a: np.ndarray, b: np.ndarray) -> LogFit:
    """:class:`LogFit` of positive window means (the caller checks positivity)."""
    x = np.log(np.asarray(a, dtype=np.float64))
    y = np.log(np.asarray(b, dtype=np.float64))
    n = x.shape[-1]
    mx, my = x.mean(axis=-1), y.mean(axis=-1)
    cx = x - mx[..., None]
    cy = y - my[..., None]
    influence = (cy - cx) + (cy * cy - cx * cx) / 2.0
    influence -= influence.mean(axis=-1, keepdims=True)
    return LogFit(mx, my, (cx * cx).sum(axis=-1) / (n - 1), (cy * cy).sum(axis=-1) / (n - 1),
                  (cx * cy).sum(axis=-1) / (n - 1), n, (influence * influence).sum(axis=-1) / (n - 1))


def upper_spread(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How widely the window means spread on a log scale, for the candidate that spreads more: the
    standard deviation of its log window means leaving out its lowest window.  The mean over windows
    rests on the hardest windows, so the spread that matters is the upper one; a window near zero, whose
    log is far out, says nothing about them and would make narrow windows look wide.  Needs 3 windows."""
    out: np.ndarray | None = None
    for v in (a, b):
        logs = np.sort(np.log(np.asarray(v, dtype=np.float64)), axis=-1)[..., 1:]
        sd = logs.std(axis=-1, ddof=1)
        out = sd if out is None else np.maximum(out, sd)
    assert out is not None
    return out


def log_skewness(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The more negative of the two candidates' sample skewness (adjusted Fisher-Pearson) of their log
    window means.  A log-normal model reads the hardest windows off a symmetric log scale; window means
    whose logarithms are skewed to the left (gamma-shaped ones) have a lighter upper tail than it
    assumes, and its estimate of the ratio leans toward the candidate that grows faster.  Needs 3
    windows; 0 where a candidate's windows are all alike."""
    out: np.ndarray | None = None
    for v in (a, b):
        logs = np.log(np.asarray(v, dtype=np.float64))
        n = logs.shape[-1]
        centred = logs - logs.mean(axis=-1, keepdims=True)
        m2 = (centred * centred).mean(axis=-1)
        m3 = (centred * centred * centred).mean(axis=-1)
        g1 = np.divide(m3, m2 ** 1.5, out=np.zeros_like(m2), where=m2 > 0) * math.sqrt(n * (n - 1)) / (n - 2)
        out = g1 if out is None else np.minimum(out, g1)
    assert out is not None
    return out


def difficulty_dependence(fit: LogFit) -> np.ndarray:
    """The Pitman-Morgan t statistic (``n - 2`` degrees of freedom) of "A and B spread alike on a log
    scale": the correlation of ``log B - log A`` with ``log A + log B``.  Positive when B's KL grows
    faster with window difficulty than A's."""
    n = fit.windows
    den = np.sqrt(np.maximum((fit.var_x + fit.var_y) ** 2 - 4.0 * fit.cov ** 2, 1e-300))
    r = np.clip((fit.var_y - fit.var_x) / den, -1.0 + 1e-12, 1.0 - 1e-12)
    out: np.ndarray = r * np.sqrt((n - 2) / (1.0 - r * r))
    return out


@functools.lru_cache(maxsize=64)
def _gpq_draws(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bartlett factors of a 2x2 Wishart(n - 1, I) and a normal, :data:`GPQ_DRAWS` each, fixed seed."""
    rng = np.random.default_rng((GPQ_SEED, n))
    t11 = np.sqrt(rng.chisquare(n - 1, GPQ_DRAWS))
    t22 = np.sqrt(rng.chisquare(n - 2, GPQ_DRAWS))
    t21 = rng.standard_normal(GPQ_DRAWS)
    z = rng.standard_normal(GPQ_DRAWS)
    for arr in (t11, t22, t21, z):
        arr.setflags(write=False)
    return t11, t22, t21, z


@dataclass(frozen=True)
class ModelRatio:
    """``E[B] / E[A]`` under the log-normal model: interval ends and one-sided p-values."""

    low: np.ndarray
    high: np.ndarray
    p_worse: np.ndarray  # P(pivot <= 0): small when B's mean is larger
    p_better: np.ndarray
    estimate: np.ndarray  # exp(mean(log B - log A) + (s_y^2 - s_x^2) / 2)


def lognormal_ratio(fit: LogFit, level: float = 0.95) -> ModelRatio:
    """Generalised pivotal quantity for ``log E[B] - log E[A] = mu_y - mu_x + (s_y^2 - s_x^2) / 2``
    under bivariate normal log window means (Weerahandi's construction: the sample covariance is
    Wishart, the Bartlett factors give its pivot ``C (T T')^-1 C'``)."""
    n = fit.windows
    t11, t22, t21, z = _gpq_draws(n)
    v11 = (n - 1) * fit.var_x
    c11 = np.sqrt(np.maximum(v11, 1e-300))
    c21 = (n - 1) * fit.cov / c11
    c22 = np.sqrt(np.maximum((n - 1) * fit.var_y - c21 * c21, 1e-300))
    e = (...,) + (None,)
    i11 = 1.0 / t11
    i21 = -t21 / (t11 * t22)
    i22 = 1.0 / t22
    l11 = c11[e] * i11
    l21 = c21[e] * i11 + c22[e] * i21
    l22 = c22[e] * i22
    sxx = l11 * l11
    sxy = l11 * l21
    syy = l21 * l21 + l22 * l22
    sdd = np.maximum(sxx + syy - 2.0 * sxy, 0.0)
    pivot = (fit.mean_y - fit.mean_x)[e] - z * np.sqrt(sdd / n) + (syy - sxx) / 2.0
    alpha = 1.0 - level
    lo, hi = np.quantile(pivot, [alpha / 2.0, 1.0 - alpha / 2.0], axis=-1)
    # a ratio beyond the largest float64 is inf: an end the verdict says is not finite (no_interval_reason)
    with np.errstate(over="ignore"):
        est, low, high = np.exp(fit.log_ratio), np.exp(lo), np.exp(hi)
    return ModelRatio(low, high, (pivot <= 0).mean(axis=-1), (pivot >= 0).mean(axis=-1), est)


def cox_ratio(fit: LogFit, level: float = 0.95, widen: float = 0.0) -> ModelRatio:
    """``E[B] / E[A]`` under the log-normal model by Cox's method: the estimate
    ``mean(log B - log A) + (s_y^2 - s_x^2) / 2`` with standard error
    ``sqrt(s_d^2 / n + (s_x^4 + s_y^4 - 2 s_xy^2) / (2 (n - 1)))``, times ``1 + widen / (n - 1)``,
    against Student t (n - 1): closed form, more powerful than :func:`lognormal_ratio` where the windows
    spread little, liberal in few windows where they spread widely (the standard error of the spreads
    is itself uncertain there; ``widen`` allows for it; docs/STATISTICS.md)."""
    n = fit.windows
    est = fit.log_ratio
    sdd = np.maximum(fit.var_x + fit.var_y - 2.0 * fit.cov, 0.0)
    se = np.sqrt(sdd / n + np.maximum(fit.var_x ** 2 + fit.var_y ** 2 - 2.0 * fit.cov ** 2, 0.0)
                 / (2.0 * (n - 1)))
    se = np.maximum(se, 1e-300) * (1.0 + widen / (n - 1))
    return _t_ratio(est, se, level, n)


def _t_ratio(est: np.ndarray, se: np.ndarray, level: float, n: int) -> ModelRatio:
    """The interval and one-sided p-values of a log ratio ``est`` with standard error ``se``, Student t
    with n - 1 degrees of freedom."""
    q = t_quantile(0.5 + level / 2.0, n - 1)
    t = est / se
    with np.errstate(over="ignore"):  # as lognormal_ratio: an end beyond float64 is inf, said in words
        low, high, ratio = np.exp(est - q * se), np.exp(est + q * se), np.exp(est)
    return ModelRatio(low, high, t_sf(t, n - 1), t_sf(-t, n - 1), ratio)


def sandwich_ratio(fit: LogFit, level: float = 0.95, widen: float = 0.0) -> ModelRatio:
    """``E[B] / E[A]`` under the log-normal model, the estimate as :func:`cox_ratio`'s, its standard error
    measured on the windows (the spread of each window's influence on the estimate, over sqrt(n)) rather
    than read off the normal model: where the log window means are not normal (gamma-shaped windows are
    skewed to the left on a log scale) Cox's form misjudges how the fitted spreads vary; times
    ``1 + widen / (n - 1)`` (an influence spread from few windows is itself uncertain), against Student t
    (n - 1) (docs/STATISTICS.md, "Which ratio interval")."""
    n = fit.windows
    est = fit.log_ratio
    se = np.maximum(np.sqrt(np.maximum(fit.var_influence, 0.0) / n), 1e-300) * (1.0 + widen / (n - 1))
    return _t_ratio(est, se, level, n)


def null_skewness(fit: LogFit) -> np.ndarray:
    """Skewness of B - A if the two had equal means, under the fitted log-normal model: what makes
    the mean of few windows unreliable when A and B depend differently on window difficulty."""
    sx2, sy2, sxy = fit.var_x, fit.var_y, fit.cov

    def moment(p: int, q: int) -> np.ndarray:  # E[A^p B^q] with E[A] = E[B] = 1
        exponent = p * (p - 1) * sx2 / 2 + q * (q - 1) * sy2 / 2 + p * q * sxy
        out: np.ndarray = np.exp(np.minimum(exponent, 700.0))
        return out

    m2 = moment(0, 2) + moment(2, 0) - 2 * moment(1, 1)
    m3 = moment(0, 3) - 3 * moment(1, 2) + 3 * moment(2, 1) - moment(3, 0)
    # moments capped at exp(700) can give m2 ** 1.5 beyond float64: the skewness of such a spread is
    # taken as 0 (its windows needed, then, the fewest), as for m2 = 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out: np.ndarray = np.where(m2 > 0, m3 / np.maximum(m2, 1e-300) ** 1.5, 0.0)
    return out


class MeanInterval(NamedTuple):
    """:func:`mean_interval`'s answer, one entry per suite."""

    low: np.ndarray
    high: np.ndarray
    log_scale: np.ndarray  # Cox's log-normal interval (else Hall's t)
    stretched: np.ndarray  # widened to hold the windows' own mean, which it fell beside


def mean_interval(values: np.ndarray, level: float = 0.95) -> MeanInterval:
    """The headline interval of the mean of window means (last axis).

    Hall's (1992) skewness-corrected t (the monotone transform ``t + g t^2 / (3 sqrt n) +
    g^2 t^3 / (27 n) + g / (6 sqrt n)`` of the t statistic, g the adjusted sample skewness), or,
    where all means are positive and their log-scale spread exceeds :data:`LOG_SPREAD_COX`, Cox's
    interval for a log-normal mean (``log`` mean + s^2 / 2 +- t sqrt(s^2 / n + s^4 / (2 (n - 1))))``.
    Cox's is centred on the model's mean, which with a log spread of dozens of orders of magnitude is
    far from the windows' own (1e-30..1e33 gave 6.7e33 beside [1.5e196, inf]): an interval that falls
    beside the windows' mean is stretched to hold it, so the estimate shown always lies in its
    interval (widening never lowers coverage; docs/STATISTICS.md). Needs at least 3 windows."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[-1]
    if n < 3:
        raise ValueError("the headline interval needs at least 3 windows")
    q = t_quantile(0.5 + level / 2.0, n - 1)
    m = x.mean(axis=-1)
    c = x - m[..., None]
    m2 = (c * c).mean(axis=-1)
    se = np.sqrt(m2 * n / (n - 1) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(m2 > 0, (c ** 3).mean(axis=-1) / np.maximum(m2, 1e-300) ** 1.5, 0.0)
    g = g * math.sqrt(n * (n - 1)) / (n - 2)
    a = g / (6.0 * math.sqrt(n))

    def inverse(target: float) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (np.cbrt(1.0 + 6.0 * a * (target - a)) - 1.0) / (2.0 * a)
        out: np.ndarray = np.where(np.abs(a) < 1e-12, target, t)
        return out

    low = m - inverse(q) * se
    high = m - inverse(-q) * se
    positive = np.all(x > 0, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lx = np.log(np.where(x > 0, x, 1.0))
    s2 = lx.var(axis=-1, ddof=1)
    cox = positive & (np.sqrt(s2) > LOG_SPREAD_COX)
    centre = lx.mean(axis=-1) + s2 / 2.0
    half = q * np.sqrt(s2 / n + s2 * s2 / (2.0 * (n - 1)))
    with np.errstate(over="ignore"):  # an end beyond float64 is inf: the views say it is not finite
        low = np.where(cox, np.exp(centre - half), low)
        high = np.where(cox, np.exp(centre + half), high)
    stretched = (low > m) | (high < m)  # a NaN end stays NaN, not stretched
    return MeanInterval(np.minimum(low, m), np.maximum(high, m), cox, stretched)


def windows_needed(skewness: np.ndarray | float) -> np.ndarray:
    """How many windows the sign-flip test needs, alone, before its false-winner rate for differences
    this skewed is within half a point of 5 %: the simulation's excess rate is about
    ``0.035 skewness / sqrt(n)`` (docs/STATISTICS.md), so ``n = (0.035 skewness / 0.005)^2``; at least
    :data:`MIN_WINDOWS` and two significant digits."""
    s = np.abs(np.asarray(skewness, dtype=np.float64))
    raw = np.maximum(float(MIN_WINDOWS), NEEDED_PER_SKEW2 * s * s)
    digits = np.floor(np.log10(raw)) - 1.0
    out: np.ndarray = np.ceil(raw / 10.0 ** digits) * 10.0 ** digits
    return out


MIN_WINDOWS = 8
NEEDED_PER_SKEW2 = (0.035 / 0.005) ** 2  # 49


# The headline interval's coverage of the true mean measured by benchmarks/verdict_simulation.py
# (its "mean" table): the lowest over the simulated window-mean distributions (normal, gamma,
# lognormal), by window count. docs/STATISTICS.md has the whole table.
MEAN_INTERVAL_COVERAGE = {4: 0.915, 8: 0.947, 16: 0.948, 32: 0.945, 64: 0.945}


@dataclass(frozen=True)
class Headline:
    """The headline interval of one mean over windows, with what the simulation says of it."""

    estimate: float
    low: float | None
    high: float | None
    method: str  # "hall-t" or "cox-lognormal", "-stretched" added where stretched to hold the estimate
    windows: int
    rests_on_too_few_windows: bool
    measured_coverage: float | None


def measured_coverage(windows: int, table: Mapping[int, float] = MEAN_INTERVAL_COVERAGE) -> float | None:
    """The lowest coverage measured (``table``: by simulated window count) at the largest simulated window
    count not above ``windows``."""
    counts = [n for n in sorted(table) if n <= windows]
    return table[counts[-1]] if counts else None


def headline(values: np.ndarray | list[float], bounds: Bounds = UNBOUNDED) -> Headline:
    """:func:`mean_interval` of one set of window values (non-finite values left out), described, its
    ends held to ``bounds`` (:func:`held_to`)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    n = int(v.size)
    est = float(v.mean()) if n else math.nan
    if n < 3:
        return Headline(est, None, None, "hall-t", n, True, None)
    got = mean_interval(v)
    low, high = held_to(float(got.low), float(got.high), bounds)
    method = "cox-lognormal" if bool(got.log_scale) else "hall-t"
    return Headline(est, low, high, method + ("-stretched" if bool(got.stretched) else ""), n,
                    n < MIN_INTERVAL_WINDOWS, measured_coverage(n))
