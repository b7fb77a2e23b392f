"""The verdict and the interval it shows agree (docs/STATISTICS.md, "The rule", rule 2): the sign-flip
test's interval is the set of ratios that very test accepts, over the very patterns it counts, so a
verdict names a difference exactly when its interval excludes the null.

Beyond 12 units the test draws random sign patterns, which (unlike all 2^n of them) are not closed under a
change of sign. The verdict's p-value is the one-sided count doubled; the interval inverted the
two-sided test of ``|sum|`` over the same patterns, a different test: near 5 % the two disagreed, and a
clustered verdict over 17 source clusters named a difference (p 0.048) beside an interval that held zero.
Where the log-normal check must also confirm a difference (rule 4) the verdict may hold back one its
interval excludes, and says why; it never names one its interval holds."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.verdict_simulation import candidates
from kldtui.decide.clustered import SourceClusters, cluster_verdict
from kldtui.decide.verdict import (
    ALPHA,
    LEAN_FLIP_LEVEL,
    LEVEL,
    Evidence,
    decide,
    evidence,
    family_flips,
    verdict_interval,
)
from kldtui.metrics.inference import FLIPS, accepted_count, flip_ratio_interval, flip_test

NAMED = ("a_closer", "b_closer")
# the window-mean distributions and difficulty dependences the simulation's nulls are drawn from
SHAPES = [(dist, gamma) for dist in ("normal", "gamma", "lognormal") for gamma in (1.0, 0.5, 1.5)]


def borderline(rng: np.random.Generator, trials: int, n: int, dist: str, gamma: float) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """Suites of ``n`` window means (the simulation's model) where B differs from A by a ratio drawn so
    that the verdict's test falls on both sides of 5 %, many of them near it."""
    a, b = candidates(dist, trials, n, (1.0, 1.0), rng, gamma)
    z = rng.uniform(0.0, 3.5, (trials, 1)) * rng.choice([-1.0, 1.0], (trials, 1))
    return a, b * np.exp(z * 0.14 / np.sqrt(n))


def agreement(ev: Evidence) -> tuple[np.ndarray, np.ndarray]:
    """(named, excludes): the verdict names a difference alone (at 5 %); its interval excludes 1."""
    named = ev.p <= ALPHA
    excludes = (ev.interval_low > 1.0) | (ev.interval_high < 1.0)
    return named, excludes


def check_agreement(ev: Evidence) -> None:
    """A named difference is one the interval excludes; where the log-normal check does not apply the two
    agree exactly; where it does, an interval may exclude 1 that the verdict holds back only where the
    interval is not the union of what the verdict asks (the model's alone from 16 units, or the sign-flip
    test's alone where the units spread least)."""
    named, excludes = agreement(ev)
    assert np.all(excludes[named]), np.flatnonzero(named & ~excludes)
    unchecked = ~ev.checked
    assert np.array_equal(named[unchecked], excludes[unchecked]), \
        np.flatnonzero(unchecked & (named != excludes))
    held = excludes & ~named
    alone = (ev.model_interval & ~ev.leans_on_windows) | (~ev.model_interval & (ev.windows >= 16))
    assert np.all((ev.checked & alone)[held]), np.flatnonzero(held & ~(ev.checked & alone))


def accepts(a: np.ndarray, b: np.ndarray, rho: float, level: float, flips: int) -> bool:
    """Whether the verdict's test (doubled one-sided p-value) accepts ``B - rho A`` at ``level``."""
    t = flip_test(rho * a, b, flips)
    return bool(2.0 * min(float(t.p_worse), float(t.p_better)) > 1.0 - level)


def two_sided(a: np.ndarray, b: np.ndarray, rho: float) -> float:
    """The two-sided p-value of ``|sum(B - rho A)|`` over all sign patterns (up to 12 windows)."""
    d = b - rho * a
    n = d.size
    sums = np.array(np.meshgrid(*[[1.0, -1.0]] * n)).reshape(n, -1).T @ d
    return float((np.abs(sums) >= abs(d.sum()) * (1 - 1e-12)).mean())


def test_the_interval_is_the_set_of_ratios_the_verdicts_own_test_accepts() -> None:
    """At each end of the sign-flip interval the test of ``B - rho A`` (doubled one-sided p-value, what a
    verdict reads) turns from accepting to rejecting, at 8-40 windows and with a leaderboard's larger
    pattern set; over up to 12 windows (all patterns) it is also the two-sided test of ``|sum|``, as
    before, and the mean difference's interval (A all ones, null 0) inverts the same test."""
    rng = np.random.default_rng(3)
    for n, flips in ((8, FLIPS), (12, FLIPS), (13, FLIPS), (17, FLIPS), (40, FLIPS), (17, family_flips(28))):
        for _ in range(6):
            a = rng.lognormal(np.log(0.01), 0.5, n)
            b = a * np.exp(rng.normal(0.05, 0.15, n))
            for level in (LEVEL, LEAN_FLIP_LEVEL):
                lo, hi = (float(x) for x in flip_ratio_interval(a, b, level, flips))
                inside = [lo * (1 + 1e-7), hi * (1 - 1e-7)]
                outside = [lo * (1 - 1e-7), hi * (1 + 1e-7)]
                assert all(accepts(a, b, rho, level, flips) for rho in inside), (n, flips, level)
                assert not any(accepts(a, b, rho, level, flips) for rho in outside), (n, flips, level)
                if n <= 12:  # every pattern and its mirror: the two-sided test of |sum| is the same test
                    assert all(two_sided(a, b, rho) > 1 - level for rho in inside), (n, level)
                    assert all(two_sided(a, b, rho) <= 1 - level for rho in outside), (n, level)
        d = rng.normal(0.001, 0.002, n)
        lo, hi = (float(x) for x in flip_ratio_interval(np.ones(n), d, LEVEL, flips, null=0.0))
        for rho, within in ((lo - 1e-9, False), (lo + 1e-9, True), (hi - 1e-9, True), (hi + 1e-9, False)):
            assert accepts(np.ones(n), d, rho, LEVEL, flips) == within, (n, rho)


def test_the_count_that_accepts_is_the_verdicts_threshold() -> None:
    """The interval keeps a ratio while at least ``accepted_count`` patterns hold in each direction: the
    smallest count whose doubled share is above the level's complement, the comparison a verdict makes
    (its p-value at most ALPHA; at LEAN_FLIP_LEVEL the one-sided share scaled as ``Evidence.p`` scales it),
    for every pattern count a verdict draws."""
    for m in [2 ** n for n in range(3, 13)] + [FLIPS, family_flips(28), family_flips(66), family_flips(120)]:
        k = accepted_count(LEVEL, m)
        assert min(1.0, 2.0 * ((k - 1) / m)) <= ALPHA < min(1.0, 2.0 * (k / m)), m
        lean = accepted_count(LEAN_FLIP_LEVEL, m)
        scale = ALPHA / (1.0 - LEAN_FLIP_LEVEL)
        assert min(1.0, 2.0 * ((lean - 1) / m) * scale) <= ALPHA < min(1.0, 2.0 * (lean / m) * scale), m


def test_over_windows_the_verdict_names_a_difference_exactly_when_its_interval_excludes_one() -> None:
    """Suites of 8 to 40 windows, many near 5 %, of every window-mean distribution and difficulty
    dependence of the simulation: the rule's p-value and its headline interval agree suite by suite
    (the sign-flip test alone, joined with the log-normal check, the model's, the model's joined with
    the windows' 80 % interval), and the product's verdicts say the same."""
    rng = np.random.default_rng(2026)
    near = 0
    for n in range(8, 41):
        dist, gamma = SHAPES[n % len(SHAPES)]
        a, b = borderline(rng, 300, n, dist, gamma)
        ev = evidence(a, b)
        check_agreement(ev)
        near += int(((ev.p > 0.03) & (ev.p < 0.08) & (n > 12)).sum())
        for t in range(0, 300, 60):  # the product's verdicts on some of them
            iv = verdict_interval(a[t], b[t])
            decision = decide(iv, None, range(n))
            assert iv.p_value == pytest.approx(float(ev.p[t]), rel=1e-12)
            assert (decision.outcome in NAMED) == bool(ev.p[t] <= ALPHA)
    assert near > 300, near  # enough suites near the threshold, beyond the 12 windows of all patterns


def test_a_leaderboards_larger_pattern_set_gives_its_interval_too() -> None:
    """A leaderboard of eight candidates or more draws more sign patterns for its test
    (``family_flips``); its pairs' intervals come from the same patterns, and agree with them."""
    rng = np.random.default_rng(7)
    flips = family_flips(28)
    for n in (13, 17, 29):
        a, b = borderline(rng, 200, n, "gamma", 1.0)
        check_agreement(evidence(a, b, flips=flips))


@pytest.mark.parametrize("seed", [1, 2])
def test_over_source_clusters_the_verdict_names_a_difference_exactly_when_its_interval_excludes_zero(
        seed: int) -> None:
    """A hidden-state suite's verdict (``cluster_verdict``: kldtui diff's and the leaderboard's ties) over
    8 to 40 source clusters of one to three contexts each: the verdict names a difference exactly when
    the interval it prints excludes zero, except where the log-normal check holds one back, which the
    sentence says; a named difference's printed interval never reaches zero."""
    rng = np.random.default_rng(seed)
    named_seen = 0
    for _ in range(160):
        k = int(rng.integers(8, 41))
        sizes = rng.integers(1, 4, k)
        keys = tuple(f"[\"ds\",\"host-{c:02d}\"]" for c in range(k) for _ in range(sizes[c]))
        contexts = len(keys)
        layout = SourceClusters("analysis", tuple(range(contexts)), keys, ("prose",) * contexts)
        of = np.repeat(np.arange(k), sizes)
        spread = float(rng.choice([0.2, 0.5, 1.0]))
        kl_a = rng.lognormal(np.log(0.01), spread, k)[of] * rng.lognormal(0.0, 0.05, contexts)
        ratio = np.exp(rng.uniform(-3.5, 3.5) * 0.14 / np.sqrt(k) + rng.normal(0.0, 0.1, k))
        kl_b = kl_a * ratio[of] * rng.lognormal(0.0, 0.05, contexts)
        iv, decision, text = cluster_verdict(layout.units(kl_a), layout.units(kl_b), layout, None, "A", "B",
                                             unit="context")
        assert iv.windows == k and (f"over {k} source clusters (analysis partition)" in text
                                    or f"({k}, analysis partition)" in text), text
        named = decision.outcome in NAMED
        if named:
            named_seen += 1
            assert iv.excludes(0.0), text
            assert "95 % interval -" not in text, text  # the printed interval is on one side of zero
        elif not iv.dependent:
            assert not iv.excludes(0.0), text
            assert "includes zero" in text, text
        elif iv.excludes(0.0):
            assert ("does not confirm" in text or "does not show the difference" in text), text
    assert named_seen > 20 and named_seen < 150, named_seen
