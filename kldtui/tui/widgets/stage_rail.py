"""The stage rail: one box per pipeline stage, its state and key figures."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from kldtui.tui.model import STAGE_TITLES, STAGES, DashboardModel, StageView, stage_figure_text

STATE_MARK = {"idle": "○", "running": "◐", "done": "●", "failed": "✗", "stopped": "■"}


class StageBox(Static):
    """One stage of the rail: state mark, title and its key figures."""

    def __init__(self, stage: str) -> None:
        super().__init__(id=f"stage-{stage}", classes="stage -idle")
        self.stage = stage
        self.show(StageView(stage))

    def show(self, view: StageView, server_url: str | None = None, percent: float | None = None) -> None:
        for state in STATE_MARK:
            self.set_class(view.state == state, f"-{state}")
        title = Text(f"{STATE_MARK.get(view.state, '?')} {STAGE_TITLES[self.stage]}", style="bold")
        figures = dict(view.figures)
        if server_url and self.stage == "server":
            figures.setdefault("url", server_url)
        state = view.state if percent is None or view.state != "running" else f"running {percent:.0f}%"
        limit = 1 if (self.size.width or 16) < 26 else 2
        second = stage_figure_text(figures, limit) if view.state == "done" else state
        third = view.detail
        if view.state == "done":
            second, third = (second, view.detail) if second else (view.detail or "done", "")
        self.update(Text.assemble(title, "\n", second or "", "\n", third or ""))


def stage_percent(model: DashboardModel, stage: str) -> float | None:
    """The stage's overall progress: its ``windows``/``download`` task, else its only task."""
    tasks = {k[1]: p for k, p in model.progress.items() if k[0] == stage and p.total}
    for name in ("windows", "download", "tokens"):
        if name in tasks:
            p = tasks[name]
            return 100.0 * p.done / p.total if p.total else None
    if len(tasks) == 1:
        p = next(iter(tasks.values()))
        return 100.0 * p.done / p.total if p.total else None
    return None


class StageRail(Horizontal):
    def compose(self) -> ComposeResult:
        for stage in STAGES:
            yield StageBox(stage)

    def refresh_from(self, model: DashboardModel) -> None:
        url = model.server.url if model.server is not None else None
        for stage in STAGES:
            box = self.query_one(f"#stage-{stage}", StageBox)
            box.show(model.stages[stage], url, stage_percent(model, stage))
