"""A q8's figures in the result pane and the charts as a table's cells write them
(kldtui.text.table_figure, signed_table_figure): four significant digits, three below 0.001. The
per-token quantiles, the noise floor, KL by position and by confidence and the window chart's labels
used ``.4g`` (and ``.3g`` for the ends), beside a mean KL in table_figure's digits."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kldtui.text import signed_table_figure, table_figure
from kldtui.tui.app import create_app
from tests.fixtures_tui import drawn_lines, make_report, result_text, settle, sync, write_report

SMALL = 0.0001844  # reads 0.000184 (.4g: 0.0001844; .5f: 0.00018)


def _after(text: str, label: str) -> str:
    """The figure written right after ``label`` in ``text``."""
    found = re.search(rf"{re.escape(label)} (\S+)", text)
    assert found is not None, (label, text)
    return found.group(1)


@sync
async def test_a_q8s_small_figures_read_as_the_tables_cells(tmp_path: Path) -> None:
    report = make_report("q8", 0.0002, seed=1)
    report["kl_reference_to_candidate"].update({"median": 0.0000567, "p95": 0.0001234, "p99": SMALL,
                                                "max": 0.0009876})
    report["per_window_arrays"]["kl_mean"][0] = SMALL
    report["kl_by_position"] = [{"start": 0, "stop": 64, "positions": 384, "kl_mean": SMALL,
                                 "ci95_low": 0.0001234, "ci95_high": 0.0002468, "windows": 8}]
    report["kl_by_reference_confidence"] = [{"low": 0.0, "high": 1.0, "positions": 384, "kl_mean": SMALL,
                                             "ci95_low": 0.0001234, "ci95_high": 0.0002468, "windows": 8}]
    (tmp_path / "q8").mkdir()
    path = write_report(tmp_path / "q8" / "comparison.json", report)
    app = create_app(reports=[path], config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(app, pilot)
        text = result_text(app)
        chart = drawn_lines(app, "#result-chart")
    assert _after(text, "p99") == "0.000184" and _after(text, "max") == "0.000988", text
    assert "[0,1] 0.000184 [0.000123, 0.000247] (n=384)" in text, text
    band = next(line for line in text.splitlines() if line.startswith("0-63 "))
    assert band.endswith(" 0.000184 [0.000123, 0.000247]"), band
    first = next(line for line in chart if line.startswith("0 ") or line.startswith("00"))
    assert first.split()[-1] == "0.000184", "\n".join(chart)
    assert json.loads(path.read_text())["kl_reference_to_candidate"]["p99"] == SMALL  # the file keeps it all


def test_the_signed_and_unsigned_cells_of_small_figures() -> None:
    assert table_figure(SMALL) == "0.000184" and signed_table_figure(-SMALL) == "-0.000184"


def test_the_charts_label_a_q8s_small_mean_as_a_cell() -> None:
    from kldtui.decide.plots import ChartData, DomainBar, SizePoint, WindowSeries, candidate_styles
    from kldtui.tui.widgets.board_charts import render_charts

    low, high = 0.0001234, 0.0002468
    data = ChartData(sizes=[SizePoint("q8", 8 << 30, 8.5, SMALL, low, high, True, 32)], unsized=[],
                     windows=[WindowSeries("q8", list(range(32)), [SMALL] * 32, SMALL, low, high)],
                     domains=[DomainBar("q8", "prose", SMALL, low, high, 32)], domain_names=["prose"],
                     styles=candidate_styles(["q8"]))
    lines = render_charts(data, 100).plain.splitlines()
    rows = [line for line in lines if line.lstrip().startswith("q8 ")]
    assert len(rows) == 3 and rows[0].endswith(" 0.000184") and rows[2].endswith(" 0.000184"), lines
    assert rows[1].endswith(" 0.000184 [0.000123, 0.000247]"), lines
