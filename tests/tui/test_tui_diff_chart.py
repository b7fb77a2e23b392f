"""The difference chart (key d): its bars take the width the differences need, on one scale.

Every difference positive (or every one negative) kept half the bar area empty for the other sign:
at 200 columns most of the chart was a gap. Each test reads the chart as text, as the user sees it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult

from kldtui.text import signed_table_figure
from kldtui.tui.app import create_app
from kldtui.tui.resultdata import Band, WindowBar
from kldtui.tui.widgets import KLChart
from kldtui.tui.widgets.kl_chart import signed_layout
from tests.fixtures_decide import make_report, suite_domains, write_report
from tests.fixtures_tui import settle, sync

EIGHTHS = {"█": 1.0, "▉": 7 / 8, "▊": 6 / 8, "▋": 5 / 8, "▌": 4 / 8, "▍": 3 / 8, "▎": 2 / 8, "▏": 1 / 8}
# the same cells filled from the right edge, as a block in reverse video shows them (Unicode's right
# eighths, which terminal fonts mostly lack: the chart draws them reversed, _seen reads them back)
RIGHT_EIGHTHS = {"█": 1.0, "\U0001fb8b": 7 / 8, "\U0001fb8a": 6 / 8, "\U0001fb89": 5 / 8, "▐": 4 / 8,
                 "\U0001fb88": 3 / 8, "\U0001fb87": 2 / 8, "▕": 1 / 8}


def _seen(text: Text) -> str:
    """``text`` as the user sees it: a cell in reverse video as the right-filled block it shows."""
    cells = list(text.plain)
    right = {v: k for k, v in RIGHT_EIGHTHS.items()}
    for span in text.spans:
        if isinstance(span.style, Style) and span.style.reverse:
            for i in range(span.start, span.end):
                cells[i] = right[1 - EIGHTHS[cells[i]]]
    return "".join(cells)


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield KLChart(empty="no difference shown yet")


async def _chart(width: int, values: list[float], band: Band | None = None,
                 domain: str = "prose") -> str:
    """The difference chart of ``values`` as text, ``width`` cells wide."""
    app = _One()
    async with app.run_test(size=(width, len(values) + 6)) as pilot:
        chart = app.query_one(KLChart)
        chart.set_data([WindowBar(i, domain, v) for i, v in enumerate(values)], band, signed=True)
        await pilot.pause()
        assert chart.size.width == width
        return _seen(chart.render())


def _rows(text: str, values: list[float], domain: str = "prose") -> tuple[str, list[str]]:
    """The heading, and each row's bar area (the cells between its label and its number)."""
    head, *rows = text.splitlines()
    areas = []
    for row, v in zip(rows, values, strict=True):
        match = re.fullmatch(rf"\d{{3}} {re.escape(domain)} +?(.*) {re.escape(signed_table_figure(v))}", row)
        assert match, row
        areas.append(match.group(1))
    assert len({len(a) for a in areas}) == 1, areas  # one bar area, as wide on every row
    return head, areas


def _zero(area: str) -> int:
    assert area.count("│") == 1, area
    return area.index("│")


def _right(area: str, zero: int) -> float:
    """The bar's length right of the zero line, in cells (eighths counted)."""
    cells = area[zero + 1:].rstrip()
    assert all(c in EIGHTHS for c in cells), area
    return sum(EIGHTHS[c] for c in cells)


def _left(area: str, zero: int) -> float:
    """The bar's length left of the zero line, in cells (eighths counted)."""
    cells = area[:zero].lstrip()
    assert all(c in RIGHT_EIGHTHS for c in cells[:1]) and set(cells[1:]) <= {"█"}, area  # a part at its end
    return sum(RIGHT_EIGHTHS[c] for c in cells)


def _full_bar(head: str) -> list[float]:
    words = head.split("full bar ")[1]
    return [float(w) for w in words.split(" / ")]


@sync
async def test_all_positive_differences_use_the_whole_width_from_a_zero_line_at_the_left() -> None:
    values = [0.001, 0.002, 0.004, 0.003, 0.0005]
    head, areas = _rows(await _chart(200, values), values)
    area = len(areas[0])
    assert area > 150  # the labels and numbers take the rest of 200 columns
    assert all(_zero(a) == 0 for a in areas)  # no column left of zero: nothing is there to draw
    lengths = [_right(a, 0) for a in areas]
    assert lengths[2] >= area - 2  # the largest difference fills the bar area
    for v, length in zip(values, lengths, strict=True):  # one scale: length proportional to value
        assert abs(length - v / 0.004 * lengths[2]) <= 0.5, (v, length)
    assert "±" not in head
    (end,) = _full_bar(head)  # a bar that fills the area: the largest difference, said as positive
    assert end > 0 and math.isclose(end, 0.004, rel_tol=0.02), head


@sync
async def test_all_negative_differences_grow_left_from_a_zero_line_at_the_right() -> None:
    values = [-0.001, -0.002, -0.004, -0.003]
    head, areas = _rows(await _chart(200, values), values)
    area = len(areas[0])
    assert all(_zero(a) == area - 1 for a in areas)  # nothing right of zero
    lengths = [_left(a, area - 1) for a in areas]
    assert lengths[2] == area - 1  # the largest difference reaches the area's left end
    for v, length in zip(values, lengths, strict=True):  # in eighths, as the positive side
        assert abs(length - v / -0.004 * (area - 1)) <= 1 / 16, (v, length)
    (end,) = _full_bar(head)
    assert end < 0 and math.isclose(end, -0.004, rel_tol=0.02), head


@sync
async def test_mixed_signs_put_the_zero_line_where_the_largest_of_each_side_puts_it() -> None:
    values = [-0.001, 0.003, 0.0015, -0.0005]
    head, areas = _rows(await _chart(200, values), values)
    area = len(areas[0])
    zero = _zero(areas[0])
    assert all(_zero(a) == zero for a in areas)
    assert abs(zero - (area - 1) / 4) <= 1, (zero, area)  # 0.001 of 0.004: a quarter, not the middle
    neg, pos = _left(areas[0], zero), _right(areas[1], zero)
    assert neg >= zero - 1 and pos >= area - 1 - zero - 1  # both sides used to their ends
    assert abs(pos / neg - 3) < 0.3  # one scale for both signs
    assert abs(_right(areas[2], zero) - pos / 2) <= 0.5 and abs(_left(areas[3], zero) - neg / 2) <= 0.5
    low, high = _full_bar(head)  # each side's full bar, as drawn
    assert math.isclose(low, -zero / (area - 1 - zero) * high, rel_tol=1e-2), head
    assert low <= -0.001 and high >= 0.003 and math.isclose(min(-low / 0.001, high / 0.003), 1, rel_tol=0.02)


@sync
async def test_the_mean_and_its_interval_are_on_the_bars_scale_and_the_zero_line_stays_in_sight() -> None:
    values = [0.002, 0.004, 0.001, 0.003]
    band = Band(0.0025, -0.001, 0.006, windows=32)  # the interval crosses zero though no bar does
    head, areas = _rows(await _chart(120, values, band), values)
    area = len(areas[0])
    assert "┃ mean ┊ 95 % interval over 32 windows" in head  # what the interval counts
    for a in areas:
        zero = _zero(a)  # the interval across zero does not hide the zero line
        unit = (area - 1) / 0.007  # the interval's ends set the scale: -0.001 to +0.006
        assert abs(zero - 0.001 * unit) <= 1
        assert abs(a.index("┃") - (zero + 0.0025 * unit)) <= 1
        assert abs(a.index("┊") - (zero - 0.001 * unit)) <= 1 and a.rindex("┊") >= area - 2


@sync
async def test_negative_bars_are_drawn_in_eighths_of_a_cell_as_positive_ones() -> None:
    """A negative difference was drawn in whole cells, a positive one in eighths: a negative difference
    worth an eighth of a cell drew nothing (its positive twin a sliver), and equal differences of each
    sign drew bars of unequal length. Both are eighths now, the left one's partial cell reversed."""
    cell = 1.0 / signed_layout([1.0, -1.0], 160 - len("000 prose ") - 11)[1]  # what one cell is worth
    values = [1.0, -1.0, 0.3, -0.3, cell / 8, -cell / 8, 0.61 * cell, -0.61 * cell]
    head, areas = _rows(await _chart(160, values), values)
    zero = _zero(areas[0])
    assert all(_zero(a) == zero for a in areas)
    lengths = [_right(a, zero) if v > 0 else _left(a, zero) for a, v in zip(areas, values, strict=True)]
    assert lengths[5] == 1 / 8 and lengths[4] == 1 / 8, areas[4:6]  # an eighth's worth draws an eighth
    assert lengths[7] == lengths[6] == 5 / 8, areas[6:]
    for k in range(0, len(values), 2):  # equal magnitudes, equal bars
        assert lengths[k] == lengths[k + 1] > 0, (values[k], areas[k], areas[k + 1])


def test_signed_layout_edges() -> None:
    assert signed_layout([0.0, 0.0], 50) == (0, 49.0)  # nothing drawn: a full bar is 1
    zero, unit = signed_layout([1.0, -1e-6], 50)  # a side with a value keeps a cell for it
    assert zero == 1 and unit * 1.0 <= 48
    zero, unit = signed_layout([2.0, -1.0, math.nan, math.inf], 31)  # non-finite ones left out
    assert (zero, unit) == (10, 10.0)


@sync
async def test_viewer_difference_of_a_worse_candidate_fills_the_pane_at_200_columns(tmp_path: Path) -> None:
    domains = suite_domains(32)
    base = np.random.default_rng(4).gamma(4.0, 0.0025, 32)
    a = write_report(tmp_path / "a.json", make_report(base, domains, candidate_dir="/runs/a"))
    worse = base + np.linspace(0.001, 0.004, 32)  # B is worse on every window
    b = write_report(tmp_path / "b.json", make_report(worse, domains, candidate_dir="/runs/b"))
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        await pilot.press("d")
        await settle(app, pilot)
        chart = app.query_one("#diff-chart", KLChart)
        assert chart.signed and all(bar.kl > 0 for bar in chart.bars)
        text = chart.render().plain
        width, label = chart.size.width, chart.label_width(chart.size.width)
    rows = text.splitlines()[1:]
    start = 4 + label + 1  # "NNN domain ": the bar area begins right after the label
    assert all(row[start] == "│" for row in rows), rows  # the zero line first: no empty half before it
    area = width - start - 11  # " +0.0123" after the bars
    longest = max(rows, key=lambda r: r.count("█"))
    assert max(longest.rindex(c) for c in EIGHTHS if c in longest) >= start + area - 2, longest


async def _drawn(width: int, bars: list[WindowBar], signed: bool) -> str:
    app = _One()
    async with app.run_test(size=(width, len(bars) + 6)) as pilot:
        chart = app.query_one(KLChart)
        chart.set_data(bars, None, signed=signed)
        await pilot.pause()
        return chart.render().plain


@sync
async def test_past_index_999_every_bar_starts_in_the_same_column() -> None:
    """A hidden-state suite's "KL per context" (and its difference chart) reaches context 1000 and on:
    every row's index is as wide as the largest shown (the grid's rule), so no bar shifts right."""
    indices = [0, 7, 998, 999, 1000, 1023]
    for signed in (False, True):
        bars = [WindowBar(i, "prose", 0.01 * (k + 1) * (-1 if signed and k % 2 else 1))
                for k, i in enumerate(indices)]
        for width in (80, 200):
            rows = (await _drawn(width, bars, signed)).splitlines()[1:]
            labels = [r.split(" ", 1)[0] for r in rows]
            assert labels == ["0000", "0007", "0998", "0999", "1000", "1023"], rows
            start = len("0000 prose ")  # the bar area begins right after the label, on every row
            assert all(r[:start].endswith(" prose ") for r in rows), rows
            if signed:  # the zero line in one column
                assert {r.index("│") for r in rows} == {rows[0].index("│")}, rows
            else:  # each bar from the area's first cell
                assert all(r[start] in EIGHTHS for r in rows), rows
            assert all(len(r) <= width for r in rows), rows
    # up to 999 the labels keep their three digits, as before
    rows = (await _drawn(80, [WindowBar(i, "prose", 0.01) for i in (0, 999)], False)).splitlines()[1:]
    assert [r.split(" ", 1)[0] for r in rows] == ["000", "999"]
