"""The per-row figure registry: a figure declared once reaches the report (per-window columns,
per_window entries, the figures object with its interval), the report model, the text summary
and the viewer's figures; the built-in figures are the report's fixed columns."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax

from kldtui.formats.report import figure_lines, summary_text
from kldtui.formats.report_model import WINDOW_FIGURES, ComparisonReport, WindowTable
from kldtui.metrics import figures as registry
from kldtui.metrics import stats as st
from kldtui.metrics.figures import RowFigure
from kldtui.stages.compare import CompareOptions, compare
from kldtui.tui.resultdata import result_from_report
from tests.fixtures_compare import make_suite

CONFIDENT_FLIP = RowFigure(
    name="test_confident_flip_rate", label="confident flips",
    definition="positions where the reference's top probability is at least 0.5 and the candidate's "
               "argmax differs from the reference's, per 10,000 positions",
    slots=("ref_top_prob", "argmax_ref", "argmax_cand"),
    values=lambda r: (r.ref_top_prob >= 0.5) & (r.argmax_ref != r.argmax_cand),
    scale=10_000.0, unit="per 10,000 tokens", fmt="{:.1f}")


@pytest.fixture(scope="module")
def suite_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    # a coarse candidate: enough flips of confident positions to count
    return make_suite(root, windows=4, context=200, vocab=300, seed=3,
                      candidate=lambda rng, x: (x + rng.standard_normal(x.shape) * 3.0).astype(np.float32))


def _flips(data, window: int) -> np.ndarray:
    x, y, _ = data[window]
    p = softmax(x.astype(np.float64), axis=1)
    return (p.max(axis=1) >= 0.5) & (x.argmax(axis=1) != y.argmax(axis=1))


def test_builtin_figures_are_the_reports_per_window_columns() -> None:
    builtin = {f.name for f in registry.all_figures() if f.report == "columns"}
    assert builtin == set(WINDOW_FIGURES) | {"top1_agreement"}
    ids = {"window_index", "domain", "positions", "figures", "extra"}
    assert builtin == {f.name for f in dataclasses.fields(WindowTable)} - ids
    # beyond them: the figures users rank by (kldtui/metrics/figures/ranking.py), in the figures object
    assert {f.name for f in registry.reported_figures()} == {"confident_flip_rate", "same_top_p",
                                                             "rms_delta_p", "entropy_shift"}


def test_a_registered_figure_reaches_the_report_model_summary_and_viewer(suite_dirs, tmp_path: Path) -> None:
    suite, ref, cand, data = suite_dirs
    opts = CompareOptions(bootstrap_samples=500)
    plain = compare(suite.path, ref, cand, opts).to_json()
    assert "test_confident_flip_rate" not in plain["figures"]
    assert "test_confident_flip_rate" not in plain["per_window_arrays"]
    with registry.registered(CONFIDENT_FLIP):
        report = compare(suite.path, ref, cand, opts)
    doc = report.to_json()
    windows = [0, 1, 2, 3]
    per_window = [1e4 * float(np.mean(_flips(data, w))) for w in windows]
    pooled = 1e4 * float(np.mean(np.concatenate([_flips(data, w) for w in windows])))
    assert pooled > 0  # the suite really has confident flips
    np.testing.assert_allclose(doc["per_window_arrays"]["test_confident_flip_rate"], per_window, rtol=1e-12)
    np.testing.assert_allclose([e["test_confident_flip_rate"] for e in doc["per_window"]], per_window,
                               rtol=1e-12)
    fig = doc["figures"]["test_confident_flip_rate"]
    assert fig["label"] == "confident flips" and fig["unit"] == "per 10,000 tokens"
    assert fig["better"] == "lower" and fig["definition"].startswith("positions where")
    assert fig["value"] == pytest.approx(pooled, rel=1e-12)
    boot = st.window_cluster_bootstrap(per_window, 500, 1)
    assert fig["window_cluster_bootstrap"]["estimate"] == pytest.approx(boot["estimate"], rel=1e-12)
    assert fig["window_cluster_bootstrap"]["ci95_low"] == pytest.approx(boot["ci95_low"], rel=1e-12)
    # everything else is the report without the figure
    same = {k: v for k, v in doc.items() if k not in ("figures", "per_window", "per_window_arrays",
                                                       "provenance")}
    assert same == {k: v for k, v in plain.items() if k not in ("figures", "per_window", "per_window_arrays",
                                                                "provenance")}
    assert {k: v for k, v in doc["figures"].items() if k != "test_confident_flip_rate"} == plain["figures"]

    # the file round-trips through the typed model (also in a kldtui that does not register it)
    back = ComparisonReport.from_json(json.loads(json.dumps(doc)), "r.json")
    assert back.figures is not None and back.figures["test_confident_flip_rate"].value == fig["value"]
    assert back.window_table().figures["test_confident_flip_rate"] == doc["per_window_arrays"][
        "test_confident_flip_rate"]
    assert back.per_window[2].figures["test_confident_flip_rate"] == per_window[2]
    assert back.to_json() == doc

    # shown with its headline interval (docs/STATISTICS.md), from the windows a 95 % interval needs
    head = fig["interval"]
    low, high = head["ci95_low"], head["ci95_high"]
    enough = dataclasses.replace(back, windows=8)  # as if it had the windows a 95 % interval needs
    with registry.registered(CONFIDENT_FLIP):
        # 4 windows are too few for a 95 % interval (formats.report_names): the value alone
        line = f"confident flips {pooled:.1f} per 10,000 tokens"
        assert figure_lines(back)[-1] == line
        assert f"  {line}" in summary_text(back).splitlines()
        assert result_from_report(back).figures[-1] == line
        with_interval = f"confident flips {pooled:.1f} [{low:.1f}, {high:.1f}] per 10,000 tokens"
        assert figure_lines(enough)[-1] == with_interval
    # unregistered here (a report from a newer kldtui): shown from the report itself, 6 digits
    newer = f"confident flips {pooled:.6g} [{low:.6g}, {high:.6g}] per 10,000 tokens"
    assert figure_lines(enough)[-1] == newer


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="not kernel outputs"):
        registry.register(dataclasses.replace(CONFIDENT_FLIP, name="test_bad", slots=("entropy",)))
    with pytest.raises(ValueError, match="unknown aggregation"):
        registry.register(dataclasses.replace(CONFIDENT_FLIP, name="test_bad", aggregation="mode"))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(dataclasses.replace(CONFIDENT_FLIP, name="kl_mean"))
    with pytest.raises(ValueError, match="per-window entries"):
        registry.register(dataclasses.replace(CONFIDENT_FLIP, name="positions"))
    with pytest.raises(ValueError, match="lower-case"):
        registry.register(dataclasses.replace(CONFIDENT_FLIP, name="Flips"))
    assert registry.get("test_bad") is None


def test_registered_figures_come_from_cached_rows_alike(suite_dirs) -> None:
    """A derived figure needs nothing stored beyond the kernels' outputs: a window read back from
    the compare cache gives the same figures."""
    from kldtui.stages.compare import compare_window
    from kldtui.stages.compare.cache import decode_result, encode_result

    suite, ref, cand, _ = suite_dirs
    with registry.registered(CONFIDENT_FLIP):
        result = compare_window(suite, 1, ref, cand, CompareOptions(reverse=True))
        again = decode_result(json.loads(json.dumps(encode_result(result))))
        assert again.figures() == result.figures()
        assert result.figures()["test_confident_flip_rate"] is not None


def test_intervals_are_held_to_the_values_a_figure_can_take() -> None:
    # Hall's t about a skewed mean: one window of twelve with 5 confident flips per 10,000 tokens gave
    # "0.42 [-0.14, 3.05]", one window of 90 % agreement among eleven of 100 % "99.2 [93.9, 100.3] %"
    from kldtui.metrics import inference
    from kldtui.stages.compare.report import headline_interval

    rare = [0.0] * 11 + [5.0]
    assert inference.headline(rare).low is not None and inference.headline(rare).low < 0  # unheld
    flips = headline_interval(rare, "confident_flip_rate")
    assert flips.ci95_low == 0.0 and flips.ci95_high == inference.headline(rare).high
    agree = [100.0] * 11 + [90.0]
    assert (inference.headline(agree).high or 0) > 100
    same = headline_interval(agree, "same_top_p")
    assert same.ci95_high == 100.0 and same.ci95_low == inference.headline(agree).low
    assert headline_interval([0.0] * 12, "rms_delta_p").ci95_low == 0.0
    # the ends, in order, inside the bounds; an estimate within them is within the interval
    for bounds in ((0.0, None), (None, 1.0), (0.0, 1.0)):
        for lo, hi in ((-0.5, 0.3), (0.2, 1.7), (-2.0, -1.0), (1.5, 2.0)):
            a, b = inference.held_to(lo, hi, bounds)
            assert a <= b
            assert all(x >= bounds[0] for x in (a, b) if bounds[0] is not None)
            assert all(x <= bounds[1] for x in (a, b) if bounds[1] is not None)
    assert registry.figure("kl_mean").bounds == (0.0, None)
    assert registry.figure("entropy_shift").bounds == (None, None)  # either sign


def test_a_buckets_kl_interval_never_reaches_below_zero() -> None:
    # a bucket whose KL sits in one window of twelve: the symmetric interval reached below 0
    sums, counts = [0.0] * 11 + [0.6], [3] * 12
    low, high = st.clustered_ratio_interval(sums, counts)
    unheld, _ = st.clustered_ratio_interval(sums, counts, bounds=(None, None))
    assert unheld is not None and unheld < 0 and low == 0.0 and high is not None and high > 0.6 / 36
    rows = np.arange(36) // 3  # three positions in each of twelve windows
    kl = np.where(rows == 11, 0.2, 0.0)
    bucket = st.confidence_buckets(np.full(36, 0.8), kl, np.ones(36, bool), window=rows)[3]
    assert bucket["positions"] == 36 and bucket["ci95_low"] == 0.0
    by_depth = st.position_buckets([kl[rows == w] for w in range(12)], bucket=3, intervals=True)
    assert by_depth[0]["ci95_low"] == 0.0


def test_the_entropy_shift_reads_as_a_signed_tables_cell() -> None:
    # five fixed decimals read a q8's +0.0001844 nats as +0.00018 and +0.0000123 as +0.00001
    shift = registry.figure("entropy_shift")
    assert [shift.format(v) for v in (0.0001844, -0.0000123, 0.01234, 0.0)] == \
        ["+0.000184", "-1.23e-05", "+0.01234", "+0"]
    assert shift.format(None) == "n/a" and shift.format(float("nan")) == "n/a"
    assert registry.figure("rms_delta_p").format(1.23456) == "1.235"  # a format string still works
