"""The Pareto front of the size chart."""

from __future__ import annotations

from kldtui.decide.plots import pareto_front


def test_pareto_front_marks_the_candidates_worth_their_size() -> None:
    # (size, KL): the 5 GB at 0.02 is beaten by the 4 GB at 0.01 (smaller and closer)
    points = [(8.0, 0.001), (5.0, 0.02), (4.0, 0.01), (3.0, 0.05), (3.0, 0.06), (9.0, 0.001)]
    assert pareto_front(points) == [True, False, True, True, False, False]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [True, True]  # equal points dominate neither
