"""The window grid: one cell per window, its state and then its KL band."""

from __future__ import annotations

import math

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from kldtui.tui.model import DashboardModel
from kldtui.tui.widgets.format import KL_LEVELS, kl_level, trim_number

ACTIVE_WINDOW_STATES = {"capturing", "finalizing", "comparing"}
DONE_WINDOW_STATES = {"captured", "finalized"}


# One glyph per KL band beside each compared window's number, so the grid reads without colour
# (NO_COLOR, monochrome terminals); the legend shows the same glyphs.
KL_GLYPHS = ("▁", "▃", "▅", "█")


def cell_mark(state: str, kl: float | None) -> str:
    if state == "failed":
        return "!"
    if state in ACTIVE_WINDOW_STATES:
        return "›"
    if kl is not None:
        return KL_GLYPHS[kl_level(kl)]
    return " "


LEGEND_WIDTH = 25  # "KL ▁<.005 ▃<.02 ▅<.1 █≥.1"; narrower: "KL band" on a line of its own


def label_digits(largest: int) -> int:
    """The digits of every tile's number in a grid whose largest index is ``largest``: three up to
    999, four up to 9999 (a hidden-state suite's 1,024 contexts), and so on, so the columns line up."""
    return max(3, len(str(max(0, largest))))


class WindowGrid(Widget):
    """One cell per window: its state, then (once compared) its KL level. A tile is the window's
    number, as wide as the grid's largest (``label_digits``), and one mark."""

    COMPONENT_CLASSES = {"grid--pending", "grid--active", "grid--done", "grid--failed",
                         "grid--kl0", "grid--kl1", "grid--kl2", "grid--kl3"}

    def __init__(self, model: DashboardModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model

    def _cell_class(self, state: str, kl: float | None) -> str:
        if kl is not None:
            return f"grid--kl{kl_level(kl)}"
        if state == "failed":
            return "grid--failed"
        if state in ACTIVE_WINDOW_STATES:
            return "grid--active"
        if state in DONE_WINDOW_STATES or state == "compared":
            return "grid--done"
        return "grid--pending"

    def _digits(self) -> int:
        return label_digits(max(self.model.windows, default=0))

    def _columns(self, width: int) -> int:
        return max(1, width // (self._digits() + 1))  # + 1: the tile's mark

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        n = len(self.model.windows)
        legend = 1 if width >= LEGEND_WIDTH else 2
        return max(1, math.ceil(n / self._columns(width))) + legend if n else 1

    def render(self) -> Text:
        windows = list(self.model.windows.values())
        if not windows:
            return Text(f"no {self.model.unit}s yet", style=self.get_component_rich_style("grid--pending"))
        cols = self._columns(self.size.width or 40)
        digits = self._digits()
        text = Text(no_wrap=True)
        for i, win in enumerate(windows):
            if i and i % cols == 0:
                text.append("\n")
            style = self.get_component_rich_style(self._cell_class(win.state, win.kl))
            mark = cell_mark(win.state, win.kl)
            text.append(f"{win.index:0{digits}d}", style)
            text.append(mark)
        text.append("\n")
        text.append_text(self.legend(self.size.width or 40))
        return text

    def legend(self, width: int = 40) -> Text:
        legend = Text(no_wrap=True, overflow="ellipsis")
        legend.append("KL band\n" if width < LEGEND_WIDTH else "KL ")
        labels = [*(f"<{trim_number(level)}" for level in KL_LEVELS[:3]), f"≥{trim_number(KL_LEVELS[2])}"]
        for level, label in enumerate(labels):
            if level:  # no blank after the last: at 80x24 a scrolling grid is 22 cells, the labels' width
                legend.append(" ")
            legend.append(f"{KL_GLYPHS[level]}{label}", self.get_component_rich_style(f"grid--kl{level}"))
        return legend
