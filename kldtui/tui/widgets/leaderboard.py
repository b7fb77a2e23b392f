"""The leaderboard table: candidates sorted by mean KL with interval bars."""

from __future__ import annotations

from rich.text import Text
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from kldtui.text import BarAxis, bar_axis, interval_bar
from kldtui.tui.resultdata import Band, ResultData
from kldtui.tui.widgets.format import fmt_num
from kldtui.tui.widgets.plain import plain


def bar_cell(band: Band | None, axis: BarAxis, width: int) -> str:
    """A row's ``├──●──┤`` on the axis shared by all rows (blank without a figure)."""
    if band is None:
        return " " * width
    low, high = band.interval if band.interval is not None else (None, None)
    return interval_bar(low, high, band.estimate, axis, width)


def axis_of(bands: list[Band | None]) -> BarAxis:
    """The rows' shared axis: their lows to their highs (the estimates, where an interval is not
    shown), padded a little; logarithmic where they span more than ten times."""
    return bar_axis([v for b in bands if b is not None for v in (b.estimate, *(b.interval or ()))
                     if v is not None], pad=0.05)


class LeaderboardTable(DataTable[str | Text]):
    """Candidates sorted by mean KL with interval bars; ``=`` marks a tie with the best."""

    BAR_WIDTH = 20

    class Open(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    class Highlighted(Message):
        """The cursor is on row ``index`` (the screen says what that row's tie mark means)."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.results: list[ResultData] = []
        self.marked: set[int] = set()

    # Fixed widths: the columns never jump as rows come and go, and the header is drawn once at its
    # final width (sized from the rows, it was drawn at the headers' widths first).
    COLUMNS = (("#", 3), ("candidate", 18), ("mean KL", 8), ("interval", BAR_WIDTH), ("tie", 10),
               ("95% interval", 20))

    def on_mount(self) -> None:
        self.add_columns_for(None)

    def add_columns_for(self, axis: BarAxis | None) -> None:
        """The columns, the bars' one saying when its axis is logarithmic."""
        for label, width in self.COLUMNS:
            log = label == "interval" and axis is not None and axis.log
            self.add_column(f"{label} (log)" if log else label, width=width)

    def set_results(self, results: list[ResultData], ties: dict[int, str] | None = None) -> None:
        """``results`` already sorted; ``ties`` maps a row to its mark (e.g. "= best")."""
        self.results = results
        axis = axis_of([r.kl for r in results])
        self.clear(columns=True)  # the same widths again: only the bars' label may change
        self.add_columns_for(axis)
        for i, r in enumerate(results):
            mark = "*" if i in self.marked else " "
            band = r.kl
            self.add_row(
                f"{mark}{i + 1}", plain(r.name[:18]), fmt_num(band.estimate if band else None),
                bar_cell(band, axis, self.BAR_WIDTH), (ties or {}).get(i, ""),
                band.interval_text() if band is not None else "-", key=str(i))

    def toggle_mark(self) -> None:
        row = self.cursor_row
        if not self.results:
            return
        self.marked ^= {row}
        if len(self.marked) > 2:
            self.marked = {row}
        self.update_cell_at(Coordinate(row, 0), f"{'*' if row in self.marked else ' '}{row + 1}")
        for other in range(len(self.results)):
            if other != row:
                mark = "*" if other in self.marked else " "
                self.update_cell_at(Coordinate(other, 0), f"{mark}{other + 1}")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Highlighted(event.cursor_row))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Open(event.cursor_row))
