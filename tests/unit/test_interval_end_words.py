"""An interval end that overflowed (KL over dozens of orders of magnitude) reads in words, the same
in every view (kldtui.text.interval_ends): ``kldtui view`` printed "95% interval [2.27897e+31, n/a]",
the viewer dropped the interval without a word, the leaderboard and its Markdown export "[..., inf]"."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.report_model import as_report
from kldtui.formats.report_names import kl_headline_interval
from kldtui.text import interval_ends, interval_range, plain_number
from kldtui.tui.resultdata import Band, result_from_report
from tests.fixtures_decide import make_report, suite_domains, write_report


def test_an_infinite_end_in_words_in_one_home() -> None:
    assert interval_ends(0.25, 0.5) == "[0.25, 0.5]"
    assert interval_ends(0.25, math.inf) == "from 0.25 with no finite upper end"
    assert interval_ends(-math.inf, 0.5) == "up to 0.5 with no finite lower end"
    assert interval_ends(-math.inf, math.inf) == "with no finite end"
    assert interval_ends(3.55e30, math.inf, "{:.3g}".format) == "from 3.55e+30 with no finite upper end"
    assert interval_range(0.25, 0.5) == "0.25 to 0.5"
    assert interval_range(0.25, math.inf) == interval_ends(0.25, math.inf)
    assert plain_number(math.inf) == "inf"  # a sentence says what it means, never the bare word


WIDE = np.exp(np.random.default_rng(0).uniform(np.log(1e-30), np.log(1e33), 32))


def test_kldtui_view_the_viewer_and_the_exports_say_an_overflowed_end_in_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = make_report(WIDE, suite_domains(32), candidate_dir="/r/wide")
    head = kl_headline_interval(as_report(doc))
    assert head.ci95_low is not None and math.isfinite(head.ci95_low) and head.ci95_high == math.inf
    path = write_report(tmp_path / "wide.json", doc)
    other = write_report(tmp_path / "other.json", make_report(
        np.random.default_rng(30).gamma(4.0, 0.0025, 32), suite_domains(32), candidate_dir="/r/other"))

    assert main(["view", str(path)]) == 0  # not a terminal: the summary
    first = capsys.readouterr().out.splitlines()[0]
    assert (f"= {head.estimate:.6g}  95% interval from {head.ci95_low:.6g} with no finite upper end  "
            in first), first
    assert "n/a" not in first and "inf" not in first

    band = result_from_report(doc, path).kl  # the viewer's result pane
    assert band is not None and band.interval is None  # nothing for a chart to draw
    assert band.text(plain_number) == (f"{plain_number(head.estimate)} from {plain_number(head.ci95_low)} "
                                       "with no finite upper end")
    assert Band(1.0, 0.5, math.inf, 32).interval_text(plain_number) == "from 0.5 with no finite upper end"

    for fmt in ("markdown", None):  # the markdown export and the text leaderboard
        args = ["leaderboard", str(path), str(other)] + (["--format", fmt] if fmt else [])
        assert main(args) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if "wide" in line)
        assert "with no finite upper end" in row and "inf]" not in row, row
