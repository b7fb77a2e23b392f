"""The viewer: one saved report (result pane) or several (leaderboard, diff of two marked)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Header

from kldtui.formats.report_model import ComparisonReport
from kldtui.formats.report_names import FolderNoise
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.tui.resultdata import Band, ResultData, WindowBar, result_from_report
from kldtui.tui.screens.board import PANE_GROUP, BoardScreen
from kldtui.tui.widgets import BoardCharts, DiffPane, LeaderboardTable, ResultPane
from kldtui.tui.widgets.key_help import HelpSection
from kldtui.tui.widgets.plain import PlainStatic

if TYPE_CHECKING:
    from kldtui.decide.plots import ChartData

def single_keys_help(unit: str) -> tuple[HelpSection, ...]:
    """The help (?) of the viewer of one report, over the report's ``unit`` s (its chart has a bar per
    window, or per context of a hidden-state suite: :attr:`ComparisonReport.unit`)."""
    return (
        HelpSection("Viewer (one report)", (
            ("↑ ↓ PgUp PgDn", f"scroll the summary, domains and per-{unit} chart"),
        )),
    )


def board_keys_help(unit: str) -> tuple[HelpSection, ...]:
    """The help (?) of the viewer's leaderboard, over the board's ``unit`` s (:attr:`Leaderboard.unit`:
    a hidden-state suite's contexts), as its tie column's help counts them."""
    return (
        HelpSection("Viewer (leaderboard)", (
            ("↑ ↓", "move between reports; under the table, the selected row's verdict"),
            ("Enter", "open the selected report (Esc: back)"),
            ("space", "mark a row; with two marked, d shows their difference"),
            ("d", f"per-{unit} difference of the two marked reports"),
            ("c", f"charts: mean KL against size (Pareto front), per {unit}, per domain (as kldtui plot "
                  "draws them)"),
            ("Esc", "close the difference or the charts (the notes above the table and the selected "
                    "row's verdict in full come back)"),
        )),
    )


class ViewerScreen(BoardScreen):
    BINDINGS: ClassVar[list[Binding]] = [  # type: ignore[assignment]
        Binding("d", "diff", "diff", show=False),
        Binding("space", "mark", "mark", show=False),
        Binding("c", "charts", "charts", show=False),
        Binding("escape", "close_pane", "close"),  # in the footer while a pane is open
    ]

    def __init__(self, report_paths: list[Path]) -> None:
        super().__init__(report_paths)
        self.single = len(report_paths) == 1
        self.single_unit = WINDOW_UNIT  # what the one report's windows are called (ComparisonReport.unit)
        self.diff_verdict = ""  # the verdict sentence the difference pane shows (while it is open)

    def compose(self) -> ComposeResult:
        yield Header()
        if self.single:
            yield ResultPane(id="resultpane")
        else:
            with Vertical(id="viewer"):
                yield PlainStatic("loading reports…", id="board-note")
                yield LeaderboardTable(id="board")
                yield PlainStatic("", id="board-verdict")
                yield DiffPane(id="diffpane")
                yield BoardCharts(id="charts")
        yield Footer()

    def on_mount(self) -> None:
        self.app.sub_title = "viewer"
        if not self.single:
            self._hide_panes()
        self.load_reports()

    def _hide_panes(self) -> None:
        self.query_one("#diffpane", DiffPane).display = False
        self.query_one("#charts", BoardCharts).display = False

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("mark", "diff", "charts", "close_pane") and self.single:
            return False
        if action == "close_pane":
            return self.pane_open()
        return True

    def pane_open(self) -> bool:
        return bool(self.query("#viewer.pane-open"))

    def _open_pane(self, pane: DiffPane | BoardCharts) -> None:
        """Show ``pane`` under the table, the other hidden. The ranking's notes step aside and the
        table shrinks while it is open: at 80x24 a dozen candidates' notes and rows filled the screen,
        and the difference or the charts opened out of sight."""
        for other in self.query_one("#viewer").query("DiffPane, BoardCharts"):
            other.display = other is pane
        self.query_one("#viewer").add_class("pane-open")
        self.refresh_row_verdict()
        self.refresh_bindings()

    def action_close_pane(self) -> None:
        """Esc: the difference or the charts closed, the notes and the whole table back."""
        viewer = self.query_one("#viewer")
        for pane in viewer.query("DiffPane, BoardCharts"):
            pane.display = False
        viewer.remove_class("pane-open")
        self.refresh_row_verdict()
        self.refresh_bindings()

    def reports_loaded(self, loaded: list[tuple[ComparisonReport, Path]], problems: list[str]) -> None:
        if not self.single:
            super().reports_loaded(loaded, problems)
            return
        for problem in problems:
            self.notify(problem, title="report", severity="error", timeout=10)
        if loaded:
            report, path = loaded[0]
            result = result_from_report(report, path)
            self.app.sub_title = result.name
            self.show_result(result, report)

    def folder_loaded(self, loaded: list[tuple[ComparisonReport, Path]], problems: list[str],
                      noise: FolderNoise, opened: str = "") -> None:
        if self.single:  # showing the folder's first candidate alone hid the others
            self.call_later(self._become_board, loaded, problems, noise)
        else:
            super().folder_loaded(loaded, problems, noise, opened)

    async def _become_board(self, loaded: list[tuple[ComparisonReport, Path]], problems: list[str],
                            noise: FolderNoise) -> None:
        """The viewer of one report, given a campaign's folder (``o``), becomes the leaderboard of its
        candidates as ``kldtui view FOLDER`` opens it: with the folder's noise model unless one was
        given (``--noise``, ``--no-noise-floor``). The open dialog says a campaign's folder opens all
        its candidates; the viewer showed the first alone."""
        self.take_folder_noise(noise)
        self.single = False
        self.report_paths = [path for _, path in loaded]
        self.current_result = None
        await self.recompose()
        self._hide_panes()
        self.app.sub_title = "viewer"
        self.refresh_bindings()
        super().reports_loaded(loaded, problems)

    def result_note(self, result: ResultData) -> str:
        """Whose run a work folder's report is, as its ``profiles.json`` records it
        (:func:`kldtui.workflow.owners.report_owner`: read only; a broken record is said), or ""."""
        from kldtui.workflow.owners import report_owner

        return (report_owner(Path(result.path)) or "") if result.path is not None else ""

    def show_result(self, result: ResultData, report: ComparisonReport | None) -> None:
        if self.single:
            self.single_unit = report.unit if report is not None else WINDOW_UNIT
            super().show_result(result, report)
        elif report is not None:  # `o` in the leaderboard: the report joins the board
            self.add_to_board(result, report)

    def keys_help(self, unit: str) -> tuple[HelpSection, ...]:
        return board_keys_help(unit)

    def help_sections(self) -> tuple[HelpSection, ...]:
        """One report's keys alone (no leaderboard, no tie column), else the board's; each counting
        the units its reports count (a hidden-state suite's contexts)."""
        return single_keys_help(self.single_unit) if self.single else super().help_sections()

    def show_board(self, results: list[ResultData], reports: list[ComparisonReport],
                   ties: dict[str, str], notes: list[tuple[str, str]],
                   verdicts: dict[str, str] | None = None, unit: str = WINDOW_UNIT,
                   tie_unit: str | None = None, brief_verdicts: dict[str, str] | None = None) -> None:
        super().show_board(results, reports, ties, notes, verdicts, unit, tie_unit, brief_verdicts)
        self.query_one("#board", LeaderboardTable).focus()

    def show_diff(self, text: str, bars: list[WindowBar], band: Band | None = None,
                  verdict: str = "", unit: str = WINDOW_UNIT, headline: str = "") -> None:
        self.diff_verdict = verdict
        self._open_pane(self.query_one("#diffpane", DiffPane))
        super().show_diff(text, bars, band, verdict, unit, headline)

    def verdict_shown_elsewhere(self) -> str | None:
        """The open difference's verdict: it sits just under the table's line, which points to it
        (the pane keeps the sentence, true whichever row is selected)."""
        panes = self.query("#diffpane")
        return (self.diff_verdict or None) if panes and panes.first(DiffPane).display else None

    def action_charts(self) -> None:
        self._charts()

    @work(thread=True, group=PANE_GROUP, exclusive=True, exit_on_error=False, name="charts")
    def _charts(self) -> None:
        """The data kldtui plot draws, from the reports on the board."""
        from kldtui.decide.exports import export_table
        from kldtui.decide.leaderboard import build_leaderboard
        from kldtui.decide.plots import chart_data

        names = [r.name for r in self.results]
        try:
            board = build_leaderboard(self.reports, names=names)
            data = chart_data(export_table(board, self.reports, names=names))
        except Exception as exc:  # noqa: BLE001 - one line (reports of other suites do not chart together)
            self.deliver(self.notify, str(exc), title="charts", severity="error", timeout=10)
            return
        self.deliver(self.show_charts, data)

    def show_charts(self, data: ChartData) -> None:
        pane = self.query_one("#charts", BoardCharts)
        self._open_pane(pane)
        pane.show(data)
