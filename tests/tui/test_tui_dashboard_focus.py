"""The dashboard's d from its ranking: the Diff tab hid the focused ranking and left the focus nowhere, so
the arrows, End and Enter did nothing until Tab. The focus now lands on the difference's pane (its
placeholder too, with fewer than two reports) and the next key works there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import TabbedContent

from kldtui.tui.widgets import DiffPane, LeaderboardTable
from tests.fixtures_tui import DOMAINS, dashboard, make_report, open_with_o, settle, sync, until, write_report


@sync
async def test_d_without_two_reports_leaves_the_focus_on_the_diff_pane(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        for reports in (0, 1):
            await pilot.press("b")
            await settle(app, pilot)
            assert isinstance(app.focused, LeaderboardTable)
            await pilot.press("d")  # a notification: a difference needs two reports
            await settle(app, pilot)
            assert app.screen.query_one("#tabs", TabbedContent).active == "diff"
            pane = app.screen.query_one("#diffpane", DiffPane)
            assert app.focused is pane, app.focused  # in sight, on the placeholder
            assert "d shows the difference of two reports" in str(pane.query_one("#diff-verdict").render())
            await pilot.press("tab")  # the keys go on from there: Tab leaves the pane for the next one
            await settle(app, pilot)
            assert app.focused is not None and app.focused is not pane
            if not reports:
                path = write_report(tmp_path / "one.json", make_report("one", 0.01, seed=1))
                await open_with_o(app, pilot, path)


async def _two_tall_reports(app: Any, pilot: Any, tmp_path: Path) -> LeaderboardTable:
    """Two reports of 32 windows opened with o, their difference taller than an 80x24 tab: the ranking."""
    for name, level, seed in (("q8", 0.01, 2), ("q4", 0.03, 3)):
        report = make_report(name, level, seed=seed, domains=DOMAINS * 4)
        await open_with_o(app, pilot, write_report(tmp_path / f"{name}.json", report))
    board = app.screen.query_one("#board", LeaderboardTable)
    await until(pilot, lambda: board.row_count == 2, "the two reports ranked")
    return board


@sync
async def test_the_next_key_after_d_scrolls_the_difference(tmp_path: Path) -> None:
    """Two reports of 32 windows at 80x24: d from the ranking shows their difference, taller than the
    tab; End, the next key, scrolls it to its last rows."""
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        board = await _two_tall_reports(app, pilot, tmp_path)
        await pilot.press("b")
        await settle(app, pilot)
        assert app.focused is board
        await pilot.press("d")
        await settle(app, pilot)
        pane = app.screen.query_one("#diffpane", DiffPane)
        await until(pilot, lambda: pane.shown, "the difference")
        await settle(app, pilot)
        assert app.focused is pane, app.focused
        assert pane.max_scroll_y > 0 and pane.scroll_y == 0
        await pilot.press("end")
        await settle(app, pilot)
        assert pane.scroll_y == pane.max_scroll_y, (pane.scroll_y, pane.max_scroll_y)


@sync
async def test_d_with_three_unmarked_reports_shows_the_ranking_to_mark_them_on(tmp_path: Path) -> None:
    """Three reports, none marked: d cannot choose two, so it shows the ranking (where space marks them)
    with its focus, and says so; it left the ranking for an empty Diff tab."""
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        for name, level, seed in (("q8", 0.01, 2), ("q6", 0.02, 4), ("q4", 0.03, 3)):
            await open_with_o(app, pilot, write_report(tmp_path / f"{name}.json",
                                                       make_report(name, level, seed=seed)))
        board = app.screen.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: board.row_count == 3, "the three reports ranked")
        await pilot.press("l")
        await settle(app, pilot)
        await pilot.press("d")
        await settle(app, pilot)
        assert app.screen.query_one("#tabs", TabbedContent).active == "leaderboard"
        assert app.focused is board, app.focused
        assert any("mark two reports with space" in str(n.message) for n in app._notifications)
        await pilot.press("space", "down", "space", "d")  # then d shows the two marked
        pane = app.screen.query_one("#diffpane", DiffPane)
        await until(pilot, lambda: pane.shown, "the difference of the two marked")
        assert app.screen.query_one("#tabs", TabbedContent).active == "diff"


@sync
async def test_d_from_the_window_grid_gives_the_difference_the_focus(tmp_path: Path) -> None:
    """The grid has the focus when the dashboard opens; d shows the difference of the only two reports
    and End, the next key, scrolls it (it scrolled the grid, which has nothing to scroll)."""
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await _two_tall_reports(app, pilot, tmp_path)
        app.screen.query_one("#left").focus()
        await settle(app, pilot)
        await pilot.press("d")
        pane = app.screen.query_one("#diffpane", DiffPane)
        await until(pilot, lambda: pane.shown, "the difference")
        await settle(app, pilot)
        assert app.focused is pane, app.focused
        await pilot.press("end")
        await settle(app, pilot)
        assert pane.max_scroll_y > 0 and pane.scroll_y == pane.max_scroll_y, pane.scroll_y
