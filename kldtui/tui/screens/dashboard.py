"""The dashboard: drives a pipeline's stages, shows their events live, and its reports.

Engine work runs in thread workers of the ``engine`` group (one job at a time); stopping the
server runs in the ``control`` group; loading/ranking reports in ``load``. The engine's ``emit``
is an :class:`EventBridge` that posts one :class:`EventsPending` message per batch (progress
coalesced to the latest per task); a 10 Hz timer redraws only the widgets whose part of the model
changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerCancelled, WorkerFailed, WorkerState

from kldtui.events import (
    PIPELINE_STAGES,
    Cancel,
    Event,
    LeaderboardUpdated,
    Notice,
    PipelineStageName,
    Progress,
    StageFailed,
    StageName,
)
from kldtui.formats.report_model import ComparisonReport
from kldtui.formats.report_names import FolderNoise
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.tui.model import STAGE_TITLES, STAGES, DashboardModel, ShownCandidate
from kldtui.tui.resultdata import Band, ResultData, WindowBar, live_result, result_from_report
from kldtui.tui.screens.board import LOAD_GROUP, BoardScreen
from kldtui.tui.widgets import (
    CampaignBoard,
    DiffPane,
    LeaderboardTable,
    LogView,
    ProgressPanel,
    ResultPane,
    StageRail,
    WindowGrid,
)
from kldtui.tui.widgets.key_help import HelpSection
from kldtui.tui.widgets.plain import PlainStatic
from kldtui.workflow.control import PipelineControl, StageRequest
from kldtui.workflow.next_steps import shown_path
from kldtui.workflow.state import RunState
from kldtui.workspace import Workspace

REFRESH_INTERVAL = 0.1
ENGINE_GROUP, CONTROL_GROUP = "engine", "control"
# In a terminal narrower than this the Leaderboard and Diff tabs take the window grid's room: beside the
# grid (30% of the width, at least 26 columns) they had 54 columns at 80, and the ranking's and the campaign
# board's intervals were cut mid-figure. From here on the pane beside the grid has the 80 columns the
# ranking needs.
GRID_BESIDE_TABLES_FROM = 116
TABLE_TABS = ("leaderboard", "diff")  # the tabs whose tables and charts take the grid's room
NOT_OURS_SECONDS = 15  # the notice that the work folder's run is another profile's (a long line), shown


PipelineFactory = Callable[[Callable[[Event], None], Cancel], PipelineControl]


# -- engine -> screen ------------------------------------------------------------------------------
def _pipeline_stage(name: str) -> PipelineStageName | None:
    """The stage an engine worker runs (workers are named by their StageRequest)."""
    for stage in PIPELINE_STAGES:
        if stage == name:
            return stage
    return None


def _file_signature(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of ``path``, None where it cannot be read: whether a file changed since."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class EventsPending(Message):
    """Engine events are waiting in the bridge (posted once per batch, not per event)."""


class EventBridge:
    """The engine's ``emit``: thread-safe, keeps event order, and coalesces progress.

    A progress event replaces a pending one of the same stage and task unless another event came
    in between (so a ``StageStarted`` is never overtaken by the progress that followed it).
    """

    def __init__(self, target: Any) -> None:
        self.target = target  # anything with post_message (the dashboard screen)
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
            self.target.post_message(EventsPending())

    def take(self) -> list[Event]:
        with self._lock:
            pending, self._pending = self._pending, []
            self._slot.clear()
        return pending


class ResettableCancel(Cancel):
    """The dashboard's cancel flag: set on stop/quit, cleared when the next stage starts."""

    def reset(self) -> None:
        self._flag.clear()
        self.reason = "interrupted"


KEYS_HELP = (
    HelpSection("Dashboard", (
        ("r", "run all stages (download and server start overlap)"),
        ("1 … 5", "start one stage (1 reference … 5 compare)"),
        ("s", "stop the running stage(s); state on disk stays resumable"),
        ("x", "stop the server"),
        ("l e b", "show the log / result / leaderboard tab (under "
                  f"{GRID_BESIDE_TABLES_FROM} columns the Leaderboard and Diff tabs take the grid's room)"),
        ("d", "the Diff tab: the difference of two reports on the leaderboard (the two marked, or the "
              "only two)"),
        ("/", "search the log (Esc clears)"),
        ("Tab", "move the focus: the grid (it has it first; its edge is lit), the tab bar, the open tab; "
                "↑ ↓ PgUp PgDn Home End scroll the grid, or the log, result or diff, that has it"),
    )),
    HelpSection("Leaderboard tab", (
        ("Enter", "open the selected report (Esc: back)"),
        ("space", "mark a row; with two marked, d shows their difference"),
    )),
)


class DashboardScreen(BoardScreen):
    KEYS_HELP = KEYS_HELP
    BINDINGS: ClassVar[list[Binding]] = [  # type: ignore[assignment]
        Binding("r", "run_all", "run all"),
        Binding("1", "start_stage('reference')", "reference", show=False),
        Binding("2", "start_stage('server')", "server", show=False),
        Binding("3", "start_stage('capture')", "capture", show=False),
        Binding("4", "start_stage('finalize')", "finalize", show=False),
        Binding("5", "start_stage('compare')", "compare", show=False),
        Binding("s", "stop", "stop"),
        Binding("x", "stop_server", "stop server", show=False),
        Binding("l", "show_tab('log')", "log", show=False),
        Binding("e", "show_tab('result')", "result", show=False),
        Binding("b", "show_board", "board", show=False),
        Binding("d", "diff", "diff", show=False),
        Binding("space", "mark", "mark", show=False),
        Binding("slash", "search_log", "search", key_display="/"),
        Binding("escape", "escape", "back", show=False),
    ]

    def __init__(self, pipeline_factory: PipelineFactory, *, report_paths: list[Path],
                 own_report: Path | None = None, windows: list[tuple[int, str]] | None = None,
                 autostart: bool = False, workspace: Workspace | None = None,
                 profile_name: str | None = None, candidate: ShownCandidate | None = None,
                 unit: str | None = None, suite_hash: str | None = None, not_ours: str | None = None) -> None:
        super().__init__(report_paths)
        # the line saying the work folder's run is another profile's (kldtui.workflow.owners.view_problem):
        # said on mount; ``workspace`` is then None, so nothing of that run is shown as this one's
        self.not_ours = not_ours
        # the run's suite (its token hash; None until known: the suite is not there yet): the ranking
        # holds its reports only, and those that record no suite; the others are left out, by absolute
        # path (their path as given, their suite), and named in a note above it (other_suites_note)
        self.suite_hash = suite_hash
        self.other_suites: dict[str, tuple[Path, str]] = {}
        self.workspace = workspace  # read on mount: a reopened work folder shows what it holds
        self.workspace_candidate = candidate  # a campaign's: which candidate ``workspace`` holds
        self.profile_name = profile_name
        self.suite_windows = 0
        self.pipeline_factory = pipeline_factory
        self.own_report = own_report.resolve() if own_report is not None else None
        self.autostart = autostart
        self.model = DashboardModel()
        self._campaign_reports_loading: set[str] = set()  # absolute paths of campaign reports on their way
        # campaign reports that failed to load, by absolute path: the file's (size, mtime_ns) then; a campaign
        # update tries one again (and says so again) only once the file has changed
        self._campaign_reports_failed: dict[str, tuple[int, int] | None] = {}
        # ``unit``: what the suite's windows are called (a hidden-state suite's contexts), when known
        self.model.set_windows(list(windows or []), unit)
        self.model.take_dirty()
        self.cancel = ResettableCancel()
        self.bridge = EventBridge(self)
        self._pipeline: PipelineControl | None = None
        self._pipeline_lock = threading.Lock()
        self.quitting = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield StageRail(id="rail")
        with Horizontal(id="body"):
            with VerticalScroll(id="left"):
                yield Static(self.grid_title(), classes="section-title", id="grid-title")
                yield WindowGrid(self.model, id="grid")
            with TabbedContent(id="tabs", initial="log"):
                with TabPane("Log", id="log"):
                    yield LogView(self.model, id="logview")
                with TabPane("Result", id="result"):
                    yield ResultPane(id="resultpane")
                with TabPane("Leaderboard", id="leaderboard"):
                    yield CampaignBoard(id="campaign")
                    yield PlainStatic("", id="board-note")
                    yield LeaderboardTable(id="board")
                    yield PlainStatic("", id="board-verdict")
                with TabPane("Diff", id="diff"):
                    yield DiffPane(id="diffpane")
        yield ProgressPanel(self.model, id="progress")
        yield Footer()

    def grid_title(self) -> str:
        """The grid's heading: the run's windows as the suite calls them (``Contexts``)."""
        return f"{self.model.unit.capitalize()}s"

    def on_mount(self) -> None:
        self.app.sub_title = "dashboard"
        self.set_interval(REFRESH_INTERVAL, self.refresh_now)
        self.refresh_now(all_parts=True)
        if self.report_paths:
            self.load_reports()
        if self.not_ours is not None:
            self.model.apply(Notice("run", self.not_ours, level="warning"))
            self.notify(self.not_ours, title="run", severity="warning", timeout=NOT_OURS_SECONDS)
        if self.workspace is not None and not self.autostart:
            self._load_disk_state(self.workspace)
        if self.autostart:
            self.action_run_all()

    @work(thread=True, group=LOAD_GROUP, exit_on_error=False, name="disk-state")
    def _load_disk_state(self, workspace: Workspace) -> None:
        from kldtui.workflow.state import load_state

        state = load_state(workspace)
        self.deliver(self.apply_disk_state, state)
        # a campaign also says its standings from the reports on disk (kldtui.workflow.campaign);
        # a single candidate's pipeline has nothing more to say
        announce = getattr(self.pipeline(), "announce_disk_state", None)
        if announce is not None and not self.engine_workers():
            announce()
            self.deliver(self._standings_announced)  # after the standings' events (one message queue)

    def apply_disk_state(self, state: RunState) -> None:
        """Show what the work folder holds (a finished or interrupted earlier run)."""
        if self.engine_workers():
            return  # a run started meanwhile: its events are the truth
        self.suite_windows = state.suite_windows
        if not state.anything and not state.reference_ready:
            return  # a new folder: every card idle is the truth
        if state.anything and self.workspace_candidate is not None:
            self.model.shown_candidate = self.workspace_candidate
        self.model.apply_disk_state(state)
        if not self._is_campaign():  # a campaign's next steps come with its standings (_standings_announced)
            self._say_next_steps(state)
        self.refresh_now()

    def _standings_announced(self) -> None:
        """A reopened campaign's standings on disk have been sent: what to do next names its reports
        together, as its ``--batch`` run said (nothing when none is ranked)."""
        if self.engine_workers():
            return  # a run started meanwhile: it says what to do when it ends
        self.apply_events()
        self._say_next_steps(None)
        self.refresh_now()

    def _say_next_steps(self, state: RunState | None) -> None:
        """What to do now (kldtui.workflow.next_steps, the lines ``--batch`` prints): a campaign's from
        its standings, else from ``state``, the run's; said where there are any and they changed
        (the report's event may have set them already)."""
        from kldtui.workflow.next_steps import next_steps

        lines = next_steps(self.model.campaign if self._is_campaign() else state, self.profile_name)
        if lines and lines != self.model.next_lines:
            self.model.set_next_steps(lines)

    def on_unmount(self) -> None:
        self.cancel.set("the dashboard closed")  # engine threads stop at their next safe point

    # -- engine ------------------------------------------------------------------------------------
    def pipeline(self) -> PipelineControl:
        """The pipeline object, built on first use (in a worker thread)."""
        with self._pipeline_lock:
            if self._pipeline is None:
                self._pipeline = self.pipeline_factory(self.bridge, self.cancel)
                pairs = self._pipeline.window_list()  # the grid shows every window of the range
                if pairs:
                    self.app.call_from_thread(self.model.set_windows, pairs)
            return self._pipeline

    def server_up(self) -> bool:
        """A server this dashboard started (through the pipeline) is running."""
        return self._pipeline is not None and self._pipeline.server_running

    def engine_workers(self) -> list[Worker[Any]]:
        return [w for w in self.app.workers if w.group == ENGINE_GROUP and not w.is_finished]

    def start_engine(self, stage: StageRequest) -> bool:
        if self.quitting:
            return False
        busy = {w.name for w in self.engine_workers()}
        if busy:  # one engine job at a time: the pipeline's stages are not meant to race each other
            what = "the whole run" if busy == {"all"} else ", ".join(sorted(busy))
            self.notify(f"{what} is running; wait for it or stop it first (s)", severity="warning")
            return False
        self.cancel.reset()
        self.model.set_starting("the whole run" if stage == "all" else f"the {stage} stage")
        self.refresh_now()
        self._run_stage(stage)
        return True

    def _run_stage(self, stage: StageRequest) -> Worker[Any]:
        def job() -> object:
            return self.pipeline().run_stage(stage)

        return self.run_worker(job, name=stage, group=ENGINE_GROUP, thread=True, exit_on_error=False)

    @work(group=CONTROL_GROUP, exit_on_error=False, name="stop-server")
    async def _stop_server(self, then_exit: bool = False, announce: bool = False) -> None:
        try:
            for worker in self.engine_workers():  # the engine stops at its next safe point first
                with contextlib.suppress(WorkerFailed, WorkerCancelled):
                    await worker.wait()
            if self._pipeline is not None:
                reason = "quitting" if then_exit else "stopped from the dashboard"
                await asyncio.to_thread(self._pipeline.stop_server, reason)
        finally:
            self.model.server_stopped()
            if then_exit:
                self.app.exit(0)
            elif announce:
                self.notify("the server is stopped (state on disk stays resumable)")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Textual also calls BoardScreen's handler (every class's handler in the MRO runs): it reports
        # failures; calling it here too reported every failure and stop twice
        worker = event.worker
        if worker.group == ENGINE_GROUP and event.state in (WorkerState.SUCCESS, WorkerState.CANCELLED):
            self.model.set_starting(None)
        if (event.state == WorkerState.SUCCESS and worker.group == ENGINE_GROUP
                and isinstance(worker.result, RunState)):
            self.run_finished(worker.result)

    def run_finished(self, state: RunState) -> None:
        """A whole run ended: the state the pipeline returned (its report, the suite's size) says
        what to do next; nothing is read back from the work folder."""
        self.suite_windows = state.suite_windows
        self.apply_events()  # the campaign's final standings, sent before its run returned
        self.model.show_leader(state)  # a campaign's end: its best candidate, not its last capture
        self._say_next_steps(state)
        self.refresh_now()

    def worker_failed(self, worker: Worker[Any]) -> None:
        if worker.group != ENGINE_GROUP:
            super().worker_failed(worker)
            return
        from kldtui.errors import Interrupted, KldError

        error = worker.error
        stage: PipelineStageName | None = _pipeline_stage(worker.name)
        where: StageName = stage or "run"
        self.model.set_starting(None)
        if isinstance(error, Interrupted):
            self.apply_events()  # what the engine said before it stopped comes first
            if stage is not None and self.model.stages[stage].state != "running":
                view = self.model.stages[stage]
                view.state, view.detail = "stopped", str(error) or "stopped"
            self.model.stopped(None, str(error) or "stopped")
            self.model.apply(Notice(where, f"stopped: {error}"))
            self.notify(f"{worker.name}: stopped", severity="information")
        else:
            message = str(error) if isinstance(error, KldError) else \
                f"internal error: {type(error).__name__}: {error}"
            self.apply_events()
            if stage is not None and isinstance(error, KldError) and self.model.stages[stage].state == "done":
                # a done stage asked again and refused before it started (a campaign runs its stages
                # candidate by candidate): nothing ran, so what it did is still done
                self.model.apply(Notice(stage, f"not run: {message}", level="error"))
                self.notify(message, title=f"{worker.name} not run", severity="error", timeout=10)
                self.refresh_now()
                return
            if stage is not None and self.model.stages[stage].state != "failed":
                self.model.apply(StageFailed(stage, message=message))
            elif stage is None:
                for view in self.model.stages.values():
                    if view.state == "running":
                        view.state, view.detail = "failed", message
                        self.model.dirty.add("stages")
                self.model.apply(Notice(where, message, level="error"))
            self.model.stopped(None, "stopped: another stage failed")
            self.notify(message, title=f"{worker.name} failed", severity="error", timeout=10)
            campaign = self.model.campaign
            if campaign is not None and campaign.final:  # a campaign ended failed, the others ranked
                self._show_leader_after_failure()
        self.refresh_now()

    @work(thread=True, group=LOAD_GROUP, exit_on_error=False, name="leader")
    def _show_leader_after_failure(self) -> None:
        """A campaign that ended failed with the others ranked ends on its leader too (its run
        state read from the work folder: ``run_all`` returned none)."""
        leader_state = getattr(self._pipeline, "leader_state", None)
        state = leader_state() if callable(leader_state) else None
        if state is not None:
            self.deliver(self._show_leader, state)

    def _show_leader(self, state: RunState) -> None:
        if not self.engine_workers() and self.model.show_leader(state):
            self.refresh_now()


    # -- messages ----------------------------------------------------------------------------------
    def on_events_pending(self, message: EventsPending) -> None:
        self.apply_events()

    def apply_events(self) -> None:
        for event in self.bridge.take():
            self.model.apply(event)
            if isinstance(event, Notice) and event.level != "info":
                self.notify(event.text, title=event.stage, severity=event.level)

    def refresh_now(self, all_parts: bool = False) -> None:
        """Redraw the parts of the dashboard whose data changed (called by the timer)."""
        self.apply_events()
        pipeline = self._pipeline
        if self.model.server is not None and pipeline is not None and not pipeline.server_running \
                and pipeline.server_url is None:
            self.model.server_stopped()
        dirty = self.model.take_dirty()
        if all_parts:
            dirty |= {"stages", "windows", "progress", "log", "live", "unit"}
        if not dirty:
            return
        if "unit" in dirty:  # the suite's windows are contexts (a hidden-state suite): the words follow
            self.query_one("#grid-title", Static).update(self.grid_title())
            self.query_one("#resultpane", ResultPane).set_unit(self.model.unit)
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
            if live:  # named: a campaign's candidate (it follows the candidate before's report on this
                # tab), else the served model (the pane says "live: windows compared so far" beside it)
                shown = self.model.shown_candidate if self.model.candidate is not None else None
                served = self.model.server.served_model_name if self.model.server is not None else None
                self.current_result = live_result(live, name=shown.name if shown else served or "this run",
                                                  unit=self.model.unit)
                self.query_one("#resultpane", ResultPane).show(self.current_result)
        if "campaign" in dirty:
            self.query_one("#campaign", CampaignBoard).show(self.model.campaign, self.model.candidate)
            self.update_board_note()
            campaign = self.model.campaign
            if campaign is not None:
                self._rank_every_compared_candidate(campaign)
            if campaign is not None and campaign.final:
                self.action_show_tab("leaderboard")  # a campaign ends on its leaderboard
            # the reports' ties and d use the campaign's measured model too: at its end, and when a
            # finished campaign's work folder is opened again (its board then comes from the folder)
            if campaign is not None and campaign.noise_path and self.take_folder_noise(
                    FolderNoise((Path(campaign.noise_path),)), say=False):  # its suite's, by the campaign
                self.rebuild_board()

    def _rank_every_compared_candidate(self, campaign: LeaderboardUpdated) -> None:
        """The ranking below the campaign board holds every candidate the campaign ranked. A
        candidate's report joins it when its result comes (``ResultReady``), but the model keeps the
        latest result only: two that came in one batch (an app slowed down by a loaded machine) left
        the earlier off the ranking for good. The campaign's standings name every report."""
        on_board = {os.path.abspath(r.path) for r in self.results if r.path} | self._campaign_reports_loading
        missing = [(row.name, row.report_path) for row in campaign.rows
                   if row.state == "compared" and row.rank is not None and row.report_path
                   and os.path.abspath(row.report_path) not in on_board]
        if missing:
            self._campaign_reports_loading |= {os.path.abspath(path) for _, path in missing}
            self._load_campaign_reports(missing, dict(self._campaign_reports_failed))

    @work(thread=True, group=LOAD_GROUP, exit_on_error=False, name="campaign-reports")
    def _load_campaign_reports(self, named: list[tuple[str, str]],
                               failed: dict[str, tuple[int, int] | None]) -> None:
        from kldtui.formats.report import load_report
        from kldtui.formats.report_model import REPORT_REMEDY

        loaded: list[tuple[str, str, ComparisonReport]] = []
        failures: dict[str, tuple[int, int] | None] = {}
        for name, path in named:
            key = os.path.abspath(path)
            signature = _file_signature(path)
            if key in failed and failed[key] == signature:
                continue  # said once; unchanged since
            try:
                loaded.append((name, path, load_report(path)))
            except Exception as exc:  # noqa: BLE001 - one line; the others still rank
                failures[key] = signature
                problem = str(exc).removesuffix(f"; {REPORT_REMEDY}")  # this one's remedy is more precise
                self.deliver(self.notify, f"{problem}; it joins the ranking once the file changes (compare "
                             f"{name} again to rewrite it)", title="report", severity="error", timeout=10)
        self.deliver(self._campaign_reports_loaded, [path for _, path in named], loaded, failures)

    def _campaign_reports_loaded(self, asked: list[str], loaded: list[tuple[str, str, ComparisonReport]],
                                 failures: dict[str, tuple[int, int] | None]) -> None:
        self._campaign_reports_loading -= {os.path.abspath(path) for path in asked}
        self._campaign_reports_failed.update(failures)
        for _, path, _ in loaded:
            self._campaign_reports_failed.pop(os.path.abspath(path), None)
        on_board = {os.path.abspath(r.path) for r in self.results if r.path}
        added = False
        for _, _, report in loaded:  # the campaign's reports: of the run's suite
            self.learn_suite(report.suite_token_hash_sha256)
        for name, path, report in loaded:
            if os.path.abspath(path) not in on_board:  # its ResultReady may have come meanwhile
                self.add_to_board(result_from_report(report, path, name), report, rebuild=False)
                added = True
        if added:
            self.rebuild_board()

    def _is_campaign(self) -> bool:
        """Whether this dashboard shows a campaign (its profile's folders are a campaign candidate's, or
        its standings or a candidate of it arrived)."""
        return (self.workspace_candidate is not None or self.model.campaign is not None
                or self.model.candidate is not None)

    def _result_ready(self) -> None:
        report, path = self.model.result_report, self.model.result_path
        if report is not None:  # the run's (a campaign candidate's) report: of the run's suite
            self.learn_suite(report.suite_token_hash_sha256)
        # a campaign's next steps are its reports together, said when it ends (run_finished): one
        # candidate's report is not what to diff next
        if path and report and not self.model.next_lines and not self._is_campaign():
            from kldtui.workflow.next_steps import report_next_steps

            self.model.set_next_steps(report_next_steps(path, report.window_range, self.suite_windows,
                                                        self.profile_name, unit=self.model.unit))
        if report:  # a campaign's named as the campaign names it
            self.show_result(result_from_report(report, path, self.model.result_name), report)
        elif path:
            self.load_result_file(path)

    def show_result(self, result: ResultData, report: ComparisonReport | None) -> None:
        super().show_result(result, report)
        self.action_show_tab("result")
        other = not result.live and result.path is not None and not self._is_own(result.path)
        self.model.set_shown_report(shown_path(result.path) if other and result.path else None)
        if result.path is not None and result.path in self.model.repeat_reports:
            return  # a campaign's repeat capture: the noise model, not a candidate to rank
        if report is not None and result.path is not None:
            self.add_to_board(result, report)

    def add_to_board(self, result: ResultData, report: ComparisonReport, rebuild: bool = True) -> None:
        """A report joins the ranking where it is of the run's suite (or records none: unknown is not
        another suite, :func:`~kldtui.formats.report_names.other_suite`); one of another suite (a work
        folder that holds ``kldtui demo`` and ``kldtui demo --hidden``) is left out, and the note above
        the ranking says how many and the command that ranks them (:meth:`ranking_notes`)."""
        if self._left_out(result, report):
            if rebuild:
                self.update_board_note()
            return
        super().add_to_board(result, report, rebuild)

    def _left_out(self, result: ResultData, report: ComparisonReport) -> bool:
        """Whether ``report`` is of another suite than the run's (set aside, with its suite, in
        :attr:`other_suites`): the one test :meth:`add_to_board` and :meth:`learn_suite` ask."""
        from kldtui.formats.report_names import other_suite

        suite = report.suite_token_hash_sha256
        if suite and result.path is not None and other_suite(self.suite_hash, suite):
            self.other_suites[os.path.abspath(result.path)] = (Path(result.path), suite)
            return True
        return False

    def learn_suite(self, suite: str | None) -> None:
        """The run's suite, from its own report, where it was not known when the dashboard opened (the
        suite was not downloaded yet): the reports of other suites on the ranking leave it."""
        if self.suite_hash is not None or not suite:
            return
        self.suite_hash = suite
        kept = [i for i, (result, report) in enumerate(zip(self.results, self.reports, strict=True))
                if not self._left_out(result, report)]
        if len(kept) == len(self.results):
            return
        self.results = [self.results[i] for i in kept]
        self.reports = [self.reports[i] for i in kept]
        self.rebuild_board()

    def ranking_notes(self) -> list[tuple[str, str]]:
        """The ranking's notes, then the one naming the reports of other suites left out."""
        from kldtui.formats.report_names import other_suites_note, suite_groups

        left_out = list(self.other_suites.values())
        groups = suite_groups([path for path, _ in left_out], [suite for _, suite in left_out])
        note = other_suites_note(groups, "view")
        return [*super().ranking_notes(), *([note] if note is not None else [])]

    def _own_report(self) -> Path | None:
        if self.model.result_path:
            return Path(self.model.result_path).resolve()
        return self.own_report

    def _is_own(self, path: str) -> bool:
        own = self._own_report()
        return own is None or Path(path).resolve() == own

    def result_note(self, result: ResultData) -> str:
        if result.live or result.path is None or self._is_own(result.path):
            return ""
        own = self._own_report()
        return f"opened with o; this run's report is {shown_path(own)}" if own else "opened with o"

    # -- reports -----------------------------------------------------------------------------------
    def default_report_path(self) -> str:
        if self.model.result_path:
            return self.model.result_path
        return super().default_report_path() or (str(self.own_report) if self.own_report else "")

    def diff_needs_marks(self) -> None:
        # under two reports the Diff tab's placeholder says what to do; with more, two are marked on the
        # ranking (space), so the ranking is shown with the focus that marks them
        if len(self.results) < 2:
            self.action_show_tab("diff")
        else:
            self.action_show_board()
        super().diff_needs_marks()

    def show_diff(self, text: str, bars: list[WindowBar], band: Band | None = None,
                  verdict: str = "", unit: str = WINDOW_UNIT, headline: str = "") -> None:
        super().show_diff(text, bars, band, verdict, unit, headline)
        self.action_show_tab("diff")
        # d asked for the difference: its keys (the arrows, End) scroll it at once, wherever the focus was,
        # as b puts it on the ranking
        self.query_one("#diffpane", DiffPane).focus()

    # -- actions -----------------------------------------------------------------------------------
    def action_run_all(self) -> None:
        self.start_engine("all")

    def action_start_stage(self, stage: StageRequest) -> None:
        self.start_engine(stage)

    def action_stop(self) -> None:
        running = self.engine_workers()
        if not running:
            self.notify("nothing is running")
            return
        self.cancel.set("stopped by the user")
        self.notify(f"stopping {', '.join(sorted(w.name for w in running))}…")

    def action_stop_server(self) -> None:
        starting = self.model.stages["server"].state == "running"
        if not self.server_up() and not starting:
            self.notify("no server is running: nothing to stop (r or 2 starts one)", severity="warning")
            return
        self.cancel.set("server stopped by the user")
        self.notify("stopping the server…")
        self._stop_server(announce=True)

    def notes_shown_elsewhere(self) -> frozenset[str]:
        boards = self.query("#campaign")
        return boards.first(CampaignBoard).notes_shown if boards else frozenset()

    def on_resize(self) -> None:
        self._place_grid()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._place_grid()

    def _place_grid(self) -> None:
        """The window grid beside the open tab, except beside the Leaderboard and Diff tabs in a terminal
        under :data:`GRID_BESIDE_TABLES_FROM` columns: they take its room (their figures were cut). The
        focus it had goes to the open tab."""
        tabs = self.query_one("#tabs", TabbedContent)
        left = self.query_one("#left")
        left.display = self.size.width >= GRID_BESIDE_TABLES_FROM or tabs.active not in TABLE_TABS
        if not left.display and tabs.active:
            self._focus_in_sight(tabs.active)

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        self.call_after_refresh(self._focus_in_sight, tab)

    def _focus_in_sight(self, tab: str) -> None:
        """Where the focus was in the tab now hidden (the ranking, when d shows the Diff tab), it goes
        to the first widget of the shown ``tab`` that takes it (the difference's pane, its placeholder
        too): it was left nowhere, and the arrows and Enter did nothing until Tab. Focus elsewhere (the
        grid) stays where it is."""
        def shown(widget: Widget) -> bool:
            return widget.display and all(node.display for node in widget.ancestors
                                          if isinstance(node, Widget))

        if self.focused is not None and shown(self.focused):
            return
        pane = self.query_one(f"#{tab}", TabPane)
        target = next((w for w in pane.query(Widget) if w.focusable and shown(w)), None)
        if target is not None:
            target.focus()

    def action_show_board(self) -> None:
        """b: the Leaderboard tab, the focus on its ranking and the ranking in sight, so that Enter and
        the arrows its note names work at once (the focus stayed on the window grid, and at 80x24 a
        campaign's board hid the ranking below the pane's edge)."""
        self.action_show_tab("leaderboard")
        self.query_one("#board", LeaderboardTable).focus()

    def action_search_log(self) -> None:
        self.action_show_tab("log")
        self.query_one("#logview", LogView).open_search()

    def action_escape(self) -> None:
        log = self.query_one("#logview", LogView)
        if log.query_text or log.query_one("#log-search", Input).display:
            log.clear_search()

    # -- quitting ----------------------------------------------------------------------------------
    def quit_question(self) -> str | None:
        if self.quitting:
            return None
        if self.server_up():
            return "A server is running. Stop it and quit?"
        if self.engine_workers():
            return "A stage is running. Stop it and quit?"
        return None

    def stop_and_quit(self) -> None:
        self.quitting = True
        self.cancel.set("quit")
        self.notify("stopping the server, then quitting…")
        self._stop_server(then_exit=True)

    def commands(self) -> list[tuple[str, str, Any]]:
        out: list[tuple[str, str, Any]] = [
            ("Run all", "Run every stage (reference to compare)", self.action_run_all)]
        for stage in STAGES:
            out.append((f"Start {STAGE_TITLES[stage].lower()}", f"Start the {stage} stage",
                        lambda s=stage: self.action_start_stage(s)))
        out += [("Stop", "Stop the running stage(s)", self.action_stop),
                ("Stop server", "Stop the candidate server", self.action_stop_server),
                ("Search log", "Search the log (every stage's lines)", self.action_search_log)]
        return out
