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
from kldtui.tui.widgets.plain import PlainStatic, plain
from kldtui.workflow.standings import HEADERS, cells


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

    def compose(self) -> ComposeResult:
        yield PlainStatic("", id="campaign-title", classes="campaign--title")
        yield DataTable(id="campaign-table", cursor_type="row", zebra_stripes=True)
        yield PlainStatic("", id="campaign-notes", classes="campaign--notes")

    def on_mount(self) -> None:
        self.query_one("#campaign-table", DataTable).add_columns(*HEADERS)

    def show(self, board: LeaderboardUpdated | None, current: CandidateStarted | None) -> None:
        """Show the latest standings (``board``) and which candidate runs (``current``)."""
        self.add_class("-shown")
        table = self.query_one("#campaign-table", DataTable)
        table.clear()
        rows = board.rows if board is not None else ()
        for row in rows:
            table.add_row(*(plain(c) for c in cells(row)), key=row.name)
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
        if board is not None and board.path:
            shown.append(f"written to {board.path}")
        self.query_one("#campaign-notes", PlainStatic).update("\n".join(shown))

    @staticmethod
    def title_text(board: LeaderboardUpdated | None, current: CandidateStarted | None) -> str:
        windows = f", {board.windows} windows" if board is not None and board.windows else ""
        if board is not None and board.final:
            return f"Campaign leaderboard: KL(reference || candidate), lower is closer{windows}"
        if current is not None:
            what = "repeat capture of the leader" if current.repeat else "candidate"
            return f"Campaign: {what} {current.number}/{current.total} ({current.name}) running{windows}"
        if board is not None and board.path:  # an earlier run's, read from the work folder
            return f"Campaign leaderboard of the reports in the work folder{windows}"
        return f"Campaign leaderboard so far{windows}"
