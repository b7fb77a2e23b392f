"""The stage rail: one box per pipeline stage, its state and key figures."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from kldtui.formats.suite import COUNT_TASKS
from kldtui.text import short_name
from kldtui.tui.model import (
    CANDIDATE_STAGES,
    STAGE_TITLES,
    STAGE_WINDOW_STATE,
    STAGES,
    DashboardModel,
    ShownCandidate,
    StageView,
    stage_figures,
)

STATE_MARK = {"idle": "○", "running": "◐", "done": "●", "failed": "✗", "stopped": "■"}


class StageBox(Static):
    """One stage of the rail: state mark and title, its state, then the figures that fit.

    Every line is made to fit the box (80 columns give 13 characters): long engine summaries stay
    in the log, the card shows the state and short figures, or "see the log (l)". In a campaign the
    state line of a candidate stage also names the candidate whose work the card shows ("done ·
    q8 (best)"; where the name does not fit beside a state word that only repeats the card's mark,
    the name alone: "fine-hidden" for "done · fine-hidden" at 80 columns).
    """

    def __init__(self, stage: str) -> None:
        super().__init__(id=f"stage-{stage}", classes="stage -idle")
        self.stage = stage
        self._last: tuple[StageView, str | None, float | None, dict[str, Any] | None, str,
                          ShownCandidate | None] = (StageView(stage), None, None, None, "running", None)
        self.show(StageView(stage))

    def lines(self, view: StageView, server_url: str | None, percent: float | None,
              width: int, figures: dict[str, Any] | None = None, phase: str = "running",
              candidate: ShownCandidate | None = None) -> tuple[str, str]:
        """The state line and the figures line of the card, each at most ``width`` long."""
        figures = dict(view.figures if figures is None else figures)
        if server_url and self.stage == "server":
            figures.setdefault("url", server_url)
        if view.state == "running" and percent is not None:
            state = f"{phase} {percent:.0f}%"
        elif self.stage == "server" and view.state == "done" and view.detail == "stopped":
            state = "stopped"
        elif self.stage == "server" and view.state == "done" and server_url:
            state = "serving"  # its stage is over, the server is not: it answers at the URL below
        elif self.stage == "server" and view.state == "running":
            state = "starting"  # loading its model: it serves once ready (a vLLM takes minutes)
        else:
            state = view.state
        parts = [_narrow(p, width) for p in stage_figures(figures)]
        third = ""
        for n in range(len(parts), 0, -1):  # as many figures as fit
            text = " · ".join(parts[:n])
            if len(text) <= width:
                third = text
                break
        if not third and view.detail and view.detail != state:
            if len(view.detail) <= width:
                third = view.detail
            elif view.state in ("failed", "stopped"):
                third = "see the log (l)" if width >= 15 else "see log (l)"
            elif view.state == "done":
                third = "see the log (l)" if width >= 15 else "see log (l)"
        # the state word a card may drop for the name: its mark's own (not a running card's progress,
        # nor a server's "stopped"/"serving", which the mark does not say)
        repeats_mark = state == view.state and view.state != "running"
        return state_with_candidate(state, candidate, width, repeats_mark), third

    def show(self, view: StageView, server_url: str | None = None, percent: float | None = None,
             figures: dict[str, Any] | None = None, phase: str = "running",
             candidate: ShownCandidate | None = None) -> None:
        self._last = (view, server_url, percent, figures, phase, candidate)
        for state in STATE_MARK:
            self.set_class(view.state == state, f"-{state}")
        title = Text(f"{STATE_MARK.get(view.state, '?')} {STAGE_TITLES[self.stage]}", style="bold")
        width = self.content_size.width or 13
        second, third = self.lines(view, server_url, percent, width, figures, phase, candidate)
        self.update(Text.assemble(title, "\n", second, "\n", third))

    def on_resize(self) -> None:
        self.show(*self._last)


def state_with_candidate(state: str, candidate: ShownCandidate | None, width: int, repeats_mark: bool) -> str:
    """The state line with the candidate the card shows: the state, then its name and role when they
    fit, else its name. Where both do not fit and the state word only repeats the card's mark
    (``repeats_mark``: "done" beside "●", see :data:`STATE_MARK`), the word goes and the line shows
    the name with its role, else the name, else the name cut in its middle to the card's width
    (:func:`kldtui.text.short_name`, when that keeps four characters): "fine-hidden" at 80 columns,
    not "done · f…dden". A state the mark does not say (a running card's progress, a server's
    "stopped") stays alone (the campaign board and the log name the candidate)."""
    if candidate is None:
        return state[:width]
    for shown in (candidate.label(), candidate.name):
        if len(state) + 3 + len(shown) <= width:
            return f"{state} · {shown}"
    if not repeats_mark:
        return state[:width]
    for shown in (candidate.label(), candidate.name):
        if len(shown) <= width:
            return shown
    return short_name(candidate.name, width) if width >= 4 else state[:width]


def _narrow(part: str, width: int) -> str:
    """A loopback URL as its port, a window count as the count alone, when the card is narrow (the
    log has the full text)."""
    for host in ("127.0.0.1:", "localhost:", "0.0.0.0:"):
        if part.startswith(host) and len(part) > width:
            return "port " + part[len(host):].split("/", 1)[0]
    if part.split(" ", 1)[0] in COUNT_TASKS and len(part) > width:
        return part.split(" ", 1)[1]  # "windows 120/128" (a context suite's "contexts ...") as "120/128"
    return part


def stage_percent(model: DashboardModel, stage: str) -> float | None:
    """The stage's overall progress: its ``windows``/``download`` task (a helper run's
    ``finalized`` or ``captured`` count), else the share of the run's windows that reached the
    stage, else its only task when that is the stage's own (not one window's)."""
    tasks = {k[1]: p for k, p in model.progress.items() if k[0] == stage and p.total}
    for name in (*COUNT_TASKS, "download", "finalized", "captured", "tokens"):
        if name in tasks:
            p = tasks[name]
            return 100.0 * p.done / p.total if p.total else None
    counted = STAGE_WINDOW_STATE.get(stage)
    if counted is not None and model.windows:
        return 100.0 * model.windows_reached(counted) / len(model.windows)
    if len(tasks) == 1:
        name, p = next(iter(tasks.items()))
        if not name.startswith(f"{model.unit} "):  # a window's own ("context 0003 rows" of contexts)
            return 100.0 * p.done / p.total if p.total else None
    return None


def stage_phase(model: DashboardModel, stage: str) -> str:
    """What a running stage is doing, for its card: a helper run's phase (the reference's capture,
    then its finalize), else "running"."""
    if (stage, "finalized") in model.progress:
        return "finalize"
    if (stage, "captured") in model.progress:
        return "capture"
    return "running"


class StageRail(Horizontal):
    def compose(self) -> ComposeResult:
        for stage in STAGES:
            yield StageBox(stage)

    def refresh_from(self, model: DashboardModel) -> None:
        url = model.server.url if model.server is not None else None
        for stage in STAGES:
            box = self.query_one(f"#stage-{stage}", StageBox)
            box.show(model.stages[stage], url, stage_percent(model, stage), model.card_figures(stage),
                     stage_phase(model, stage), model.shown_candidate if stage in CANDIDATE_STAGES else None)
