"""The estimate printed beside an interval is that interval's own (docs/STATISTICS.md: the mean of
window means).

Windows of very different lengths: the mean over every position (a figure's ``value``, the per-token
KL mean) is not the mean of the window means the headline interval is about, and fell outside the
interval printed beside it ("Same top p 52.528 [68.852, 99.890] %"). A report of the original
comparator's scripts carries its own bootstrap estimate, which the headline showed beside kldtui's
interval."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from kldtui.formats.report import figure_lines, summary_text
from kldtui.formats.report_model import as_report
from kldtui.formats.report_names import figure_headline_interval, kl_headline_interval
from kldtui.tui.resultdata import result_from_report
from tests.fixtures_decide import make_report

N = 12
# one long window the candidate gets badly wrong, eleven short ones it gets nearly right
POSITIONS = [2000] + [10] * (N - 1)
KL = [0.5] + [0.01 + 0.001 * i for i in range(N - 1)]
SAME_TOP = [50.0] + [99.0 - 0.1 * i for i in range(N - 1)]


def _uneven(fmt: str = "kldtui") -> dict[str, Any]:
    """A report of :data:`N` windows of :data:`POSITIONS` positions, its figures over every position
    weighted by them (as the compare stage pools them)."""
    doc = make_report(KL, ["prose"] * N, fmt=fmt)
    weights = np.asarray(POSITIONS, dtype=np.float64)
    doc["positions"] = int(weights.sum())
    for entry, positions, same in zip(doc["per_window"], POSITIONS, SAME_TOP, strict=True):
        entry["positions"] = positions
        if fmt == "kldtui":
            entry["same_top_p"] = same
    pooled_kl = float(np.average(KL, weights=weights))
    doc["kl_reference_to_candidate"]["mean"] = pooled_kl
    if fmt == "kldtui":
        doc["per_window_arrays"]["positions"] = POSITIONS
        doc["per_window_arrays"]["same_top_p"] = SAME_TOP
        doc["figures"] = {"same_top_p": {
            "label": "Same top p", "definition": "per cent of positions with the reference's argmax",
            "unit": "%", "better": "higher", "value": float(np.average(SAME_TOP, weights=weights))}}
        # the perplexity ratio over every position; its bootstrap's, from the windows' mean NLL
        doc["next_token"] = {"perplexity_reference": 5.0, "perplexity_candidate": 6.5,
                             "perplexity_ratio": 1.3, "perplexity_ratio_window_cluster_bootstrap": {
                                 "estimate": 1.02, "ci95_low": 1.01, "ci95_high": 1.04,
                                 "standard_error": 0.01, "bootstrap_samples": 2000, "cluster_unit": "window"}}
    return doc


def test_a_figures_line_shows_its_intervals_own_estimate_and_labels_the_one_over_every_position() -> None:
    report = as_report(_uneven())
    head = figure_headline_interval(report, "same_top_p")
    assert head is not None and head.ci95_low is not None and head.ci95_high is not None
    pooled = report.figures["same_top_p"].value  # type: ignore[index]
    assert pooled is not None and not head.ci95_low <= pooled <= head.ci95_high  # the trap
    assert head.estimate == pytest.approx(float(np.mean(SAME_TOP)))
    want = (f"Same top p {head.estimate:.3f} [{head.ci95_low:.3f}, {head.ci95_high:.3f}] % (from the "
            f"windows' values; over every position {pooled:.3f} %)")
    assert figure_lines(report) == [want]
    assert f"  {want}" in summary_text(report).splitlines()  # kldtui view, compare, run --batch
    assert result_from_report(report).figures == [want]  # the viewer and the dashboard's result pane
    # the KL headline alike: the windows' mean, not the mean over every position
    kl = kl_headline_interval(report)
    assert kl.estimate == pytest.approx(float(np.mean(KL)))
    assert kl.ci95_low is not None and kl.ci95_high is not None
    assert not kl.ci95_low <= report.kl_reference_to_candidate.mean <= kl.ci95_high
    first = summary_text(report).splitlines()[0]
    assert first.startswith(f"KL(reference || candidate) = {kl.estimate:.6g}  95% interval "
                            f"[{kl.ci95_low:.6g}, {kl.ci95_high:.6g}]"), first

    # the perplexity ratio alike: its bootstrap's estimate beside its interval
    ratio = "ratio 1.02 [1.01, 1.04] (from the windows' values; over every position 1.3)"
    assert ratio in summary_text(report)

    # where the windows' mean and the one over every position agree, one estimate is shown
    doc = _uneven()
    doc["figures"]["same_top_p"]["value"] = float(np.mean(SAME_TOP))
    line = figure_lines(as_report(doc))[0]
    assert line == f"Same top p {head.estimate:.3f} [{head.ci95_low:.3f}, {head.ci95_high:.3f}] %"


def test_an_original_comparator_report_keeps_its_bootstrap_estimate_beside_its_own_interval() -> None:
    doc = _uneven("original")
    boot = doc["kl_window_cluster_bootstrap"]
    # the original scripts' estimate here: the mean over every position, not of the window means
    boot.update(estimate=doc["kl_reference_to_candidate"]["mean"], ci95_low=0.3, ci95_high=0.48)
    report = as_report(doc)
    head = kl_headline_interval(report)
    first = summary_text(report).splitlines()[0]
    assert first.startswith(f"KL(reference || candidate) = {head.estimate:.6g}  95% interval "
                            f"[{head.ci95_low:.6g}, {head.ci95_high:.6g}]"), first
    theirs = f"the original comparator's window bootstrap {boot['estimate']:.6g} [0.3, 0.48])"
    assert first.endswith(theirs), first
    # where the two estimates agree it is said once
    same = copy.deepcopy(doc)
    same["kl_window_cluster_bootstrap"]["estimate"] = float(np.mean(KL))
    assert summary_text(as_report(same)).splitlines()[0].endswith("window bootstrap [0.3, 0.48])")


def test_the_leaderboard_ranks_an_original_comparator_report_by_its_headline_estimate() -> None:
    """The leaderboard's row took its mean from the original comparator's bootstrap and its interval
    from the headline: for a report whose bootstrap takes the mean over every position (0.44 here) the
    row showed a mean above its interval [0.014, 0.1] and ranked by it."""
    from kldtui.decide import build_leaderboard

    doc = _uneven("original")
    doc["kl_window_cluster_bootstrap"].update(estimate=doc["kl_reference_to_candidate"]["mean"],
                                              ci95_low=0.3, ci95_high=0.48)
    other = copy.deepcopy(doc)
    other["candidate_dir"] = "/r/b"
    board = build_leaderboard([as_report(doc), as_report(other)], noise=None)
    head = kl_headline_interval(as_report(doc))
    assert head.estimate is not None and head.ci95_high is not None and head.ci95_high < 0.3
    for row in board.rows:
        assert row.mean == pytest.approx(head.estimate), row
        assert (row.ci_low, row.ci_high) == (head.ci95_low, head.ci95_high), row
