"""Windows needed: the count, and its power claim simulated through the product's decision rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kldtui.decide.noise import NoiseFloor
from kldtui.decide.paired import compare_group, draw_indices
from kldtui.decide.verdict import MIN_VERDICT_WINDOWS
from kldtui.decide.windows_needed import windows_for, windows_needed

TRIALS = 1500


def _floor(margin: float) -> NoiseFloor | None:
    """A measured noise model whose repeat variation of the metric is ``margin`` on every window."""
    if margin <= 0:
        return None
    return NoiseFloor(kind="measured", source="simulated", kl_mean=0.0, threshold=0.0,
                      metric_per_window={w: margin for w in range(10_000)})


def _resolved_rate(draw: np.ndarray, margin: float, comparisons: int, seed: int = 11) -> float:
    """How often the decision rule (the leaderboard's and diff's: ``compare_group``) names the
    difference (a_closer or b_closer, not within noise) over trials of per-window differences ``draw``
    (trials x windows) added to a candidate A's window means; in a family of ``comparisons`` the test
    is held at 5 % / comparisons (Holm's strictest step)."""
    noise = _floor(margin)
    rng = np.random.default_rng(seed)
    n = draw.shape[1]
    windows = list(range(n))
    indices = draw_indices(n, 20, 1)  # the rule does not use the compatibility bootstrap
    named = 0
    for d in draw:
        a = rng.lognormal(math.log(0.01), 0.5, size=n)  # A's window means: windows not alike
        b = a + d
        significant = None
        if comparisons > 1:
            p = compare_group(a, b, indices, noise, windows, "A", "B").interval.p_value
            significant = p is not None and p <= 0.05 / comparisons
        outcome = compare_group(a, b, indices, noise, windows, "A", "B", significant=significant).outcome
        named += outcome in ("a_closer", "b_closer")
    return named / len(draw)


@pytest.mark.parametrize(("delta", "sd", "margin", "comparisons", "shape"), [
    (0.002, 0.004, 0.0, 1, "normal"),  # a small difference, noisy windows
    (0.001, 0.006, 0.0, 6, "normal"),  # a leaderboard of four: 6 pairs
    (0.003, 0.004, 0.001, 1, "normal"),  # against a measured repeat variation
    # windows not alike: skewed differences (log-normal, skewness 6), the long tail along the difference (a
    # few hard windows carry it, as with KL) or against it
    (0.002, 0.004, 0.0, 1, "skewed-along"),
    (0.002, 0.004, 0.0, 1, "skewed-against"),
    (0.001, 0.004, 0.0, 3, "skewed-against"),
])
def test_the_windows_said_resolve_the_difference_80_percent_of_the_time(
        delta: float, sd: float, margin: float, comparisons: int, shape: str) -> None:
    n = windows_for(delta, sd, margin=margin, comparisons=comparisons).windows
    assert n is not None and n >= MIN_VERDICT_WINDOWS
    rng = np.random.default_rng(7)

    def draw(k: int) -> np.ndarray:
        if shape == "normal":
            return rng.normal(delta, sd, size=(TRIALS, k))
        tail = rng.lognormal(0.0, 1.0, size=(TRIALS, k))
        z = (tail - math.exp(0.5)) / math.sqrt((math.e - 1) * math.e)  # mean 0, standard deviation 1
        return delta + (1 if shape == "skewed-along" else -1) * sd * z

    at_n = _resolved_rate(draw(n), margin, comparisons)
    # 80 % claimed; 2000 trials give +-1.8 % (95 %). Measured: normal 0.79-0.82; skewed along the
    # difference 0.94-0.98 (the count is conservative there); skewed against it 0.77-0.79
    if shape == "normal":
        assert 0.76 <= at_n <= 0.86, (n, at_n)
        # and it is the least that does it: a third fewer windows fall clearly short
        assert _resolved_rate(draw(max(MIN_VERDICT_WINDOWS, n * 2 // 3)), margin, comparisons) < 0.74
    else:
        assert at_n >= 0.74, (n, at_n)


def test_counts_grow_as_they_should() -> None:
    one = windows_for(0.002, 0.004).windows
    assert one is not None
    quarter = windows_for(0.001, 0.004).windows  # half the difference: about four times the windows
    assert quarter is not None and 3.5 * one <= quarter <= 4.5 * one
    family = windows_for(0.002, 0.004, comparisons=6).windows
    assert family is not None and family > one
    assert windows_for(0.002, 0.0).windows == MIN_VERDICT_WINDOWS


def test_no_count_where_windows_cannot_help() -> None:
    within = windows_for(0.001, 0.004, margin=0.002)
    assert within.windows is None and "within the repeat variation" in within.reason
    assert windows_for(0.0, 0.004).windows is None
    assert windows_for(math.inf, 0.004).windows is None
    tiny = windows_for(1e-9, 1.0)
    assert tiny.windows is None and "more than" in tiny.reason


def test_from_window_means_and_in_words() -> None:
    a = np.array([0.010, 0.012, 0.008, 0.011, 0.009, 0.013, 0.010, 0.012])
    b = a + np.array([0.001, -0.002, 0.003, 0.000, 0.002, -0.001, 0.004, 0.001])
    got = windows_needed(a, b)
    d = b - a
    assert got.difference == pytest.approx(d.mean()) and got.window_sd == pytest.approx(d.std(ddof=1))
    assert got.measured_windows == 8 and got.windows is not None and got.more == got.windows - 8
    words = got.words(suite_windows=32)
    assert f"about {got.windows} windows" in words and "80 % power" in words
    assert "a larger suite is needed" in got.words(suite_windows=got.windows - 1)
