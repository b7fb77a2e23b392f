"""The ranking's row at 80 columns where every mark is "no verdict" (10 cells), one name is long and the
bars are on a log axis: the candidate column kept its 18 cells, the bar its header "interval (log)" whole,
and the row ran 3 cells past the table's edge, the bar cut off behind a horizontal scroll."""

from __future__ import annotations

from pathlib import Path

from kldtui.tui.app import create_app
from kldtui.tui.widgets import LeaderboardTable
from tests.fixtures_tui import (
    drawn_lines,
    make_report,
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
        await settle(app, pilot)
        table = app.screen.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: table.row_count == 2, "the ranking")
        await settle(app, pilot)
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)
        lines = "\n".join(screen_lines(app))
        assert "small-quant-with-…" in lines and lines.count("no verdict") >= 2, lines
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
        await settle(app, pilot)
        table = app.screen.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: table.row_count == 3, "the ranking")
        await settle(app, pilot)
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
        await settle(app, pilot)
        table = app.screen.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: table.row_count == 2, "the ranking")
        await settle(app, pilot)
        note = app.screen.query_one("#board-note")
        assert note.region.height == 2, static_text(app, "#board-note")  # how to use it, and this
        assert "no tie marks: these reports cannot be paired (? says why)" in static_text(app, "#board-note")
        await pilot.press("question_mark")
        await pilot.pause()
        assert "come from different suites" in " ".join(drawn_lines(app, "#help-notes"))
