"""One result over a leaderboard (Esc goes back)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header

from kldtui.tui.resultdata import ResultData
from kldtui.tui.widgets import ResultPane


class ResultScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, result: ResultData) -> None:
        super().__init__()
        self.result = result

    def compose(self) -> ComposeResult:
        yield Header()
        yield ResultPane(id="result")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ResultPane).show(self.result)
