"""The campaign's live leaderboard: each candidate of a ``[[candidates]]`` profile with its mean KL
and interval, size, bits per weight and verdict against the current best, filling in as candidates
finish (from :class:`~kldtui.events.LeaderboardUpdated` events; the words are
:mod:`kldtui.workflow.standings`', the same the batch reporter prints)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from kldtui.events import CandidateStarted, LeaderboardUpdated
from kldtui.text import plural
from kldtui.tui.widgets.plain import PlainStatic, plain
from kldtui.workflow.standings import HEADERS, cells, column_widths

VERDICT_COLUMN = HEADERS.index("verdict vs best")


def verdict_width(rows: list[list[str]], available: int, padding: int = 1) -> int | None:
    """The width to wrap the verdict column to so that it ends inside ``available`` columns (the columns
    before it at their natural widths, each cell padded by ``padding`` on both sides), or None where it
    already does (or nothing is known of the width yet). Never narrower than its longest word: a verdict
    is read whole ("worse than the best (provisional)" cut at the pane's edge read "... (provis"); the
    columns after it scroll."""
    natural = column_widths(rows)
    before = sum(natural[:VERDICT_COLUMN]) + 2 * padding * VERDICT_COLUMN
    room = available - before - 2 * padding
    if available <= 0 or natural[VERDICT_COLUMN] <= room:
        return None
    longest_word = max(len(word) for line in (HEADERS, *rows) for word in line[VERDICT_COLUMN].split())
    return max(longest_word, room)


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
        """The rows, the verdict column wrapped where it would run past the pane's edge."""
        table = self.query_one("#campaign-table", DataTable)
        board = self._board
        standings = board.rows if board is not None else ()
        rows = ([cells(row, board.windows, board.unit, board.tie_unit) for row in standings]
                if board is not None else [])
        # the table's own scrollbar gutter may take two columns
        wrap = verdict_width(rows, self.size.width - 2, table.cell_padding) if rows else None
        self._width_filled = self.size.width
        table.clear(columns=True)
        for i, header in enumerate(HEADERS):
            table.add_column(header, width=wrap if i == VERDICT_COLUMN else None)
        for row, line in zip(standings, rows, strict=True):
            table.add_row(*(plain(c) for c in line), key=row.name, height=None if wrap else 1)

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
