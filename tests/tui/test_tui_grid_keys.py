"""The window grid's pane at 80x24 from the keyboard. A user pressed Tab, then End, and the grid did
not scroll: the grid's pane already has the focus when the dashboard opens (End, Home, PgDn and the
arrows scroll it then), and Tab moves the focus on to the tab bar, where End does nothing. Nothing
showed which pane had the focus, and the help named neither Tab nor the scroll keys. The pane's edge
is lit while it has the focus now, and the help says where Tab goes and what scrolls."""

from __future__ import annotations

from pathlib import Path

from textual.containers import VerticalScroll

from kldtui.tui.app import KldApp, create_app
from kldtui.tui.screens.dashboard import KEYS_HELP
from tests.fixtures_tui import drawn_lines, settle, sync

DOMAINS = ("prose", "code", "instruction")


def _app(tmp_path: Path) -> KldApp:
    return create_app(pipeline_factory=lambda emit, cancel: None,  # type: ignore[arg-type,return-value]
                      config_dir=tmp_path / "cfg", remember_theme=False, theme="kldtui-dark",
                      windows=[(i, DOMAINS[i % 3]) for i in range(1024)])


@sync
async def test_tab_goes_grid_tab_bar_log_and_the_scroll_keys_scroll_the_focused_grid(tmp_path: Path) -> None:
    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        left = app.query_one("#left", VerticalScroll)
        assert left.max_scroll_y > 0 and left.scroll_y == 0
        lit = left.styles.border_right[1]
        assert app.focused is left  # the grid's pane has the focus at first
        order = []
        for _ in range(3):
            await pilot.press("tab")
            await settle(app, pilot)
            order.append(type(app.focused).__name__)
        assert order == ["ContentTabs", "RichLog", "VerticalScroll"], order  # the grid's again
        # End where the tab bar has the focus (the user's Tab, then End) leaves the grid where it is
        await pilot.press("tab")
        await settle(app, pilot)
        assert type(app.focused).__name__ == "ContentTabs"
        unlit = left.styles.border_right[1]
        assert unlit != lit  # the grid's edge is lit only while it has the focus
        await pilot.press("end")
        await settle(app, pilot)
        assert left.scroll_y == 0
        # back to the grid (shift+Tab), whose edge is lit again: End, Home and PgDn scroll it
        await pilot.press("shift+tab")
        await settle(app, pilot)
        assert app.focused is left and left.styles.border_right[1] == lit
        await pilot.press("end")
        await settle(app, pilot)
        assert left.scroll_y == left.max_scroll_y
        await pilot.press("home")
        await settle(app, pilot)
        assert left.scroll_y == 0
        await pilot.press("pagedown")
        await settle(app, pilot)
        assert 0 < left.scroll_y < left.max_scroll_y
        # the dashboard's own keys still reach it with the grid focused
        await pilot.press("e")
        await settle(app, pilot)
        assert app.query_one("#tabs").active == "result"  # type: ignore[attr-defined]


@sync
async def test_the_help_names_tab_and_the_scroll_keys(tmp_path: Path) -> None:
    words = ("move the focus: the grid (it has it first; its edge is lit), the tab bar, the open tab; "
             "↑ ↓ PgUp PgDn Home End scroll the grid, or the log, result or diff, that has it")
    assert dict(KEYS_HELP[0].rows)["Tab"] == words
    app = _app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("question_mark")
        await settle(app, pilot)
        shown = " ".join(" ".join(drawn_lines(app, "KeyHelp")).split())
        assert f"Tab {words}" in shown, shown
