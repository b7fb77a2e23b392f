"""Statistics: the original comparator's bootstrap convention, quantiles, buckets."""

from __future__ import annotations

import math

import numpy as np

from kldtui.metrics import stats as st


def original_bootstrap(window_means: list[float], samples: int, seed: int) -> dict:
    """docs/FORMATS.md's convention, written out literally."""
    window_means = np.asarray(window_means, dtype=np.float64)
    n_windows = window_means.size
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_windows, size=(samples, n_windows))
    means = window_means[idx].mean(axis=1)
    ci = np.quantile(means, [0.025, 0.975])
    return {"estimate": float(window_means.mean()), "standard_error": float(means.std(ddof=1)),
            "ci95_low": float(ci[0]), "ci95_high": float(ci[1]), "bootstrap_samples": samples,
            "cluster_unit": "window"}


def test_bootstrap_is_identical_to_the_original_convention() -> None:
    rng = np.random.default_rng(0)
    for n, samples, seed in ((32, 10000, 1), (8, 10000, 1), (5, 777, 42), (1, 100, 3)):
        means = list(rng.gamma(2.0, 0.002, size=n))
        assert st.window_cluster_bootstrap(means, samples, seed) == original_bootstrap(means, samples, seed)


def test_bootstrap_changes_with_seed_and_data() -> None:
    means = [0.001, 0.002, 0.004, 0.003, 0.010]
    a = st.window_cluster_bootstrap(means, 1000, 1)
    assert a != st.window_cluster_bootstrap(means, 1000, 2)
    assert a["ci95_low"] < a["estimate"] < a["ci95_high"]
    assert a["estimate"] == np.mean(means)


def test_ratio_bootstrap_uses_the_same_draw() -> None:
    nll_c = np.array([2.0, 2.2, 1.9, 2.5])
    nll_r = np.array([1.9, 2.1, 1.9, 2.4])
    got = st.ratio_bootstrap(nll_c, np.exp, nll_r, 500, 1)
    idx = np.random.default_rng(1).integers(0, 4, size=(500, 4))
    want = np.exp(nll_c[idx].mean(axis=1) - nll_r[idx].mean(axis=1))
    assert got["estimate"] == math.exp(nll_c.mean() - nll_r.mean())
    assert got["standard_error"] == float(want.std(ddof=1))
    assert [got["ci95_low"], got["ci95_high"]] == [float(v) for v in np.quantile(want, [0.025, 0.975])]


def test_stats_object_keys_and_numpy_quantiles() -> None:
    v = np.random.default_rng(2).exponential(0.01, size=2047)
    s = st.stats_object(v)
    assert set(s) == {"mean", "median", "p95", "p99", "max", "min", "p0_1", "p1", "p5", "p10", "p50",
                      "p90", "p99_9"}
    assert s["p95"] == float(np.quantile(v, 0.95)) and s["p99_9"] == float(np.quantile(v, 0.999))
    assert s["median"] == s["p50"] == float(np.median(v))
    assert s["min"] == v.min() and s["max"] == v.max() and s["mean"] == float(np.mean(v))


def test_confidence_and_position_buckets() -> None:
    top = np.array([0.1, 0.3, 0.5, 0.74, 0.75, 0.95, 1.0, 0.99])
    kl = np.arange(8, dtype=np.float64)
    agree = np.array([True, False, True, True, False, True, True, False])
    b = st.confidence_buckets(top, kl, agree)
    assert [x["positions"] for x in b] == [1, 1, 2, 1, 3]
    assert b[2]["kl_mean"] == 2.5 and b[4]["kl_mean"] == 6.0 and b[4]["top1_agreement"] == 2 / 3
    pos = st.position_buckets([np.arange(600.0), np.arange(600.0) + 1], bucket=256)
    assert [(p["start"], p["stop"], p["positions"]) for p in pos] == [(0, 256, 512), (256, 512, 512),
                                                                      (512, 600, 176)]
    assert pos[0]["kl_mean"] == (np.arange(256.0).mean() + np.arange(1.0, 257.0).mean()) / 2
