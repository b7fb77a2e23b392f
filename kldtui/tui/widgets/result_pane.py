"""One result: which file it is, its summary, per-domain table, per-window chart, KL by position and
where its figures come from."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable

from kldtui.formats.suite import WINDOW_UNIT
from kldtui.formats.untrusted_json import printable_name
from kldtui.text import (
    interval_ends,
    plain_number,
    plural,
    precise_number,
    signed_table_figure,
    table_figure,
    top_k,
    window_span,
    wrap_words,
)
from kldtui.tui.resultdata import PositionRow, ResultData
from kldtui.tui.widgets.kl_chart import KLChart, bar_cells
from kldtui.tui.widgets.plain import PlainStatic, plain
from kldtui.workflow.next_steps import shown_path


class LabelledRows(PlainStatic):
    """Rows of a label and a value (the result's provenance), each value wrapped at the widget's
    width in its own column (kldtui.text.wrap_words), again when the width changes: at 80 columns a
    long value (why the backend was chosen, the command) goes on in its column, not back at the
    label's. Values are text from a report, each shown on one line before it is wrapped
    (:func:`~kldtui.formats.untrusted_json.printable_name`: a line break or a tab in a report's
    ``provenance.command`` or ``candidate_dir``, which its loader allows, reads ``\\x0a``, never a
    made-up row of its own; ESC and every other control character as ``\\xNN`` too)."""

    LABEL_WIDTH = 9

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self.rows: list[tuple[str, str]] = []

    def set_rows(self, rows: list[tuple[str, str]]) -> None:
        self.rows = rows
        self.update(self.rows_text(self.size.width))

    def rows_text(self, width: int) -> Text:
        """The rows at ``width`` cells (not positive: each on one line)."""
        text = Text()
        room = width - self.LABEL_WIDTH - 1
        room = room if room >= self.LABEL_WIDTH else 0  # too narrow for a column: lines as they come
        for n, (label, value) in enumerate(self.rows):
            if n:
                text.append("\n")
            text.append(f"{label:<{self.LABEL_WIDTH}} ", style="bold")
            text.append(("\n" + " " * (self.LABEL_WIDTH + 1)).join(wrap_words(printable_name(value), room)))
        return text

    def on_resize(self) -> None:
        if self.rows:
            self.update(self.rows_text(self.size.width))


POSITIONS_HEADING = "KL by position"


class PositionBands(PlainStatic):
    """KL by position: mean KL per band of positions (did the candidate drift further into the
    context?), its heading on one line and each band's bar sized so that its line fits the widget's
    width (the heading's note beside it or under it, as the width allows), drawn again when the
    width changes (as :class:`LabelledRows`): a result shown at 200 columns kept its 200-column bars
    after the terminal went to 60."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self.rows: list[PositionRow] = []
        self.unit = WINDOW_UNIT

    def set_rows(self, rows: list[PositionRow], unit: str, width: int) -> None:
        """Show ``rows`` of a report whose units are ``unit``; ``width``: the cells to fit until the
        widget is laid out (then its own width)."""
        self.rows, self.unit = rows, unit
        self.update(self.bands_text(self.size.width or width))

    def bands_text(self, width: int) -> Text:
        """The bands at ``width`` cells, over the report's ``unit`` s (:attr:`ResultData.unit`: a
        hidden-state suite's contexts): each bar as long as the line leaves room for (8 to 40 cells)."""
        text = Text(no_wrap=True, overflow="ellipsis")
        rows, unit = self.rows, self.unit
        if not rows:
            return text
        with_interval = any(r.low is not None and r.high is not None for r in rows)
        note = f"mean per band, 95% {unit}-clustered interval" if with_interval else "mean per band"
        text.append(POSITIONS_HEADING, style="bold")
        # the note beside the heading where the line holds both (80 columns: the viewer's pane), else on
        # a line of its own (the dashboard's Result tab beside the grid): the heading never wraps
        fits = len(POSITIONS_HEADING) + len(f"  ({note})") <= width
        text.append(f"  ({note})" if fits else f"\n{note}")
        top = max((r.kl_mean for r in rows), default=0.0) or 1.0
        labels = [f"{r.start}-{r.stop - 1}" for r in rows]
        tails = [f" {table_figure(r.kl_mean)}" + (f" {interval_ends(r.low, r.high, table_figure)}"
                                                   if r.low is not None and r.high is not None else "")
                 for r in rows]
        label_w = max(len(label) for label in labels)
        area = max(8, min(40, width - label_w - 1 - max(len(tail) for tail in tails)))
        for r, label, tail in zip(rows, labels, tails, strict=True):
            text.append("\n" + label.rjust(label_w) + " ")
            text.append(bar_cells(r.kl_mean / top * area).ljust(area))
            text.append(tail)
        return text

    def on_resize(self) -> None:
        if self.rows:
            self.update(self.bands_text(self.size.width))


EMPTY = "no result yet: run the compare stage, or open a report (o)"


class ResultPane(VerticalScroll):
    """Summary, per-domain table with intervals, the per-window KL chart, KL by position and the
    report's provenance. ``note`` (set by the screen) says how the shown file relates to the run."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.result: ResultData | None = None
        self.note = ""

    def compose(self) -> ComposeResult:
        yield PlainStatic(EMPTY, id="result-summary")
        table: DataTable[str | Text] = DataTable(id="result-domains", cursor_type="row", zebra_stripes=True)
        yield table
        yield KLChart(id="result-chart")
        yield PositionBands(id="result-positions")
        yield LabelledRows(id="result-provenance")

    def on_mount(self) -> None:
        table = self.query_one("#result-domains", DataTable)
        table.add_columns("domain", "n", "mean KL", "95% interval")
        table.display = False

    def summary_text(self, r: ResultData) -> Text:
        text = Text()
        origin = "original comparator report" if r.original else "kldtui report"
        if r.live:
            origin = f"live: {r.unit}s compared so far"
        text.append(printable_name(r.name), style="bold")  # a folder or file name may hold a line break
        text.append(f"  ({origin})\n")
        if r.path is not None:
            text.append("file ", style="bold")
            text.append(printable_name(shown_path(r.path)))  # a file name may hold ESC or a line break
            if self.note:
                text.append(f"  ({self.note})")
            text.append("\n")
        text.append("mean KL  ", style="bold")
        text.append(r.kl.text() if r.kl is not None else "-")
        if r.kl is not None and r.kl.ends is not None:
            text.append("  (95%)")
        if r.kl_quantiles:
            text.append("\nper-token KL ", style="bold")
            text.append("  ".join(f"{label} {table_figure(value)}" for label, value in r.kl_quantiles))
        text.append("\nJS ")
        text.append(table_figure(r.js_mean))  # a q8's JS in its digits, as its mean KL
        shown = r.topk or ([(1, r.top1)] if r.top1 is not None else [])
        for k, fraction in shown:
            text.append(f"  {top_k(k, fraction)}")
        if not shown:
            text.append("  top-1 -")
        text.append("\nPPL ratio ")
        # six significant digits: a ratio's news is after its 1.00 (1.00231), as in kldtui view's
        text.append(r.ppl_ratio.text(precise_number, short=True) if r.ppl_ratio is not None else "-")
        text.append("  Δp mean ")
        text.append(signed_table_figure(r.delta_p_mean))  # a q8's -0.0000123 keeps its digits
        if not r.delta_p_rms_in_figures:
            text.append("  Δp rms ")
            text.append(table_figure(r.delta_p_rms))
        for line in r.figures:
            text.append("\n" + line)
        for line in r.buckets:
            text.append("\n" + line)
        for extra_line in (r.clustered, r.reference):
            if extra_line is not None:
                text.append("\n" + extra_line)
        extra = []
        if r.positions is not None:
            extra.append(f"{r.positions} positions")
        if r.window_range is not None:
            extra.append(window_span(*r.window_range, unit=r.unit))  # a hidden-state suite's: contexts
        elif r.windows:
            extra.append(plural(len(r.windows), r.unit))
        if r.noise_floor is not None:
            extra.append(f"noise floor {table_figure(r.noise_floor)}")
        if extra:
            text.append("\n" + " · ".join(extra))
        if r.repeat_floor_note:
            text.append("\n" + r.repeat_floor_note)
        return text

    def provenance_rows(self, r: ResultData) -> list[tuple[str, str]]:
        """Where the figures come from, as (label, value) rows: the files, the backend with why it
        was chosen (the report's ``provenance.backend_reason``), what was checked, the command."""
        prov = r.provenance
        if prov is None:
            return []
        lines = []
        if prov.reference:
            lines.append(("reference", prov.reference))
        if prov.candidate:
            lines.append(("candidate", prov.candidate))
        how = []
        if prov.backend:
            threads = f", {plural(prov.threads, 'thread')}" if prov.threads else ""
            # the reason as the compare said it ("compare backend: c-kernel, 8 threads (REASON)")
            why = f" ({prov.backend_reason})" if prov.backend_reason else ""
            how.append(f"{prov.backend} backend{threads}{why}")
        if prov.elapsed_seconds is not None:
            how.append(f"{plain_number(prov.elapsed_seconds)} s")
        if prov.kldtui_version:
            how.append(f"kldtui {prov.kldtui_version}")
        if prov.created_utc:
            how.append(prov.created_utc)
        if how:
            lines.append(("compared", ", ".join(how)))
        if prov.verified:
            lines.append(("verified", prov.verified))
        if prov.suite_hash:
            lines.append(("suite", f"token hash {prov.suite_hash[:16]}…"))
        if prov.command:
            lines.append(("command", prov.command))
        return lines

    def set_unit(self, unit: str) -> None:
        """The run's windows are called ``unit`` (a hidden-state suite's contexts): the empty chart
        says so until a result is shown (a result's chart counts the result's own)."""
        if self.result is None:
            self.query_one("#result-chart", KLChart).set_unit(unit)

    def show(self, result: ResultData | None) -> None:
        self.result = result
        summary = self.query_one("#result-summary", PlainStatic)
        table = self.query_one("#result-domains", DataTable)
        chart = self.query_one("#result-chart", KLChart)
        positions = self.query_one("#result-positions", PositionBands)
        provenance = self.query_one("#result-provenance", LabelledRows)
        if result is None:
            summary.update(EMPTY)
            table.display = False
            chart.set_data([], None)
            positions.set_rows([], WINDOW_UNIT, 0)
            provenance.set_rows([])
            return
        summary.update(self.summary_text(result))
        table.clear()
        for row in result.domains:
            band = row.band
            table.add_row(plain(row.domain), str(row.windows) if row.windows else "-",
                          table_figure(band.estimate if band else None),
                          band.interval_text() if band is not None else "-")
        table.display = bool(result.domains)
        chart.set_unit(result.unit)
        chart.set_data(result.windows, result.kl)
        positions.set_rows(result.kl_by_position, result.unit, self.size.width or 80)
        positions.display = bool(result.kl_by_position)
        provenance.set_rows(self.provenance_rows(result))
        provenance.display = result.provenance is not None and not result.live
