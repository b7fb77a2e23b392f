"""Statistics over per-position and per-window figures: quantile summaries and the
window-cluster bootstrap, with the original comparator's conventions (FORMATS.md).  Pure."""

from __future__ import annotations

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


def _interval(estimate: float, resampled: np.ndarray, samples: int) -> dict[str, float | int | str]:
    low, high = np.quantile(resampled, [0.025, 0.975])
    return {
        "estimate": float(estimate),
        "standard_error": float(resampled.std(ddof=1)) if samples > 1 else 0.0,
        "ci95_low": float(low),
        "ci95_high": float(high),
        "bootstrap_samples": int(samples),
        "cluster_unit": "window",
    }


def window_cluster_bootstrap(window_means: Sequence[float] | np.ndarray, samples: int = 10000,
                             seed: int = 1) -> dict[str, float | int | str]:
    """Bootstrap object over window means, identical to the original comparator's."""
    means = np.asarray(window_means, dtype=np.float64)
    if means.size == 0:
        raise ValueError("no windows")
    idx = bootstrap_indices(means.size, samples, seed)
    resampled = means[idx].mean(axis=1)
    return _interval(float(means.mean()), resampled, samples)


def ratio_bootstrap(numerators: Sequence[float] | np.ndarray, transform: Callable[[np.ndarray], np.ndarray],
                    denominators: Sequence[float] | np.ndarray, samples: int = 10000,
                    seed: int = 1) -> dict[str, float | int | str]:
    """Bootstrap of ``transform(mean(num) - mean(den))`` with windows resampled (the same draw as
    :func:`window_cluster_bootstrap`); used for the perplexity ratio ``exp(mean NLL_c - mean NLL_r)``."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    idx = bootstrap_indices(num.size, samples, seed)
    resampled = transform(num[idx].mean(axis=1) - den[idx].mean(axis=1))
    estimate = float(transform(np.asarray(num.mean() - den.mean())))
    return _interval(estimate, resampled, samples)


def confidence_buckets(ref_top_prob: np.ndarray, kl: np.ndarray,
                       top1: np.ndarray) -> list[dict[str, float | int | None]]:
    """KL and top-1 agreement by reference top probability: [0,.25) [.25,.5) [.5,.75) [.75,.95)
    [.95,1] (the last bucket includes 1)."""
    out: list[dict[str, float | int | None]] = []
    edges = CONFIDENCE_EDGES
    for k in range(len(edges) - 1):
        low, high = edges[k], edges[k + 1]
        if k == len(edges) - 2:
            mask = ref_top_prob >= low
        else:
            mask = (ref_top_prob >= low) & (ref_top_prob < high)
        n = int(np.count_nonzero(mask))
        out.append({"low": low, "high": high, "positions": n,
                    "kl_mean": float(kl[mask].mean()) if n else None,
                    "top1_agreement": float(top1[mask].mean()) if n else None})
    return out


def position_buckets(kl_by_window: Sequence[np.ndarray],
                     bucket: int = POSITION_BUCKET) -> list[dict[str, float | int]]:
    """Mean KL by position in the window, buckets ``[start, stop)`` of ``bucket`` positions."""
    rows = max((len(k) for k in kl_by_window), default=0)
    out: list[dict[str, float | int]] = []
    for start in range(0, rows, bucket):
        stop = min(start + bucket, rows)
        parts = [k[start:stop] for k in kl_by_window if len(k) > start]
        vals = np.concatenate(parts)
        out.append({"start": start, "stop": stop, "positions": int(vals.size),
                    "kl_mean": float(vals.mean())})
    return out
