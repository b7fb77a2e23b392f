"""What the dashboard and the viewer share: a leaderboard of reports, their difference, opening one.

A screen with a ``#board`` (:class:`LeaderboardTable`), a ``#board-note`` and a ``#diffpane``
subclasses :class:`BoardScreen`. Its thread workers: reading reports in the ``load`` group (each one
runs to the end: an opened report is never dropped for another), ranking in ``rank`` and the pane
under the table (difference, charts) in ``pane``, both exclusive (the newest request wins). A thread
worker hands its result to the screen with :meth:`BoardScreen.deliver`, never
``call_from_thread``. Worker failures of every group are handled in one place,
:meth:`BoardScreen.on_worker_state_changed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from kldtui.formats.report import load_report  # json only, no numpy: the viewer starts fast
from kldtui.formats.report_model import ComparisonReport
from kldtui.formats.report_names import REPORT_FILE_NAME, FolderNoise, folder_reports, unique_names
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import kldtui_command, no_verdict_words, outcome_words
from kldtui.tui.resultdata import Band, ResultData, WindowBar, result_from_report
from kldtui.tui.screens.dialogs import PathScreen
from kldtui.tui.screens.result import ResultScreen
from kldtui.tui.widgets import DiffPane, LeaderboardTable, ResultPane
from kldtui.tui.widgets.key_help import HelpSection
from kldtui.tui.widgets.plain import PlainStatic
from kldtui.workflow.next_steps import shown_path

LOAD_GROUP = "load"  # reading reports and the work folder: every one runs to its end
RANK_GROUP = "rank"  # exclusive: a newer ranking replaces an older one
PANE_GROUP = "pane"  # exclusive: what the pane under the table shows (difference, charts)
# the ranking's notes are said in full above it where they take at most this share of the screen's
# rows (at 200x50 six lines: each in one short line left most of a wide screen empty); else in one
# short line each, so that at 80x24 the table keeps the room
NOTES_IN_FULL_SHARE = 1 / 8
NOISE_NOTE = "noise model: "  # how the noise model's note in full starts (as kldtui leaderboard says it)


# a row whose verdict is provisional (LeaderboardRow.provisional: no noise model fully backs it) carries
# this after its mark in the table's tie column, whose 10 cells hold "worse (p)" but not the word; the
# line under the table says what it means while a row carries it (PROVISIONAL_LEGEND), as the campaign's
# board ("worse than the best (provisional)") and kldtui leaderboard ("(provisional)") say it in words
PROVISIONAL_MARK = " (p)"
PROVISIONAL_LEGEND = "(p) provisional: not fully backed by a noise model; move to the row for why"


def tie_mark(row: Any) -> str:
    """A leaderboard row's mark in the table's tie column: decide.leaderboard's (``best``, ``tied``,
    ``worse``, ``no verdict``), with :data:`PROVISIONAL_MARK` where its verdict is provisional."""
    return f"{row.mark}{PROVISIONAL_MARK}" if row.provisional and row.mark else str(row.mark)


def tie_column_help(unit: str) -> HelpSection:
    """The help (?) of every screen with a leaderboard: what its tie column says (decide.leaderboard's
    marks), over the ``unit`` s its verdicts count (:attr:`Leaderboard.tie_unit`: the windows; a
    hidden-state suite's source clusters)."""
    return HelpSection("The leaderboard's tie column", (
        ("best", "lowest mean KL; the other rows are compared with it"),
        ("tied", "not shown different from the best"),
        ("worse", "shown worse than the best"),
        (f"worse{PROVISIONAL_MARK}", "shown worse than the best, provisionally: no noise model fully backs "
                                     "it (the row's verdict, under the table, says why)"),
        ("no verdict", no_verdict_words(unit)),
    ))


def row_verdict(row: Any, rows: int, unit: str) -> str:
    """One sentence on a leaderboard row's mark (the best row's is about the others), counting the
    ``unit`` s the board's verdicts count (:attr:`Leaderboard.tie_unit`)."""
    if row.is_best:
        if row.mark == "no verdict":
            from kldtui.decide.verdict import family_windows

            # the count itself, not "see the note above": the notes step aside while a pane is open
            need = family_windows(max(1, rows * (rows - 1) // 2))
            return (f"lowest mean KL, but {row.units_tied_over} {unit}s are too few to say it is best among "
                    f"{rows} (a verdict needs {need})")
        return f"lowest mean KL of the {rows} reports; each other row says how it compares with this one"
    return str(row.verdict_vs_best)


def row_brief(row: Any, rows: int, unit: str) -> str:
    """:func:`row_verdict` in a few words (:func:`~kldtui.text.outcome_words`), for the line under the
    table while a pane is open below it: a clearly worse row's sentence took 9 lines of 80x24 there."""
    if row.is_best:
        if row.mark == "no verdict":
            return f"lowest mean KL, but too few {unit}s to say it is best among {rows}"
        return f"lowest mean KL of the {rows} reports"
    return outcome_words(row.outcome_vs_best, str(row.mark), row.provisional, unit=unit)


class Delivered(Message):
    """A thread worker's result, to be shown on the app's thread (:meth:`BoardScreen.deliver`)."""

    def __init__(self, worker: Worker[Any], show: Callable[[], object]) -> None:
        super().__init__()
        self.worker, self.show = worker, show


class BoardScreen(Screen[None]):
    """Base of the two main screens. ``KEYS_HELP`` is the help (?) of the screen's own keys (or
    :meth:`keys_help`, where their words count the board's units), above what the tie column says
    (:meth:`help_sections`)."""

    KEYS_HELP: tuple[HelpSection, ...] = ()

    def __init__(self, report_paths: list[Path]) -> None:
        super().__init__()
        self.report_paths = report_paths
        self.results: list[ResultData] = []  # leaderboard rows, sorted
        self.reports: list[ComparisonReport] = []
        self.current_result: ResultData | None = None
        self.leaderboard_note = ""
        # the ranking's notes (ties, noise model): (in full, in one short line); above the ranking in
        # full where there is room (notes_in_full), else in short; in the help (?) in full
        self.board_notes: list[tuple[str, str]] = []
        self.verdicts: dict[str, str] = {}  # row name -> what its tie mark rests on
        self.brief_verdicts: dict[str, str] = {}  # row name -> the same in a few words (row_brief)
        self.ties: dict[str, str] = {}  # row name -> its tie mark
        self.board_unit = WINDOW_UNIT  # what the ranking's windows are called (Leaderboard.unit)
        self.tie_unit = WINDOW_UNIT  # what its tie verdicts count (Leaderboard.tie_unit)
        self.noise_path: str | None = None  # the ties' noise model: --noise FILE, or the folders' one
        self.use_noise_floor = True  # kldtui view --no-noise-floor: none
        self.noise_chosen = False  # --noise or --no-noise-floor: the folders' models are not used
        self.folder_noise = FolderNoise()  # the models the campaign folders on the board brought

    # -- what the app asks of its main screen ------------------------------------------------------
    def quit_question(self) -> str | None:
        """A question to confirm before quitting, or None to quit at once."""
        return None

    def stop_and_quit(self) -> None:
        self.app.exit(0)

    def default_report_path(self) -> str:
        return self.current_result.path if self.current_result and self.current_result.path else ""

    def commands(self) -> list[tuple[str, str, Any]]:
        """(title, help, callback) for the command palette."""
        return []

    def help_sections(self) -> tuple[HelpSection, ...]:
        """The help (?)'s sections: the screen's own keys, then what the tie column's marks mean over
        the board's units."""
        return (*self.keys_help(self.board_unit), tie_column_help(self.tie_unit))

    def keys_help(self, unit: str) -> tuple[HelpSection, ...]:
        """The help (?) of the screen's own keys, over the board's ``unit`` s: ``KEYS_HELP``."""
        return self.KEYS_HELP

    def help_notes(self) -> list[str]:
        """What the help (?) adds below the keys: the ranking's notes in full."""
        return [full for full, _ in self.ranking_notes()]

    def ranking_notes(self) -> list[tuple[str, str]]:
        """The ranking's notes (in full, in one short line): its own (``board_notes``), then what the
        screen adds (the dashboard: the reports of other suites it leaves out)."""
        return list(self.board_notes)

    # -- one handler for worker failures -----------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.worker_failed(event.worker)

    def worker_failed(self, worker: Worker[Any]) -> None:
        error = worker.error
        self.notify(f"{type(error).__name__}: {error}", title=f"{worker.name} failed", severity="error",
                    timeout=10)

    # -- results of thread workers -----------------------------------------------------------------
    def deliver(self, show: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """From a thread worker: ``show(*args, **kwargs)`` on the app's thread, unless the worker has
        been cancelled by then (a newer exclusive worker replaced it: its result is stale; or the
        screen closed). Never waits: ``call_from_thread`` waits for the app's loop, which a closing
        app may never run again, and a cancelled thread's late result would overwrite a newer one."""
        worker = get_current_worker()
        with contextlib.suppress(RuntimeError):  # the app's loop is closed: nothing left to show on
            self.post_message(Delivered(worker, lambda: show(*args, **kwargs)))

    @on(Delivered)
    def delivered(self, message: Delivered) -> None:
        message.stop()
        if not message.worker.is_cancelled:  # cancellation happens on this thread too: no race
            message.show()

    # -- loading and showing reports ---------------------------------------------------------------
    def show_result(self, result: ResultData, report: ComparisonReport | None) -> None:
        self.current_result = result
        pane = self.query_one("#resultpane", ResultPane)
        pane.note = self.result_note(result)
        pane.show(result)

    def result_note(self, result: ResultData) -> str:
        """How the shown report relates to the screen's own (the dashboard: its run's), or ""."""
        return ""

    @work(thread=True, group=LOAD_GROUP, exit_on_error=False, name="load-reports")
    def load_reports(self) -> None:
        loaded: list[tuple[ComparisonReport, Path]] = []
        problems: list[str] = []
        for path in self.report_paths:
            try:
                loaded.append((load_report(path), path))
            except Exception as exc:  # noqa: BLE001 - one line per bad file, the rest still shows
                problems.append(str(exc))
        self.deliver(self.reports_loaded, loaded, problems)

    def reports_loaded(self, loaded: list[tuple[ComparisonReport, Path]], problems: list[str]) -> None:
        for problem in problems:
            self.notify(problem, title="report", severity="error", timeout=10)
        for report, path in loaded:
            self.add_to_board(result_from_report(report, path), report, rebuild=False)
        self.rebuild_board()

    def folder_loaded(self, loaded: list[tuple[ComparisonReport, Path]], problems: list[str],
                      noise: FolderNoise, opened: str = "") -> None:
        """``o`` on a campaign's folder (``opened``): its reports join the board, ranked with the noise
        model the board's folders bring (``noise``: this folder's measured one of its reports' suite), as
        ``kldtui view`` ranks the same folders (:meth:`take_folder_noise`); unless they are of another
        suite than the board's (:meth:`refused_beside_board`)."""
        if self.refused_beside_board(opened, loaded):
            return
        self.take_folder_noise(noise)
        self.reports_loaded(loaded, problems)

    def refused_beside_board(self, opened: str, loaded: list[tuple[ComparisonReport, Path]]) -> bool:
        """Whether the reports ``loaded`` that ``o`` on ``opened`` brought are refused: they bring a
        suite none of the board's reports records, which no leaderboard ranks together with them. One
        notification names each suite's reports and the ``kldtui view`` command that ranks the opened
        ones, as a folder of several suites is refused; the board stays as it was (its noise model
        too). The one rule: :func:`~kldtui.formats.report_names.beside_board_line`."""
        from kldtui.formats.report_names import beside_board_line

        board = [Path(r.path) if r.path else Path(r.name) for r in self.results]
        suites = [r.suite_token_hash_sha256 for r, _ in loaded]
        line = beside_board_line(opened, [p for _, p in loaded], suites, board,
                                 [r.suite_token_hash_sha256 for r in self.reports], "view")
        if line is None:
            return False
        self.notify(line, title="report", severity="error", timeout=20)
        return True

    def take_folder_noise(self, found: FolderNoise, say: bool = True) -> bool:
        """Reports from campaign folders came with the noise models ``found`` (their
        ``noise-model-HASH.json`` of the reports' suite): the ties use the model the board's folders
        hold, none when they hold different ones or ones of other suites only, and the user's choice
        (``--noise``, ``--no-noise-floor``) over either (``FolderNoise``: the rule ``kldtui view DIR``
        follows). ``say``: a notification names the model when it changes, and the models of other
        suites when they are left unused. True when it changed; the caller ranks again
        (:meth:`rebuild_board`)."""
        before = self.folder_noise
        self.folder_noise = before.joined(found)
        if self.noise_chosen:
            return False
        model = self.folder_noise.model
        chosen = str(model) if model is not None else None
        changed = chosen != self.noise_path
        refused = not self.folder_noise.models and self.folder_noise.other_suites != before.other_suites
        words = self.folder_noise.words(shown_path)
        if say and words is not None and (changed or refused):
            self.notify(words if model is not None else
                        f"{words}: {kldtui_command()} view --noise FILE chooses one", title="leaderboard")
        if not changed:
            return False
        self.noise_path = chosen
        return True

    def load_result_file(self, path: str) -> None:
        self._load_one(path)

    @work(thread=True, group=LOAD_GROUP, exit_on_error=False, name="open")
    def _load_one(self, path: str) -> None:
        try:
            folder = folder_reports(path)
        except Exception as exc:  # noqa: BLE001 - shown as one line
            self.deliver(self.notify, str(exc), title="report", severity="error", timeout=10)
            return
        found = folder.reports
        left_out = folder.left_out_line(path)  # a campaign's folder: files not of its candidates, named
        if left_out is not None:               # as kldtui view and leaderboard name them on stderr
            self.deliver(self.notify, left_out, title="report", severity="warning", timeout=10)
        from kldtui.decide.paired import suite_hash_of
        from kldtui.formats.report_names import campaign_noise_model, mixed_suites_line

        if len(found) > 1:  # a campaign's folder: every candidate onto the board
            loaded, problems = [], []
            for one in found:
                try:
                    loaded.append((load_report(one), one))
                except Exception as exc:  # noqa: BLE001 - one line per bad file, the rest still shows
                    problems.append(str(exc))
            # a folder of several suites (kldtui demo and kldtui demo --hidden): refused, as kldtui view
            # DIR refuses it, naming each suite's reports
            mixed = mixed_suites_line([path], [p for _, p in loaded],
                                      [r.suite_token_hash_sha256 for r, _ in loaded], "view")
            if mixed is not None:
                self.deliver(self.notify, mixed, title="report", severity="error", timeout=20)
                return
            # a campaign's folder: its measured model of its reports' suite, if any
            noise = campaign_noise_model(path, suite_hash_of(*(r for r, _ in loaded)))
            self.deliver(self.folder_loaded, loaded, problems, noise, str(path))
            return
        try:
            report = load_report(found[0])
        except Exception as exc:  # noqa: BLE001 - shown as one line
            self.deliver(self.notify, str(exc), title="report", severity="error", timeout=10)
            return
        noise = campaign_noise_model(path, report.suite_token_hash_sha256)
        self.deliver(self.report_opened, result_from_report(report, str(found[0])), report, noise, str(path))

    def report_opened(self, result: ResultData, report: ComparisonReport, noise: FolderNoise,
                      opened: str = "") -> None:
        """``o`` on one report (``opened``: its path or its folder's); from a campaign's folder of one
        candidate, with the folder's noise model, as a folder of several brings it
        (:meth:`take_folder_noise`); refused where its suite is not the board's
        (:meth:`refused_beside_board`)."""
        if self.refused_beside_board(opened, [(report, Path(result.path or opened))]):
            return
        self.take_folder_noise(noise)
        self.show_result(result, report)

    def action_open_result(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.load_result_file(path)

        self.app.push_screen(PathScreen("Open a comparison report (JSON, or a work folder holding "
                                        f"{REPORT_FILE_NAME}; a campaign's folder opens all its "
                                        "candidates):", self.default_report_path()), chosen)

    # -- the leaderboard ---------------------------------------------------------------------------
    def add_to_board(self, result: ResultData, report: ComparisonReport, rebuild: bool = True) -> None:
        for i, old in enumerate(self.results):  # one row per file, however its path was written
            if old.path is not None and result.path is not None and (
                    os.path.abspath(old.path) == os.path.abspath(result.path)):
                del self.results[i], self.reports[i]
                break
        self.results.append(result)
        self.reports.append(report)
        if rebuild:
            self.rebuild_board()

    def rebuild_board(self) -> None:
        self._rank(list(self.results), list(self.reports))

    @work(thread=True, group=RANK_GROUP, exclusive=True, exit_on_error=False, name="rank")
    def _rank(self, results: list[ResultData], reports: list[ComparisonReport]) -> None:
        ties: dict[str, str] = {}
        verdicts: dict[str, str] = {}
        briefs: dict[str, str] = {}
        notes: list[tuple[str, str]] = []
        # what the reports' windows are called, one report's too (no leaderboard is built of one):
        # a hidden-state suite's contexts; reports of two kinds of suite rank untied, as windows
        units = {r.unit for r in reports}
        unit = units.pop() if len(units) == 1 else WINDOW_UNIT
        tie_unit = unit  # what the verdicts count: a hidden-state board's source clusters
        names = unique_names([r.name for r in results], [r.path for r in results])
        results = [dataclasses.replace(r, name=n) for r, n in zip(results, names, strict=True)]
        order = sorted(range(len(results)), key=lambda i: (results[i].sort_key, results[i].name))
        if len(results) > 1:
            try:
                from kldtui.decide.leaderboard import build_leaderboard
                from kldtui.workflow.owners import with_whose

                # whose run each report is, as its folder's profiles.json records it (read only)
                board = with_whose(build_leaderboard(reports, names=[r.name for r in results],
                                                     paths=[r.path for r in results],
                                                     **self.noise_options(reports)))
                by_name = {row.name: row for row in board.rows}
                ties = {r.name: tie_mark(by_name[r.name]) for r in results if r.name in by_name}
                verdicts = {row.name: row_verdict(row, len(board.rows), board.tie_unit) for row in board.rows}
                briefs = {row.name: row_brief(row, len(board.rows), board.tie_unit) for row in board.rows}
                unit, tie_unit = board.unit, board.tie_unit
                notes = [*zip(board.notes, board.brief_notes, strict=True),
                         (f"{NOISE_NOTE}{board.noise_source}", self.noise_brief(board.noise_brief))]
            except Exception as exc:  # noqa: BLE001 - reports from other suites still rank, untied
                # in one short line above the table, as every note (the paths and hashes took four
                # lines of 80x24); the help has it in full
                notes = [(f"no tie marks: {exc}",
                          "no tie marks: these reports cannot be paired (? says why)")]
        ranked = [results[i] for i in order]
        ranked_reports = [reports[i] for i in order]
        self.deliver(self.show_board, ranked, ranked_reports, ties, notes, verdicts, unit, tie_unit, briefs)

    def noise_brief(self, words: str) -> str:
        """The noise model's note above the ranking (``words``: in short, what a difference must clear;
        or in full); a campaign folder's model names its folder (the user's ``--noise`` is theirs to
        know), in one line at 80 columns: the notification and the help name the file."""
        model = self.folder_noise.model
        if self.noise_chosen or model is None or self.noise_path != str(model):
            return f"noise model: {words}"
        return f"noise model of {model.parent.name}: {words}"

    def noise_options(self, reports: list[ComparisonReport]) -> dict[str, Any]:
        """How the leaderboard's ties use a noise model (``kldtui view --noise FILE`` or
        ``--no-noise-floor``): keyword arguments of :func:`~kldtui.decide.leaderboard.build_leaderboard`;
        empty: its default (the published figure for the published suite, else none)."""
        if not self.use_noise_floor:
            return {"noise": None}
        if self.noise_path is None:
            return {}
        from kldtui.decide.noise import resolve_floor
        from kldtui.decide.paired import suite_hash_of

        return {"noise": resolve_floor(self.noise_path, suite_hash_of(*reports))}

    def show_board(self, results: list[ResultData], reports: list[ComparisonReport],
                   ties: dict[str, str], notes: list[tuple[str, str]],
                   verdicts: dict[str, str] | None = None, unit: str = WINDOW_UNIT,
                   tie_unit: str | None = None, brief_verdicts: dict[str, str] | None = None) -> None:
        """The ranking; ``unit``: what its windows are called, ``tie_unit``: what its verdicts count
        (:attr:`Leaderboard.tie_unit`; None: the windows); ``verdicts``: each row's verdict against the
        best, ``brief_verdicts`` the same in a few words."""
        if {id(r) for r in reports} != {id(r) for r in self.reports}:
            # a ranking of the board as it was: a report came since (and its ranking is on its way).
            # Taken, it dropped that report, and a ranking started next (the campaign's noise model
            # at its end) ranked two of a campaign's three reports.
            return
        self.results, self.reports = results, reports
        self.verdicts = dict(verdicts or {})
        self.brief_verdicts = dict(brief_verdicts or {})
        self.ties = dict(ties)
        self.board_unit = unit
        self.tie_unit = tie_unit or unit
        for pane in self.query(DiffPane):  # its placeholder counts them too, until a difference is shown
            pane.set_unit(unit)
        table = self.query_one("#board", LeaderboardTable)
        table.marked.clear()
        table.set_results(results, {i: ties.get(r.name, "") for i, r in enumerate(results)})
        self.board_notes = list(notes)
        self.update_board_note()
        self.show_row_verdict(table.cursor_row if results else None)

    def notes_shown_elsewhere(self) -> frozenset[str]:
        """Notes another part of this screen already shows (the dashboard's campaign board): the
        ranking's note leaves them out rather than print them twice on one tab."""
        return frozenset()

    def update_board_note(self) -> None:
        """The lines above the ranking: how to use it, and its notes not shown elsewhere, in full where
        they fit in :data:`NOTES_IN_FULL_SHARE` of the screen's rows, else one short line each, so that
        the table keeps the room at 80x24 (the help has them in full)."""
        n = len(self.results)
        head = f"{n} report{'s' if n != 1 else ''} by mean KL"
        if n > 1:  # what the tie marks mean is in the help (?); the selected row's verdict is below
            head += "; Enter opens one, space marks two, d diffs, ? help"
        elsewhere = self.notes_shown_elsewhere()
        notes = [(full, brief) for full, brief in self.ranking_notes() if full not in elsewhere]
        note = self.query_one("#board-note", PlainStatic)
        # in full, the noise model's note names a campaign folder's model as its short line does
        shown = [self.noise_brief(full.removeprefix(NOISE_NOTE)) if full.startswith(NOISE_NOTE) else full
                 for full, _ in notes] if self.notes_in_full([full for full, _ in notes], note) else \
            [brief for _, brief in notes]
        self.leaderboard_note = "\n".join([head, *shown])
        note.update(self.leaderboard_note)

    def notes_in_full(self, notes: list[str], note: PlainStatic) -> bool:
        """Whether ``notes``, wrapped to the width of the ``note`` above the ranking, fit in
        :data:`NOTES_IN_FULL_SHARE` of the screen's rows."""
        width = note.content_size.width or self.size.width - 2  # its padding; before its first layout
        lines = sum(len(textwrap.wrap(text, max(1, width))) for text in notes)
        return width > 0 and lines <= self.size.height * NOTES_IN_FULL_SHARE

    def on_resize(self) -> None:
        # the room the notes have changed: in full or in short, once the note has its new width
        if self.results:
            self.call_after_refresh(self.update_board_note)

    def verdict_shown_elsewhere(self) -> str | None:
        """A verdict sentence another part of this screen shows in sight now (the viewer's open
        difference of two reports), or None: the line under the table points to it rather than say it
        a second time."""
        return None

    def pane_open(self) -> bool:
        """Whether a pane under the table (the viewer's difference or charts) takes the room below it:
        the line under the table then says the selected row's verdict in a few words."""
        return False

    def show_row_verdict(self, index: int | None) -> None:
        """Under the table: what a ``(p)`` mark means while a row carries one (:data:`PROVISIONAL_LEGEND`;
        not while a pane is open below), then what the selected row's tie mark rests on, in one
        sentence; where that sentence is the open difference's (the best and this row marked, d), a
        pointer to it: at 200x50 the viewer said the same long sentence twice, one above the other.
        While a pane is open below, a sentence longer than one line in a few words, and how to read it
        in full (Esc closes the pane)."""
        boxes = self.query("#board-verdict")
        if not boxes:
            return
        text = ""
        if index is not None and 0 <= index < len(self.results):
            name = self.results[index].name
            verdict = self.verdicts.get(name)
            if verdict is not None and verdict == self.verdict_shown_elsewhere():
                text = f"{name}: its verdict against the best is the difference's, below"
            elif verdict is not None and self.pane_open() and name in self.brief_verdicts \
                    and len(f"{name}: {verdict}") > boxes.first(PlainStatic).content_size.width:
                text = f"{name}: {self.brief_verdicts[name]}; Esc shows its verdict in full"
            elif verdict is not None:
                text = f"{name}: {verdict}"
        if not self.pane_open() and any(mark.endswith(PROVISIONAL_MARK) for mark in self.ties.values()):
            # what a row's "(p)" means, whichever row is selected (at first the best, which has none);
            # while a pane is open below, one line: a provisional row's brief says "(provisional)"
            text = "\n".join([PROVISIONAL_LEGEND, *([text] if text else [])])
        boxes.first(PlainStatic).update(text)

    def refresh_row_verdict(self) -> None:
        """The line under the table again, for the selected row (a pane opened or closed)."""
        boards = self.query("#board")
        if boards:
            self.show_row_verdict(boards.first(LeaderboardTable).cursor_row if self.results else None)

    @on(LeaderboardTable.Highlighted)
    def row_highlighted(self, message: LeaderboardTable.Highlighted) -> None:
        self.show_row_verdict(message.index)

    @on(LeaderboardTable.Open)
    def open_row(self, message: LeaderboardTable.Open) -> None:
        if 0 <= message.index < len(self.results):
            self.app.push_screen(ResultScreen(self.results[message.index]))

    def action_mark(self) -> None:
        self.query_one("#board", LeaderboardTable).toggle_mark()

    def action_diff(self) -> None:
        table = self.query_one("#board", LeaderboardTable)
        marked = sorted(table.marked)
        if len(marked) != 2:
            if len(self.results) == 2:
                marked = [0, 1]
            else:
                self.diff_needs_marks()
                return
        self._diff(marked[0], marked[1])

    def diff_needs_marks(self) -> None:
        if len(self.results) < 2:
            self.notify(f"a difference needs two reports; the leaderboard has {len(self.results)}: "
                        "open another with o")
        else:
            self.notify("mark two reports with space, then press d")

    @work(thread=True, group=PANE_GROUP, exclusive=True, exit_on_error=False, name="diff")
    def _diff(self, i: int, j: int) -> None:
        a, b = self.results[i], self.results[j]
        try:
            from kldtui.decide.paired import paired_diff

            # the noise model the leaderboard's ties use (--noise, a campaign's, --no-noise-floor)
            diff = paired_diff(self.reports[i], self.reports[j], name_a=a.name, name_b=b.name,
                               path_a=a.path, path_b=b.path,
                               **self.noise_options([self.reports[i], self.reports[j]]))
        except Exception as exc:  # noqa: BLE001 - one line
            self.deliver(self.notify, str(exc), title="diff", severity="error", timeout=10)
            return
        bars = [WindowBar(w, d, kb - ka) for w, d, ka, kb in
                zip(diff.window_index, diff.domain, diff.kl_a, diff.kl_b, strict=True)]
        # the verdict over source clusters where contexts share sources, as the tie column counts them,
        # and the interval it rests on (not the contexts' one, which counts them as independent)
        iv = diff.verdict_interval
        band = Band(iv.estimate, iv.ci95_low, iv.ci95_high, iv.windows, diff.verdict_unit)
        lines = [f"A = {a.name}, B = {b.name}", diff.verdict]
        text = "\n".join([*lines, f"noise model: {diff.noise_source}"])
        self.deliver(self.show_diff, text, bars, band, diff.verdict, diff.unit,
                     f"A = {a.name}, B = {diff.headline}")

    def show_diff(self, text: str, bars: list[WindowBar], band: Band | None = None,
                  verdict: str = "", unit: str = WINDOW_UNIT, headline: str = "") -> None:
        """The difference pane: ``headline`` (which pair, the verdict in short) above its chart of
        ``bars``, one per ``unit`` (a hidden-state suite's context), and ``text`` below it (which pair,
        ``verdict``, the noise model)."""
        pane = self.query_one("#diffpane", DiffPane)
        pane.display = True
        pane.show(text, bars, band, unit, headline)
