"""The leaderboard table: candidates sorted by mean KL with interval bars."""

from __future__ import annotations

from rich.text import Text
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from kldtui.text import BarAxis, bar_axis, interval_bar, short_names, table_figure
from kldtui.tui.resultdata import Band, ResultData
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
    """Candidates sorted by mean KL with interval bars; ``=`` marks a tie with the best.

    What a row is read for comes first (rank, name, mean KL, tie mark, interval in figures), each
    column as wide as its cells, and the bar last, as wide as the room left (at most
    :attr:`BAR_WIDTH`): at 80 columns the viewer cut the interval's figures ("[0.00754,"), and the
    dashboard's narrower pane hid the tie marks whole. The candidate's name takes the room the
    terminal gives, whole where it fits beside the bar at its narrowest; where it does not, it keeps
    :attr:`NAME_MIN` cells and is cut in its middle, each row's told apart from the others'
    (:func:`kldtui.text.short_names`; at 200 columns a name was cut to 18 characters beside an empty
    half of the screen, and cut at its end two quants of one model read alike)."""

    # at 200 columns the bar had 20 cells beside 100 empty ones: two intervals a cell apart read as one
    BAR_WIDTH = 40
    BAR_MIN = 8
    NAME_MIN = 18  # a name cut for room keeps this much (the help, the result pane and the diff say it whole)

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
        self._ties: dict[int, str] = {}
        self._width_filled = 0  # the width the columns were sized for

    # Widths given, from the rows (never wider than these): the header is drawn at its final width
    # (sized by the table from the rows later, it was drawn at the headers' widths first).
    # (the candidate's is its width before the rows come: the rows' names size it, see widths)
    COLUMNS = (("#", 3), ("candidate", NAME_MIN), ("mean KL", 8), ("tie", 10), ("95% interval", 20),
               ("interval", BAR_WIDTH))

    @classmethod
    def column(cls, label: str) -> int:
        """Where the column named ``label`` in :attr:`COLUMNS` is."""
        return [name for name, _ in cls.COLUMNS].index(label)

    def on_mount(self) -> None:
        self.add_columns_for(None, self.widths([], None))

    def widths(self, rows: list[list[str]], axis: BarAxis | None) -> list[int]:
        """Each column's width: as wide as its longest cell (and header), at most as COLUMNS gives it;
        the candidate's as its longest name (``rows`` hold them whole) where the room allows with the bar
        at its narrowest, else the room left (at least NAME_MIN); the bar the room left in the table
        (between BAR_MIN, or its header where that is longer, and BAR_WIDTH). Where the name at its least
        leaves no room for the log axis's header whole (80 columns, "no verdict" marks), the bar takes
        its short header rather than push the row past the table's edge."""
        out = []
        name = self.column("candidate")
        for k, (label, width) in enumerate(self.COLUMNS):
            if label != "interval" and rows:
                longest = max(len(label), *(len(row[k]) for row in rows))
                width = longest if k == name else min(width, longest)
            out.append(width)
        room = self.size.width - 2  # the vertical scrollbar's gutter, once there are more rows than fit
        if room <= 0:
            out[name] = min(out[name], self.NAME_MIN)
            return out
        least = max(self.BAR_MIN, len(self.bar_header(axis)))  # "interval (log)" said whole
        others = sum(out[:-1]) - out[name] + 2 * self.cell_padding * len(out)
        out[name] = min(out[name], max(self.NAME_MIN, room - others - least))
        if room - others - out[name] < least:
            least = max(self.BAR_MIN, len(self.bar_header(axis, self.BAR_MIN)))
        out[-1] = max(least, min(self.BAR_WIDTH, room - others - out[name]))
        return out

    LOG_HEADERS = ("interval (log)", "log axis")  # the bars' header on a log axis; the short one

    @classmethod
    def bar_header(cls, axis: BarAxis | None, width: int | None = None) -> str:
        """The bars' column header: it says when their axis is logarithmic, in its short form where the
        column (``width``) is narrower than the long one."""
        if axis is None or not axis.log:
            return "interval"
        long, short = cls.LOG_HEADERS
        return long if width is None or width >= len(long) else short

    def add_columns_for(self, axis: BarAxis | None, widths: list[int]) -> None:
        """The columns, the bars' one saying when its axis is logarithmic."""
        for (label, _), width in zip(self.COLUMNS, widths, strict=True):
            self.add_column(self.bar_header(axis, width) if label == "interval" else label, width=width)

    def set_results(self, results: list[ResultData], ties: dict[int, str] | None = None) -> None:
        """``results`` already sorted; ``ties`` maps a row to its mark (e.g. "= best")."""
        self.results = results
        self._ties = dict(ties or {})
        axis = axis_of([r.kl for r in results])
        rows = [[f"{'*' if i in self.marked else ' '}{i + 1}", r.name,
                 table_figure(r.kl.estimate if r.kl else None), self._ties.get(i, ""),
                 r.kl.interval_text() if r.kl is not None else "-"] for i, r in enumerate(results)]
        widths = self.widths(rows, axis)
        name = self.column("candidate")
        for row, shown in zip(rows, short_names([row[name] for row in rows], widths[name]), strict=True):
            row[name] = shown
        self._width_filled = self.size.width
        self.clear(columns=True)
        self.add_columns_for(axis, widths)
        for i, (row, r) in enumerate(zip(rows, results, strict=True)):
            self.add_row(row[0], plain(row[1]), row[2], row[3], row[4], bar_cell(r.kl, axis, widths[-1]),
                         key=str(i))

    def on_resize(self) -> None:
        # the bar takes the room there is: laid out again for the new width, the cursor kept
        if self.results and self.size.width != self._width_filled:
            row = self.cursor_row
            self.set_results(self.results, self._ties)
            self.move_cursor(row=row)

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
