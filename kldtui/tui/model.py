"""What the dashboard knows, built only from engine events (no Textual here).

The app feeds every :class:`kldtui.events.Event` into :meth:`DashboardModel.apply`; widgets read
the model when the refresh timer finds their part marked dirty. Progress events are coalesced by
the caller (latest per task), so ``apply`` stays cheap.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui.events import (
    PIPELINE_STAGES,
    BackendChosen,
    CandidateStarted,
    Event,
    LeaderboardUpdated,
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
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import table_figure, top_k, window_span
from kldtui.workflow.state import RunState

STAGES: tuple[str, ...] = PIPELINE_STAGES
STAGE_TITLES = {"reference": "Reference", "server": "Server", "capture": "Capture",
                "finalize": "Finalize", "compare": "Compare"}
# events of helper stages shown on a rail stage
STAGE_ALIASES = {"verify": "reference", "download": "reference"}
LOG_LIMIT = 20_000
# a helper run's server line, already labelled by the pipeline ("[reference server] INFO ...")
_HELPER_SERVER = re.compile(r"\[\w+ server\] ")
# the stages whose cards show one candidate's work (the reference is shared by a campaign's candidates)
CANDIDATE_STAGES = ("server", "capture", "finalize", "compare")


@dataclass(frozen=True)
class ShownCandidate:
    """The campaign candidate whose work the candidate stages' cards show: ``name`` as the campaign
    names it (the leader's repeat capture is ``NAME.repeat``) and ``role``, what it is in the
    campaign ("2 of 3" while it runs, "repeat capture", "best" once ranked first; "" when unknown)."""

    name: str
    role: str = ""

    def label(self) -> str:
        return f"{self.name} ({self.role})" if self.role else self.name


@dataclass
class StageView:
    name: str
    state: str = "idle"  # idle | running | done | failed | stopped
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


# How far a window has come, in order: a window that reached a state has done every earlier one
# (a resumed capture re-announces finished windows as "captured"; the count keeps what was reached).
WINDOW_ORDER = ("pending", "capturing", "captured", "finalizing", "finalized", "comparing", "compared")
ACTIVE_WINDOW_STATES = ("capturing", "finalizing", "comparing")
# the window state each pipeline stage's card counts
STAGE_WINDOW_STATE = {"capture": "captured", "finalize": "finalized", "compare": "compared"}


@dataclass
class WindowView:
    index: int
    domain: str = ""
    state: str = "pending"
    kl: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    settled: str = "pending"  # the last state that is not work in progress (what a stop returns to)
    reached: int = 0  # the furthest state reached (index in WINDOW_ORDER)

    def set_state(self, state: str) -> None:
        self.state = state
        if state in WINDOW_ORDER:
            self.reached = max(self.reached, WINDOW_ORDER.index(state))
        if state not in ACTIVE_WINDOW_STATES:
            self.settled = state

    def has_reached(self, state: str) -> bool:
        return self.reached >= WINDOW_ORDER.index(state)


def _resolved(path: str) -> str:
    try:
        return str(Path(path).resolve())
    except OSError:
        return path


def _short(value: Any) -> str:
    """A figure on a card: a float as a KL in a table's cell (the leaderboard's digits), else as it is."""
    return table_figure(value) if isinstance(value, float) else str(value)


FIGURE_NAMES = {"kl_mean": "KL", "top1_agreement": "top-1", "windows": "windows", "url": ""}
# figures whose name is a unit: written after the number ("1966 tok/s", not "tok/s 1966")
FIGURE_UNITS = {"tok/s": "tok/s", "tokens_per_s": "tok/s", "GiB": "GiB"}
# figures that are for the log and the report, not the rail (a mean KL's interval: the Result tab's)
HIDDEN_FIGURES = {"ci95_low", "ci95_high", "percentile_ci95_low", "percentile_ci95_high", "seconds",
                  "elapsed_s", "bytes_downloaded", "commit", "offline"}


def stage_figures(figures: dict[str, Any]) -> list[str]:
    """Short figures of a stage for the rail (long values, lists and flags are left out)."""
    parts = []
    for key, value in figures.items():
        if isinstance(value, list | tuple) and len(value) == 2 and all(type(v) is int for v in value):
            value = window_span(value[0], value[1]).split(" ", 1)[1]  # a window range [start, stop)
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
        if key == "top1_agreement" and isinstance(value, int | float):
            parts.append(top_k(1, float(value)))
            continue
        if key in FIGURE_UNITS:
            parts.append(f"{_short(value)} {FIGURE_UNITS[key]}")
            continue
        name = FIGURE_NAMES.get(key, key)
        parts.append(f"{name} {_short(value)}".strip())
    return parts


class DashboardModel:
    def __init__(self) -> None:
        self.stages: dict[str, StageView] = {name: StageView(name) for name in STAGES}
        self.windows: dict[int, WindowView] = {}
        # what the run's windows are called: the suite's (kldtui.formats.suite.unit_of; a hidden-state
        # suite's "context"), from the suite when the dashboard opens, else from the windows' events
        self.unit = WINDOW_UNIT
        self.progress: dict[tuple[str, str], Progress] = {}
        self.log: deque[tuple[str, str]] = deque(maxlen=LOG_LIMIT)  # (level, text)
        self.log_serial = 0  # count of lines ever appended (to find new ones)
        self.notices: list[Notice] = []
        self.server: ServerReady | None = None
        self.result_path: str | None = None
        self.result_report: ComparisonReport | None = None
        # the result's name as the campaign names it (None: the report's own), fixed when it arrives:
        # the next candidate may start before the screen shows it
        self.result_name: str | None = None
        self.next_lines: list[str] = []
        self.starting: str | None = None
        self.shown_report: str | None = None  # a report opened with o (not this run's), shown in Result
        self.dirty: set[str] = set()
        # a campaign ([[candidates]]): the latest standings and the candidate that runs
        self.campaign: LeaderboardUpdated | None = None
        self.candidate: CandidateStarted | None = None
        self.repeat_reports: set[str] = set()  # reports of a campaign's repeat captures
        self.shown_candidate: ShownCandidate | None = None  # whose work the candidate cards show

    # -- events --------------------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        stage = STAGE_ALIASES.get(event.stage, event.stage)
        view = self.stages.get(stage)
        if isinstance(event, StageStarted):
            self.starting = None
            if view is not None:
                view.state, view.detail, view.figures = "running", event.detail, {}
                for key in [k for k in self.progress if k[0] == stage]:
                    del self.progress[key]
                self.dirty |= {"stages", "progress"}
            self._log("info", f"started {event.detail}".rstrip(), event.stage)
        elif isinstance(event, StageFinished):
            if view is not None:
                view.state, view.detail = "done", event.summary
                view.figures = dict(event.figures)
                for key in [k for k in self.progress if k[0] == stage]:
                    del self.progress[key]  # a finished stage leaves no bar, whatever its last update said
                self.dirty |= {"stages", "progress"}
            if stage != "server":  # the server's end of loading is its ServerReady line, said once
                self._log("info", f"finished {event.summary}".rstrip(), event.stage)
        elif isinstance(event, StageFailed):
            if view is not None:
                view.state, view.detail = "failed", event.message
                self.dirty.add("stages")
            if stage == "server":
                self.server = None
            self._log("error", f"failed: {event.message}", event.stage)
        elif isinstance(event, Progress):
            self.progress[(stage, event.task)] = event
            self.dirty |= {"progress", "stages"}  # the stage's card shows its percentage
        elif isinstance(event, LogLine):
            if event.level != "debug":  # per-request access lines: in the server log file only
                self._log(event.level, event.line, event.stage)
        elif isinstance(event, BackendChosen):
            self._log("info", event.line, event.stage)
        elif isinstance(event, Notice):
            self.notices.append(event)
            self._log(event.level, event.text, event.stage)
        elif isinstance(event, WindowState):
            if stage in STAGE_WINDOW_STATE or stage not in self.stages:
                self.apply_window(event)
            else:  # a helper run's window (the reference's capture): its bars end, the grid is the run's
                self._drop_window_progress(event, stage)
        elif isinstance(event, ServerReady):
            self.server = event
            if view is not None:
                view.figures = {**view.figures, "url": event.url}
            self.dirty.add("stages")
            self._log("info", f"ready at {event.url} as {event.served_model_name}", event.stage)
        elif isinstance(event, ResultReady):
            self.result_path = event.path
            self.result_report = event.report
            self.result_name = self.shown_candidate.name if self.shown_candidate is not None else None
            self.dirty.add("result")
            if self.candidate is not None and self.candidate.repeat and event.path:
                self.repeat_reports.add(event.path)  # the noise model's capture, not a candidate
        elif isinstance(event, CandidateStarted):
            self.start_candidate(event)
        elif isinstance(event, LeaderboardUpdated):
            self.campaign = event
            self.dirty.add("campaign")
            if event.final and event.rows:
                best = event.rows[0]
                self._log("info", f"[campaign] best: {best.name} (mean KL {_short(best.mean)})")

    def start_candidate(self, event: CandidateStarted) -> None:
        """A campaign's next candidate: the grid and the stages start again for it."""
        self.candidate = event
        what = "repeat capture of the leader" if event.repeat else "candidate"
        self._log("info", f"[campaign] {what} {event.number}/{event.total}: {event.name}")
        self.shown_candidate = ShownCandidate(
            event.name, "repeat capture" if event.repeat else f"{event.number} of {event.total}")
        self._clear_candidate()

    def _clear_candidate(self) -> None:
        """The grid and the candidate stages' cards start empty (the reference's card stays: it is
        shared); a window's furthest state goes too, or the cards would count the windows the
        candidate before reached."""
        for win in self.windows.values():
            win.state, win.kl, win.figures = "pending", None, {}
            win.settled, win.reached = "pending", 0
        for name in CANDIDATE_STAGES:
            self.stages[name].state, self.stages[name].detail, self.stages[name].figures = "idle", "", {}
        self.progress.clear()
        self.dirty |= {"campaign", "windows", "stages", "progress", "live"}

    def show_leader(self, state: RunState) -> bool:
        """A campaign ended: the cards, the grid and the result show its best candidate (the first
        row of the final leaderboard) from ``state``, the leader's run state, instead of the last
        capture run (often the leader's repeat capture, which is the noise model, not a result).
        Returns False (nothing changed) when this is not the end of a campaign or ``state`` is not
        the leader's."""
        board = self.campaign
        if board is None or not board.final or not board.rows or board.rows[0].state != "compared":
            return False
        best = board.rows[0]
        if state.report_path is None or best.report_path is None or \
                _resolved(best.report_path) != _resolved(str(state.report_path)):
            return False
        self.candidate = None
        self.shown_candidate = ShownCandidate(best.name, "best")
        self._clear_candidate()
        self._show_state(state)
        self.result_report = state.report  # the leader's own (None: read from its path)
        self._log("info", f"[campaign] the stage cards show the best candidate, {best.name} "
                  f"(its report {state.report_path})")
        return True

    def _drop_window_progress(self, event: WindowState, stage: str | None = None) -> None:
        """A window's own bars go once it reached a final state (its last update may not be 100 %)."""
        if event.state not in ("captured", "finalized", "compared", "failed", "pending"):
            return
        prefix = event.name  # as the batch reporter's bars: a context's are "context 0003 ..."
        for key in [k for k in self.progress if k[1].startswith(prefix) and stage in (None, k[0])]:
            del self.progress[key]
            self.dirty.add("progress")

    def apply_window(self, event: WindowState) -> None:
        if event.unit:  # said by its WindowSpec: a hidden-state suite's "context"
            self.set_unit(event.unit)
        win = self.windows.get(event.window_index)
        if win is None:
            win = self.windows[event.window_index] = WindowView(event.window_index)
            self.windows = dict(sorted(self.windows.items()))
        win.set_state(event.state)
        self._drop_window_progress(event)
        if event.domain:
            win.domain = event.domain
        win.figures.update(event.figures)
        kl = event.figures.get("kl", event.figures.get("kl_mean"))
        if isinstance(kl, int | float):
            win.kl = float(kl)
        if event.state in ("captured", "finalized", "compared", "failed"):
            self._log("error" if event.state == "failed" else "info", event.describe(), event.stage)
        self.dirty |= {"windows", "stages"}
        if win.kl is not None:
            self.dirty.add("live")

    def stopped(self, stages: list[str] | None = None, reason: str = "stopped") -> None:
        """The engine stopped (``s``, a failure, quit): the stages that were running are stopped,
        their bars go, and a window in progress shows what it holds on disk again."""
        for view in self.stages.values():
            if view.state == "running" and (stages is None or view.name in stages):
                view.state, view.detail = "stopped", reason
        running = {v.name for v in self.stages.values() if v.state == "running"}
        for key in [k for k in self.progress if k[0] not in running]:
            del self.progress[key]
        for win in self.windows.values():
            if win.state in ACTIVE_WINDOW_STATES:
                win.state = win.settled
        self.dirty |= {"stages", "progress", "windows"}

    def set_unit(self, unit: str) -> None:
        """The run's windows are called ``unit`` (``window``; a hidden-state suite's ``context``): the
        cards, the grid's title, the resume lines and the Result tab say it."""
        if unit != self.unit:
            self.unit = unit
            self.dirty |= {"unit", "stages", "windows", "live"}

    def set_windows(self, windows: list[tuple[int, str]], unit: str | None = None) -> None:
        """Pre-populate the grid (index, domain) from the suite before any event arrived; ``unit``:
        what the suite's windows are called (kldtui.formats.suite.unit_of), when known."""
        if unit is not None:
            self.set_unit(unit)
        for index, domain in windows:
            self.windows.setdefault(index, WindowView(index, domain))
        self.windows = dict(sorted(self.windows.items()))
        self.dirty.add("windows")

    def apply_disk_state(self, state: RunState) -> None:
        """What a reopened work folder holds, shown as if the run had just happened here."""
        captured, finalized, compared, total = self._show_state(state)
        if state.anything:
            summary = (f"opened an earlier run: reference {'ready' if state.reference_ready else 'missing'}, "
                       f"{captured}/{total} captured, {finalized} finalized, {compared} compared")
        else:  # a reference alone is no earlier run of a candidate (a shared suite's, or prepared here)
            summary = f"found the reference ready ({total} {self.unit}s); no candidate captured yet"
        self._log("info", summary, "run")
        for problem in state.problems:
            self._log("warning", problem, "run")

    def _show_state(self, state: RunState) -> tuple[int, int, int, int]:
        """The cards, the grid and the result path as ``state`` says; returns the windows captured,
        finalized and compared, and the windows of the run."""
        in_range = set(self.windows) or set(state.windows)
        disk = [w for i, w in state.windows.items() if i in in_range]
        total = len(in_range)
        for w in disk:
            win = self.windows.setdefault(w.index, WindowView(w.index, w.domain))
            win.set_state(w.state)
            if w.kl is not None:
                win.kl = w.kl
        self.windows = dict(sorted(self.windows.items()))
        captured, finalized, compared = (self.windows_reached(state)
                                         for state in ("captured", "finalized", "compared"))

        def mark(stage: str, n: int) -> None:
            if n <= 0:
                return
            view = self.stages[stage]
            view.state = "done" if n >= total else "stopped"
            view.figures = {}  # the card counts the windows (card_figures)
            view.detail = "" if n >= total else f"{n} of {total} {self.unit}s; r resumes"

        if state.reference_ready:
            self.stages["reference"].state = "done"
            # the run's window range [start, stop), as the live reference stage reports it
            shown = sorted(in_range)
            self.stages["reference"].figures = {
                "windows": [shown[0], shown[-1] + 1] if shown else state.suite_windows}
            self.stages["reference"].detail = "on disk"
        if captured:
            self.stages["server"].state, self.stages["server"].detail = "done", "stopped"
        mark("capture", captured)
        mark("finalize", finalized)
        if state.report_path is not None:
            view = self.stages["compare"]
            view.state, view.detail = "done", str(state.report_path)
            view.figures = {k: v for k, v in state.headline.items() if k in ("kl_mean", "top1_agreement")}
        else:
            mark("compare", compared)
        if state.report_path is not None:
            self.result_path = str(state.report_path)
            self.result_name = self.shown_candidate.name if self.shown_candidate is not None else None
            self.dirty.add("result")
        self.dirty |= {"stages", "windows", "progress", "live"}
        return captured, finalized, compared, total

    def set_next_steps(self, lines: list[str]) -> None:
        """What to do now that a report is written (shown when nothing runs; each line logged once:
        the end of a run may complete what the report's event set)."""
        said = set(self.next_lines)
        self.next_lines = list(lines)
        for line in lines:
            if line not in said:
                self._log("info", line, "run")
        self.dirty.add("progress")

    def idle_note(self) -> list[str]:
        """The progress panel's text while no task reports progress (derived from the stages)."""
        if any(v.state == "running" for v in self.stages.values()):
            return ["waiting for progress…"]
        if self.starting:
            return [f"starting {self.starting}…"]
        shown = [f"Result shows {self.shown_report} (opened with o)"] if self.shown_report else []
        if self.next_lines:
            return shown + self.next_lines
        if shown:
            return shown
        failed = [v.name for v in self.stages.values() if v.state == "failed"]
        if failed:
            return [f"{', '.join(failed)} failed: the log (l) says why; r runs again (finished work is kept)"]
        if all(v.state == "idle" for v in self.stages.values()):
            return ["press r to run all stages, ? for help"]
        return ["no stage running; r runs the rest (finished work is kept)"]

    def set_shown_report(self, path: str | None) -> None:
        """The Result tab shows ``path`` (opened with o), not this run's report (None: it shows the run's)."""
        if path != self.shown_report:
            self.shown_report = path
            self.dirty.add("progress")

    def set_starting(self, what: str | None) -> None:
        """An engine job was asked for and has not reported yet (``None``: it has, or it ended)."""
        self.starting = what
        self.dirty.add("progress")

    def server_stopped(self) -> None:
        """The server of this run is gone: its card says so instead of showing its old address."""
        self.server = None
        view = self.stages["server"]
        if view.state in ("done", "running"):
            view.state, view.detail, view.figures = "done", "stopped", {}
        self.dirty.add("stages")

    def _log(self, level: str, text: str, source: str | None = None) -> None:
        """Append ``text`` as log lines, each prefixed ``[source]`` (where it came from), unless the
        line already names it (``[reference server] ...``)."""
        prefix = f"[{source}] " if source else ""
        for line in str(text).splitlines() or [""]:
            named = line.startswith(f"[{source}") or _HELPER_SERVER.match(line) is not None
            shown = line if not prefix or named else prefix + line
            self.log.append((level, shown))
            self.log_serial += 1
        self.dirty.add("log")

    # -- reads ---------------------------------------------------------------------------------
    def take_dirty(self) -> set[str]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def live_window_kl(self) -> list[tuple[int, str, float]]:
        return [(w.index, w.domain, w.kl) for w in self.windows.values() if w.kl is not None]

    def windows_reached(self, state: str) -> int:
        """How many of the run's windows reached ``state`` (on disk or in this session)."""
        return sum(1 for w in self.windows.values() if w.has_reached(state))

    def card_figures(self, stage: str) -> dict[str, Any]:
        """The figures a stage's card shows: its own, and for capture, finalize and compare the
        windows of the run that reached that stage (counted from the grid, so a resumed run counts
        what an earlier one left on disk, not only this session's work). The windows' figure is
        named as the run's windows are called (``contexts 3/12`` of a hidden-state suite)."""
        view = self.stages[stage]
        figures = dict(view.figures)
        counted = STAGE_WINDOW_STATE.get(stage)
        if counted is not None and self.windows and view.state != "idle":
            n = self.windows_reached(counted)
            for key in ("captured", "skipped", "windows", "compared", "kept", "bytes"):
                figures.pop(key, None)
            count = {"windows": f"{n}/{len(self.windows)}"}
            figures = {**figures, **count} if stage == "compare" else {**count, **figures}
        return {f"{self.unit}s" if k == "windows" else k: v for k, v in figures.items()}
