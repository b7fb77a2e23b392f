"""Per-window KL (or KL difference) as horizontal bars."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from kldtui.formats.suite import WINDOW_UNIT
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


def bar_cells(length: float) -> str:
    """A horizontal bar ``length`` cells long, in eighths of a cell."""
    eighths = " ▏▎▍▌▋▊▉█"
    full = int(length)
    rest = int(round((length - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    return "█" * full + (eighths[rest] if rest else "")


class KLChart(Widget):
    """Per-window mean KL as horizontal bars, with the overall mean (``│``) and its 95 % interval
    (``┊``) marked; a row's label is its index and as much of its domain's name as the width allows
    (:meth:`label_width`), its index as wide as the largest shown (the window grid's ``label_digits``:
    ``0999`` beside ``1000``), so every bar starts in the same column. Signed (a difference B − A):
    bars grow both ways from the zero line (``│``), which sits where :func:`signed_layout` puts it
    (the first column when every difference is positive, the last when every one is negative), and
    the mean difference is ``┃``; the heading says what a bar that fills its side is worth. An
    interval that rests on too few windows is not drawn. Its heading counts the band's unit
    (``KL per context`` of a hidden-state suite's report), else :attr:`unit`, which an empty chart's
    own words count too (``no contexts compared yet``)."""

    COMPONENT_CLASSES = {"chart--bar", "chart--band", "chart--mean", "chart--label", "chart--neg"}

    def __init__(self, empty: str | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.empty_words = empty  # what an empty chart says (None: that no unit was compared yet)
        self.unit = WINDOW_UNIT  # what its rows are called without a band (set_unit)
        self.bars: list[WindowBar] = []
        self.band: Band | None = None
        self.signed = False  # True for differences: bars grow both ways from zero

    @property
    def empty(self) -> str:
        """What the chart says while it has no bars: ``no windows compared yet`` (``contexts``)."""
        return self.empty_words if self.empty_words is not None else f"no {self.unit}s compared yet"

    def set_unit(self, unit: str) -> None:
        """Its rows are ``unit`` s (a hidden-state suite's contexts) where no band says so."""
        if unit != self.unit:
            self.unit = unit
            self.refresh()

    def set_data(self, bars: list[WindowBar], band: Band | None, signed: bool = False) -> None:
        self.bars, self.band, self.signed = bars, band, signed
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.bars) + 2 if self.bars else 1

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

    def render(self) -> Text:
        label_style = self.get_component_rich_style("chart--label")
        if not self.bars:
            return Text(self.empty, style=label_style)
        width = max(30, self.size.width or 60)
        label_w = self.label_width(width)
        digits = self.index_digits()
        area = max(8, width - (digits + label_w + 2) - 11)  # "NNN domain " before the bars, " +0.0123" after
        values = [b.kl for b in self.bars]
        if self.band is not None:
            values += [v for v in (self.band.estimate, *(self.band.interval or ())) if v is not None]
        scale = _scale(abs(v) for v in values)
        # signed: the zero line where the values' signs put it, one scale both ways
        zero, unit = signed_layout(values, area) if self.signed else (0, area / scale)

        def col(v: float) -> int:
            return int(min(area - 1, max(0.0, round(abs(v) * unit)))) if not self.signed else \
                max(0, min(area - 1, zero + int(round(v * unit))))

        marks: dict[int, tuple[str, str]] = {}
        interval = self.band.interval if self.band is not None else None
        mean_glyph = "┃" if self.signed else "│"
        if self.band is not None:
            if interval is not None:
                for c in range(col(interval[0]), col(interval[1]) + 1):
                    marks[c] = ("┊", "chart--band")
            marks[col(self.band.estimate)] = (mean_glyph, "chart--mean")
        if self.signed and marks.get(zero, ("", ""))[1] != "chart--mean":
            marks[zero] = ("│", "chart--label")  # an interval across zero still shows where zero is
        text = Text(no_wrap=True, overflow="crop")
        called = self.band.unit if self.band is not None else self.unit  # a hidden-state suite's: context
        head = f"KL per {called}" if not self.signed else f"B − A per {called}"
        text.append(head, label_style)
        if self.signed:
            text.append("  │ 0", label_style)
        if self.band is not None:
            text.append(f"  {mean_glyph} mean", label_style)
        if interval is not None:
            text.append("  ┊ 95% CI", label_style)
        if self.signed:  # what a bar that fills its side of the zero line is worth, each side drawn
            ends = ([f"{-zero / unit:+.3g}"] if zero > 0 else []) + \
                ([f"{(area - 1 - zero) / unit:+.3g}"] if zero < area - 1 else [])
            text.append(f"  full bar {' / '.join(ends)}", label_style)
        else:
            text.append(f"  full bar {scale:.3g}", label_style)
        for bar in self.bars:
            text.append("\n")
            text.append(f"{bar.index:0{digits}d} {clip(bar.domain, label_w):<{label_w}} ", label_style)
            if self.signed:
                cells = list(" " * area)
                styles = [""] * area
                length = abs(bar.kl) * unit if math.isfinite(bar.kl) else 0.0  # no bar for nan or inf
                if bar.kl >= 0:
                    body = bar_cells(min(length, area - 1 - zero))
                    for i, ch in enumerate(body):
                        cells[zero + 1 + i], styles[zero + 1 + i] = ch, "chart--bar"
                else:
                    for i in range(min(zero, int(round(length)))):
                        cells[zero - 1 - i], styles[zero - 1 - i] = "█", "chart--neg"
            else:
                body = bar_cells(min(area, bar.kl * unit))
                cells = list(body.ljust(area))[:area]
                styles = ["chart--bar" if i < len(body) else "" for i in range(area)]
            for c, (ch, cls) in marks.items():
                if 0 <= c < area and (cells[c] == " " or cls == "chart--mean"):
                    cells[c], styles[c] = ch, cls
            for ch, cls in zip(cells, styles, strict=True):
                text.append(ch, self.get_component_rich_style(cls) if cls else "")
            text.append(f" {bar.kl:+.4g}" if self.signed else f" {bar.kl:.4g}")
        return text
