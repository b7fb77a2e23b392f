"""The leaderboard table: candidates sorted by mean KL with interval bars."""

from __future__ import annotations

from rich.text import Text
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from kldtui.tui.resultdata import Band, ResultData
from kldtui.tui.widgets.format import fmt_num
from kldtui.tui.widgets.plain import plain


def interval_bar(band: Band | None, lo_axis: float, hi_axis: float, width: int) -> str:
    """``├──●──┤`` on an axis shared by all rows, [lo_axis, hi_axis]."""
    if band is None:
        return " " * width
    cells = [" "] * width
    span = hi_axis - lo_axis

    def col(v: float) -> int:
        if not span > 0:
            return width // 2
        return max(0, min(width - 1, int(round((v - lo_axis) / span * (width - 1)))))

    if band.interval is not None:
        lo, hi = col(band.interval[0]), col(band.interval[1])
        for c in range(lo, hi + 1):
            cells[c] = "─"
        cells[lo], cells[hi] = "├", "┤"
    cells[col(band.estimate)] = "●"
    return "".join(cells)


def axis_of(bands: list[Band | None]) -> tuple[float, float]:
    """A shared axis for interval bars: from the lowest low to the highest high (the estimates, where
    an interval is not shown), padded a little."""
    values = [v for b in bands if b is not None for v in (b.estimate, *(b.interval or ())) if v is not None]
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


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
        for label, width in self.COLUMNS:
            self.add_column(label, width=width)

    def set_results(self, results: list[ResultData], ties: dict[int, str] | None = None) -> None:
        """``results`` already sorted; ``ties`` maps a row to its mark (e.g. "= best")."""
        self.results = results
        self.clear()
        lo_axis, hi_axis = axis_of([r.kl for r in results])
        for i, r in enumerate(results):
            mark = "*" if i in self.marked else " "
            band = r.kl
            self.add_row(
                f"{mark}{i + 1}", plain(r.name[:18]), fmt_num(band.estimate if band else None),
                interval_bar(band, lo_axis, hi_axis, self.BAR_WIDTH), (ties or {}).get(i, ""),
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
