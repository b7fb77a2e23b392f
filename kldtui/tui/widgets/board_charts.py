"""The leaderboard's charts in the terminal: the data ``kldtui plot`` draws
(:func:`kldtui.decide.plots.chart_data`), as text.

Three charts, one axis each for every candidate: mean KL against size (candidates by size, each
with its 95 % interval on a shared KL axis, ◆ on the Pareto front), per-window mean KL (one row of
block heights per candidate, shared scale, its interval said beside it), and per-domain mean KL
(bars with their intervals).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll

from kldtui.decide.plots import NO_SIZE
from kldtui.formats.report_names import too_few_text
from kldtui.text import (
    BarAxis,
    bar_axis,
    human_bytes,
    interval_bar,
    interval_ends,
    short_names,
    table_figure,
)
from kldtui.tui.widgets.plain import PlainStatic

if TYPE_CHECKING:
    from kldtui.decide.plots import ChartData

LEVELS = "▁▂▃▄▅▆▇█"


def render_charts(data: ChartData, width: int = 100) -> Text:
    """The three charts as one text, fitted to ``width`` columns."""
    text = Text(no_wrap=True, overflow="crop")
    names = [s.name for s in data.windows]
    label = min(max((len(n) for n in names), default=8), 24)
    charted = list(dict.fromkeys([*names, *(p.name for p in data.sizes), *(b.name for b in data.domains)]))
    short = dict(zip(charted, short_names(charted, label), strict=True))  # told apart in every chart
    # -- KL against size ---------------------------------------------------------------------------
    text.append("mean KL against size", style="bold")
    if data.sizes:
        lows = [p.ci_low if p.interval_shown else p.mean for p in data.sizes]
        lo = min((v for v in lows if v > 0), default=0.0)
        hi = max(p.ci_high if p.interval_shown else p.mean for p in data.sizes)
        log = lo > 0
        # the legend says the axis drawn (it said "log axis" also where none was, or no chart at all)
        text.append(f"  ● mean ├─┤ 95 % interval, {'log' if log else 'linear'} axis\n", style="dim")
        text.append("◆ on the Pareto front: no smaller candidate is closer\n", style="dim")
        prefix = label + 25  # name, size, bits per weight, front mark
        bar = max(10, width - prefix - 11)
        for p in sorted(data.sizes, key=lambda p: p.size_bytes):
            bpw = f"{p.bits_per_weight:5.2f} bpw" if p.bits_per_weight is not None else " " * 9
            text.append(f"{short[p.name]:<{label}} {human_bytes(p.size_bytes):>11} {bpw} ")
            text.append("◆ " if p.on_front else "  ", style="bold")
            low, high = (p.ci_low, p.ci_high) if p.interval_shown else (None, None)  # too few: the mean alone
            text.append(interval_bar(low, high, p.mean, BarAxis(lo, hi, log), bar))
            text.append(f" {table_figure(p.mean)}\n")
        ends = f"{table_figure(lo)}{table_figure(hi):>{max(1, bar - len(table_figure(lo)))}}"
        text.append(f"{'':<{prefix}}{ends}\n", style="dim")
        few = sorted({p.windows for p in data.sizes if not p.interval_shown and p.windows is not None})
        if few:
            text.append(f"{too_few_text(few[0], short=True, unit=data.unit)}: the mean alone\n", style="dim")
    else:
        text.append(f"\n{NO_SIZE}\n", style="dim")
    if data.unsized and data.sizes:
        text.append(f"without a size, not shown: {', '.join(data.unsized)}\n", style="dim")
    # -- per window --------------------------------------------------------------------------------
    text.append(f"\nmean KL per {data.unit}", style="bold")
    every = [v for s in data.windows for v in s.kl_mean if math.isfinite(v)]
    top = max(every, default=0.0)
    scale = bar_axis(every)  # a dozen quants 100x apart: on 0 to top the closer half were all "▁"
    if scale.log:
        ends = f"{table_figure(scale.low)} to {table_figure(scale.high)}"
        text.append(f"  one log scale, {ends}\n", style="dim")
    else:
        text.append(f"  blocks: 0 to {table_figure(top)}, one scale\n", style="dim")

    def block(v: float) -> str:
        if not math.isfinite(v):
            return "?"
        if scale.log:
            return LEVELS[scale.position(v, len(LEVELS))]
        return LEVELS[min(7, int(v / top * 8))] if top > 0 else "?"

    cols = max(4, width - label - 36)
    longest = max((len(s.kl_mean) for s in data.windows), default=0)
    if longest > cols:
        text.append(f"the last {cols} of {longest} {data.unit}s (wider terminal: more)\n", style="dim")
    for s in data.windows:
        values = s.kl_mean[-cols:]
        spark = "".join(block(v) for v in values)
        text.append(f"{short[s.name]:<{label}} {spark} ")
        interval = interval_ends(s.ci_low, s.ci_high, table_figure) if s.interval_shown else \
            too_few_text(s.windows, short=True, unit=data.unit)
        text.append(f"{table_figure(s.mean)} {interval}\n", style="dim")
    # -- per domain --------------------------------------------------------------------------------
    if data.domains:
        text.append("\nmean KL per domain", style="bold")
        text.append("  █ mean ├─┤ 95 % interval\n", style="dim")
        dhi = max(b.ci_high if b.interval_shown else b.estimate for b in data.domains)
        bar = max(10, width - label - 14)
        for domain in data.domain_names:
            bars = [b for b in data.domains if b.domain == domain]
            text.append(domain, style="italic")
            few = sorted({b.windows for b in bars if not b.interval_shown and b.windows is not None})
            if few:  # the reports share their windows: one count, said once
                text.append(f"  {too_few_text(few[0], short=True, unit=data.unit)}: no interval", style="dim")
            text.append("\n")
            axis = BarAxis(0.0, dhi)  # bars rise from 0: linear
            for b in bars:
                filled = axis.position(b.estimate, bar)
                # from too few windows: the bar alone, and why there is no interval
                cells = list(interval_bar(b.ci_low if b.interval_shown else None,
                                          b.ci_high if b.interval_shown else None, b.estimate, axis, bar))
                for k in range(filled):
                    if cells[k] in " ─":
                        cells[k] = "█"
                text.append(f"  {short[b.name]:<{label}} {''.join(cells)} {table_figure(b.estimate)}\n")
    return text


class BoardCharts(VerticalScroll):
    """The viewer's charts pane (key c in a leaderboard)."""

    def compose(self) -> ComposeResult:
        yield PlainStatic("charts: loading…", id="charts-text")

    def show(self, data: ChartData) -> None:
        self.data = data
        self.query_one("#charts-text", PlainStatic).update(render_charts(data, max(60, self.size.width - 2)))

    def on_resize(self) -> None:
        if getattr(self, "data", None) is not None:
            self.show(self.data)
