"""Interval bars on a shared text axis (kldtui.text): the leaderboard (text and dashboard) and the
dashboard's charts draw theirs with one rule."""

from __future__ import annotations

import math

from kldtui.text import ASCII_BAR, BarAxis, bar_axis, interval_bar


def test_a_dozen_quants_spanning_two_hundred_times_get_a_log_axis() -> None:
    # mean KL 0.00085 to 0.16: on a linear axis of 20 columns the best seven sat in its first two
    means = [0.00085, 0.0015, 0.0023, 0.0054, 0.0079, 0.0093, 0.012, 0.021, 0.045, 0.045, 0.072, 0.16]
    linear = BarAxis(min(means), max(means))
    assert len({linear.position(m, 20) for m in means[:7]}) == 2  # seven quants in two columns
    axis = bar_axis(means)
    assert axis.log and axis.words() == "log axis 0.00085 to 0.16"
    columns = [axis.position(m, 20) for m in means]
    assert columns == sorted(columns) and len(set(columns[:7])) == 7
    assert columns[0] == 0 and columns[-1] == 19


def test_close_values_or_any_not_positive_keep_a_linear_axis() -> None:
    assert not bar_axis([0.010, 0.012, 0.05]).log  # five times: linear
    assert not bar_axis([-0.001, 0.01, 0.5]).log
    assert not bar_axis([0.0, 0.01, 0.5]).log
    assert bar_axis([]) == BarAxis(0.0, 1.0)
    assert bar_axis([float("nan"), 0.5, 0.7]) == BarAxis(0.5, 0.7)
    padded = bar_axis([1.0, 2.0], pad=0.05)
    assert (padded.low, padded.high) == (0.95, 2.05)
    logged = bar_axis([1.0, 100.0], pad=0.05)  # padded by the same share of the log span
    assert logged.log and abs(logged.low - 100 ** -0.05) < 1e-12 and abs(logged.high - 100 ** 1.05) < 1e-9


def test_interval_bar_draws_the_interval_and_the_mean() -> None:
    axis = BarAxis(0.0, 10.0)
    assert interval_bar(2.0, 6.0, 4.0, axis, 11) == "  ├─●─┤    "
    assert interval_bar(2.0, 6.0, 4.0, axis, 11, ASCII_BAR) == "  |-*-|    "
    assert interval_bar(None, None, 4.0, axis, 11) == "    ●      "  # too few windows: the mean alone
    assert interval_bar(-5.0, 50.0, 4.0, axis, 11) == "├───●─────┤"  # held to the axis' ends
    assert interval_bar(1.0, 1.0, 1.0, BarAxis(1.0, 1.0), 5) == " ├●┤ "  # no span: the middle


def test_a_narrow_interval_keeps_both_ends_beside_its_mean() -> None:
    """Where the mean's column is an end's, the end is drawn a column further out (at 80x24 a ranking
    row read "├●", a bar without its upper end), at the axis' edge the bar a column further in."""
    axis = BarAxis(0.0, 10.0)
    assert interval_bar(4.0, 5.0, 5.0, axis, 11) == "    ├●┤    "
    assert interval_bar(4.0, 5.0, 4.0, axis, 11) == "   ├●┤     "
    assert interval_bar(4.0, 4.0, 4.0, axis, 11) == "   ├●┤     "
    assert interval_bar(9.0, 10.0, 10.0, axis, 11) == "        ├●┤"
    assert interval_bar(0.0, 1.0, 0.0, axis, 11) == "├●┤        "
    assert interval_bar(0.0, 10.0, 10.0, axis, 11) == "├────────●┤"
    assert interval_bar(0.0, 1.0, 1.0, axis, 3) == "├●┤"


def test_an_end_with_no_finite_value_is_drawn_open() -> None:
    """An interval with no finite upper end runs to the axis' edge with no end mark (before: "┤" at
    the edge, an end that is not there)."""
    axis = BarAxis(0.0, 10.0)
    assert interval_bar(2.0, math.inf, 4.0, axis, 11) == "  ├─●──────"
    assert interval_bar(-math.inf, 6.0, 4.0, axis, 11) == "────●─┤    "
    assert interval_bar(2.0, math.nan, 4.0, axis, 11) == "  ├─●──────"


def test_one_log_axis_rule_for_the_bars_and_the_plot() -> None:
    from kldtui.text import wants_log_axis

    assert wants_log_axis([0.001, 0.02]) and not wants_log_axis([0.001, 0.01])  # more than ten times
    assert wants_log_axis([float("inf"), 0.001, 0.5])  # non-finite values left out
    assert not wants_log_axis([]) and not wants_log_axis([0.0, 1.0])
    assert all(bar_axis(v).log == wants_log_axis(v) for v in ([0.001, 0.5], [0.1, 0.5], [-1.0, 9.0]))
