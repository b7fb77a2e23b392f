"""The per-window difference of two marked reports (per context of a hidden-state suite's)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll

from kldtui.formats.suite import WINDOW_UNIT
from kldtui.tui.resultdata import Band, WindowBar
from kldtui.tui.widgets.kl_chart import KLChart
from kldtui.tui.widgets.plain import PlainStatic


def placeholder(unit: str) -> str:
    """What the pane says before a difference is shown, over the board's ``unit`` s
    (:attr:`~kldtui.decide.leaderboard.Leaderboard.unit`: a hidden-state suite's contexts)."""
    return (f"d shows the difference of two reports in the leaderboard, {unit} by {unit} "
            "(o opens another report; with more than two, space marks the two)")


BELOW = " (in full below the chart)"  # after the headline: where the verdict and the noise model are


class DiffPane(VerticalScroll):
    """The verdict in short above the chart, the sentence in full and the noise model below it: at
    80x24 the sentence and the noise model's description took 16 lines, and the chart began out of
    sight."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.shown = False  # a difference is shown (the placeholder is gone)

    def compose(self) -> ComposeResult:
        yield PlainStatic("", id="diff-headline")
        yield KLChart(empty="no difference shown yet", id="diff-chart")
        yield PlainStatic(placeholder(WINDOW_UNIT), id="diff-verdict")

    def on_mount(self) -> None:
        self.query_one("#diff-headline", PlainStatic).display = False

    def set_unit(self, unit: str) -> None:
        """The board's reports count ``unit`` s: the placeholder says so (a shown difference stays)."""
        if not self.shown:
            self.query_one("#diff-verdict", PlainStatic).update(placeholder(unit))

    def show(self, verdict: str, bars: list[WindowBar], band: Band | None = None,
             unit: str = WINDOW_UNIT, headline: str = "") -> None:
        """``headline``: the verdict in one short line, above the chart; ``verdict``: in full, below it.
        ``bars``: one per ``unit``; ``band``: the mean difference B − A with the verdict's interval
        (drawn as ┃ and ┊), over the units the verdict counts (a hidden-state suite's source clusters)."""
        self.shown = True
        above = self.query_one("#diff-headline", PlainStatic)
        above.update(headline + BELOW if headline else "")
        above.display = bool(headline)
        self.query_one("#diff-verdict", PlainStatic).update(verdict)
        chart = self.query_one("#diff-chart", KLChart)
        chart.set_unit(unit)
        chart.set_data(bars, band, signed=True)
        self.scroll_home(animate=False)  # a difference opens at its headline and chart
