"""The per-window difference of two marked reports."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from kldtui.tui.resultdata import Band, WindowBar
from kldtui.tui.widgets.kl_chart import KLChart


class DiffPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static("d shows the difference of two reports in the leaderboard, window by window (o opens "
                     "another report; with more than two, space marks the two)", id="diff-verdict")
        yield KLChart(empty="no difference shown yet", id="diff-chart")

    def show(self, verdict: str, bars: list[WindowBar], band: Band | None = None) -> None:
        """``band``: the mean difference B − A with its verdict interval (drawn as ┃ and ┊)."""
        self.query_one("#diff-verdict", Static).update(verdict)
        self.query_one("#diff-chart", KLChart).set_data(bars, band, signed=True)
