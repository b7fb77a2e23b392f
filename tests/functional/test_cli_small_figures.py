"""``kldtui diff`` and ``kldtui leaderboard`` of two q8-like candidates (mean KL about 0.0002) write
their figures as the viewer's tables do (kldtui.text.table_figure: three significant digits below
0.001): the means, the intervals, B - A per window and the vs-best column used ``.4g``, four."""

from __future__ import annotations

import json
import re

import numpy as np

from kldtui.cli.main import main
from kldtui.text import table_figure
from tests.fixtures_decide import make_report, suite_domains, write_report

DOMAINS = suite_domains(32)
# a figure below 0.001 in digits (0.000184) or in exponent form (1.84e-05), with its digits
SMALL_FIGURE = re.compile(r"(?<![\w.])[+-]?(0\.000\d+|\d(?:\.\d+)?e-\d+)(?![\w.])")


def _digits(figure: str) -> int:
    mantissa = figure.split("e")[0].lstrip("+-").replace(".", "").lstrip("0")
    return len(mantissa)


def test_a_q8s_figures_in_kldtui_diff_and_leaderboard_keep_three_digits(tmp_path, capsys):
    base = np.random.default_rng(3).gamma(4.0, 0.00005, 32)  # mean KL about 0.0002
    a = write_report(tmp_path / "a.json", make_report(base, DOMAINS, candidate_dir="/runs/q8_0"))
    b = write_report(tmp_path / "b.json", make_report(base * 1.3, DOMAINS, candidate_dir="/runs/q6_k"))
    assert main(["diff", str(a), str(b), "--bootstrap-samples", "500", "--per-window"]) in (0, 1)
    diff = capsys.readouterr().out
    assert main(["leaderboard", str(a), str(b), "--bootstrap-samples", "500"]) in (0, 1)
    board = capsys.readouterr().out
    for out in (diff, board):
        small = [m.group(0) for m in SMALL_FIGURE.finditer(out)]
        assert small, out
        assert all(_digits(figure) <= 3 for figure in small), (small, out)
    mean_a = float(np.mean(json.loads(a.read_text())["per_window_arrays"]["kl_mean"]))
    row = next(line for line in diff.splitlines() if line.startswith("all "))
    assert f" {table_figure(mean_a)} " in row, row
