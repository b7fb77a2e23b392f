"""The Pareto front of the size chart."""

from __future__ import annotations

from kldtui.decide.plots import pareto_front


def test_pareto_front_marks_the_candidates_worth_their_size() -> None:
    # (size, KL): the 5 GB at 0.02 is beaten by the 4 GB at 0.01 (smaller and closer)
    points = [(8.0, 0.001), (5.0, 0.02), (4.0, 0.01), (3.0, 0.05), (3.0, 0.06), (9.0, 0.001)]
    assert pareto_front(points) == [True, False, True, True, False, False]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [True, True]  # equal points dominate neither


def test_candidate_styles_are_all_different_and_start_with_matplotlibs_colours() -> None:
    from kldtui.decide.plots import candidate_styles

    names = [f"c{k}" for k in range(120)]
    styles = candidate_styles(names)
    assert list(styles) == names
    assert len({(s.color, s.marker) for s in styles.values()}) == 120  # lines: colour and marker
    assert len({(s.color, s.hatch) for s in styles.values()}) == 120  # bars: colour and hatch
    assert len({styles[n].color for n in names[:20]}) == 20  # twenty colours before any comes back
    # the first ten as matplotlib draws them by default (tab10): charts of a few candidates unchanged
    import matplotlib

    tab10 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors]
    assert [styles[n].color for n in names[:10]] == tab10
    assert candidate_styles(["a", "a", "b"]).keys() == {"a", "b"}
