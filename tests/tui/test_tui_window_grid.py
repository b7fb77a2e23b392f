"""The window grid's columns line up at any count: every tile is as wide as the grid's largest number
(three digits up to 999, four for a hidden-state suite's 1,024 contexts, ...), so the numbers past
999 no longer push their rows out of line. A grid of up to 1,000 windows is drawn as before."""

from __future__ import annotations

import re
from pathlib import Path

from kldtui.events import WindowState
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.widgets import WindowGrid
from kldtui.tui.widgets.window_grid import label_digits
from tests.fixtures_tui import drawn_lines, screen_lines, settle, sync

DOMAINS = ("prose", "code", "instruction")


def _app(tmp_path: Path, indices: range, unit: str = "window") -> KldApp:
    app = create_app(pipeline_factory=lambda emit, cancel: None, config_dir=tmp_path / "cfg",  # type: ignore[arg-type,return-value]
                     remember_theme=False, theme="kldtui-dark",
                     windows=[(i, DOMAINS[i % 3]) for i in indices])
    app.main.model.set_unit(unit)  # a hidden-state suite's: context
    return app


def _tiles(lines: list[str]) -> list[list[tuple[int, str]]]:
    """Each tile row's tiles: (column, number as drawn); the legend's lines are left out."""
    rows = [[(m.start(), m.group()) for m in re.finditer(r"\d+", line)] for line in lines
            if re.match(r"\d", line)]
    return [row for row in rows if row]


def _assert_lined_up(lines: list[str], indices: range, width: int) -> None:
    digits = len(str(indices[-1])) if indices[-1] >= 1000 else 3
    tile = digits + 1  # the number and its mark
    per_row = width // tile
    rows = _tiles(lines)
    assert [int(n) for row in rows for _, n in row] == list(indices), lines
    for r, row in enumerate(rows):
        assert [c for c, _ in row] == [k * tile for k in range(len(row))], (r, lines[r])
        assert all(len(n) == digits for _, n in row), (r, lines[r])
        assert len(row) == (per_row if r < len(rows) - 1 else len(indices) - per_row * (len(rows) - 1))


def test_the_tiles_number_width_follows_the_largest_index() -> None:
    assert [label_digits(n) for n in (0, 7, 31, 999, 1000, 1023, 9999, 10000, 123456)] == \
        [3, 3, 3, 3, 4, 4, 4, 5, 6]


@sync
async def test_a_grid_of_1024_contexts_lines_up_its_columns(tmp_path: Path) -> None:
    for size in ((80, 24), (200, 50)):
        app = _app(tmp_path, range(1024), unit="context")
        model = app.main.model
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            # a few states and KL bands, so the tiles carry every kind of mark
            for i, kl in ((3, 0.001), (998, 0.01), (999, 0.05), (1000, 0.5), (1023, 0.001)):
                model.apply(WindowState("compare", i, "compared", DOMAINS[i % 3], figures={"kl": kl}))
            model.apply(WindowState("capture", 1001, "capturing", DOMAINS[1001 % 3]))
            model.apply(WindowState("capture", 1002, "failed", DOMAINS[1002 % 3]))
            await settle(app, pilot)
            grid = app.query_one(WindowGrid)
            lines = drawn_lines(app, "#grid")
            _assert_lined_up(lines, range(1024), grid.size.width)
            assert "0999▅" in lines[_row_of(lines, "0999")] and "1000█" in lines[_row_of(lines, "1000")]
            assert "1001›" in lines[_row_of(lines, "1001")] and "1002!" in lines[_row_of(lines, "1002")]
            per_row = {(80, 24): 4, (200, 50): 11}[size]  # the left pane's width, less its scrollbar
            assert len(_tiles(lines)[0]) == per_row, (size, lines[0])
            # the grid is taller than its pane: the pane scrolls, and its end shows the last row and
            # the legend in full
            left = app.query_one("#left")
            assert left.max_scroll_y > 0
            left.scroll_end(animate=False)
            await settle(app, pilot)
            shown = screen_lines(app)
            last = [line for line in lines if re.match(r"\d", line)][-1]
            assert last.endswith("1023▁"), last
            assert any(last in line for line in shown), shown
            assert lines[-1].endswith("▁<.005 ▃<.02 ▅<.1 █≥.1"), lines[-1]  # the legend, not cut short
            assert any(line.rstrip("▕ ").endswith("█≥.1") for line in shown), shown


def _row_of(lines: list[str], number: str) -> int:
    return next(r for r, line in enumerate(lines) if re.search(rf"(^|\D){number}\D", line))


@sync
async def test_contexts_from_1000_on_line_up_and_32_windows_are_drawn_as_before(tmp_path: Path) -> None:
    app = _app(tmp_path, range(1000, 1040), unit="context")  # a run of [run] start_window = 1000
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        grid = app.query_one(WindowGrid)
        _assert_lined_up(drawn_lines(app, "#grid"), range(1000, 1040), grid.size.width)
    app = _app(tmp_path, range(32))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        grid = app.query_one(WindowGrid)
        lines = drawn_lines(app, "#grid")
        _assert_lined_up(lines, range(32), grid.size.width)
        per_row = grid.size.width // 4
        assert lines[0] == " ".join(f"{i:03d}" for i in range(per_row)), lines
    app = _app(tmp_path, range(1000))  # 999 is the largest: still three digits
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        grid = app.query_one(WindowGrid)
        _assert_lined_up(drawn_lines(app, "#grid"), range(1000), grid.size.width)
