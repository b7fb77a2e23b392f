"""Progress bars of the running stages' tasks."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from kldtui.events import Progress
from kldtui.text import BYTE_UNITS, amount, done_of_total, wrap_words
from kldtui.tui.model import STAGES, DashboardModel
from kldtui.tui.widgets.format import fmt_eta

STAGE_SHORT = {"reference": "ref", "server": "srv", "capture": "cap", "finalize": "fin", "compare": "cmp"}


class ProgressPanel(Widget):
    """Bars for the latest progress of every task, grouped by stage in rail order; while none runs, the
    model's idle note (the next steps) in rows that fit (:func:`note_rows`)."""

    COMPONENT_CLASSES = {"progress--bar", "progress--rest", "progress--label"}
    PER_STAGE = 3

    def __init__(self, model: DashboardModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model

    def items(self) -> list[Progress]:
        """Tasks of the stages that are not done (a finished stage's figures are on the rail)."""
        out: list[Progress] = []
        for stage in (*STAGES, *sorted({k[0] for k in self.model.progress} - set(STAGES))):
            view = self.model.stages.get(stage)
            if view is not None and view.state == "done":
                continue
            tasks = [p for k, p in self.model.progress.items() if k[0] == stage]
            if not tasks:
                continue
            # unfinished tasks first (a download shows its total and the file in flight), newest first
            open_tasks = [p for p in tasks if p.total is None or p.done < p.total]
            pick = sorted(open_tasks or tasks, key=lambda p: -p.ts)[: self.PER_STAGE if open_tasks else 1]
            out.extend(sorted(pick, key=lambda p: p.task))
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.items()) or len(note_rows(self.model.idle_note(), width)))

    def render(self) -> Text:
        items = self.items()
        if not items:
            rows = note_rows(self.model.idle_note(), self.size.width)
            height = self.size.height  # at most its max-height (0: not laid out yet)
            if 0 < height < len(rows):  # the rows that do not fit, counted, and where to read them
                more = len(rows) - height + 1
                rows = [*rows[:height - 1], f"… {more} more rows: the Log (l) has these lines whole"]
            return Text("\n".join(rows), style=self.get_component_rich_style("progress--label"))
        width = max(20, self.size.width or 60)
        labels = [task_label(p) for p in items]
        label_w = min(max(len(label) for label in labels), max(12, width // 4))
        bar_w = max(6, min(30, width // 5))
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, (p, label) in enumerate(zip(items, labels, strict=True)):
            if n:
                text.append("\n")
            if len(label) > label_w:  # cut visibly, never mid-word without a mark
                label = label[: label_w - 1] + "…"
            text.append(f"{label:<{label_w}} ", self.get_component_rich_style("progress--label"))
            frac = (p.done / p.total) if p.total else None
            filled = int(round(bar_w * min(1.0, max(0.0, frac)))) if frac is not None else 0
            text.append("━" * filled, self.get_component_rich_style("progress--bar"))
            text.append("━" * (bar_w - filled), self.get_component_rich_style("progress--rest"))
            parts = [f" {frac * 100:3.0f}%" if frac is not None else "", f" {progress_amount(p)}"]
            if p.rate:
                unit = "" if p.unit in BYTE_UNITS else f" {p.unit}".rstrip()
                parts.append(f" {amount(p.rate, p.unit)}{unit}/s")
            if p.eta_s is not None:
                parts.append(f" {fmt_eta(p.eta_s)}")
            text.append("".join(parts))
        return text


def note_rows(lines: list[str], width: int) -> list[str]:
    """The idle note's ``lines`` (the next steps: commands and paths to read whole) in rows of at most
    ``width`` cells: a wider line wrapped at spaces (kldtui.text.wrap_words), its later rows indented
    two more than its first, so that a row which goes on with a line reads apart from the next line."""
    rows: list[str] = []
    for line in lines:
        text = line.lstrip(" ")
        indent = " " * (len(line) - len(text))
        first = wrap_words(text, width - len(indent))[0]
        rows.append(indent + first)
        rest = text[len(first):].lstrip(" ")
        if rest:
            rows.extend(indent + "  " + row for row in wrap_words(rest, width - len(indent) - 2))
    return rows


def task_label(p: Progress) -> str:
    """``cap windows``, ``ref captured``, ``fin window 003 data``: the stage's short name and the task."""
    return f"{STAGE_SHORT.get(p.stage, p.stage)} {p.task}" if p.task != p.stage else p.stage


def progress_amount(p: Progress) -> str:
    """``2/6``, ``1.50/4.00 MiB``, ``1024/2047 rows``: the unit once, and not when the task names it."""
    shown = done_of_total(p.done, p.total, p.unit)
    if p.unit and p.unit not in BYTE_UNITS and not p.task.endswith(p.unit):
        shown += f" {p.unit}"
    return shown
