"""One result: summary, per-domain table and the per-window chart."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from kldtui.tui.resultdata import ResultData
from kldtui.tui.widgets.format import fmt_num
from kldtui.tui.widgets.kl_chart import KLChart


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
        for line in r.figures:
            text.append("\n" + line)
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
