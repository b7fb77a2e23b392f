"""The viewer's charts (key c): the data kldtui plot draws, as text, with the reports' numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Static

from kldtui.decide.exports import export_table
from kldtui.decide.leaderboard import leaderboard_from_files
from kldtui.decide.plots import chart_data
from kldtui.formats.report import load_report
from kldtui.text import table_figure
from kldtui.tui.app import create_app
from kldtui.tui.widgets import BoardCharts, DiffPane
from kldtui.tui.widgets.board_charts import render_charts
from tests.fixtures_exports import make_reports
from tests.fixtures_tui import settle, sync, until


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return make_reports(tmp_path_factory.mktemp("charts"))


def _g(v: float) -> str:
    return table_figure(v)  # as a table's cells


@pytest.mark.parametrize("width", [60, 80, 200])
def test_text_charts_fit_their_width_and_say_the_reports_numbers(reports: list[Path], width: int) -> None:
    board = leaderboard_from_files(reports, samples=2000)
    data = chart_data(export_table(board, [load_report(p) for p in reports], paths=reports))
    text = render_charts(data, width).plain
    assert all(len(line) <= width for line in text.splitlines()), width
    for p in reports:
        doc = json.loads(p.read_text())
        boot = doc["kl_window_cluster_bootstrap"]
        head = doc["kl_mean_interval"]  # the leaderboard's interval: the headline one (docs/STATISTICS.md)
        assert _g(boot["estimate"]) in text
        assert f"[{_g(head['ci95_low'])}, {_g(head['ci95_high'])}]" in text
        for d, b in doc["domains"].items():
            assert f"{p.stem} " in text and _g(b["estimate"]) in text, d
    size_rows = [line for line in text.splitlines() if " GiB " in line]
    assert [row.split()[0] for row in size_rows] == ["q2_k", "q4_0", "q4_k_m", "q8_0"]  # by size
    assert all("◆" in row for row in size_rows)  # each smaller candidate is further: all on the front
    assert "mean KL against size  ● mean ├─┤ 95 % interval, log axis" in text


def test_without_sizes_the_size_chart_says_how_to_give_them_and_draws_no_legend(reports: list[Path],
                                                                                tmp_path: Path) -> None:
    from kldtui.decide.plots import NO_SIZE

    unsized = []
    for path in reports:
        doc = json.loads(path.read_text())
        doc.pop("candidate_size", None)
        unsized.append(tmp_path / path.name)
        unsized[-1].write_text(json.dumps(doc))
    board = leaderboard_from_files(unsized, samples=2000)
    data = chart_data(export_table(board, [load_report(p) for p in unsized], paths=unsized))
    text = render_charts(data, 400).plain
    head = text.split("mean KL per window")[0]
    assert NO_SIZE in head and "axis" not in head and "◆" not in head, head


def test_window_blocks_of_candidates_far_apart_are_on_a_log_scale(reports: list[Path]) -> None:
    # the four reports' mean KL span about a hundred times (q8_0 0.0004 to q2_k 0.036): on 0 to the
    # highest window, q8_0's windows were all the lowest block
    board = leaderboard_from_files(reports, samples=2000)
    data = chart_data(export_table(board, [load_report(p) for p in reports], paths=reports))
    text = render_charts(data, 200).plain
    every = [v for s in data.windows for v in s.kl_mean]
    assert f"mean KL per window  one log scale, {_g(min(every))} to {_g(max(every))}" in text
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()
            if line.split() and line.split()[0] in {s.name for s in data.windows} and " GiB " not in line
            and set(line.split()[1]) <= set("▁▂▃▄▅▆▇█")}
    assert len(rows) == 4 and len(set(rows["q8_0"])) > 1  # q8_0's windows differ, and show it
    assert min(rows["q2_k"]) > max(rows["q8_0"])  # blocks order as their values do


@sync
async def test_viewer_c_shows_the_charts_and_d_the_difference(reports: list[Path], tmp_path: Path) -> None:
    app = create_app(reports=reports, config_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        charts = app.query_one("#charts", BoardCharts)
        assert not charts.display
        await pilot.press("c")
        await settle(app, pilot)
        await until(pilot, lambda: charts.display, "the charts pane")
        text = str(app.query_one("#charts-text", Static).render())
        for title in ("mean KL against size", "mean KL per window", "mean KL per domain"):
            assert title in text
        assert "q2_k" in text and "3.17 bpw" in text
        await pilot.press("space", "down", "space", "d")
        await settle(app, pilot)
        assert app.query_one("#diffpane", DiffPane).display and not charts.display
