"""The Textual app: a shell around one main screen, the dashboard or the viewer.

The app owns what every screen shares (themes and remembered settings, help, quit, the command
palette); the main screen (:class:`~kldtui.tui.screens.dashboard.DashboardScreen` or
:class:`~kldtui.tui.screens.viewer.ViewerScreen`) owns its keys, its help text and its work.
:func:`create_app` is the one way to build it (CLI and tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.theme import Theme

from kldtui import stop_signals
from kldtui.formats.report_names import FolderNoise
from kldtui.formats.suite import Suite, WindowSpec, unit_of
from kldtui.formats.untrusted_json import printable
from kldtui.tui import themes as theme_files
from kldtui.tui.model import ShownCandidate
from kldtui.tui.screens.board import BoardScreen
from kldtui.tui.screens.dashboard import DashboardScreen, PipelineFactory
from kldtui.tui.screens.dialogs import ConfirmScreen, HelpScreen
from kldtui.tui.screens.viewer import ViewerScreen
from kldtui.workspace import Workspace


class KldApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kldtui"

    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("t", "change_theme", "theme"),
        Binding("o", "open_result", "open"),
    ]

    def __init__(self, main: BoardScreen, *, theme: str | None = None, config_dir: Path | None = None,
                 title: str = "kldtui", remember_theme: bool = True, watch_css: bool = False) -> None:
        super().__init__(watch_css=watch_css)
        self.main = main
        self.config = config_dir
        self.requested_theme = theme
        self.remember_theme = remember_theme
        self.title = title
        self.problems: list[str] = []
        self._applied_theme = ""

    def get_default_screen(self) -> Screen[Any]:
        return self.main

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notification, from any screen: its text comes from data (an error naming a path from a
        shared folder, a stage's notice), so it is never read as markup (a path through a folder named
        ``x[`` stopped the dashboard with a MarkupError) and its control characters show escaped."""
        super().notify(printable(message), title=printable(title), severity=severity, timeout=timeout,
                       markup=False)

    def on_mount(self) -> None:
        self._setup_themes()

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
        self._applied_theme = chosen
        self.theme = chosen
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        # Only a theme the user picks (t, palette) is remembered: never the start-up choice, so
        # `--theme` is for this session and a typo there cannot rewrite the setting.
        if theme.name == self._applied_theme:
            return
        self._applied_theme = theme.name
        if self.remember_theme:
            theme_files.save_settings({"theme": theme.name}, self.config)

    # -- actions every screen shares -----------------------------------------------------------------
    def quit_note(self) -> str:
        """What quitting does first, as the help's ``q`` and the palette's Quit say it ("" in the viewer)."""
        return "; asks first while a server or stage runs" if isinstance(self.main, DashboardScreen) else ""

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.main.help_sections(), quit_note=self.quit_note(),
                                    notes=self.main.help_notes()))

    def action_open_result(self) -> None:
        self.main.action_open_result()

    async def action_quit(self) -> None:
        question = self.main.quit_question()
        if question is None:
            self.exit(0)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.main.stop_and_quit()

        self.push_screen(ConfirmScreen(self.main.quit_question), answered)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title == "Quit":  # Textual's "as soon as possible": the dashboard asks first
                command = SystemCommand("Quit", f"Quit kldtui{self.quit_note()}", self.action_quit)
            yield command
        yield SystemCommand("Help", "Keys and what they do", self.action_help)
        for title, help_text, callback in self.main.commands():
            yield SystemCommand(title, help_text, callback)
        yield SystemCommand("Open result", "Open a comparison report", self.action_open_result)


def create_app(*, profile: Any = None, pipeline_factory: PipelineFactory | None = None,
               reports: Sequence[str | Path] = (), theme: str | None = None, config_dir: Path | None = None,
               title: str | None = None, windows: Iterable[tuple[int, str]] = (), autostart: bool = False,
               remember_theme: bool = True, own_report: Path | None = None, noise_path: str | None = None,
               use_noise_floor: bool = True, folder_noise: FolderNoise | None = None) -> KldApp:
    """The one way to build the app (CLI and tests).

    Dashboard: give ``profile`` (a :class:`kldtui.workflow.profile.Profile`; the app drives
    ``kldtui.workflow.pipeline.Pipeline(profile, emit, cancel)``, shows the suite's windows at once and
    lists earlier reports of its workdir in the leaderboard; where the work folder's run is another
    profile's, :func:`kldtui.workflow.owners.view_problem`, it says so and shows none of that run as
    the profile's) or any ``pipeline_factory(emit,
    cancel)`` returning a :class:`~kldtui.tui.screens.dashboard.PipelineLike`. Viewer: neither, and
    ``reports`` (one: the result pane; several: the leaderboard). ``config_dir`` overrides
    ``$XDG_CONFIG_HOME/kldtui`` (themes and remembered settings). ``noise_path`` /
    ``use_noise_floor``: the leaderboard's noise model, as ``kldtui leaderboard --noise`` /
    ``--no-noise-floor``; ``folder_noise``: the models the campaign folders among ``reports`` brought
    (``kldtui view DIR``), used by the rule every folder the board takes in follows
    (:meth:`~kldtui.tui.screens.board.BoardScreen.take_folder_noise`).
    """
    brought = folder_noise if folder_noise is not None else FolderNoise()
    abort: float | None = None
    workspace: Workspace | None = None
    profile_name: str | None = None
    candidate: ShownCandidate | None = None  # a campaign's: which candidate ``workspace`` holds
    unit: str | None = None  # what the suite's windows are called (a hidden-state suite's: context)
    suite_hash: str | None = None  # the suite's token hash: the dashboard ranks that suite's reports
    not_ours: str | None = None  # why the work folder's run is not the profile's (it is another's)
    if profile is not None:
        from kldtui.workflow.campaign import shown_candidate, shown_workspace
        from kldtui.workflow.owners import view_problem

        # another profile's run (or leaderboard) in the work folder: none of it is shown as this one's
        not_ours = view_problem(profile)
        workspace = shown_workspace(profile) if not_ours is None else profile.workspace()
        shown = shown_candidate(profile) if not_ours is None else None  # a campaign: its leader's folders
        if shown is not None:
            candidate = ShownCandidate(shown[0], "best" if shown[1] else "")
        profile_name = str(profile.path) if profile.path else None
        if pipeline_factory is None:
            pipeline_factory = _pipeline_factory_for(profile)
        suite = _profile_suite(profile)
        specs = _profile_windows(profile, suite)
        suite_hash = suite.suite_token_hash_sha256 if suite is not None else None
        windows = list(windows) or [(w.index, w.domain) for w in specs]
        unit = unit_of(specs) if specs else None
        if not reports:
            reports = [str(p) for p in workspace.earlier_reports()]
        if own_report is None and not_ours is None:
            own_report = workspace.report_path
        if title is None:
            title = f"kldtui — {Path(profile.path).parent.name + '/' + Path(profile.path).name}" \
                if profile.path else "kldtui"
        abort = profile.compare.abort_kl_above
    paths = [Path(p) for p in reports]
    main: BoardScreen
    if pipeline_factory is not None:
        dashboard = DashboardScreen(pipeline_factory, report_paths=paths, own_report=own_report,
                                    windows=list(windows), autostart=autostart,
                                    workspace=workspace if not_ours is None else None,
                                    profile_name=profile_name, candidate=candidate, unit=unit,
                                    suite_hash=suite_hash, not_ours=not_ours)
        if abort is not None:  # early abort: the rail says so before the run
            dashboard.model.stages["compare"].detail = f"aborts if a {dashboard.model.unit}'s KL > {abort:g}"
        main = dashboard
    elif paths:
        main = ViewerScreen(paths)
    else:
        from kldtui.errors import BadInput

        raise BadInput("nothing to show: give a profile (dashboard) or report files (viewer)")
    main.noise_path, main.use_noise_floor = noise_path, use_noise_floor
    main.noise_chosen = noise_path is not None or not use_noise_floor
    main.take_folder_noise(brought, say=False)
    return KldApp(main, theme=theme, config_dir=config_dir, title=title or "kldtui",
                  remember_theme=remember_theme)


def _pipeline_factory_for(profile: Any) -> PipelineFactory:
    def factory(emit: Callable[[Any], None], cancel: Any) -> Any:
        from kldtui.workflow.campaign import control_for

        return control_for(profile, emit, cancel)

    return factory


def _profile_suite(profile: Any) -> Suite | None:
    """The profile's suite, from its manifest (no token file is read): the windows it will run and its
    token hash; None where it is not downloaded yet (the grid fills from events, and the run's report
    says its suite)."""
    from kldtui.formats.suite import load_suite

    try:
        return load_suite(profile.workspace().suite_dir)  # a campaign's candidates share it
    except Exception:  # noqa: BLE001 - not downloaded yet
        return None


def _profile_windows(profile: Any, suite: Suite | None) -> list[WindowSpec]:
    """The windows the profile will run, of its ``suite`` (none yet: the grid fills from events)."""
    try:
        return suite.select(profile.run.start_window, profile.run.stop_window) if suite is not None else []
    except Exception:  # noqa: BLE001 - a range the suite does not hold: the run says so
        return []


def run_dashboard(profile_path: str | Path | None = None, theme: str | None = None,
                  demo_workdir: str | Path | None = None, demo_score: bool = False,
                  demo_hidden: bool = False) -> int:
    """Open the dashboard for a profile (``./kldtui.toml`` by default) or on the demo pipeline
    (``demo_score``: the demo in score mode; ``demo_hidden``: the hidden-state demo)."""
    if demo_workdir is not None:
        from kldtui.folder_lock import hold
        from kldtui.workflow import demo

        with hold([demo_workdir], what="demo folder"):  # the pipeline locks it again when it runs
            profile = demo.prepare_demo(Path(demo_workdir), score=demo_score, hidden=demo_hidden)
        badge = profile.capture.mode.badge  # the capture mode, when it is not the default
        title: str | None = f"kldtui demo ({badge})" if badge else "kldtui demo"
    else:
        from kldtui.workflow.profile import load_profile
        from kldtui.workspace import DEFAULT_PROFILE

        profile = load_profile(profile_path or DEFAULT_PROFILE)
        title = None
    stop_signals.raise_if_received()  # a stop signal while this was being prepared: do not open
    # The demo is a new user's first command: it runs by itself; a profile waits for `r`.
    app = create_app(profile=profile, theme=theme, title=title, autostart=demo_workdir is not None)
    try:
        code = app.run()
    finally:
        dashboard = app.main
        if isinstance(dashboard, DashboardScreen) and dashboard.server_up():
            # closed some other way than q (which stops it): never leave it running
            dashboard.pipeline().stop_server(reason="dashboard closed")
    return int(code or 0)


def run_viewer(paths: Sequence[str | Path], theme: str | None = None, noise_path: str | None = None,
               use_noise_floor: bool = True, folder_noise: FolderNoise | None = None) -> int:
    """Show one saved report (result pane) or several (leaderboard)."""
    from kldtui.formats.report import load_report

    for p in paths:  # missing, a folder, a FIFO: load_report says which, and what to do (exit 2)
        if not Path(p).is_file():
            load_report(p)
    if len(paths) == 1:  # a malformed or wrong-type report: one line and exit 2, like a missing one
        load_report(paths[0])
    stop_signals.raise_if_received()
    app = create_app(reports=list(paths), theme=theme, title="kldtui view", noise_path=noise_path,
                     use_noise_floor=use_noise_floor, folder_noise=folder_noise)
    return int(app.run() or 0)
