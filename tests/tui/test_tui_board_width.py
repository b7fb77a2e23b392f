"""The ranking's row at 80 columns where every mark is "no verdict" (10 cells), one name is long and the
bars are on a log axis: the candidate column kept its 18 cells, the bar its header "interval (log)" whole,
and the row ran 3 cells past the table's edge, the bar cut off behind a horizontal scroll."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kldtui.tui.app import create_app
from kldtui.tui.screens.dashboard import GRID_BESIDE_TABLES_FROM
from kldtui.tui.widgets import LeaderboardTable
from tests.fixtures_tui import (
    dashboard,
    drawn_lines,
    feed,
    make_report,
    ranking,
    screen_lines,
    settle,
    static_text,
    sync,
    until,
    write_report,
)

LONG = "small-quant-with-a-long-name"


@sync
async def test_no_verdict_marks_beside_a_long_name_on_a_log_axis_fit_80_columns(tmp_path: Path) -> None:
    six = ["prose", "prose", "prose", "code", "code", "instruction"]  # too few windows: no verdict
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s, domains=six))
             for n, lvl, s in [(LONG, 0.005, 1), ("q2", 0.08, 2)]]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await ranking(app, pilot, 2)
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)
        lines = "\n".join(screen_lines(app))
        assert "small…-a-long-name" in lines and lines.count("no verdict") >= 2, lines
        headers = [str(c.label) for c in table.columns.values()]
        assert headers[-1] == "log axis", headers  # the bars' axis, said in the room there is
        bar = table.column("interval")
        assert all("●" in str(table.get_row_at(i)[bar]) for i in range(2))
        await pilot.resize_terminal(200, 50)
        await settle(app, pilot)
        await until(pilot, lambda: [str(c.label) for c in table.columns.values()][-1] == "interval (log)",
                    "the long header where there is room")


@sync
async def test_at_200_columns_the_bar_takes_40_cells(tmp_path: Path) -> None:
    """The bar stopped at 20 cells at 200 columns, beside a hundred empty ones: two intervals a twentieth
    of the axis apart were drawn in one cell. It takes the room there is, up to 40 cells."""
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s))
             for n, lvl, s in [("q8", 0.004, 1), ("q6", 0.0045, 2), ("q4", 0.02, 3)]]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        table = await ranking(app, pilot, 3)
        bar = table.column("interval")
        assert all(len(str(table.get_row_at(i)[bar])) == 40 for i in range(3))
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)


@sync
async def test_reports_that_cannot_be_paired_say_so_in_one_line_above_the_ranking(tmp_path: Path) -> None:
    """Reports of two suites rank without tie marks: the reason (both paths, both suites' hashes) took
    four lines above the table at 80x24, where every other note takes one; the help has it in full."""
    other = make_report("q4", 0.02, seed=2)
    other["suite_token_hash_sha256"] = "ef" * 32
    paths = [write_report(tmp_path / "q8.json", make_report("q8", 0.004, seed=1)),
             write_report(tmp_path / "q4.json", other)]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await ranking(app, pilot, 2)
        note = app.screen.query_one("#board-note")
        assert note.region.height == 2, static_text(app, "#board-note")  # how to use it, and this
        assert "no tie marks: these reports cannot be paired (? says why)" in static_text(app, "#board-note")
        await pilot.press("question_mark")
        await pilot.pause()
        assert "come from different suites" in " ".join(drawn_lines(app, "#help-notes"))


# the hidden demo's candidates (kldtui demo --hidden), and names of about 20 characters with known sizes
HIDDEN_DEMO = (("fine-hidden", 0.0078, None), ("coarse-hidden", 0.0297, None))
LONG_NAMES = (("llama-3.1-8b-q4_k_m", 0.0078, 4.9), ("llama-3.1-8b-iq3_xxs", 0.0297, 3.1))


@pytest.mark.parametrize("candidates", [HIDDEN_DEMO, LONG_NAMES], ids=["hidden-demo", "20-character"])
@sync
async def test_at_80x24_the_leaderboard_tab_shows_every_interval_whole(
        tmp_path: Path, candidates: tuple[tuple[str, float, float | None], ...]) -> None:
    """At 80x24 the dashboard's Leaderboard tab had 54 columns beside the window grid: with the hidden
    demo's names the ranking's interval read "[0.006834, 0.00", its bar was behind a horizontal scroll,
    and the campaign board's "95% interval" column read "9" and "[". The tab (and the Diff tab) takes the
    grid's room there; the board wraps its verdicts and names and drops the size and bpw no row knows
    rather than cut a figure."""
    from kldtui.events import LeaderboardUpdated, ResultReady, Standing
    from kldtui.formats.report import load_report
    from kldtui.text import human_bytes, interval_ends, table_figure

    paths = {name: write_report(tmp_path / f"comparison-{name}.json", make_report(name, level, seed=i))
             for i, (name, level, _) in enumerate(candidates)}
    first = candidates[0][0]
    standings = [Standing(name, "compared", rank=i + 1, mean=level, ci_low=level * 0.97, ci_high=level * 1.03,
                          mark="best" if i == 0 else "worse", outcome=None if i == 0 else "a_closer",
                          provisional=i > 0, report_path=str(paths[name]),
                          size_bytes=None if bpw is None else int(bpw * 1e9), bits_per_weight=bpw)
                 for i, (name, level, bpw) in enumerate(candidates)]
    standings.append(Standing(f"{first}.repeat", "compared", mean=0.00779, ci_low=0.00759, ci_high=0.00797,
                              mark="tied", outcome="within_noise", repeat_of=first))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await feed(app, pilot, *(ResultReady("compare", path=str(p), report=load_report(p))
                                 for p in paths.values()),
                   LeaderboardUpdated("campaign", rows=tuple(standings), windows=24, final=True,
                                      noise_model="2 captures (one repeat)"))
        ranking = app.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: ranking.row_count == 2, "the two reports on the ranking")
        app.main.action_show_tab("leaderboard")
        await settle(app, pilot)
        board_text = "\n".join(screen_lines(app))
        for row in standings:
            assert row.ci_low is not None and row.ci_high is not None
            assert interval_ends(row.ci_low, row.ci_high, table_figure) in board_text, board_text
            assert table_figure(row.mean) in board_text, board_text
            if row.size_bytes is not None:
                assert f" {human_bytes(row.size_bytes)}  {row.bits_per_weight:.2f}" in board_text, board_text
        assert "95% interval" in board_text, board_text
        await pilot.press("b")
        await settle(app, pilot)
        lines = screen_lines(app)
        text = "\n".join(lines)
        for result in app.main.results:
            assert result.kl is not None and result.kl.interval_text() in text, text
        bar = LeaderboardTable.column("interval")
        assert all("●" in str(ranking.get_row_at(i)[bar]) for i in range(2))
        assert ranking.virtual_size.width <= ranking.region.width, (ranking.virtual_size, ranking.region)
        assert all(len(line) <= 80 for line in lines), text
        await pilot.press("d")  # the only two reports' difference, a bar and a figure a context
        await settle(app, pilot)
        chart = app.query_one("#diff-chart")
        await until(pilot, lambda: bool(chart.bars), "the difference")  # type: ignore[attr-defined]
        assert not app.query_one("#left").display and chart.size.width >= 76
        legend = len(chart.legend_lines(chart.size.width))  # type: ignore[attr-defined]
        rows = [row for row in drawn_lines(app, "#diff-chart")[legend:] if row]
        assert rows and all(re.search(r"│.* [+-]0\.\d+$", row) for row in rows), rows
        # beside the other tabs the grid is back, and at 200 columns beside every tab
        await pilot.press("l")
        await settle(app, pilot)
        assert app.query_one("#left").display
        await pilot.press("b")
        for width in (GRID_BESIDE_TABLES_FROM, 200):  # from where the pane beside the grid has room
            await pilot.resize_terminal(width, 50)
            await settle(app, pilot)
            assert app.query_one("#left").display
            await until(pilot, lambda: ranking.virtual_size.width <= ranking.region.width,
                        "the ranking whole")
            text = "\n".join(screen_lines(app))
            assert all(r.kl is not None and r.kl.interval_text() in text for r in app.main.results), text
