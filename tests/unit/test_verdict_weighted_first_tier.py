"""The 8-15-window rule where windows spread little (docs/STATISTICS.md, "The rule"): the sign-flip test
weighs each window's difference by (A + B)^-1/2, its interval inverts that same test, and the first tier's
log-normal check confirms at 5 % where the dependence is strong (|t| > 3)."""

from __future__ import annotations

import numpy as np
import pytest

from kldtui.decide.verdict import (
    ALPHA,
    DEPENDENCE_TIERS,
    FIRST_TIER_WEIGHT_POWER,
    MODEL_INTERVAL_FROM,
    evidence,
    interval_source_words,
    verdict_interval,
)
from kldtui.metrics.inference import cox_ratio, flip_inference, log_fit


def _suites(trials: int, n: int, ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Window means spread little (gamma-shaped difficulty, shape 40: the first tier), B ``ratio`` times A
    with each window's own noise."""
    rng = np.random.default_rng(seed)
    w = rng.gamma(40.0, 0.01 / 40.0, (trials, n))
    a = w * rng.lognormal(0.0, 0.1, (trials, n))
    b = ratio * w * rng.lognormal(0.0, 0.1, (trials, n))
    return a, b


def test_under_sixteen_windows_that_spread_little_the_test_weighs_each_windows_difference() -> None:
    a, b = _suites(400, 8, 1.08, seed=4)
    ev = evidence(a, b)
    assert FIRST_TIER_WEIGHT_POWER == 0.5
    assert bool(np.all(ev.tier == 0)) and bool(np.all(ev.weighted))
    w = (a + b) ** -0.5
    want = flip_inference(a * w, b * w)
    assert np.array_equal(ev.p_flip_worse, want.test.p_worse)
    assert np.array_equal(ev.p_flip_better, want.test.p_better)
    plain = flip_inference(a, b)
    assert not np.array_equal(ev.p_flip_worse, plain.test.p_worse)
    # the interval inverts the weighted test, stretched to hold the windows' own ratio
    observed = b.mean(axis=-1) / a.mean(axis=-1)
    low, high = want.intervals[0]
    assert np.array_equal(ev.ratio_low, np.fmin(low, observed))
    assert np.array_equal(ev.ratio_high, np.fmax(high, observed))
    assert bool(np.all((ev.interval_low <= observed) & (observed <= ev.interval_high)))
    # the weights do not change when A and B swap: the test stays exact where they are alike
    swapped = evidence(b, a)
    assert np.array_equal(swapped.p_flip_worse, ev.p_flip_better)
    # the verdict and its interval agree on every suite: the interval excludes 1 exactly where the rule
    # names a difference (no check applies where B scales with A unless the dependence test fires by chance)
    unchecked = ~ev.checked
    named = ev.p <= ALPHA
    excludes = (ev.interval_low > 1.0) | (ev.interval_high < 1.0)
    assert unchecked.sum() > 300 and 0 < named[unchecked].sum() < unchecked.sum()
    assert np.array_equal(named[unchecked], excludes[unchecked])


def test_the_weights_apply_only_to_a_whole_suite_of_8_to_15_windows_in_the_first_tier() -> None:
    a, b = _suites(50, MODEL_INTERVAL_FROM, 1.08, seed=5)
    assert not bool(np.any(evidence(a, b).weighted))  # 16 windows: unweighted
    whole = evidence(a[:, :12], b[:, :12])
    assert bool(np.all(whole.weighted))
    assert not bool(np.any(evidence(a[:, :6], b[:, :6], within=whole).weighted))  # a domain
    wide = np.random.default_rng(6).lognormal(0.0, 1.2, (50, 8)) * 0.01
    ev = evidence(wide, wide * 1.05)
    assert bool(np.any(ev.tier > 0)) and np.array_equal(ev.weighted, ev.tier == 0)  # beyond the first tier
    zero = a[:1, :8].copy()
    zero[0, 3] = 0.0
    assert not bool(evidence(zero, b[:1, :8]).weighted[0])  # not on a log scale


def test_the_report_says_the_weighted_test_and_a_domain_or_16_windows_do_not() -> None:
    a, b = _suites(1, 16, 1.3, seed=7)
    iv = verdict_interval(a[0, :8], b[0, :8])
    assert iv.interval_source == "weighted_sign_flip" and iv.weight_power == 0.5
    assert iv.ratio_low is not None and iv.ratio_high is not None and iv.ratio is not None
    assert iv.ratio_low <= iv.ratio <= iv.ratio_high
    out = iv.to_dict()
    assert out["sign_flip_weights"] == "1 / sqrt(A + B)"
    assert out["difficulty_dependence"]["interval_source"] == "weighted_sign_flip"
    assert "(fewer than 16 of them that spread little: of each one's difference weighed by 1 / sqrt(A + B))" \
        in out["method"]
    assert interval_source_words("weighted_sign_flip", "context") == (
        "the sign-flip test's with each context's difference weighed by 1 / sqrt(A + B) (fewer than 16 "
        "contexts that spread little: the noisier contexts that hold more KL count less), stretched to hold "
        "the contexts' own ratio")
    full = verdict_interval(a[0], b[0])
    assert full.interval_source == "sign_flip" and full.to_dict()["sign_flip_weights"] is None


def _strong_and_weak() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Two 8-window first-tier suites whose B depends on difficulty (w^1.6): one with a dependence t
    beyond 3, one with a t the first tier's test finds (10 %) but under 3."""
    w = 0.01 * np.exp(np.linspace(-0.3, 0.3, 8))
    strong = (w, 1.02 * w ** 1.6 / 0.01 ** 0.6)
    rng = np.random.default_rng(11)
    for _ in range(2000):
        a = w * rng.lognormal(0.0, 0.12, 8)
        b = w ** 1.3 / 0.01 ** 0.3 * rng.lognormal(0.0, 0.12, 8)
        t = float(evidence(a, b).dependence_t)
        if 2.2 < abs(t) < 3.0 and int(evidence(a, b).tier) == 0:
            return strong, (a, b)
    raise AssertionError("no suite with a moderate dependence")


@pytest.mark.parametrize(("which", "level"), [(0, 0.05), (1, 0.10)])
def test_the_first_tiers_check_confirms_at_5_percent_where_the_dependence_t_exceeds_3(which: int,
                                                                                       level: float) -> None:
    a, b = _strong_and_weak()[which]
    ev = evidence(a, b)
    first = DEPENDENCE_TIERS[0]
    assert int(ev.tier) == 0 and bool(ev.dependent) and first.strict_above_t == 3.0
    assert (abs(float(ev.dependence_t)) > 3.0) == (which == 0)
    assert float(ev.check_level) == level
    cox = cox_ratio(log_fit(a, b), 1.0 - level)
    assert (float(ev.model_low), float(ev.model_high)) == (float(cox.low), float(cox.high))
    # on the rule's scale a check confirms where its one-sided p-value is at most ALPHA / 2
    assert float(ev.model_p_worse) == pytest.approx(float(cox.p_worse) * ALPHA / level)
    iv = verdict_interval(a, b)
    assert iv.to_dict()["difficulty_dependence"]["lognormal_check"] == {"method": "cox", "level": 1.0 - level}


def test_the_strict_check_goes_with_the_weights_so_that_16_windows_and_more_decide_as_before() -> None:
    """Sixteen first-tier windows with strong dependence: the sign-flip test is unweighted there, and the
    check runs at the first tier's usual 10 %."""
    w = 0.01 * np.exp(np.linspace(-0.3, 0.3, 16))
    a, b = w, 1.02 * w ** 1.6 / 0.01 ** 0.6
    ev = evidence(a, b)
    assert int(ev.tier) == 0 and abs(float(ev.dependence_t)) > 3.0 and not bool(ev.weighted)
    assert float(ev.check_level) == 0.10
    assert float(evidence(a[::2], b[::2]).check_level) == 0.05  # the same windows, eight of them
