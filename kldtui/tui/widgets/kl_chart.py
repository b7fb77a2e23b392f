"""Per-window KL (or KL difference) as horizontal bars."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import plural, signed_table_figure, table_figure
from kldtui.tui.resultdata import Band, WindowBar
from kldtui.tui.widgets.format import clip
from kldtui.tui.widgets.window_grid import label_digits


def _scale(values: Iterable[float]) -> float:
    top = max([v for v in values if v is not None and math.isfinite(v)] or [0.0])
    return top if top > 0 else 1.0


def signed_layout(values: Iterable[float], area: int) -> tuple[int, float]:
    """Where a signed chart's zero line sits in its ``area`` cells and how many cells one unit of value
    spans, one scale for both signs: the cells beside the zero line are split as the largest negative
    and the largest positive of ``values`` need (non-finite ones left out). All positive: the zero
    line is the first column and the bars have all the rest; all negative: it is the last column; a
    side with any value keeps at least one cell. (Half the area was kept for negative differences
    that were not there: at 200 columns most of the chart was an empty gap.)"""
    finite = [v for v in values if math.isfinite(v)]
    neg = max([-v for v in finite if v < 0], default=0.0)
    pos = max([v for v in finite if v > 0], default=0.0)
    cells = area - 1  # beside the zero line
    if not neg and not pos:
        return 0, float(cells)  # nothing to draw: a full bar is 1

    def unit(zero: int) -> float:
        return min(zero / neg if neg else math.inf, (cells - zero) / pos if pos else math.inf)

    ideal = cells / (1 + pos / neg) if neg else 0.0  # neg's share of the cells (no sum to overflow)
    low, high = (1 if neg else 0), (cells - 1 if pos else cells)
    choices = {min(high, max(low, z)) for z in (math.floor(ideal), math.ceil(ideal))}
    zero = max(sorted(choices), key=unit)  # the one that leaves the longer scale
    return zero, unit(zero)


EIGHTHS = " ▏▎▍▌▋▊▉█"  # a cell filled from its left edge, in eighths


def eighths(length: float) -> tuple[int, int]:
    """``length`` cells as whole cells and the eighths of one more (0 to 7), rounded to the nearest
    eighth: the one resolution of bars both ways."""
    full = int(length)
    rest = int(round((length - full) * 8))
    return (full + 1, 0) if rest == 8 else (full, rest)


def bar_cells(length: float) -> str:
    """A horizontal bar ``length`` cells long growing right, in eighths of a cell."""
    full, rest = eighths(length)
    return "█" * full + (EIGHTHS[rest] if rest else "")


def leftward_cells(length: float) -> list[tuple[str, bool]]:
    """A bar ``length`` cells long growing left, in eighths of a cell as :func:`bar_cells`, from its far
    end to the zero line: each cell's glyph and whether it is drawn in reverse video. Unicode has no
    blocks filled from the right edge but the half and the eighth, so a partial cell is the block of
    the eighths it leaves empty, reversed: its right part in the bar's colour."""
    full, rest = eighths(length)
    return ([(EIGHTHS[8 - rest], True)] if rest else []) + [("█", False)] * full


@dataclass(frozen=True)
class ChartLayout:
    """Where a chart ``width`` cells wide draws: a row's label (``digits`` of its index, ``label_w``
    cells of its domain), its ``area`` cells of bars, the zero line's column (0 unsigned), how many
    cells one unit of value spans, and the largest value (an unsigned chart's full bar)."""

    digits: int
    label_w: int
    area: int
    zero: int
    cells_per_unit: float
    scale: float


class KLChart(Widget):
    """Per-window mean KL as horizontal bars, with the overall mean (``│``) and its 95 % interval
    (``┊``) marked; a row's label is its index and as much of its domain's name as the width allows
    (:meth:`label_width`), its index as wide as the largest shown (the window grid's ``label_digits``:
    ``0999`` beside ``1000``), so every bar starts in the same column. Signed (a difference B − A):
    bars grow both ways from the zero line (``│``), in eighths of a cell both ways
    (:func:`leftward_cells`), from where :func:`signed_layout` puts it (the first column when every
    difference is positive, the last when every one is negative), and the mean difference is ``┃``;
    the heading says what a bar that fills its side is worth. The legend says what the mean and its
    interval are over (the band's units: a clustered verdict's source clusters, not the rows) and
    wraps where the width is short of it. An interval that rests on too few windows is not drawn. Its
    rows are :attr:`unit` s (``KL per context`` of a hidden-state suite's report), which an empty
    chart's own words count too (``no contexts compared yet``)."""

    COMPONENT_CLASSES = {"chart--bar", "chart--band", "chart--mean", "chart--label", "chart--neg"}

    def __init__(self, empty: str | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.empty_words = empty  # what an empty chart says (None: that no unit was compared yet)
        self.unit = WINDOW_UNIT  # what its rows are called (set_unit)
        self.bars: list[WindowBar] = []
        self.band: Band | None = None
        self.signed = False  # True for differences: bars grow both ways from zero

    @property
    def empty(self) -> str:
        """What the chart says while it has no bars: ``no windows compared yet`` (``contexts``)."""
        return self.empty_words if self.empty_words is not None else f"no {self.unit}s compared yet"

    def set_unit(self, unit: str) -> None:
        """Its rows are ``unit`` s (a hidden-state suite's contexts)."""
        if unit != self.unit:
            self.unit = unit
            self.refresh(layout=True)

    def set_data(self, bars: list[WindowBar], band: Band | None, signed: bool = False) -> None:
        self.bars, self.band, self.signed = bars, band, signed
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.bars) + len(self.legend_lines(width)) + 1 if self.bars else 1

    LABEL_MIN = 5  # the domain's cells in a row's label however narrow the chart

    def index_digits(self) -> int:
        """The digits of every row's index: as many as the largest index shown needs, at least three
        (the window grid's rule), so a chart that reaches context 1000 keeps its bars in one column."""
        return label_digits(max((b.index for b in self.bars), default=0))

    def label_width(self, width: int) -> int:
        """The cells of a row's domain name in a chart ``width`` cells wide: the longest name, at most a
        quarter of what the labels and bars share (the bars keep the rest), at least LABEL_MIN. Every
        name was cut to 5 ("004 code_") beside an empty half of the chart at 200 columns."""
        longest = max((len(b.domain) for b in self.bars), default=0)
        return max(self.LABEL_MIN, min(longest, (width - self.index_digits() - 2 - 11) // 4))

    def chart_layout(self, width: int) -> ChartLayout:
        """Where the chart draws at ``width`` cells (at least 30)."""
        width = max(30, width)
        label_w = self.label_width(width)
        digits = self.index_digits()
        area = max(8, width - (digits + label_w + 2) - 11)  # "NNN domain " before the bars, " +0.0123" after
        values = [b.kl for b in self.bars]
        if self.band is not None:
            values += [v for v in (self.band.estimate, *(self.band.interval or ())) if v is not None]
        scale = _scale(abs(v) for v in values)
        # signed: the zero line where the values' signs put it, one scale both ways
        zero, unit = signed_layout(values, area) if self.signed else (0, area / scale)
        return ChartLayout(digits, label_w, area, zero, unit, scale)

    def band_legend(self) -> str | None:
        """What the mean mark and the interval are, over the band's units: ``┃ mean ┊ 95 % interval over
        17 source clusters`` (the clustered verdict's, not the rows'), or the mean alone and why."""
        band = self.band
        if band is None:
            return None
        mean = f"{'┃' if self.signed else '│'} mean"
        over = f" over {plural(band.windows, band.unit)}" if band.windows is not None else ""
        if band.interval is not None:
            return f"{mean} ┊ 95 % interval{over}"
        if band.too_few:
            return f"{mean}{over}: too few for a 95 % interval"
        return f"{mean}{over}"

    def legend_lines(self, width: int) -> list[str]:
        """The heading: what a row is, the zero line, the band (:meth:`band_legend`), what a full bar is
        worth; one line where ``width`` holds it, else as many as it takes (never cut off)."""
        shape = self.chart_layout(width)
        items = [f"KL per {self.unit}" if not self.signed else f"B − A per {self.unit}"]
        if self.signed:
            items.append("│ 0")
        band = self.band_legend()
        if band is not None:
            items.append(band)
        if self.signed:  # what a bar that fills its side of the zero line is worth, each side drawn
            zero, unit, area = shape.zero, shape.cells_per_unit, shape.area
            ends = ([signed_table_figure(-zero / unit)] if zero > 0 else []) + \
                ([signed_table_figure((area - 1 - zero) / unit)] if zero < area - 1 else [])
            items.append(f"full bar {' / '.join(ends)}")
        else:
            items.append(f"full bar {table_figure(shape.scale)}")
        width = max(30, width)
        lines: list[str] = []
        for item in items:
            for part in textwrap.wrap(item, width) or [item]:
                if lines and len(lines[-1]) + 2 + len(part) <= width:
                    lines[-1] += "  " + part
                else:
                    lines.append(part)
        return lines

    def render(self) -> Text:
        label_style = self.get_component_rich_style("chart--label")
        if not self.bars:
            return Text(self.empty, style=label_style)
        width = self.size.width or 60
        shape = self.chart_layout(width)
        area, zero, unit, digits, label_w = shape.area, shape.zero, shape.cells_per_unit, shape.digits, \
            shape.label_w

        def col(v: float) -> int:
            return int(min(area - 1, max(0.0, round(abs(v) * unit)))) if not self.signed else \
                max(0, min(area - 1, zero + int(round(v * unit))))

        marks: dict[int, tuple[str, str]] = {}
        interval = self.band.interval if self.band is not None else None
        if self.band is not None:
            if interval is not None:
                for c in range(col(interval[0]), col(interval[1]) + 1):
                    marks[c] = ("┊", "chart--band")
            marks[col(self.band.estimate)] = ("┃" if self.signed else "│", "chart--mean")
        if self.signed and marks.get(zero, ("", ""))[1] != "chart--mean":
            marks[zero] = ("│", "chart--label")  # an interval across zero still shows where zero is
        text = Text(no_wrap=True, overflow="crop")
        text.append("\n".join(self.legend_lines(width)), label_style)
        reverse = Style(reverse=True)
        for bar in self.bars:
            text.append("\n")
            text.append(f"{bar.index:0{digits}d} {clip(bar.domain, label_w):<{label_w}} ", label_style)
            cells = list(" " * area)
            styles: list[str | None] = [None] * area
            reversed_cells: set[int] = set()
            if self.signed:
                length = abs(bar.kl) * unit if math.isfinite(bar.kl) else 0.0  # no bar for nan or inf
                if bar.kl >= 0:
                    for i, ch in enumerate(bar_cells(min(length, area - 1 - zero))):
                        cells[zero + 1 + i], styles[zero + 1 + i] = ch, "chart--bar"
                else:
                    left = leftward_cells(min(length, zero))
                    for i, (ch, rev) in enumerate(left, start=zero - len(left)):
                        cells[i], styles[i] = ch, "chart--neg"
                        if rev:
                            reversed_cells.add(i)
            else:
                for i, ch in enumerate(bar_cells(min(area, bar.kl * unit))[:area]):
                    cells[i], styles[i] = ch, "chart--bar"
            for c, (ch, cls) in marks.items():
                if 0 <= c < area and (cells[c] == " " or cls == "chart--mean"):
                    cells[c], styles[c] = ch, cls
                    reversed_cells.discard(c)
            for i, (ch, drawn) in enumerate(zip(cells, styles, strict=True)):
                style = self.get_component_rich_style(drawn) if drawn else Style()
                text.append(ch, style + reverse if i in reversed_cells else style)
            text.append(f" {signed_table_figure(bar.kl) if self.signed else table_figure(bar.kl)}")
        return text
