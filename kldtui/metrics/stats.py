"""Statistics over per-position and per-window figures: quantile summaries and the
window-cluster bootstrap, with the original comparator's conventions (docs/FORMATS.md).  Pure."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

# (report key, quantile as a fraction); NumPy's default (linear) interpolation, as the original.
QUANTILES: tuple[tuple[str, float], ...] = (
    ("p0_1", 0.001), ("p1", 0.01), ("p5", 0.05), ("p10", 0.1), ("p50", 0.5), ("p90", 0.9),
    ("p95", 0.95), ("p99", 0.99), ("p99_9", 0.999),
)
CONFIDENCE_EDGES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)
POSITION_BUCKET = 256


def stats_object(values: np.ndarray) -> dict[str, float]:
    """``mean``, ``median``, ``p95``, ``p99``, ``max`` (the original's keys) plus ``min`` and the
    quantiles of :data:`QUANTILES`."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no values")
    qs = np.quantile(v, [q for _, q in QUANTILES])
    out = {key: float(val) for (key, _), val in zip(QUANTILES, qs, strict=True)}
    out.update(mean=float(np.mean(v)), median=float(np.median(v)), min=float(np.min(v)),
               max=float(np.max(v)))
    return out


def bootstrap_indices(n_windows: int, samples: int, seed: int) -> np.ndarray:
    """The original's draw: ``default_rng(seed).integers(0, n, size=(samples, n))``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_windows, size=(samples, n_windows))


def _interval(estimate: float, resampled: np.ndarray, samples: int,
              unit: str) -> dict[str, float | int | str]:
    low, high = np.quantile(resampled, [0.025, 0.975])
    return {
        "estimate": float(estimate),
        "standard_error": float(resampled.std(ddof=1)) if samples > 1 else 0.0,
        "ci95_low": float(low),
        "ci95_high": float(high),
        "bootstrap_samples": int(samples),
        "cluster_unit": unit,
    }


def window_cluster_bootstrap(window_means: Sequence[float] | np.ndarray, samples: int = 10000,
                             seed: int = 1, unit: str = "window") -> dict[str, float | int | str]:
    """Bootstrap object over window means, identical to the original comparator's; ``cluster_unit``
    is ``unit``, what the resampled windows are called (the report's unit: a hidden-state suite's
    ``context``, by kldtui.formats.suite.unit_name, which this layer cannot import)."""
    means = np.asarray(window_means, dtype=np.float64)
    if means.size == 0:
        raise ValueError("no windows")
    idx = bootstrap_indices(means.size, samples, seed)
    resampled = means[idx].mean(axis=1)
    return _interval(float(means.mean()), resampled, samples, unit)


def ratio_bootstrap(numerators: Sequence[float] | np.ndarray, transform: Callable[[np.ndarray], np.ndarray],
                    denominators: Sequence[float] | np.ndarray, samples: int = 10000,
                    seed: int = 1, unit: str = "window") -> dict[str, float | int | str]:
    """Bootstrap of ``transform(mean(num) - mean(den))`` with windows (called ``unit``) resampled (the
    same draw as :func:`window_cluster_bootstrap`); used for the perplexity ratio
    ``exp(mean NLL_c - mean NLL_r)``."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    idx = bootstrap_indices(num.size, samples, seed)
    resampled = transform(num[idx].mean(axis=1) - den[idx].mean(axis=1))
    estimate = float(transform(np.asarray(num.mean() - den.mean())))
    return _interval(estimate, resampled, samples, unit)


Bounds = tuple[float | None, float | None]
UNBOUNDED: Bounds = (None, None)


def held_to(low: float, high: float, bounds: Bounds) -> tuple[float, float]:
    """An interval's ends held to the values the quantity can take (``bounds``: lowest, highest, None
    for no limit): Hall's t, symmetric about a skewed mean, can reach below 0 for a rate of rare events
    ("0.42 [-0.14, 3.05] flips per 10,000 tokens") or above 100 % for an agreement near 100 %. The true
    value lies within the bounds, so holding the ends to them never lowers the coverage."""
    lowest, highest = bounds
    if lowest is not None:
        low, high = max(low, lowest), max(high, lowest)
    if highest is not None:
        low, high = min(low, highest), min(high, highest)
    return low, high


def clustered_ratio_interval(sums: Sequence[float] | np.ndarray, counts: Sequence[float] | np.ndarray,
                             level: float = 0.95,
                             bounds: Bounds = (0.0, None)) -> tuple[float | None, float | None]:
    """The window-clustered interval of ``sum(sums) / sum(counts)`` (a mean over positions that fall
    into a bucket, windows as clusters): the ratio estimator's linearised standard error
    ``sqrt(n / (n - 1) sum (s_w - R c_w)^2) / sum c_w`` with Student t (n - 1) quantiles; every window
    counts as a cluster, those without positions in the bucket too; the ends held to ``bounds``
    (:func:`held_to`; from 0 for KL, the only quantity it serves). (None, None) below 2 windows with
    positions."""
    s = np.asarray(sums, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    n = s.size
    if n < 2 or np.count_nonzero(c) < 2 or c.sum() <= 0 or not np.all(np.isfinite(s)):
        return None, None
    r = s.sum() / c.sum()
    z = s - r * c
    se = math.sqrt(n / (n - 1) * float(np.sum(z * z))) / float(c.sum())
    q = t_quantile(0.5 + level / 2.0, n - 1)
    # a mean KL is never below 0: the symmetric interval of a bucket of few, skewed windows reached
    # below it ("0.0045 [-0.00028, 0.0094]")
    return held_to(float(r - q * se), float(r + q * se), bounds)


def confidence_buckets(ref_top_prob: np.ndarray, kl: np.ndarray, top1: np.ndarray,
                       window: np.ndarray | None = None) -> list[dict[str, float | int | None]]:
    """KL and top-1 agreement by reference top probability: [0,.25) [.25,.5) [.5,.75) [.75,.95)
    [.95,1] (the last bucket includes 1). ``window`` (each position's window, 0..n-1) adds the
    window-clustered interval of each bucket's mean KL (:func:`clustered_ratio_interval`)."""
    out: list[dict[str, float | int | None]] = []
    edges = CONFIDENCE_EDGES
    for k in range(len(edges) - 1):
        low, high = edges[k], edges[k + 1]
        if k == len(edges) - 2:
            mask = ref_top_prob >= low
        else:
            mask = (ref_top_prob >= low) & (ref_top_prob < high)
        n = int(np.count_nonzero(mask))
        entry: dict[str, float | int | None] = {
            "low": low, "high": high, "positions": n, "kl_mean": float(kl[mask].mean()) if n else None,
            "top1_agreement": float(top1[mask].mean()) if n else None}
        if window is not None:
            size = int(window.max()) + 1 if window.size else 0
            sums = np.bincount(window[mask], weights=kl[mask], minlength=size)
            counts = np.bincount(window[mask], minlength=size)
            entry["ci95_low"], entry["ci95_high"] = clustered_ratio_interval(sums, counts)
            entry["windows"] = int(np.count_nonzero(counts))
        out.append(entry)
    return out


def position_buckets(kl_by_window: Sequence[np.ndarray], bucket: int = POSITION_BUCKET,
                     intervals: bool = False,
                     starts: Sequence[int] | None = None) -> list[dict[str, float | int | None]]:
    """Mean KL by position in the window, buckets ``[start, stop)`` of ``bucket`` positions;
    ``intervals`` adds each bucket's window-clustered interval (:func:`clustered_ratio_interval`);
    ``starts[i]``: the position of window ``i``'s first row (its ``scored_row_start``, 0 by default).
    Buckets no window reaches are left out."""
    first = list(starts) if starts is not None else [0] * len(kl_by_window)
    rows = max((s + len(k) for k, s in zip(kl_by_window, first, strict=True)), default=0)
    out: list[dict[str, float | int | None]] = []
    for start in range(0, rows, bucket):
        stop = min(start + bucket, rows)
        parts = [k[max(0, start - s):stop - s] for k, s in zip(kl_by_window, first, strict=True)
                 if s + len(k) > start and s < stop]
        if not parts:
            continue
        vals = np.concatenate(parts)
        entry: dict[str, float | int | None] = {"start": start, "stop": stop, "positions": int(vals.size),
                                                "kl_mean": float(vals.mean())}
        if intervals:
            entry["ci95_low"], entry["ci95_high"] = clustered_ratio_interval(
                [float(p.sum()) for p in parts], [p.size for p in parts])
            entry["windows"] = len(parts)
        out.append(entry)
    return out


# ---------------------------------------------------------------------------- Student t
# Student t quantiles and tails for the headline intervals, the verdicts' log-normal check and the
# window-clustered bucket intervals (docs/STATISTICS.md), computed here with the standard library
# only, so the decide layer does not need scipy.
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return float("nan")
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_sf(t: np.ndarray | float, df: float) -> np.ndarray:
    """P(T >= t) for Student's t with ``df`` degrees of freedom, element-wise over an array: the
    regularised incomplete beta function by its continued fraction (modified Lentz), vectorised;
    agrees with :func:`t_two_sided_p` to 1e-12."""
    tt = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore"):
        x = df / (df + tt * tt)
    a, b = df / 2.0, 0.5
    # I_x(a, b) directly where x < (a + 1) / (a + b + 2), else 1 - I_{1-x}(b, a)
    swap = x >= (a + 1.0) / (a + b + 2.0)
    xa = np.where(swap, 1.0 - x, x)
    aa = np.where(swap, b, a)
    bb = np.where(swap, a, b)
    tiny = 1e-300
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lbeta = (np.vectorize(math.lgamma)(aa + bb) - np.vectorize(math.lgamma)(aa)
                 - np.vectorize(math.lgamma)(bb))
        front = np.exp(lbeta + aa * np.log(np.maximum(xa, tiny)) + bb * np.log1p(-np.minimum(xa, 1.0))) / aa
        c = np.ones_like(xa)
        d = 1.0 - (aa + bb) * xa / (aa + 1.0)
        d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
        h = d.copy()
        for m in range(1, 300):
            m2 = 2 * m
            num = m * (bb - m) * xa / ((aa + m2 - 1.0) * (aa + m2))
            d = 1.0 + num * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + num / np.where(np.abs(c) < tiny, tiny, c)
            h *= d * c
            num = -(aa + m) * (aa + bb + m) * xa / ((aa + m2) * (aa + m2 + 1.0))
            d = 1.0 + num * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + num / np.where(np.abs(c) < tiny, tiny, c)
            delta = d * c
            h *= delta
            if np.all(np.abs(delta - 1.0) < 1e-15):
                break
        ix = front * h
    ibeta = np.where(swap, 1.0 - ix, ix)  # I_x(df/2, 1/2) = P(|T| >= |t|)
    two = np.where(xa <= 0, np.where(swap, 1.0, 0.0), ibeta)
    out: np.ndarray = np.where(tt >= 0, two / 2.0, 1.0 - two / 2.0)
    out = np.where(np.isposinf(tt), 0.0, np.where(np.isneginf(tt), 1.0, out))
    return out


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (``0 < p < 1``), by bisection on the CDF (1e-12 relative)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p == 0.5:
        return 0.0
    tail = min(p, 1.0 - p)  # P(T > q) = tail  <=>  two-sided p-value of q = 2 * tail
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > 2.0 * tail:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_p(mid, df) > 2.0 * tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    q = 0.5 * (lo + hi)
    return q if p > 0.5 else -q


def student_t_interval(values: Sequence[float] | np.ndarray, level: float = 0.95,
                       ) -> tuple[float, float, float, float, float]:
    """Mean of ``values`` with its Student-t interval: ``(estimate, standard_error, low, high, p)``
    where ``p`` is the two-sided p-value of "the mean is 0". Needs at least 2 values. A zero
    standard error (all values equal) gives a zero-width interval and p = 0 (or 1 when the mean is 0)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    n = v.size
    if n < 2:
        raise ValueError("a t interval needs at least 2 values")
    mean = float(v.mean())
    se = float(v.std(ddof=1) / math.sqrt(n))
    q = t_quantile(0.5 + level / 2.0, n - 1)
    if se == 0.0:
        return mean, 0.0, mean, mean, (1.0 if mean == 0.0 else 0.0)
    return mean, se, mean - q * se, mean + q * se, t_two_sided_p(mean / se, n - 1)


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected with family-wise error ``alpha``."""
    if not len(p_values):
        return []
    return [bool(r) for r in holm_batch(np.asarray(p_values, dtype=np.float64), alpha)]


def holm_batch(p_values: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """:func:`holm` over the last axis of an array of p-values (one family per row): the sorted
    p-values are held to ``alpha / m``, ``alpha / (m - 1)``, ... and the procedure stops at the first
    that fails."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    passed = np.cumprod(ranked <= alpha / (m - np.arange(m)), axis=-1).astype(bool)
    out = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(out, order, passed, axis=-1)
    return out
