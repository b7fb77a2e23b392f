"""The leaderboard's charts as an SVG or PNG file (matplotlib, the optional ``plot`` extra).

Three panels, from an :class:`~kldtui.decide.exports.ExportTable` (the same figures the exports
print): mean KL against size with its 95 % interval as error bars and the Pareto front marked (no
smaller candidate is closer), each candidate's per-window mean KL with its interval as a band,
and the per-domain mean KL as bars with their intervals. :func:`chart_data` holds exactly what is
drawn; the viewer's text charts (:mod:`kldtui.tui.widgets.board_charts`) draw the same data.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.decide.exports import ExportTable
from kldtui.errors import BadInput
from kldtui.folder_lock import check_output_file
from kldtui.formats.report import domain_windows
from kldtui.formats.report_names import MIN_INTERVAL_WINDOWS, interval_rests_on_too_few
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import wants_log_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_EXTRA = "plot"
SUFFIXES = (".svg", ".png")
# both chart views say it (this file and the dashboard's board charts)
NO_SIZE = ("no candidate has a known size: give its weights or its size (in the profile: weights, or "
           "size_bytes, or parameters with bits_per_weight; kldtui compare: --candidate-model or "
           "--candidate-size-bytes)")
MISSING = ("kldtui plot needs matplotlib, which is not installed: pip install matplotlib (in a checkout of "
           f"kldtui, pip install -e '.[{PLOT_EXTRA}]'; no package index serves kldtui yet)")


@dataclass(frozen=True)
class SizePoint:
    name: str
    size_bytes: int
    bits_per_weight: float | None
    mean: float
    ci_low: float
    ci_high: float
    on_front: bool
    windows: int | None = None  # what the interval rests on

    @property
    def size_gib(self) -> float:
        """Where the plot's size axis (in GiB) places it."""
        return self.size_bytes / 2**30

    @property
    def interval_shown(self) -> bool:
        """False when the interval rests on too few windows: only the mean is drawn."""
        return not interval_rests_on_too_few(self.windows)


@dataclass(frozen=True)
class WindowSeries:
    name: str
    window_index: list[int]
    kl_mean: list[float]
    mean: float
    ci_low: float
    ci_high: float

    @property
    def windows(self) -> int:
        return len(self.kl_mean)

    @property
    def interval_shown(self) -> bool:
        return not interval_rests_on_too_few(self.windows)


@dataclass(frozen=True)
class DomainBar:
    name: str
    domain: str
    estimate: float
    ci_low: float
    ci_high: float
    windows: int | None = None  # the domain's windows, which its interval rests on

    @property
    def interval_shown(self) -> bool:
        return not interval_rests_on_too_few(self.windows)


@dataclass(frozen=True)
class CandidateStyle:
    """How one candidate is drawn in every panel, unlike every other candidate's."""
    color: str
    marker: str
    linestyle: str
    hatch: str


# tab10's colours first (matplotlib's default cycle), then tab20's lighter halves: twenty distinct
# colours before any repeats; beyond, a colour comes back with another marker, dash and hatch
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
           "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
_MARKERS = (".", "s", "^", "v", "D", "x")
_LINESTYLES = ("-", "--", ":", "-.")
_HATCHES = ("", "//", "..", "xx", "\\\\", "--")
# legends of more entries than this go beside the panel, where they cover no line
_LEGEND_INSIDE_AT_MOST = 6


def candidate_styles(names: list[str]) -> dict[str, CandidateStyle]:
    """One style per candidate, in the order given, no two alike up to 120 candidates (matplotlib's
    default cycle repeats after ten: with a dozen quants two lines and two bars looked the same)."""
    out = {}
    for i, name in enumerate(dict.fromkeys(names)):
        turn = i // len(_COLORS)
        out[name] = CandidateStyle(_COLORS[i % len(_COLORS)], _MARKERS[turn % len(_MARKERS)],
                                   _LINESTYLES[turn % len(_LINESTYLES)], _HATCHES[turn % len(_HATCHES)])
    return out


@dataclass(frozen=True)
class ChartData:
    sizes: list[SizePoint]
    unsized: list[str]  # candidates without a known size (left out of the first panel)
    windows: list[WindowSeries]
    domains: list[DomainBar]
    domain_names: list[str]
    styles: dict[str, CandidateStyle]  # each candidate's, the same in every panel
    unit: str = WINDOW_UNIT  # what the windows are called (a hidden-state suite's: context)


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (size, KL) points: True where no other point is at most as large and strictly closer,
    or strictly smaller and at most as far (the candidates worth their size)."""
    out = []
    for i, (s, k) in enumerate(points):
        dominated = any(j != i and s2 <= s and k2 <= k and (s2 < s or k2 < k)
                        for j, (s2, k2) in enumerate(points))
        out.append(not dominated)
    return out


def chart_data(table: ExportTable) -> ChartData:
    sized = [(r, r.size.size_bytes) for r in table.rows
             if r.size is not None and r.size.size_bytes is not None]
    front = pareto_front([(float(b), r.mean) for r, b in sized])
    sizes = [SizePoint(r.name, b, r.size.bits_per_weight if r.size else None, r.mean, r.ci_low,
                       r.ci_high, f, r.windows) for (r, b), f in zip(sized, front, strict=True)]
    windows = []
    for r in table.rows:
        t = r.report.window_table()
        windows.append(WindowSeries(r.name, list(t.window_index), [float(v) for v in t.kl_mean], r.mean,
                                    r.ci_low, r.ci_high))
    domains = [DomainBar(r.name, d, b.estimate, b.ci95_low, b.ci95_high, domain_windows(r.report).get(d))
               for r in table.rows for d, b in r.report.domains.items()]
    unsized = [r.name for r in table.rows if all(r is not x for x, _ in sized)]
    return ChartData(sizes=sizes, unsized=unsized, windows=windows, domains=domains,
                     domain_names=table.domains, styles=candidate_styles([r.name for r in table.rows]),
                     unit=table.unit)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise BadInput(MISSING) from None
    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def figure(table: ExportTable, whose: Sequence[str] = ()) -> Figure:
    """The panels on one figure (nothing written): without any candidate's size, the size panel
    gives way to a line that says how to give one. ``whose``: the notes a ranking of these reports says
    of whose runs they are (kldtui.workflow.owners.board_whose; decide reads no profiles record), each
    under the title."""
    plt = _pyplot()
    data = chart_data(table)
    # Candidate and domain names are text, never mathtext: "q8 $x^2$" stays as written, and a name like
    # "$\\frac$" failed the whole plot with a parse error. Each text keeps the setting it was made with.
    with plt.rc_context({"text.parse_math": False}):
        if data.sizes:
            fig, (ax_size, ax_win, ax_dom) = plt.subplots(3, 1, figsize=(9.0, 13.0), layout="constrained")
            _size_panel(ax_size, data)
        else:
            fig, (ax_win, ax_dom) = plt.subplots(2, 1, figsize=(9.0, 9.0), layout="constrained")
            fig.supxlabel(textwrap.fill(NO_SIZE, 120), fontsize=8)
        title = (f"KL(reference || candidate): {len(table.rows)} candidates, {table.windows} {data.unit}s; "
                 "lower is closer")
        fig.suptitle("\n".join([title, *(_wrapped(note) for note in whose)]), fontsize=11)
        _window_panel(ax_win, data)
        _domain_panel(ax_dom, data)
    return fig  # type: ignore[no-any-return]


def _wrapped(text: str) -> str:
    """A note in lines that fit the figure's width, broken only at spaces (a path stays whole)."""
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def _legend(ax: Any, entries: int) -> None:
    """Inside the panel for a few entries; beside it for more, where it covers no line or bar."""
    if entries <= _LEGEND_INSIDE_AT_MOST:
        ax.legend(fontsize=7)
    else:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _spread(mid: list[float], low: list[float], high: list[float]) -> list[list[float]]:
    """Error-bar lengths below and above (an interval that does not hold its estimate: none there)."""
    return [[max(m - lo, 0.0) for m, lo in zip(mid, low, strict=True)],
            [max(hi - m, 0.0) for m, hi in zip(mid, high, strict=True)]]


def _interval_bars(ax: Any, xs: list[float], mid: list[float], low: list[float], high: list[float],
                   color: str, gid: str, capsize: float = 3) -> None:
    """95 % interval bars at ``xs`` (only where one is shown), their lines and caps named ``gid`` in
    an SVG."""
    container = ax.errorbar(xs, mid, yerr=_spread(mid, low, high), fmt="none", capsize=capsize, color=color)
    for artist in (*container.lines[1], *container.lines[2]):
        artist.set_gid(gid)


def _size_panel(ax: Any, data: ChartData) -> None:
    ax.set_title("mean KL against size (95 % intervals; Pareto front: no smaller candidate is closer)",
                 fontsize=9)
    ax.set_xlabel("size (GiB)")
    ax.set_ylabel("mean KL (nats)")
    for p in data.sizes:
        # on the front: a filled diamond; off it: a hollow circle, both in the candidate's colour
        color = data.styles[p.name].color
        ax.plot([p.size_gib], [p.mean], "D" if p.on_front else "o", color=color,
                markerfacecolor=color if p.on_front else "none", gid=f"size-point-{p.name}")
        # from too few windows: the mean alone (no bar, and no cap a zero-length bar would still draw)
        if p.interval_shown:
            _interval_bars(ax, [p.size_gib], [p.mean], [p.ci_low], [p.ci_high], color,
                           f"size-interval-{p.name}")
        label = p.name if p.bits_per_weight is None else f"{p.name} ({p.bits_per_weight:.2f} bpw)"
        ax.annotate(label, (p.size_gib, p.mean), textcoords="offset points", xytext=(5, 4), fontsize=7,
                    color=color)
    front = sorted((p for p in data.sizes if p.on_front), key=lambda p: p.size_gib)
    if len(front) > 1:
        ax.plot([p.size_gib for p in front], [p.mean for p in front], "--", color="black", linewidth=1,
                label="Pareto front", gid="pareto-front")
        ax.legend(fontsize=7)
    if data.unsized:
        ax.text(0.99, 0.01, f"without a size, not shown: {', '.join(data.unsized)}", ha="right",
                va="bottom", transform=ax.transAxes, fontsize=7)
    if all(p.ci_low > 0 for p in data.sizes):
        ax.set_yscale("log")


def _window_panel(ax: Any, data: ChartData) -> None:
    log = wants_log_axis([v for w in data.windows for v in w.kl_mean]
                          + [w.ci_low for w in data.windows if w.window_index and w.interval_shown])
    ax.set_title(f"mean KL per {data.unit} (band: the candidate's 95 % interval of the mean"
                 f"{'; log axis' if log else ''})", fontsize=9)
    ax.set_xlabel(data.unit)
    ax.set_ylabel("mean KL (nats)")
    for s in data.windows:
        style = data.styles[s.name]
        ax.plot(s.window_index, s.kl_mean, marker=style.marker, linestyle=style.linestyle, color=style.color,
                linewidth=1, markersize=4, label=s.name, gid=f"window-series-{s.name}")
        if s.window_index and s.interval_shown:
            ax.fill_between([min(s.window_index), max(s.window_index)], [s.ci_low] * 2, [s.ci_high] * 2,
                            color=style.color, alpha=0.15, gid=f"window-band-{s.name}")
    if log:
        ax.set_yscale("log")
    _legend(ax, len(data.windows))


def _domain_panel(ax: Any, data: ChartData) -> None:
    log = wants_log_axis([b.estimate for b in data.domains]
                          + [b.ci_low for b in data.domains if b.interval_shown])
    ax.set_title(f"mean KL per domain (95 % intervals, {data.unit}s resampled; none from fewer than "
                 f"{MIN_INTERVAL_WINDOWS} {data.unit}s{'; log axis' if log else ''})", fontsize=9)
    ax.set_ylabel("mean KL (nats)")
    names = list(dict.fromkeys(b.name for b in data.domains))
    if not names:  # said, not an empty frame
        ax.text(0.5, 0.5, "these reports hold no per-domain figures", ha="center", va="center",
                transform=ax.transAxes, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if log:  # before the bars, so that they rise from the axis' foot, not from zero
        ax.set_yscale("log")
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        bars = [b for b in data.domains if b.name == name]
        xs = [data.domain_names.index(b.domain) + (k - (len(names) - 1) / 2) * width for b in bars]
        style = data.styles[name]
        ax.bar(xs, [b.estimate for b in bars], width=width, label=name, color=style.color, hatch=style.hatch,
               edgecolor="white" if style.hatch else None, gid=f"domain-bars-{name}")
        shown = [(x, b) for x, b in zip(xs, bars, strict=True) if b.interval_shown]  # none from too few
        if shown:
            _interval_bars(ax, [x for x, _ in shown], [b.estimate for _, b in shown],
                           [b.ci_low for _, b in shown], [b.ci_high for _, b in shown], "black",
                           f"domain-interval-{name}", capsize=2)
    ax.set_xticks(range(len(data.domain_names)), data.domain_names)
    _legend(ax, len(names))


def check_plot_path(path: str | os.PathLike[str]) -> Path:
    """BadInput (one line) unless a plot can be written to ``path``: its suffix picks a format
    (.svg or .png) and matplotlib is installed; checked before any report is read."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise BadInput(f"{p}: the plot's file name must end in .svg or .png")
    if importlib.util.find_spec("matplotlib") is None:
        raise BadInput(MISSING)
    return p


def write_plot(table: ExportTable, path: str | os.PathLike[str], whose: Sequence[str] = ()) -> Path:
    """The charts (:func:`figure`, ``whose`` under its title) to ``path`` (.svg or .png), atomically;
    where no file can be written there (a folder at the name, a missing or unwritable folder), the
    output-file rule's one line (:func:`kldtui.folder_lock.check_output_file`)."""
    p = check_output_file(check_plot_path(path), what="plot")
    plt = _pyplot()
    import matplotlib

    from kldtui.formats.atomic import atomic_open

    fig = figure(table, whose)
    try:
        with matplotlib.rc_context({"svg.hashsalt": "kldtui", "svg.fonttype": "none"}), atomic_open(p) as out:
            # no creation date: the same reports give the same file
            metadata = {"Date": None} if p.suffix.lower() == ".svg" else {"Software": "kldtui"}
            fig.savefig(out, format=p.suffix.lower()[1:], dpi=100, metadata=metadata)
    finally:
        plt.close(fig)
    return p


__all__ = ["MISSING", "NO_SIZE", "PLOT_EXTRA", "SUFFIXES", "CandidateStyle", "ChartData", "DomainBar",
           "SizePoint", "WindowSeries", "candidate_styles", "chart_data", "check_plot_path",
           "figure", "pareto_front", "write_plot"]
