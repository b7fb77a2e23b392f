"""The Textual app: the dashboard (drives the pipeline) and the viewer (saved reports).

One app class, one factory (:func:`create_app`) used by the CLI and the tests. Engine work runs in
thread workers; the engine's ``emit`` posts messages to the app (progress coalesced to the latest
per task); a 10 Hz timer redraws only the widgets whose part of the model changed.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    Footer,
    Header,
    Input,
    Label,
    Static,
    TabbedContent,
    TabPane,
)
from textual.worker import Worker, WorkerState

from kldtui.events import Cancel, Event, Progress, StageFailed
from kldtui.formats.report_names import unique_names
from kldtui.tui import themes as theme_files
from kldtui.tui.model import STAGE_TITLES, STAGES, DashboardModel
from kldtui.tui.resultdata import ResultData, WindowBar, live_result, result_from_report
from kldtui.tui.widgets import (
    KLChart,
    LeaderboardTable,
    LogView,
    ProgressPanel,
    ResultPane,
    StageRail,
    WindowGrid,
)

PipelineFactory = Callable[[Callable[[Event], None], Cancel], Any]
REFRESH_INTERVAL = 0.1
STAGE_METHODS = {"all": "run_all", "server": "serve"}  # stage -> Pipeline method


# -- engine -> app ---------------------------------------------------------------------------------
class EventsPending(Message):
    """Engine events are waiting in the bridge (posted once per batch, not per event)."""


class EventBridge:
    """The engine's ``emit``: thread-safe, keeps event order, and coalesces progress.

    A progress event replaces a pending one of the same stage and task unless another event came
    in between (so a ``StageStarted`` is never overtaken by the progress that followed it).
    """

    def __init__(self, app: App[Any]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._pending: list[Event] = []
        self._slot: dict[tuple[str, str], int] = {}
        self.received = 0

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.received += 1
            was_empty = not self._pending
            if isinstance(event, Progress):
                key = (event.stage, event.task)
                slot = self._slot.get(key)
                if slot is not None:
                    self._pending[slot] = event
                    return
                self._slot[key] = len(self._pending)
            else:
                self._slot.clear()
            self._pending.append(event)
        if was_empty:
            self.app.post_message(EventsPending())

    def take(self) -> list[Event]:
        with self._lock:
            pending, self._pending = self._pending, []
            self._slot.clear()
        return pending


class ResettableCancel(Cancel):
    """The app's cancel flag: set on stop/quit, cleared when the next stage starts."""

    def reset(self) -> None:
        self._flag.clear()
        self.reason = "interrupted"


# -- screens ---------------------------------------------------------------------------------------
class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button("Stop and quit (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class PathScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, value: str = "") -> None:
        super().__init__()
        self.prompt, self.value = prompt, value

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.prompt)
            yield Input(value=self.value, id="path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


HELP_TEXT = """\
[b]Dashboard[/b]
  r        run all stages (download and server start overlap)
  1 … 5    start one stage (1 reference … 5 compare)
  s        stop the running stage(s); state on disk stays resumable
  x        stop the server
  o        open a result report
  l e b d  show the log / result / leaderboard / diff tab
  /        search the log (Esc clears)
[b]Leaderboard and viewer[/b]
  Enter    open the selected report (Esc: back)
  space    mark a row; with two marked, d shows their difference
[b]Everywhere[/b]
  t        switch theme (remembered)
  ctrl+p   command palette
  ?        this help
  q        quit (asks first while a server runs, then stops it)
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(HELP_TEXT, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)


class ResultScreen(Screen[None]):
    """One result over the viewer's leaderboard (Esc goes back)."""

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


class DiffPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static("mark two candidates in the leaderboard (space), then press d", id="diff-verdict")
        yield KLChart(id="diff-chart")

    def show(self, verdict: str, bars: list[WindowBar]) -> None:
        self.query_one("#diff-verdict", Static).update(verdict)
        self.query_one("#diff-chart", KLChart).set_data(bars, None, signed=True)


# -- the app ---------------------------------------------------------------------------------------
class KldApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kldtui"

    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("t", "change_theme", "theme"),
        Binding("r", "run_all", "run all"),
        Binding("1", "start_stage('reference')", "reference", show=False),
        Binding("2", "start_stage('server')", "server", show=False),
        Binding("3", "start_stage('capture')", "capture", show=False),
        Binding("4", "start_stage('finalize')", "finalize", show=False),
        Binding("5", "start_stage('compare')", "compare", show=False),
        Binding("s", "stop", "stop"),
        Binding("x", "stop_server", "stop server", show=False),
        Binding("o", "open_result", "open"),
        Binding("l", "show_tab('log')", "log", show=False),
        Binding("e", "show_tab('result')", "result", show=False),
        Binding("b", "show_tab('leaderboard')", "board", show=False),
        Binding("d", "diff", "diff", show=False),
        Binding("space", "mark", "mark", show=False),
        Binding("slash", "search_log", "search", key_display="/"),
        Binding("escape", "escape", "back", show=False),
    ]

    def __init__(self, *, pipeline_factory: PipelineFactory | None = None,
                 reports: Sequence[str | Path] = (), theme: str | None = None,
                 config_dir: Path | None = None, title: str = "kldtui",
                 windows: Iterable[tuple[int, str]] = (), autostart: bool = False,
                 remember_theme: bool = True, watch_css: bool = False) -> None:
        super().__init__(watch_css=watch_css)
        self.mode_name = "dashboard" if pipeline_factory is not None else "viewer"
        self.pipeline_factory = pipeline_factory
        self.report_paths = [Path(p) for p in reports]
        self.config = config_dir
        self.requested_theme = theme
        self.remember_theme = remember_theme
        self.autostart = autostart
        self.title = title
        self.model = DashboardModel()
        self.model.set_windows(list(windows))
        self.model.take_dirty()
        self.cancel = ResettableCancel()
        self.bridge = EventBridge(self)
        self._pipeline: Any = None
        self._pipeline_lock = threading.Lock()
        self.results: list[ResultData] = []  # leaderboard rows, sorted
        self.reports: list[dict[str, Any]] = []
        self.current_result: ResultData | None = None
        self.quitting = False
        self.problems: list[str] = []
        self.leaderboard_note = ""

    # -- composition -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        if self.mode_name == "dashboard":
            yield StageRail(id="rail")
            with Horizontal(id="body"):
                with VerticalScroll(id="left"):
                    yield Static("Windows", classes="section-title")
                    yield WindowGrid(self.model, id="grid")
                with TabbedContent(id="tabs", initial="log"):
                    with TabPane("Log", id="log"):
                        yield LogView(self.model, id="logview")
                    with TabPane("Result", id="result"):
                        yield ResultPane(id="resultpane")
                    with TabPane("Leaderboard", id="leaderboard"):
                        yield Static("", id="board-note")
                        yield LeaderboardTable(id="board")
                    with TabPane("Diff", id="diff"):
                        yield DiffPane(id="diffpane")
            yield ProgressPanel(self.model, id="progress")
        elif len(self.report_paths) == 1:
            yield ResultPane(id="resultpane")
        else:
            with Vertical(id="viewer"):
                yield Static("loading reports…", id="board-note")
                yield LeaderboardTable(id="board")
                yield DiffPane(id="diffpane")
        yield Footer()

    def on_mount(self) -> None:
        self._setup_themes()
        if self.mode_name == "dashboard":
            self.sub_title = "dashboard"
            self.set_interval(REFRESH_INTERVAL, self.refresh_now)
            self.refresh_now(all_parts=True)
            if self.report_paths:
                self.load_reports()
            if self.autostart:
                self.action_run_all()
        else:
            self.sub_title = "viewer"
            if len(self.report_paths) > 1:
                self.query_one("#diffpane", DiffPane).display = False
            self.load_reports()

    def on_unmount(self) -> None:
        self.cancel.set("the dashboard closed")  # engine threads stop at their next safe point

    # -- themes ------------------------------------------------------------------------------------
    def _setup_themes(self) -> None:
        found, problems = theme_files.load_themes(theme_files.theme_dirs(self.config))
        for theme in found:
            self.register_theme(theme)
        self.problems = problems
        for problem in problems:
            self.notify(problem, title="theme", severity="warning", timeout=8)
        wanted = self.requested_theme or theme_files.load_settings(self.config).get("theme")
        chosen = theme_files.DEFAULT_THEME
        if isinstance(wanted, str) and wanted:
            if wanted in self.available_themes:
                chosen = wanted
            else:
                self.notify(f"theme {wanted!r} is not available (broken or unknown); using "
                            f"{chosen} (t lists the themes)", title="theme", severity="warning", timeout=8)
        if chosen not in self.available_themes:  # the built-in files themselves were broken
            chosen = "textual-dark"
        self.theme = chosen
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Any) -> None:
        if self.remember_theme:
            theme_files.save_settings({"theme": theme.name}, self.config)

    # -- engine ------------------------------------------------------------------------------------
    def pipeline(self) -> Any:
        """The pipeline object, built on first use (in a worker thread)."""
        with self._pipeline_lock:
            if self._pipeline is None:
                assert self.pipeline_factory is not None
                self._pipeline = self.pipeline_factory(self.bridge, self.cancel)
                try:  # the grid shows every window of the range once the suite is readable
                    pairs = [(w.index, w.domain) for w in self._pipeline.windows()]
                except Exception:  # noqa: BLE001 - not downloaded yet: cells appear with events
                    pairs = []
                if pairs:
                    self.call_from_thread(self._set_windows, pairs)
            return self._pipeline

    def server_up(self) -> bool:
        """A server this app started (through the pipeline) is running."""
        return self._pipeline is not None and getattr(self._pipeline, "server", None) is not None

    def _set_windows(self, pairs: list[tuple[int, str]]) -> None:
        self.model.set_windows(pairs)

    def engine_workers(self) -> list[Worker[Any]]:
        return [w for w in self.workers if w.group == "engine" and not w.is_finished]

    def start_engine(self, stage: str) -> bool:
        if self.mode_name != "dashboard":
            return False
        if self.quitting:
            return False
        busy = {w.name for w in self.engine_workers()}
        if busy:  # one engine job at a time: the pipeline's stages are not meant to race each other
            what = "the whole run" if busy == {"all"} else ", ".join(sorted(busy))
            self.notify(f"{what} is running; wait for it or stop it first (s)", severity="warning")
            return False
        self.cancel.reset()
        self._run_stage(stage)
        return True

    def _run_stage(self, stage: str) -> Worker[Any]:
        def job() -> Any:
            pipeline = self.pipeline()
            return getattr(pipeline, STAGE_METHODS.get(stage, stage))()

        return self.run_worker(job, name=stage, group="engine", thread=True, exit_on_error=False)

    @work(thread=True, group="control", exit_on_error=False, name="stop-server")
    def _stop_server(self, then_exit: bool = False) -> None:
        try:
            for worker in list(self.engine_workers()):
                worker.wait()
            if self._pipeline is not None and hasattr(self._pipeline, "stop_server"):
                self._pipeline.stop_server()
        finally:
            self.call_from_thread(self.model.server_stopped)
            if then_exit:
                self.call_from_thread(self.exit, 0)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place where engine worker outcomes (and failures) are handled."""
        worker = event.worker
        if worker.group not in ("engine", "control", "load"):
            return
        if event.state == WorkerState.ERROR:
            from kldtui.errors import Interrupted, KldError

            error = worker.error
            stage = worker.name if worker.name in STAGES else None
            if isinstance(error, Interrupted):
                if stage:
                    self.model.stages[stage].state = "stopped"
                    self.model.stages[stage].detail = str(error) or "stopped"
                    self.model.dirty.add("stages")
                for s in self.model.stages.values():
                    if s.state == "running" and worker.name == "all":
                        s.state, s.detail = "stopped", str(error) or "stopped"
                        self.model.dirty.add("stages")
                self.model.apply(_note(worker.name, f"stopped: {error}"))
                self.notify(f"{worker.name}: stopped", severity="information")
            else:
                if isinstance(error, KldError):
                    message = str(error)
                else:
                    message = f"internal error: {type(error).__name__}: {error}"
                if stage and self.model.stages[stage].state != "failed":
                    self.model.apply(StageFailed(stage, message=message))
                elif worker.name == "all":
                    for s in self.model.stages.values():
                        if s.state == "running":
                            s.state, s.detail = "failed", message
                            self.model.dirty.add("stages")
                    self.model.apply(_note(worker.name, message, "error"))
                else:
                    self.model.apply(_note(worker.name, message, "error"))
                self.notify(message, title=f"{worker.name} failed", severity="error", timeout=10)
            self.refresh_now()

    # -- messages ----------------------------------------------------------------------------------
    def on_events_pending(self, message: EventsPending) -> None:
        self.apply_events()

    def apply_events(self) -> None:
        for event in self.bridge.take():
            self.model.apply(event)
            if event.kind == "Notice" and getattr(event, "level", "info") != "info":
                self.notify(getattr(event, "text", ""), title=event.stage,
                            severity=getattr(event, "level", "warning"))  # type: ignore[arg-type]

    def refresh_now(self, all_parts: bool = False) -> None:
        """Redraw the parts of the dashboard whose data changed (called by the timer)."""
        if self.mode_name != "dashboard":
            return
        self.apply_events()
        if self.model.server is not None and self._pipeline is not None and not self.server_up() \
                and getattr(self._pipeline, "base_url", None) is None:
            self.model.server_stopped()
            view = self.model.stages["server"]
            if view.state == "done":
                view.detail, view.figures = "stopped", {}
        dirty = self.model.take_dirty()
        if all_parts:
            dirty |= {"stages", "windows", "progress", "log", "live"}
        if not dirty:
            return
        if "stages" in dirty:
            self.query_one("#rail", StageRail).refresh_from(self.model)
        if "windows" in dirty:
            self.query_one("#grid", WindowGrid).refresh(layout=True)
        if "progress" in dirty or "stages" in dirty:
            self.query_one("#progress", ProgressPanel).refresh(layout=True)
        if "log" in dirty:
            self.query_one("#logview", LogView).refresh_from(self.model)
        if "result" in dirty:
            self._result_ready()
        elif "live" in dirty and (self.current_result is None or self.current_result.live
                                  or self.model.stages["compare"].state == "running"):
            live = self.model.live_window_kl()
            if live:
                self.current_result = live_result(live, name="compared so far")
                self.query_one("#resultpane", ResultPane).show(self.current_result)

    def _result_ready(self) -> None:
        report, path = self.model.result_report, self.model.result_path
        if report:
            self._show_result(result_from_report(report, path), report)
        elif path:
            self.load_result_file(path)

    def _show_result(self, result: ResultData, report: dict[str, Any] | None) -> None:
        self.current_result = result
        self.query_one("#resultpane", ResultPane).show(result)
        if self.mode_name == "dashboard":
            self.query_one("#tabs", TabbedContent).active = "result"
            if report is not None and result.path is not None:
                self._add_to_board(result, report)

    # -- reports (viewer, leaderboard, open) -------------------------------------------------------
    @work(thread=True, group="load", exit_on_error=False, name="load-reports")
    def load_reports(self) -> None:
        loaded: list[tuple[dict[str, Any], Path]] = []
        problems: list[str] = []
        for path in self.report_paths:
            try:
                loaded.append((load_report_file(path), path))
            except Exception as exc:  # noqa: BLE001 - one line per bad file, the rest still shows
                problems.append(str(exc))
        self.call_from_thread(self._reports_loaded, loaded, problems)

    def _reports_loaded(self, loaded: list[tuple[dict[str, Any], Path]], problems: list[str]) -> None:
        for problem in problems:
            self.notify(problem, title="report", severity="error", timeout=10)
        if self.mode_name == "viewer" and len(self.report_paths) == 1:
            if loaded:
                report, path = loaded[0]
                result = result_from_report(report, path)
                self.sub_title = result.name
                self._show_result(result, report)
            return
        own = self._own_report_path()
        for report, path in loaded:
            result = result_from_report(report, path)
            self._add_to_board(result, report, rebuild=False)
            if own is not None and path.resolve() == own and self.model.result_report is None:
                self._show_earlier_result(result, report)
        self.rebuild_board()

    def _own_report_path(self) -> Path | None:
        factory_profile = getattr(self.pipeline_factory, "profile", None)
        workdir = getattr(getattr(factory_profile, "run", None), "workdir", None)
        return (Path(workdir) / "comparison.json").resolve() if workdir is not None else None

    def _show_earlier_result(self, result: ResultData, report: dict[str, Any]) -> None:
        """This profile's report from an earlier run: result pane and window KL, until a new one."""
        self.current_result = result
        self.query_one("#resultpane", ResultPane).show(result)
        for bar in result.windows:
            win = self.model.windows.get(bar.index)
            if win is not None and win.kl is None:
                win.kl, win.state = bar.kl, "compared"
        self.model.dirty.add("windows")

    def _add_to_board(self, result: ResultData, report: dict[str, Any], rebuild: bool = True) -> None:
        for i, old in enumerate(self.results):
            if old.path is not None and old.path == result.path:
                del self.results[i], self.reports[i]
                break
        self.results.append(result)
        self.reports.append(report)
        if rebuild:
            self.rebuild_board()

    def rebuild_board(self) -> None:
        self._rank(list(self.results), list(self.reports))

    @work(thread=True, group="load", exclusive=True, exit_on_error=False, name="rank")
    def _rank(self, results: list[ResultData], reports: list[dict[str, Any]]) -> None:
        ties: dict[str, str] = {}
        note = ""
        names = unique_names([r.name for r in results], [r.path for r in results])
        results = [dataclasses.replace(r, name=n) for r, n in zip(results, names, strict=True)]
        order = sorted(range(len(results)), key=lambda i: (results[i].sort_key, results[i].name))
        if len(results) > 1:
            try:
                from kldtui.decide.leaderboard import build_leaderboard

                board = build_leaderboard(reports, names=[r.name for r in results],
                                          paths=[r.path for r in results])
                by_name = {row.name: row for row in board.rows}
                ties = {r.name: by_name[r.name].mark for r in results if r.name in by_name}
                note = f"ties: paired bootstrap against the best; floor: {board.noise_source}"
            except Exception as exc:  # noqa: BLE001 - reports from other suites still rank, untied
                note = f"no tie marks: {exc}"
        ranked = [results[i] for i in order]
        ranked_reports = [reports[i] for i in order]
        self.call_from_thread(self._show_board, ranked, ranked_reports, ties, note)

    def _show_board(self, results: list[ResultData], reports: list[dict[str, Any]],
                    ties: dict[str, str], note: str) -> None:
        self.results, self.reports = results, reports
        table = self.query_one("#board", LeaderboardTable)
        table.marked.clear()
        table.set_results(results, {i: ties.get(r.name, "") for i, r in enumerate(results)})
        n = len(results)
        head = f"{n} report{'s' if n != 1 else ''}, sorted by mean KL (95% window-bootstrap interval)"
        keys = "Enter opens a report; space marks two, d shows their per-window difference"
        self.leaderboard_note = f"{head}. {note}".strip() + ("\n" + keys if n > 1 else "")
        self.query_one("#board-note", Static).update(self.leaderboard_note)
        if self.mode_name == "viewer":
            table.focus()

    def load_result_file(self, path: str) -> None:
        self._load_one(path)

    @work(thread=True, group="load", exit_on_error=False, name="open")
    def _load_one(self, path: str) -> None:
        try:
            report = load_report_file(path)
        except Exception as exc:  # noqa: BLE001 - shown as one line
            self.call_from_thread(self.notify, str(exc), title="report", severity="error", timeout=10)
            return
        self.call_from_thread(self._show_result, result_from_report(report, path), report)

    @on(LeaderboardTable.Open)
    def open_row(self, message: LeaderboardTable.Open) -> None:
        if 0 <= message.index < len(self.results):
            self.push_screen(ResultScreen(self.results[message.index]))

    # -- actions -----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        dashboard_only = {"run_all", "start_stage", "stop", "stop_server", "search_log", "show_tab"}
        if action in dashboard_only and self.mode_name != "dashboard":
            return False
        if action in ("mark", "diff") and not self.query("#board"):
            return False
        return True

    def action_run_all(self) -> None:
        self.start_engine("all")

    def action_start_stage(self, stage: str) -> None:
        self.start_engine(stage)

    def action_stop(self) -> None:
        running = self.engine_workers()
        if not running:
            self.notify("nothing is running")
            return
        self.cancel.set("stopped by the user")
        self.notify(f"stopping {', '.join(sorted(w.name for w in running))}…")

    def action_stop_server(self) -> None:
        if self._pipeline is None:
            self.notify("no server was started from here")
            return
        self.cancel.set("server stopped by the user")
        self._stop_server()

    def action_open_result(self) -> None:
        default = self.model.result_path or (self.current_result.path if self.current_result else "") or ""
        if not default and self._pipeline is not None and hasattr(self._pipeline, "report_path"):
            default = str(self._pipeline.report_path)

        def chosen(path: str | None) -> None:
            if path:
                self.load_result_file(path)

        self.push_screen(PathScreen("Open a comparison report (JSON):", default), chosen)

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_search_log(self) -> None:
        self.action_show_tab("log")
        self.query_one("#logview", LogView).open_search()

    def action_escape(self) -> None:
        if self.mode_name == "dashboard":
            log = self.query_one("#logview", LogView)
            if log.query_text or log.query_one("#log-search", Input).display:
                log.clear_search()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_mark(self) -> None:
        self.query_one("#board", LeaderboardTable).toggle_mark()

    def action_diff(self) -> None:
        table = self.query_one("#board", LeaderboardTable)
        marked = sorted(table.marked)
        if len(marked) != 2:
            if self.mode_name == "dashboard" and len(self.results) != 2:
                self.action_show_tab("diff")
            if len(self.results) == 2:
                marked = [0, 1]
            else:
                self.notify("mark two candidates with space first")
                return
        self._diff(marked[0], marked[1])

    @work(thread=True, group="load", exclusive=True, exit_on_error=False, name="diff")
    def _diff(self, i: int, j: int) -> None:
        a, b = self.results[i], self.results[j]
        try:
            from kldtui.decide.paired import paired_diff

            diff = paired_diff(self.reports[i], self.reports[j], name_a=a.name, name_b=b.name,
                               path_a=a.path, path_b=b.path)
        except Exception as exc:  # noqa: BLE001 - one line
            self.call_from_thread(self.notify, str(exc), title="diff", severity="error", timeout=10)
            return
        bars = [WindowBar(w, d, kb - ka) for w, d, ka, kb in
                zip(diff.window_index, diff.domain, diff.kl_a, diff.kl_b, strict=True)]
        text = f"A = {a.name}, B = {b.name}\n{diff.verdict}\nfloor: {diff.noise_source}"
        self.call_from_thread(self._show_diff, text, bars)

    def _show_diff(self, text: str, bars: list[WindowBar]) -> None:
        pane = self.query_one("#diffpane", DiffPane)
        pane.display = True
        pane.show(text, bars)
        if self.mode_name == "dashboard":
            self.action_show_tab("diff")

    async def action_quit(self) -> None:
        if self.mode_name != "dashboard" or self.quitting:
            self.exit(0)
            return
        server_up = self.server_up()
        running = self.engine_workers()
        if not server_up and not running:
            self.exit(0)
            return

        what = "A server is running" if server_up else "A stage is running"

        def answered(yes: bool | None) -> None:
            if yes:
                self.quitting = True
                self.cancel.set("quit")
                self.notify("stopping the server, then quitting…")
                self._stop_server(then_exit=True)

        self.push_screen(ConfirmScreen(f"{what}. Stop it and quit?"), answered)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help", "Keys and what they do", self.action_help)
        if self.mode_name == "dashboard":
            yield SystemCommand("Run all", "Run every stage (reference to compare)", self.action_run_all)
            for stage in STAGES:
                yield SystemCommand(f"Start {STAGE_TITLES[stage].lower()}", f"Start the {stage} stage",
                                    lambda s=stage: self.action_start_stage(s))
            yield SystemCommand("Stop", "Stop the running stage(s)", self.action_stop)
            yield SystemCommand("Stop server", "Stop the candidate server", self.action_stop_server)
            yield SystemCommand("Search log", "Search the server log", self.action_search_log)
        yield SystemCommand("Open result", "Open a comparison report", self.action_open_result)


def load_report_file(path: str | Path) -> dict[str, Any]:
    """A report, normalised (``kldtui.formats.report.load_report``: json only, no numpy, so the viewer of
    one report starts fast); the decide package's loader when that module is absent."""
    try:
        from kldtui.formats.report import load_report
    except ImportError:
        from kldtui.decide.reports import load_report_file as load_report
    return load_report(path)


def _note(stage: str, text: str, level: str = "info") -> Event:
    from kldtui.events import Notice

    return Notice(stage, text=text, level=level)  # type: ignore[arg-type]


def create_app(*, profile: Any = None, pipeline_factory: PipelineFactory | None = None,
               reports: Sequence[str | Path] = (), theme: str | None = None, config_dir: Path | None = None,
               title: str | None = None, windows: Iterable[tuple[int, str]] = (), autostart: bool = False,
               remember_theme: bool = True) -> KldApp:
    """The one way to build the app (CLI and tests).

    Dashboard: give ``profile`` (a :class:`kldtui.workflow.profile.Profile`; the app drives
    ``kldtui.workflow.pipeline.Pipeline(profile, emit, cancel)``, shows the suite's windows at once and
    lists earlier reports of its workdir in the leaderboard) or any ``pipeline_factory(emit,
    cancel)`` returning an object with ``run_all``, ``reference``, ``serve``, ``capture``,
    ``finalize``, ``compare`` and ``stop_server``. Viewer: neither, and ``reports`` (one: the
    result pane; several: the leaderboard). ``config_dir`` overrides ``$XDG_CONFIG_HOME/kldtui``
    (themes and remembered settings).
    """
    if profile is not None:
        if pipeline_factory is None:
            pipeline_factory = _pipeline_factory_for(profile)
        windows = list(windows) or _profile_windows(profile)
        if not reports:
            reports = _profile_reports(profile)
        if title is None:
            title = f"kldtui — {Path(profile.path).parent.name + '/' + Path(profile.path).name}" \
                if getattr(profile, "path", None) else "kldtui"
    if pipeline_factory is None and not reports:
        from kldtui.errors import BadInput

        raise BadInput("nothing to show: give a profile (dashboard) or report files (viewer)")
    app = KldApp(pipeline_factory=pipeline_factory, reports=reports, theme=theme, config_dir=config_dir,
                 title=title or "kldtui", windows=windows, autostart=autostart,
                 remember_theme=remember_theme)
    abort = getattr(getattr(profile, "compare", None), "abort_kl_above", None)
    if abort is not None:  # early abort: the rail says so before the run
        app.model.stages["compare"].detail = f"aborts if a window's KL > {abort:g}"
    return app


def _pipeline_factory_for(profile: Any) -> PipelineFactory:
    def factory(emit: Callable[[Event], None], cancel: Cancel) -> Any:
        from kldtui.workflow.pipeline import Pipeline

        return Pipeline(profile, emit, cancel)

    factory.profile = profile  # type: ignore[attr-defined]  # where its earlier report lives
    return factory


def _profile_windows(profile: Any) -> list[tuple[int, str]]:
    """(index, domain) of the windows the profile will run, read cheaply from the suite manifest."""
    import json

    try:
        local = profile.reference.local_dir
        data = json.loads((Path(local) / "suite-manifest.json").read_text(encoding="utf-8"))
        start = profile.run.start_window
        stop = profile.run.stop_window
        out = []
        for w in data.get("windows", []):
            idx = int(w["index"])
            if idx >= start and (stop is None or idx < stop):
                out.append((idx, str(w.get("domain", ""))))
        return out
    except Exception:  # noqa: BLE001 - not downloaded yet: the grid fills from events
        return []


def _profile_reports(profile: Any) -> list[str]:
    """Reports already in the profile's workdir (its own comparison.json), for the leaderboard."""
    workdir = getattr(profile.run, "workdir", None)
    if workdir is None or not Path(workdir).is_dir():
        return []
    return sorted(str(p) for p in Path(workdir).glob("comparison*.json"))


def run_dashboard(profile_path: str | Path | None = None, theme: str | None = None,
                  demo_workdir: str | Path | None = None) -> int:
    """Open the dashboard for a profile (``./kldtui.toml`` by default) or on the demo pipeline."""
    if demo_workdir is not None:
        from kldtui.workflow import demo

        profile = demo.prepare_demo(Path(demo_workdir))
        title: str | None = "kldtui demo"
    else:
        from kldtui.workflow.profile import load_profile

        profile = load_profile(profile_path or "kldtui.toml")
        title = None
    # The demo is a new user's first command: it runs by itself; a profile waits for `r`.
    app = create_app(profile=profile, theme=theme, title=title, autostart=demo_workdir is not None)
    try:
        code = app.run()
    finally:
        if app.server_up():  # closed some other way than q (which stops it): never leave it running
            app._pipeline.stop_server(reason="dashboard closed")
    return int(code or 0)


def run_viewer(paths: Sequence[str | Path], theme: str | None = None) -> int:
    """Show one saved report (result pane) or several (leaderboard)."""
    from kldtui.errors import BadInput

    for p in paths:
        if not Path(p).is_file():
            raise BadInput(f"{p}: comparison report not found; give the path of a report JSON")
    app = create_app(reports=list(paths), theme=theme, title="kldtui view")
    return int(app.run() or 0)
