"""Resampling for suites whose contexts are not independent: contexts drawn from one source (one
article, one repository, one conversation) form a cluster, and clusters sit inside allocation
strata.  Pure functions over per-context values and each context's cluster key and stratum;
the compare report (context, source-cluster and stratified source-cluster bootstraps) and the
decision rules (:mod:`kldtui.decide`, which run their own rule over cluster units through
:func:`cluster_units`) use them.  docs/STATISTICS.md, "Clustered suites".

Conventions (the published comparator's where it states them):

* every bootstrap block starts a fresh ``numpy.random.default_rng(seed)`` (PCG64), 10,000 draws;
* the estimate is the observed figure; ``standard_error`` is the standard deviation of the
  replicates (``ddof=1``); the interval is their 2.5 % and 97.5 % quantiles (NumPy's linear
  interpolation);
* a cluster replicate is the mean of the context values of the drawn clusters, each context once
  per draw of its cluster (sum of the drawn clusters' context sums over their context counts);
* clusters are taken in sorted key order, strata in sorted name order; each stratum's draw is one
  ``rng.integers(0, k, size=(samples, k))`` call for its ``k`` clusters, in that order (the
  published description does not give the draw order; this is kldtui's, so two kldtui runs agree
  exactly);
* the stratified estimate ``micro`` weights stratum means by the strata's fixed context counts,
  ``macro`` weighs every stratum alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_SAMPLES = 10000
DEFAULT_SEED = 1


def _interval(estimate: float, replicates: np.ndarray, samples: int, unit: str) -> dict[str, Any]:
    low, high = np.quantile(replicates, [0.025, 0.975])
    return {"estimate": float(estimate),
            "standard_error": float(replicates.std(ddof=1)) if samples > 1 else 0.0,
            "ci95_low": float(low), "ci95_high": float(high), "bootstrap_samples": int(samples),
            "cluster_unit": unit}


@dataclass(frozen=True)
class Clusters:
    """Contexts grouped by cluster key (sorted), with per-cluster sums and counts of a value."""

    keys: tuple[str, ...]  # the sorted cluster keys
    of_context: np.ndarray  # cluster number of each context

    @classmethod
    def of(cls, keys: Sequence[str]) -> Clusters:
        ordered = tuple(sorted(set(keys)))
        number = {k: n for n, k in enumerate(ordered)}
        return cls(ordered, np.array([number[k] for k in keys], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.keys)

    def totals(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per cluster: the sum of its contexts' values and their count."""
        sums = np.bincount(self.of_context, weights=values, minlength=len(self.keys))
        counts = np.bincount(self.of_context, minlength=len(self.keys)).astype(np.float64)
        return sums, counts


def context_bootstrap(values: Sequence[float] | np.ndarray, samples: int = DEFAULT_SAMPLES,
                      seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Contexts resampled as if independent (``cluster_unit`` "context")."""
    v = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, v.size, size=(samples, v.size))
    return _interval(float(v.mean()), v[idx].mean(axis=1), samples, "context")


def _cluster_replicates(sums: np.ndarray, counts: np.ndarray, rng: np.random.Generator,
                        samples: int) -> np.ndarray:
    k = sums.size
    idx = rng.integers(0, k, size=(samples, k))
    return np.asarray(sums[idx].sum(axis=1) / counts[idx].sum(axis=1))


def cluster_bootstrap(values: Sequence[float] | np.ndarray, keys: Sequence[str],
                      samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Source clusters resampled with replacement; adds ``cluster_count`` and ``context_count``."""
    v = np.asarray(values, dtype=np.float64)
    clusters = Clusters.of(keys)
    sums, counts = clusters.totals(v)
    reps = _cluster_replicates(sums, counts, np.random.default_rng(seed), samples)
    out = _interval(float(v.mean()), reps, samples, "source_cluster")
    out.update(cluster_count=len(clusters), context_count=int(v.size))
    return out


def stratified_cluster_bootstrap(values: Sequence[float] | np.ndarray, keys: Sequence[str],
                                 strata: Sequence[str], samples: int = DEFAULT_SAMPLES,
                                 seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Clusters resampled within each stratum; ``micro`` (strata weighted by their fixed context
    counts) and ``macro`` (strata alike) intervals, ``stratum_sizes``, ``stratum_cluster_counts``."""
    v = np.asarray(values, dtype=np.float64)
    names = sorted(set(strata))
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    cluster_counts: dict[str, int] = {}
    means = np.empty(len(names))
    reps = np.empty((len(names), samples))
    s_arr = np.asarray(strata)
    k_arr = np.asarray(keys)
    for n, name in enumerate(names):
        mask = s_arr == name
        clusters = Clusters.of(list(k_arr[mask]))
        sums, counts = clusters.totals(v[mask])
        reps[n] = _cluster_replicates(sums, counts, rng, samples)
        means[n] = float(v[mask].mean())
        sizes[name] = int(mask.sum())
        cluster_counts[name] = len(clusters)
    weights = np.array([sizes[n] for n in names], dtype=np.float64) / v.size
    micro = _interval(float(weights @ means), weights @ reps, samples, "source_cluster_within_stratum")
    macro = _interval(float(means.mean()), reps.mean(axis=0), samples, "source_cluster_within_stratum")
    return {"micro": micro, "macro": macro, "stratum_sizes": sizes, "stratum_cluster_counts": cluster_counts,
            "bootstrap_samples": int(samples), "cluster_unit": "source_cluster_within_stratum"}


def paired_difference_bootstrap(differences: Sequence[float] | np.ndarray, keys: Sequence[str],
                                strata: Sequence[str], samples: int = DEFAULT_SAMPLES,
                                seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Per-context differences (as given: kldtui diff gives B - A) resampled by cluster within strata,
    strata weighted by their context counts; the estimate is the observed mean difference."""
    boot = stratified_cluster_bootstrap(differences, keys, strata, samples, seed)
    out = dict(boot["micro"])
    out.update(stratum_sizes=boot["stratum_sizes"], stratum_cluster_counts=boot["stratum_cluster_counts"])
    return out


def cluster_units(values: Sequence[float] | np.ndarray, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-context values reduced to one value per cluster (the mean of its contexts) and the
    cluster's context count: the units a decision rule that assumes independent units should run
    over when contexts share sources."""
    v = np.asarray(values, dtype=np.float64)
    clusters = Clusters.of(keys)
    sums, counts = clusters.totals(v)
    return sums / counts, counts


def depth_edges(rows: int) -> list[tuple[int, int]]:
    """Row buckets by depth in the context: the published ``0000-0255``, ``0256-0511``,
    ``0512-1023``, ``1024-1535``, ``1536-2046`` for 2,047 scored rows; the same fractions (1/8,
    1/4, 1/2, 3/4 of the context) for other lengths; empty buckets left out."""
    length = rows + 1
    cuts = [0, length // 8, length // 4, length // 2, 3 * length // 4, rows]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


__all__ = ["Clusters", "cluster_bootstrap", "cluster_units", "context_bootstrap", "depth_edges",
           "paired_difference_bootstrap", "stratified_cluster_bootstrap"]
