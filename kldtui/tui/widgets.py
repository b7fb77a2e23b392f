"""Dashboard widgets. Colours come from component classes styled in ``app.tcss`` with theme
variables, never from literals here."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Input, RichLog, Static

from kldtui.events import Progress
from kldtui.tui.model import STAGE_TITLES, STAGES, DashboardModel, StageView, stage_figure_text
from kldtui.tui.resultdata import Band, ResultData, WindowBar

STAGE_SHORT = {"reference": "ref", "server": "srv", "capture": "cap", "finalize": "fin", "compare": "cmp"}
STATE_MARK = {"idle": "○", "running": "◐", "done": "●", "failed": "✗", "stopped": "■"}
KL_LEVELS = (0.005, 0.02, 0.1)  # kl0 < 0.005 <= kl1 < 0.02 <= kl2 < 0.1 <= kl3
ACTIVE_WINDOW_STATES = {"capturing", "finalizing", "comparing"}
DONE_WINDOW_STATES = {"captured", "finalized"}


def kl_level(kl: float) -> int:
    for level, bound in enumerate(KL_LEVELS):
        if kl < bound:
            return level
    return len(KL_LEVELS)


def fmt_num(value: float | None, fmt: str = "{:.5f}") -> str:
    return "-" if value is None else fmt.format(value)


def human_amount(value: float, unit: str) -> str:
    if unit in ("bytes", "B"):
        for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 1024 or suffix == "TiB":
                return f"{value:.0f} {suffix}" if suffix == "B" else f"{value:.1f} {suffix}"
            value /= 1024
    if abs(value) >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def fmt_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


# -- stage rail ------------------------------------------------------------------------------------
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


# -- window grid -----------------------------------------------------------------------------------
class WindowGrid(Widget):
    """One cell per window: its state, then (once compared) its KL level."""

    COMPONENT_CLASSES = {"grid--pending", "grid--active", "grid--done", "grid--failed",
                         "grid--kl0", "grid--kl1", "grid--kl2", "grid--kl3"}
    CELL = 4

    def __init__(self, model: DashboardModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model

    def _cell_class(self, state: str, kl: float | None) -> str:
        if kl is not None:
            return f"grid--kl{kl_level(kl)}"
        if state == "failed":
            return "grid--failed"
        if state in ACTIVE_WINDOW_STATES:
            return "grid--active"
        if state in DONE_WINDOW_STATES or state == "compared":
            return "grid--done"
        return "grid--pending"

    def _columns(self, width: int) -> int:
        return max(1, width // self.CELL)

    def get_content_height(self, container, viewport, width: int) -> int:  # type: ignore[no-untyped-def]
        n = len(self.model.windows)
        return max(1, math.ceil(n / self._columns(width))) + 1 if n else 1

    def render(self) -> Text:
        windows = list(self.model.windows.values())
        if not windows:
            return Text("no windows yet", style=self.get_component_rich_style("grid--pending"))
        cols = self._columns(self.size.width or 40)
        text = Text(no_wrap=True)
        for i, win in enumerate(windows):
            if i and i % cols == 0:
                text.append("\n")
            style = self.get_component_rich_style(self._cell_class(win.state, win.kl))
            mark = "!" if win.state == "failed" else ("›" if win.state in ACTIVE_WINDOW_STATES else " ")
            text.append(f"{win.index:03d}", style)
            text.append(mark)
        text.append("\n")
        text.append_text(self.legend())
        return text

    def legend(self) -> Text:
        legend = Text(no_wrap=True, overflow="ellipsis")
        legend.append("KL ")
        labels = [f"<{_trim(KL_LEVELS[0])}", f"<{_trim(KL_LEVELS[1])}", f"<{_trim(KL_LEVELS[2])}",
                  f"≥{_trim(KL_LEVELS[2])}"]
        for level, label in enumerate(labels):
            legend.append(label, self.get_component_rich_style(f"grid--kl{level}"))
            legend.append(" ")
        return legend


def _trim(value: float) -> str:
    """0.005 -> ".005" (compact legend labels)."""
    text = f"{value:g}"
    return text[1:] if text.startswith("0.") else text


# -- progress --------------------------------------------------------------------------------------
class ProgressPanel(Widget):
    """Bars for the latest progress of every task, grouped by stage in rail order."""

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

    def get_content_height(self, container, viewport, width: int) -> int:  # type: ignore[no-untyped-def]
        return max(1, len(self.items()))

    def render(self) -> Text:
        items = self.items()
        if not items:
            running = any(v.state == "running" for v in self.model.stages.values())
            idle = all(v.state == "idle" for v in self.model.stages.values())
            note = "waiting for progress…" if running else ("press r to run all stages, ? for help"
                                                          if idle else "no stage running")
            return Text(note, style=self.get_component_rich_style("progress--label"))
        width = max(20, self.size.width or 60)
        label_w = min(18, max(14, width // 6))
        bar_w = max(6, min(30, width // 5))
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, p in enumerate(items):
            if n:
                text.append("\n")
            label = f"{STAGE_SHORT.get(p.stage, p.stage)} {p.task}" if p.task != p.stage else p.stage
            text.append(f"{label[:label_w]:<{label_w}} ", self.get_component_rich_style("progress--label"))
            frac = (p.done / p.total) if p.total else None
            filled = int(round(bar_w * min(1.0, max(0.0, frac)))) if frac is not None else 0
            text.append("━" * filled, self.get_component_rich_style("progress--bar"))
            text.append("━" * (bar_w - filled), self.get_component_rich_style("progress--rest"))
            amount = human_amount(p.done, p.unit)
            if p.total:
                amount += f"/{human_amount(p.total, p.unit)}"
            unit = "" if p.unit in ("bytes", "B") else f" {p.unit}".rstrip()
            parts = [f" {frac * 100:3.0f}%" if frac is not None else "", f" {amount}{unit}"]
            if p.rate:
                parts.append(f" {human_amount(p.rate, p.unit)}{'' if unit == '' else unit}/s")
            if p.eta_s is not None:
                parts.append(f" {fmt_eta(p.eta_s)}")
            text.append("".join(parts))
        return text


# -- server log ------------------------------------------------------------------------------------
class LogView(Vertical):
    """The server/engine log: follows new lines; ``/`` searches (shows matching lines only)."""

    class SearchClosed(Message):
        pass

    def __init__(self, model: DashboardModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model
        self.query_text = ""
        self._shown_serial = 0
        self._width = 0

    def compose(self) -> ComposeResult:
        yield RichLog(id="log-lines", max_lines=5000, wrap=True, markup=False, auto_scroll=True,
                      min_width=20)
        yield Input(placeholder="search the log (Enter: keep, Esc: clear)", id="log-search")

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False

    def _matches(self, text: str) -> bool:
        return not self.query_text or self.query_text.lower() in text.lower()

    def _line(self, level: str, text: str) -> Text:
        line = Text(text, style=self._level_style(level))
        if self.query_text:
            line.highlight_words([self.query_text], style="reverse", case_sensitive=False)
        return line

    def _level_style(self, level: str) -> Style | str:
        if level == "error":
            return self.app.current_theme.error or ""
        if level == "warning":
            return self.app.current_theme.warning or ""
        return ""

    def refresh_from(self, model: DashboardModel) -> None:
        log = self.query_one("#log-lines", RichLog)
        new = model.log_serial - self._shown_serial
        if new <= 0:
            return
        lines = list(model.log)[-new:] if new < len(model.log) else list(model.log)
        for level, text in lines:
            if self._matches(text):
                log.write(self._line(level, text), expand=True)
        self._shown_serial = model.log_serial

    def rebuild(self) -> None:
        log = self.query_one("#log-lines", RichLog)
        log.clear()
        for level, text in list(self.model.log)[-5000:]:
            if self._matches(text):
                log.write(self._line(level, text), expand=True)
        self._shown_serial = self.model.log_serial

    def on_resize(self) -> None:
        if self._width != self.size.width:  # re-wrap the lines for the new width
            self._width = self.size.width
            self.rebuild()

    def open_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            self.query_text = event.value.strip()
            self.rebuild()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "log-search":
            self.query_one("#log-lines", RichLog).focus()

    def clear_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.value = ""
        box.display = False
        self.query_text = ""
        self.rebuild()

    def shown_lines(self) -> list[str]:
        return [strip.text for strip in self.query_one("#log-lines", RichLog).lines]


# -- result pane -----------------------------------------------------------------------------------
def _scale(values: Iterable[float]) -> float:
    top = max([v for v in values if v is not None and math.isfinite(v)] or [0.0])
    return top if top > 0 else 1.0


def _bar(length: float) -> str:
    eighths = " ▏▎▍▌▋▊▉█"
    full = int(length)
    rest = int(round((length - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    return "█" * full + (eighths[rest] if rest else "")


class KLChart(Widget):
    """Per-window mean KL as horizontal bars, with the overall mean and its 95 % interval marked."""

    COMPONENT_CLASSES = {"chart--bar", "chart--band", "chart--mean", "chart--label", "chart--neg"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.bars: list[WindowBar] = []
        self.band: Band | None = None
        self.signed = False  # True for differences: bars grow both ways from zero

    def set_data(self, bars: list[WindowBar], band: Band | None, signed: bool = False) -> None:
        self.bars, self.band, self.signed = bars, band, signed
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:  # type: ignore[no-untyped-def]
        return len(self.bars) + 2 if self.bars else 1

    def render(self) -> Text:
        label_style = self.get_component_rich_style("chart--label")
        if not self.bars:
            return Text("no windows compared yet", style=label_style)
        width = max(30, self.size.width or 60)
        area = max(8, width - 10 - 11)
        values = [abs(b.kl) for b in self.bars]
        if self.band is not None:
            values += [abs(v) for v in (self.band.estimate, self.band.low, self.band.high) if v is not None]
        scale = _scale(values)
        half = area // 2 if self.signed else 0
        unit = (area - half - 1 if self.signed else area) / scale

        def col(v: float) -> int:
            return half + int(min(area - 1, max(0.0, round(abs(v) * unit)))) if not self.signed else \
                max(0, min(area - 1, half + int(round(v * unit))))

        marks: dict[int, tuple[str, str]] = {}
        if self.band is not None:
            if self.band.low is not None and self.band.high is not None:
                for c in range(col(self.band.low), col(self.band.high) + 1):
                    marks[c] = ("┊", "chart--band")
            marks[col(self.band.estimate)] = ("│", "chart--mean")
        if self.signed:
            marks.setdefault(half, ("│", "chart--label"))
        text = Text(no_wrap=True, overflow="crop")
        head = "KL per window" if not self.signed else "B − A per window"
        text.append(f"{head}  │ mean", label_style)
        if self.band is not None and self.band.low is not None:
            text.append("  ┊ 95% CI", label_style)
        text.append(f"  bar {'±' if self.signed else ''}{scale:.3g}", label_style)
        for bar in self.bars:
            text.append("\n")
            text.append(f"{bar.index:03d} {bar.domain[:5]:<5} ", label_style)
            if self.signed:
                length = abs(bar.kl) * unit
                cells = list(" " * area)
                styles = [""] * area
                if bar.kl >= 0:
                    body = _bar(length)
                    for i, ch in enumerate(body[: area - half - 1]):
                        cells[half + 1 + i], styles[half + 1 + i] = ch, "chart--bar"
                else:
                    n = min(half, int(round(length)))
                    for i in range(n):
                        cells[half - 1 - i], styles[half - 1 - i] = "█", "chart--neg"
            else:
                body = _bar(min(area, bar.kl * unit))
                cells = list(body.ljust(area))[:area]
                styles = ["chart--bar" if i < len(body) else "" for i in range(area)]
            for c, (ch, cls) in marks.items():
                if 0 <= c < area and (cells[c] == " " or cls == "chart--mean"):
                    cells[c], styles[c] = ch, cls
            for ch, cls in zip(cells, styles, strict=True):
                text.append(ch, self.get_component_rich_style(cls) if cls else "")
            text.append(f" {bar.kl:+.4g}" if self.signed else f" {bar.kl:.4g}")
        return text


class ResultPane(VerticalScroll):
    """Summary, per-domain table with intervals and the per-window KL chart of one result."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.result: ResultData | None = None

    def compose(self) -> ComposeResult:
        yield Static("no result yet: run the compare stage, or open a report (o)", id="result-summary")
        table: DataTable[str] = DataTable(id="result-domains", cursor_type="row", zebra_stripes=True)
        yield table
        yield KLChart(id="result-chart")

    def on_mount(self) -> None:
        table = self.query_one("#result-domains", DataTable)
        table.add_columns("domain", "n", "mean KL", "95% interval")
        table.display = False

    def summary_text(self, r: ResultData) -> Text:
        text = Text()
        origin = "original comparator report" if r.original else "kldtui report"
        if r.live:
            origin = "live: windows compared so far"
        text.append(f"{r.name}", style="bold")
        text.append(f"  ({origin})\n")
        text.append("mean KL  ", style="bold")
        text.append(r.kl.text() if r.kl is not None else "-")
        if r.kl is not None and r.kl.low is not None:
            text.append("  (95%, windows resampled)")
        text.append("\nJS ")
        text.append(fmt_num(r.js_mean))
        text.append("  top-1 ")
        text.append(fmt_num(None if r.top1 is None else r.top1 * 100, "{:.3f}%"))
        text.append("  PPL ratio ")
        text.append(r.ppl_ratio.text("{:.4f}") if r.ppl_ratio is not None else "-")
        text.append("\nΔp mean ")
        text.append(fmt_num(r.delta_p_mean, "{:+.5f}"))
        text.append("  Δp rms ")
        text.append(fmt_num(r.delta_p_rms))
        extra = []
        if r.positions is not None:
            extra.append(f"{r.positions} positions")
        if r.window_range is not None:
            extra.append(f"windows [{r.window_range[0]}, {r.window_range[1]})")
        elif r.windows:
            extra.append(f"{len(r.windows)} windows")
        if r.noise_floor is not None:
            extra.append(f"noise floor {r.noise_floor:.4g}")
        if extra:
            text.append("\n" + " · ".join(extra))
        return text

    def show(self, result: ResultData | None) -> None:
        self.result = result
        summary = self.query_one("#result-summary", Static)
        table = self.query_one("#result-domains", DataTable)
        chart = self.query_one("#result-chart", KLChart)
        if result is None:
            summary.update("no result yet: run the compare stage, or open a report (o)")
            table.display = False
            chart.set_data([], None)
            return
        summary.update(self.summary_text(result))
        table.clear()
        for row in result.domains:
            band = row.band
            table.add_row(row.domain, str(row.windows) if row.windows else "-",
                          fmt_num(band.estimate if band else None),
                          "-" if band is None or band.low is None
                          else f"[{band.low:.5f}, {band.high:.5f}]")
        table.display = bool(result.domains)
        chart.set_data(result.windows, result.kl)


# -- leaderboard -----------------------------------------------------------------------------------
def interval_bar(band: Band | None, lo_axis: float, hi_axis: float, width: int) -> str:
    """``├──●──┤`` on an axis shared by all rows, [lo_axis, hi_axis]."""
    if band is None:
        return " " * width
    cells = [" "] * width
    span = hi_axis - lo_axis

    def col(v: float) -> int:
        if not span > 0:
            return width // 2
        return max(0, min(width - 1, int(round((v - lo_axis) / span * (width - 1)))))

    if band.low is not None and band.high is not None:
        lo, hi = col(band.low), col(band.high)
        for c in range(lo, hi + 1):
            cells[c] = "─"
        cells[lo], cells[hi] = "├", "┤"
    cells[col(band.estimate)] = "●"
    return "".join(cells)


def axis_of(bands: list[Band | None]) -> tuple[float, float]:
    """A shared axis for interval bars: from the lowest low to the highest high, padded a little."""
    values = [v for b in bands if b is not None for v in (b.low, b.estimate, b.high) if v is not None]
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


class LeaderboardTable(DataTable):  # type: ignore[type-arg]
    """Candidates sorted by mean KL with interval bars; ``=`` marks a tie with the best."""

    BAR_WIDTH = 20

    class Open(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.results: list[ResultData] = []
        self.marked: set[int] = set()

    def on_mount(self) -> None:
        self.add_columns("#", "candidate", "mean KL", "interval", "tie", "95% interval")

    def set_results(self, results: list[ResultData], ties: dict[int, str] | None = None) -> None:
        """``results`` already sorted; ``ties`` maps a row to its mark (e.g. "= best")."""
        self.results = results
        self.clear()
        lo_axis, hi_axis = axis_of([r.kl for r in results])
        for i, r in enumerate(results):
            mark = "*" if i in self.marked else " "
            band = r.kl
            self.add_row(
                f"{mark}{i + 1}", r.name[:18], fmt_num(band.estimate if band else None),
                interval_bar(band, lo_axis, hi_axis, self.BAR_WIDTH), (ties or {}).get(i, ""),
                "-" if band is None or band.low is None else f"[{band.low:.5f}, {band.high:.5f}]", key=str(i))

    def toggle_mark(self) -> None:
        row = self.cursor_row
        if not self.results:
            return
        self.marked ^= {row}
        if len(self.marked) > 2:
            self.marked = {row}
        self.update_cell_at((row, 0), f"{'*' if row in self.marked else ' '}{row + 1}")
        for other in range(len(self.results)):
            if other != row:
                self.update_cell_at((other, 0), f"{'*' if other in self.marked else ' '}{other + 1}")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Open(event.cursor_row))
