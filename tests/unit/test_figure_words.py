"""Every figure a user reads goes through kldtui.text: a tiny one keeps its digits (0.0000123, never
0.0000), a huge one reads in exponent form (1e+29, never thirty digits), a negative one keeps its sign
and one that is not finite is said, not printed as a number. Each text that shows figures is read
here with such values: the text summary (``kldtui view``, the end of a compare), the result pane's
perplexity ratio, a registered figure's format, the axis words beside interval bars, the chart's
legend, the published noise line, convert's precision lines, the reference-encoding line and a
window's log line."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kldtui.decide.noise import published_floor
from kldtui.events import WindowState
from kldtui.formats.report import summary_text
from kldtui.formats.report_model import ReferenceEncoding, as_report
from kldtui.metrics.figures import get
from kldtui.stages.convert import FileLoss, PrecisionLoss
from kldtui.text import BarAxis, plain_number, precise_number
from kldtui.tui.resultdata import result_from_report
from tests.fixtures_decide import make_report

# tiny, huge, negative, not finite: (value, plain_number's words, precise_number's words)
WORDS = [(0.0000123, "0.0000123", "0.0000123"), (0.000012345678, "0.0000123", "0.0000123457"),
         (1e29, "1e+29", "1e+29"), (2.94e37, "2.94e+37", "2.94e+37"), (1.59e-7, "1.59e-07", "1.59e-07"),
         (-0.25, "-0.25", "-0.25"), (-0.0000123, "-0.0000123", "-0.0000123"),
         (1.0000123, "1", "1.00001"), (0.0, "0", "0"),
         (math.inf, "inf", "inf"), (-math.inf, "-inf", "-inf"), (math.nan, "nan", "nan")]


@pytest.mark.parametrize(("value", "plain", "precise"), WORDS)
def test_a_figure_in_digits_or_exponent_form_never_fixed_decimals(value: float, plain: str,
                                                                    precise: str) -> None:
    assert plain_number(value) == plain
    assert precise_number(value) == precise
    assert "0.0000 " not in f"{precise} " and len(precise) < 14


def test_plain_number_keeps_the_digits_it_is_told() -> None:
    assert plain_number(0.0000123456, 2) == "0.000012"
    assert plain_number(0.1234, 2) == "0.12"
    assert plain_number(123456.7, 6) == "123457"
    assert plain_number(1234567.0, 6) == "1.23457e+06"


def _small_report() -> dict[str, object]:
    """A q8-like report: every KL and Δp far below 0.0001, a perplexity ratio of 1.0000123 whose
    interval's upper end is 1e29."""
    doc = make_report(list(np.linspace(1.1e-5, 1.4e-5, 12)))
    doc["kl_reference_to_candidate"]["max"] = 2.94e37  # type: ignore[index]
    doc["next_token"] = {
        "perplexity_reference": 5.0, "perplexity_candidate": 5.0000615, "perplexity_ratio": 1.0000123,
        "delta_p": {"mean": -0.0000123, "rms": 0.0000456},
        "perplexity_ratio_window_cluster_bootstrap": {
            "estimate": 1.0000123, "ci95_low": 0.9999877, "ci95_high": 1e29, "standard_error": 0.01,
            "bootstrap_samples": 2000, "cluster_unit": "window"}}
    return doc


def test_the_text_summary_writes_small_large_and_negative_figures_in_their_digits() -> None:
    text = summary_text(as_report(_small_report()))
    first, *lines = text.splitlines()
    assert first.startswith("KL(reference || candidate) = 0.0000125  95% interval [0.0000118752, "
                            "0.0000131248]"), first
    kl = next(line for line in lines if "per-token KL" in line)
    assert kl == ("  per-token KL: mean 0.0000125  median 0.0000075  p95 0.0000375  p99 0.000075  "
                  "max 2.94e+37"), kl
    nt = next(line for line in lines if "next token" in line)
    assert ("ratio 1.00001 [0.999988, 1e+29]" in nt and "Δp mean -0.0000123 rms 0.0000456" in nt
            and "cand 5.00006" in nt), nt
    assert "0.0000 " not in text and "e-05" not in text


def test_the_text_summary_says_an_unknown_figure_and_an_end_that_is_not_finite_in_words() -> None:
    doc = _small_report()
    doc["next_token"]["delta_p"] = None  # type: ignore[index]
    report = as_report(doc)
    boot = report.next_token.perplexity_ratio_window_cluster_bootstrap  # type: ignore[union-attr]
    infinite = dataclasses.replace(boot, ci95_high=math.inf)  # an overflowed end
    report = dataclasses.replace(report, next_token=dataclasses.replace(
        report.next_token, perplexity_ratio_window_cluster_bootstrap=infinite))  # type: ignore[arg-type]
    nt = next(line for line in summary_text(report).splitlines() if "next token" in line)
    assert "ratio 1.00001 from 0.999988 with no finite upper end" in nt, nt
    assert "Δp mean n/a rms n/a" in nt and "inf" not in nt, nt


def test_the_result_panes_perplexity_ratio_keeps_the_digits_after_one() -> None:
    from kldtui.tui.widgets.result_pane import ResultPane

    text = ResultPane().summary_text(result_from_report(_small_report())).plain
    assert "PPL ratio 1.00001 [0.999988, 1e+29]" in text, text  # five fixed decimals read 1.0000
    assert "Δp mean -1.23e-05" in text, text  # a signed table figure


@pytest.mark.parametrize(("value", "flips"), [(0.0000123, "1.23e-05"), (0.42, "0.42"), (12.345, "12.35"),
                                              (1e29, "1e+29"), (-0.14, "-0.14"), (math.inf, "n/a"),
                                              (math.nan, "n/a")])
def test_a_registered_figure_reads_through_the_text_module(value: float, flips: str) -> None:
    confident = get("confident_flip_rate")
    assert confident is not None and confident.format(value) == flips  # two fixed decimals read 0.00
    column = get("kl_mean")  # a figure registered without a format: six significant digits
    assert column is not None
    assert column.format(value) == ("n/a" if not math.isfinite(value) else precise_number(value))


def test_the_axis_words_beside_interval_bars() -> None:
    assert BarAxis(0.0008, 0.19, log=True).words() == "log axis 0.0008 to 0.19"
    assert BarAxis(1e-7, 0.0000123, log=True).words() == "log axis 1e-07 to 0.000012"
    assert BarAxis(-0.0000123, 1e29).words() == "linear axis -0.000012 to 1e+29"


@pytest.mark.parametrize(("values", "signed", "legend"), [
    ([0.0000123, -0.0000061], True, "full bar -6.24e-06 / +1.23e-05"),
    ([-0.25, -0.1], True, "full bar -0.25"),
    ([1e29, 3e28], False, "full bar 1e+29"),
    ([0.0000123, 0.0000061], False, "full bar 1.23e-05")])
def test_the_charts_legend_reads_its_full_bar_as_its_bars_numbers(values: list[float], signed: bool,
                                                                   legend: str) -> None:
    from kldtui.tui.resultdata import WindowBar
    from kldtui.tui.widgets import KLChart

    chart = KLChart()
    chart.set_data([WindowBar(i, "prose", v) for i, v in enumerate(values)], None, signed=signed)
    assert legend in " ".join(chart.legend_lines(120)), chart.legend_lines(120)


def test_the_published_noise_line_keeps_the_repeat_kls_digits() -> None:
    floor = published_floor()
    assert "two captures of one model differ by KL 0.0035 on window 0" in floor.describe()
    tiny = dataclasses.replace(floor, kl_mean=0.0000123)
    assert "differ by KL 0.0000123 on window 0" in tiny.describe()  # four fixed decimals read 0.0000
    assert "differ by KL 1e+29 on window 0" in dataclasses.replace(floor, kl_mean=1e29).describe()


def test_converts_precision_lines_and_the_reference_encoding_line() -> None:
    loss = PrecisionLoss(rows=2, entries=10, max_step=0.0000123, max_abs_error=1e29,
                         mean_abs_error=0.0000061, floored_entries=1, max_floored_mass=-0.25,
                         mean_floored_mass=0.0, max_row_kl=math.inf, mean_row_kl=0.0000123)
    said = " ".join(loss.lines())
    assert ("largest step 0.0000123 nats" in said and "off by at most 1e+29 nats (mean 0.0000061)" in said
            and "losing at most -0.25" in said and "max inf, mean 0.0000123 nats" in said), said
    gap = FileLoss(rows=1, max_step=1e29, floored_entries=0, entries=4, max_mass_gap=0.0000123)
    said = " ".join(gap.lines())
    assert "largest step 1e+29 nats" in said and "within 0.0000123 (mean" in said, said
    line = ReferenceEncoding(format="llama.cpp", max_entry_error=0.0000123, floored_entries=0,
                             entries=4, max_mass_gap=1e29).line()
    assert "within 0.000012 nats of the original" in line and "at most 1e+29 of their" in line, line


@pytest.mark.parametrize(("kl", "words"), [(0.0000123, "mean KL 0.0000123"), (1e29, "mean KL 1e+29"),
                                           (0.0273169, "mean KL 0.0273169")])
def test_a_windows_log_line(kl: float, words: str) -> None:
    line = WindowState("compare", 3, "compared", "code", {"kl": kl}).describe()
    assert words in line, line


@pytest.mark.parametrize("top1,said", [(0.9963, "0.9963"), (1.0, "1"), (1e-7, "1e-07")])
def test_hidden_card_top1_agreement_keeps_its_digits(top1: float, said: str) -> None:
    """The hidden-state card wrote top-1 agreement to six fixed decimals: 1e-7 read 0.000000."""
    from types import SimpleNamespace

    from kldtui.stages.publish_hidden import _qualification_lines

    doc = {"status": "qualified", "kl_live_to_replay": {"mean": 1e-4}, "top1_agreement": top1,
           "contexts": 4, "positions": 100}
    lines = _qualification_lines(SimpleNamespace(qualification=doc))  # type: ignore[arg-type]
    assert f"| top-1 agreement | {said} |" in lines
