"""RMS Δp's window-clustered interval is about llama.cpp's figure, the RMS over every position.

Its window values are each window's RMS; their mean is another, lower figure (the mean of square roots
is below the square root of the mean), so the interval of that mean sat beside the RMS over every
position as an estimate of something else (the hidden demo's coarse candidate: 5.700, and "over every
position 5.712 %" beside it). Windows combine in squares: the interval is of the mean of the window
mean squares, its ends taken back by the square root, so over windows of equal positions its estimate
is the RMS over every position."""

from __future__ import annotations

import math

import numpy as np

from kldtui.formats.report import figure_lines
from kldtui.formats.report_model import as_report
from kldtui.formats.report_names import figure_headline_interval
from kldtui.metrics import figures as registry
from kldtui.stages.compare.report import headline_interval
from tests.fixtures_decide import make_report

N = 16
POSITIONS = 500


def _window_deltas() -> list[np.ndarray]:
    """Δp per position, in per cent, for windows of equal positions and unequal spread."""
    rng = np.random.default_rng(5)
    return [rng.normal(0.0, 1.0 + 4.0 * (i % 4 == 0) + 0.2 * i, POSITIONS) for i in range(N)]


def test_the_interval_of_rms_delta_p_is_about_the_rms_over_every_position() -> None:
    deltas = _window_deltas()
    window_rms = [float(np.sqrt(np.mean(d * d))) for d in deltas]
    pooled = float(np.sqrt(np.mean(np.concatenate(deltas) ** 2)))
    assert np.mean(window_rms) < pooled - 0.1  # the mean of window RMS values is another figure
    stored = headline_interval(window_rms, "rms_delta_p")  # as the compare stage writes it
    assert stored.estimate is not None and math.isclose(stored.estimate, pooled, rel_tol=1e-12)
    assert stored.ci95_low is not None and stored.ci95_high is not None
    assert 0.0 < stored.ci95_low < pooled < stored.ci95_high

    doc = make_report([0.01 + 0.001 * i for i in range(N)], ["prose"] * N)
    doc["per_window_arrays"]["rms_delta_p"] = window_rms
    doc["figures"] = {"rms_delta_p": {"label": "RMS Δp", "definition": "root mean square of Δp",
                                      "unit": "%", "better": "lower", "value": pooled}}
    report = as_report(doc)
    shown = figure_headline_interval(report, "rms_delta_p")  # as every view recomputes it
    assert shown is not None and math.isclose(shown.estimate, pooled, rel_tol=1e-12)
    assert (shown.ci95_low, shown.ci95_high) == (stored.ci95_low, stored.ci95_high)
    line = next(x for x in figure_lines(report) if x.strip().startswith("RMS Δp"))
    assert f"RMS Δp {pooled:.3f} [{shown.ci95_low:.3f}, {shown.ci95_high:.3f}] %" in line, line
    assert "over every position" not in line, line


def test_a_mean_figure_is_unchanged_and_rms_is_the_only_aggregation_in_squares() -> None:
    values = [0.2, 0.5, 0.1, 0.9, 0.4, 0.3, 0.7, 0.6, 0.2, 0.8]
    same = registry.window_headline(values, registry.figure("same_top_p"))
    from kldtui.metrics.inference import headline

    assert same == headline(values, registry.figure("same_top_p").bounds)
    assert registry.WINDOW_POWERS == {"mean": 1, "median": 1, "p99": 1, "max": 1, "rms": 2, "count": 1}
