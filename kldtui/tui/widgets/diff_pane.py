"""The per-window difference of two marked reports."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll

from kldtui.tui.resultdata import Band, WindowBar
from kldtui.tui.widgets.kl_chart import KLChart
from kldtui.tui.widgets.plain import PlainStatic


class DiffPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield PlainStatic("d shows the difference of two reports in the leaderboard, window by window "
                          "(o opens another report; with more than two, space marks the two)",
                          id="diff-verdict")
        yield KLChart(empty="no difference shown yet", id="diff-chart")

    def show(self, verdict: str, bars: list[WindowBar], band: Band | None = None) -> None:
        """``band``: the mean difference B − A with its verdict interval (drawn as ┃ and ┊)."""
        self.query_one("#diff-verdict", PlainStatic).update(verdict)
        self.query_one("#diff-chart", KLChart).set_data(bars, band, signed=True)
