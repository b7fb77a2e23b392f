"""The campaign's live leaderboard: each candidate of a ``[[candidates]]`` profile with its mean KL
and interval, size, bits per weight and verdict against the current best, filling in as candidates
finish (from :class:`~kldtui.events.LeaderboardUpdated` events; the words are
:mod:`kldtui.workflow.standings`', the same the batch reporter prints)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from kldtui.events import CandidateStarted, LeaderboardUpdated
from kldtui.formats.untrusted_json import printable
from kldtui.text import plural, wrap_name
from kldtui.tui.widgets.plain import PlainStatic, plain
from kldtui.workflow.standings import HEADERS, cells, column_widths

VERDICT_COLUMN = HEADERS.index("verdict vs best")
NAME_COLUMN = HEADERS.index("candidate")
# what a row may not know (a candidate served from a file whose size was not read): where no row knows
# it, the column says nothing and gives its room to the figures
UNKNOWN_IN_EVERY_ROW = tuple(HEADERS.index(h) for h in ("size", "bpw"))


@dataclass(frozen=True)
class BoardFit:
    """How the board's table fits its pane: the columns shown (indexes into HEADERS), and the widths the
    verdicts and the names wrap to (None: one line at their natural widths)."""

    columns: tuple[int, ...]
    verdict: int | None = None
    name: int | None = None


def fit_board(rows: list[list[str]], available: int, padding: int = 1) -> BoardFit:
    """The table at its natural widths where it fits in ``available`` columns (each cell padded by
    ``padding`` on both sides), or nothing is known of the width yet. Where it does not, in turn: the
    size and bpw columns leave where no row knows them ("-"); the verdicts wrap, never narrower than
    their header or their longest word but a candidate's name (a verdict is read whole: "worse than the
    best (provisional)" cut at the pane's edge read "... (provis"); the names wrap, never narrower than
    their header (a name cut with a "…" read as another that differs only at its end), each line
    broken after a separator (:func:`name_cell`). A figure is never cut: at 80x24 the 95% interval read
    "9" and "[" at the pane's edge. What still does not fit scrolls, after the interval."""
    natural = column_widths(rows)
    columns = tuple(range(len(HEADERS)))

    def width(shown: tuple[int, ...], widths: list[int]) -> int:
        return sum(widths[i] + 2 * padding for i in shown)

    if available <= 0 or width(columns, natural) <= available:
        return BoardFit(columns)
    columns = tuple(i for i in columns
                    if i not in UNKNOWN_IN_EVERY_ROW or any(row[i] != "-" for row in rows))
    room = available - width(columns, natural) + natural[VERDICT_COLUMN]
    if natural[VERDICT_COLUMN] <= room:
        return BoardFit(columns)
    names = {row[NAME_COLUMN] for row in rows}  # a repeat's verdict names its first capture: it may wrap
    least = max(len(HEADERS[VERDICT_COLUMN]),
                *(len(word) for row in rows for word in row[VERDICT_COLUMN].split() if word not in names))
    verdict = max(least, room)
    name = max(len(HEADERS[NAME_COLUMN]), natural[NAME_COLUMN] - (verdict - room))
    return BoardFit(columns, verdict, name if name < natural[NAME_COLUMN] else None)


def name_cell(name: str, width: int | None) -> Text:
    """A candidate's name in the board's cell, wrapped to ``width`` after a separator (the table wrapped
    it mid-word at 80 columns: "Kimi-K3-Instruct-Q4_K" / "_M"); on one line where ``width`` is None."""
    shown = printable(name)
    if width is None:
        return plain(shown)
    return Text("\n").join(plain(line) for line in wrap_name(shown, width))


class CampaignBoard(Vertical):
    """Hidden until a campaign reports; then a title line, one row per candidate and the noise
    model and notes the verdicts used."""

    DEFAULT_CSS = """
    CampaignBoard { height: auto; display: none; }
    CampaignBoard.-shown { display: block; }
    CampaignBoard > DataTable { height: auto; max-height: 14; }
    CampaignBoard > .campaign--title { text-style: bold; padding: 0 1; }
    CampaignBoard > .campaign--notes { color: $text-muted; padding: 0 1; }
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the notes shown (the noise model line and each note as the ranking below words them), so
        # that the ranking on the same tab does not repeat them
        self.notes_shown: frozenset[str] = frozenset()
        self._board: LeaderboardUpdated | None = None
        self._width_filled: int | None = None  # the width the table was laid out for

    def compose(self) -> ComposeResult:
        yield PlainStatic("", id="campaign-title", classes="campaign--title")
        yield DataTable(id="campaign-table", cursor_type="row", zebra_stripes=True)
        yield PlainStatic("", id="campaign-notes", classes="campaign--notes")

    def on_mount(self) -> None:
        self.query_one("#campaign-table", DataTable).add_columns(*HEADERS)

    def on_resize(self) -> None:
        # after the resize is laid out: rows added while the terminal's resize was being handled were
        # never measured (their columns stayed as wide as the headers)
        self.call_after_refresh(self._refill_if_resized)

    def _refill_if_resized(self) -> None:
        if self._width_filled != self.size.width:
            self._fill_table()

    def _fill_table(self) -> None:
        """The rows, fitted to the pane (:func:`fit_board`)."""
        table = self.query_one("#campaign-table", DataTable)
        board = self._board
        standings = board.rows if board is not None else ()
        rows = ([cells(row, board.windows, board.unit, board.tie_unit) for row in standings]
                if board is not None else [])
        # the table's own scrollbar gutter may take two columns
        fit = fit_board(rows, self.size.width - 2, table.cell_padding)
        self._width_filled = self.size.width
        table.clear(columns=True)
        widths = {VERDICT_COLUMN: fit.verdict, NAME_COLUMN: fit.name}
        for i in fit.columns:
            table.add_column(HEADERS[i], width=widths.get(i))
        for row, line in zip(standings, rows, strict=True):
            table.add_row(*(name_cell(line[i], fit.name) if i == NAME_COLUMN else plain(line[i])
                            for i in fit.columns), key=row.name,
                          height=None if fit.verdict or fit.name else 1)

    def show(self, board: LeaderboardUpdated | None, current: CandidateStarted | None) -> None:
        """Show the latest standings (``board``) and which candidate runs (``current``)."""
        self.add_class("-shown")
        self._board = board
        self._fill_table()
        self.query_one("#campaign-title", PlainStatic).update(self.title_text(board, current))
        notes: list[str] = []  # in full: what the ranking below leaves out (it says them in the same words)
        shown: list[str] = []  # one short line each, so that the table keeps the room (the help has them)
        if board is not None and board.noise_model:
            notes.append(f"noise model: {board.noise_model}")
            shown.append(f"noise model: {board.noise_brief or board.noise_model}")
        if board is not None:
            briefs = board.brief_notes if len(board.brief_notes) == len(board.notes) else board.notes
            notes += [f"note: {n}" for n in board.notes]
            shown += [f"note: {n}" for n in briefs]
        self.notes_shown = frozenset(notes) | frozenset(board.notes if board is not None else ())
        if board is not None and board.path:  # a ranking of the reports on disk names the file the last
            # finished run wrote (nothing is written until this run's own final ranking)
            shown.append(f"written to {board.path}" if board.final else
                         f"the last finished run's ranking: {board.path}")
        self.query_one("#campaign-notes", PlainStatic).update("\n".join(shown))

    @staticmethod
    def title_text(board: LeaderboardUpdated | None, current: CandidateStarted | None) -> str:
        windows = f", {plural(board.windows, board.unit)}" if board is not None and board.windows else ""
        if board is not None and board.final:
            return f"Campaign leaderboard: KL(reference || candidate), lower is closer{windows}"
        if current is not None:
            what = "repeat capture of the leader" if current.repeat else "candidate"
            return f"Campaign: {what} {current.number}/{current.total} ({current.name}) running{windows}"
        if board is not None and board.path:  # an earlier run's, read from the work folder
            return f"Campaign leaderboard of the reports in the work folder{windows}"
        return f"Campaign leaderboard so far{windows}"
