"""What the dashboard knows, built only from engine events (no Textual here).

The app feeds every :class:`kldtui.events.Event` into :meth:`DashboardModel.apply`; widgets read
the model when the refresh timer finds their part marked dirty. Progress events are coalesced by
the caller (latest per task), so ``apply`` stays cheap.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kldtui.events import (
    PIPELINE_STAGES,
    Event,
    LogLine,
    Notice,
    Progress,
    ResultReady,
    ServerReady,
    StageFailed,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.report_model import ComparisonReport
from kldtui.workflow.state import RunState

STAGES: tuple[str, ...] = PIPELINE_STAGES
STAGE_TITLES = {"reference": "Reference", "server": "Server", "capture": "Capture",
                "finalize": "Finalize", "compare": "Compare"}
# events of helper stages shown on a rail stage
STAGE_ALIASES = {"verify": "reference", "download": "reference"}
LOG_LIMIT = 20_000


@dataclass
class StageView:
    name: str
    state: str = "idle"  # idle | running | done | failed | stopped
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowView:
    index: int
    domain: str = ""
    state: str = "pending"
    kl: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def _short(value: Any) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


FIGURE_NAMES = {"kl_mean": "KL", "top1_agreement": "top-1", "windows": "windows", "url": "",
                "tok/s": "tok/s", "tokens_per_s": "tok/s"}
# figures that are for the log and the report, not the rail
HIDDEN_FIGURES = {"ci95_low", "ci95_high", "seconds", "elapsed_s", "bytes_downloaded", "commit", "offline"}


def stage_figures(figures: dict[str, Any]) -> list[str]:
    """Short figures of a stage for the rail (long values, lists and flags are left out)."""
    parts = []
    for key, value in figures.items():
        if isinstance(value, list | tuple) and len(value) == 2 and all(type(v) is int for v in value):
            value = f"{value[0]}-{value[1] - 1}"  # a window range [start, stop)
        if isinstance(value, bool) or value is None or isinstance(value, list | dict | tuple):
            continue
        if key in HIDDEN_FIGURES:
            continue
        if key == "skipped" and not value:
            continue
        if isinstance(value, str):
            value = value.split("://", 1)[-1]
            if len(value) > 24:
                continue
        name = FIGURE_NAMES.get(key, key)
        parts.append(f"{name} {_short(value)}".strip())
    return parts


class DashboardModel:
    def __init__(self) -> None:
        self.stages: dict[str, StageView] = {name: StageView(name) for name in STAGES}
        self.windows: dict[int, WindowView] = {}
        self.progress: dict[tuple[str, str], Progress] = {}
        self.log: deque[tuple[str, str]] = deque(maxlen=LOG_LIMIT)  # (level, text)
        self.log_serial = 0  # count of lines ever appended (to find new ones)
        self.notices: list[Notice] = []
        self.server: ServerReady | None = None
        self.result_path: str | None = None
        self.result_report: ComparisonReport | None = None
        self.next_lines: list[str] = []
        self.dirty: set[str] = set()

    # -- events --------------------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        stage = STAGE_ALIASES.get(event.stage, event.stage)
        view = self.stages.get(stage)
        if isinstance(event, StageStarted):
            if view is not None:
                view.state, view.detail, view.figures = "running", event.detail, {}
                for key in [k for k in self.progress if k[0] == stage]:
                    del self.progress[key]
                self.dirty |= {"stages", "progress"}
            self._log("info", f"[{event.stage}] started {event.detail}".rstrip())
        elif isinstance(event, StageFinished):
            if view is not None:
                view.state, view.detail = "done", event.summary
                view.figures = dict(event.figures)
                self.dirty.add("stages")
            self._log("info", f"[{event.stage}] finished {event.summary}".rstrip())
        elif isinstance(event, StageFailed):
            if view is not None:
                view.state, view.detail = "failed", event.message
                self.dirty.add("stages")
            if stage == "server":
                self.server = None
            self._log("error", f"[{event.stage}] failed: {event.message}")
        elif isinstance(event, Progress):
            self.progress[(stage, event.task)] = event
            self.dirty.add("progress")
        elif isinstance(event, LogLine):
            self._log(event.level, event.line)
        elif isinstance(event, Notice):
            self.notices.append(event)
            self._log(event.level, f"[{event.stage}] {event.text}")
        elif isinstance(event, WindowState):
            self.apply_window(event)
        elif isinstance(event, ServerReady):
            self.server = event
            if view is not None:
                view.figures = {**view.figures, "url": event.url}
            self.dirty.add("stages")
            self._log("info", f"[server] ready at {event.url} as {event.served_model_name}")
        elif isinstance(event, ResultReady):
            self.result_path = event.path
            self.result_report = event.report
            self.dirty.add("result")

    def apply_window(self, event: WindowState) -> None:
        win = self.windows.get(event.window_index)
        if win is None:
            win = self.windows[event.window_index] = WindowView(event.window_index)
            self.windows = dict(sorted(self.windows.items()))
        win.state = event.state
        if event.state in ("captured", "finalized", "compared", "failed"):
            # the window's own tasks are over (their last update may not have been 100 %)
            prefix = f"window {event.window_index:03d}"
            for key in [k for k in self.progress if k[1].startswith(prefix)]:
                del self.progress[key]
                self.dirty.add("progress")
        if event.domain:
            win.domain = event.domain
        win.figures.update(event.figures)
        kl = event.figures.get("kl", event.figures.get("kl_mean"))
        if isinstance(kl, int | float):
            win.kl = float(kl)
        self.dirty.add("windows")
        if win.kl is not None:
            self.dirty.add("live")

    def set_windows(self, windows: list[tuple[int, str]]) -> None:
        """Pre-populate the grid (index, domain) from the suite before any event arrived."""
        for index, domain in windows:
            self.windows.setdefault(index, WindowView(index, domain))
        self.windows = dict(sorted(self.windows.items()))
        self.dirty.add("windows")

    def apply_disk_state(self, state: RunState) -> None:
        """What a reopened work folder holds, shown as if the run had just happened here."""
        in_range = set(self.windows) or set(state.windows)
        disk = [w for i, w in state.windows.items() if i in in_range]
        total = len(in_range)
        captured = sum(1 for w in disk if w.state != "pending")
        finalized = sum(1 for w in disk if w.state in ("finalized", "compared"))
        compared = sum(1 for w in disk if w.state == "compared")

        def mark(stage: str, n: int, figures: dict[str, Any], detail: str = "") -> None:
            if n <= 0:
                return
            view = self.stages[stage]
            view.state = "done" if n >= total else "stopped"
            view.figures = figures
            view.detail = detail or ("" if n >= total else f"{n} of {total} windows; r resumes")

        if state.reference_ready:
            self.stages["reference"].state = "done"
            # the run's window range [start, stop), as the live reference stage reports it
            shown = sorted(in_range)
            self.stages["reference"].figures = {
                "windows": [shown[0], shown[-1] + 1] if shown else state.suite_windows}
            self.stages["reference"].detail = "on disk"
        if captured:
            self.stages["server"].state, self.stages["server"].detail = "done", "stopped"
        mark("capture", captured, {"captured": captured})
        mark("finalize", finalized, {"windows": finalized})
        if state.report_path is not None:
            view = self.stages["compare"]
            view.state, view.detail = "done", str(state.report_path)
            view.figures = {k: v for k, v in state.headline.items() if k in ("kl_mean", "top1_agreement")}
        else:
            mark("compare", compared, {"compared": compared})
        for w in disk:
            win = self.windows.setdefault(w.index, WindowView(w.index, w.domain))
            win.state = "pending" if w.state == "pending" else w.state
            if w.kl is not None:
                win.kl = w.kl
        self.windows = dict(sorted(self.windows.items()))
        summary = (f"opened an earlier run: reference {'ready' if state.reference_ready else 'missing'}, "
                   f"{captured}/{total} captured, {finalized} finalized, {compared} compared")
        self._log("info", f"[run] {summary}")
        for problem in state.problems:
            self._log("warning", f"[run] {problem}")
        if state.report_path is not None:
            self.result_path = str(state.report_path)
            self.dirty.add("result")
        self.dirty |= {"stages", "windows", "progress", "live"}

    def set_next_steps(self, lines: list[str]) -> None:
        """What to do now that a report is written (shown when nothing runs; each line logged once:
        the end of a run may complete what the report's event set)."""
        said = set(self.next_lines)
        self.next_lines = list(lines)
        for line in lines:
            if line not in said:
                self._log("info", f"[run] {line}")
        self.dirty.add("progress")

    def idle_note(self) -> list[str]:
        """The progress panel's text while no task reports progress (derived from the stages)."""
        if any(v.state == "running" for v in self.stages.values()):
            return ["waiting for progress…"]
        if self.next_lines:
            return self.next_lines
        failed = [v.name for v in self.stages.values() if v.state == "failed"]
        if failed:
            return [f"{', '.join(failed)} failed: the log (l) says why; r runs again (finished work is kept)"]
        if all(v.state == "idle" for v in self.stages.values()):
            return ["press r to run all stages, ? for help"]
        return ["no stage running; r runs the rest (finished work is kept)"]

    def server_stopped(self) -> None:
        """The server of this run is gone: its card says so instead of showing its old address."""
        self.server = None
        view = self.stages["server"]
        if view.state in ("done", "running"):
            view.state, view.detail, view.figures = "done", "stopped", {}
        self.dirty.add("stages")

    def _log(self, level: str, text: str) -> None:
        for line in str(text).splitlines() or [""]:
            self.log.append((level, line))
            self.log_serial += 1
        self.dirty.add("log")

    # -- reads ---------------------------------------------------------------------------------
    def take_dirty(self) -> set[str]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def live_window_kl(self) -> list[tuple[int, str, float]]:
        return [(w.index, w.domain, w.kl) for w in self.windows.values() if w.kl is not None]
