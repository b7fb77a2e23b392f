"""The figures the result pane shows, read from a comparison report (no Textual here).

Reads the typed report (:mod:`kldtui.formats.report_model`) of kldtui or of the original
comparator; kldtui's extra figures are used when present. Missing figures are ``None`` and shown
as "-".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui.formats.report import (
    clustered_line,
    confidence_line,
    figure_lines,
    reference_line,
    rms_delta_p_shown_as_figure,
)
from kldtui.formats.report_model import Bootstrap, ComparisonReport, HeadlineInterval, Interval, as_report
from kldtui.formats.report_names import (
    interval_rests_on_too_few,
    kl_headline_interval,
    report_name,
    too_few_text,
)
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import interval_ends, table_figure


def _formatter(fmt: Callable[[float], str] | None) -> Callable[[float], str]:
    """How a figure reads: ``fmt`` (a formatter of kldtui.text); None: a KL's
    (:func:`~kldtui.text.table_figure`)."""
    return table_figure if fmt is None else fmt


@dataclass(frozen=True)
class Band:
    """An estimate with its 95 % interval (either bound may be unknown) over ``windows`` windows
    (what they are called: ``unit``, a hidden-state suite's ``context``).

    Below the count an interval needs (:func:`interval_rests_on_too_few`) the interval is not shown:
    :attr:`interval` is None and :meth:`text` says why instead."""

    estimate: float
    low: float | None = None
    high: float | None = None
    windows: int | None = None
    unit: str = WINDOW_UNIT

    @property
    def too_few(self) -> bool:
        return interval_rests_on_too_few(self.windows)

    @property
    def ends(self) -> tuple[float, float] | None:
        """(low, high) when the interval is to be shown, an end that overflowed (KL over dozens of
        orders of magnitude) infinite, else None."""
        if self.low is None or self.high is None or self.too_few:
            return None
        return self.low, self.high

    @property
    def interval(self) -> tuple[float, float] | None:
        """:attr:`ends` when both are finite (what a chart can draw), else None."""
        ends = self.ends
        return ends if ends is not None and all(math.isfinite(e) for e in ends) else None

    def interval_text(self, fmt: Callable[[float], str] | None = None, short: bool = True) -> str:
        """``[low, high]`` (an end that is not finite in words: kldtui.text.interval_ends), or why there
        is none (``too few windows (2)``), or ``-``; each figure as ``fmt`` writes it (a formatter of
        kldtui.text; None: a KL's, :func:`~kldtui.text.table_figure`)."""
        if self.ends is not None:
            return interval_ends(*self.ends, _formatter(fmt))
        if self.too_few and self.windows is not None:
            return too_few_text(self.windows, short=short, unit=self.unit)
        return "-"

    def text(self, fmt: Callable[[float], str] | None = None, short: bool = False) -> str:
        """``estimate [low, high]``, or the estimate and why there is no interval (``short``: in a
        few words, for a second figure on a line that already said it); ``fmt`` as
        :meth:`interval_text`'s."""
        estimate = _formatter(fmt)(self.estimate)
        if self.ends is not None:
            return f"{estimate} {self.interval_text(fmt)}"
        if self.too_few and self.windows is not None:
            why = (f"no interval: too few {self.unit}s" if short
                   else too_few_text(self.windows, unit=self.unit))
            return f"{estimate} ({why})"
        return estimate


@dataclass(frozen=True)
class WindowBar:
    index: int
    domain: str
    kl: float


@dataclass(frozen=True)
class DomainRow:
    domain: str
    windows: int
    band: Band | None


@dataclass(frozen=True)
class PositionRow:
    """Mean KL over positions [start, stop) of every window."""

    start: int
    stop: int
    positions: int
    kl_mean: float
    # the band's window-clustered 95 % interval (docs/STATISTICS.md); None when the report has none or
    # it rests on too few windows
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Provenance:
    """Where a report's figures come from (each None when the report does not say)."""

    reference: str | None = None
    candidate: str | None = None
    backend: str | None = None
    backend_reason: str | None = None  # why that backend (the report's provenance.backend_reason)
    threads: int | None = None
    elapsed_seconds: float | None = None
    kldtui_version: str | None = None
    created_utc: str | None = None
    command: str | None = None
    suite_hash: str | None = None
    verified: str | None = None  # what was checked before comparing, in words


# per-token KL quantiles the result pane shows, in order (key in the report's Stats, label)
KL_QUANTILES = (("median", "median"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("p99_9", "p99.9"),
                ("max", "max"))


@dataclass
class ResultData:
    name: str
    path: str | None = None
    original: bool = False
    kl: Band | None = None
    # the headline interval of mean KL rests on too few windows (docs/STATISTICS.md): mark, do not headline
    kl_too_few_windows: bool = False
    js_mean: float | None = None
    top1: float | None = None
    topk: list[tuple[int, float]] = field(default_factory=list)  # (k, fraction) beyond top-1 too
    kl_quantiles: list[tuple[str, float]] = field(default_factory=list)  # (label, per-token KL)
    kl_by_position: list[PositionRow] = field(default_factory=list)
    provenance: Provenance | None = None
    ppl_ratio: Band | None = None
    delta_p_mean: float | None = None
    delta_p_rms: float | None = None
    delta_p_rms_in_figures: bool = False  # shown once, as the RMS Δp figure (% with its interval)
    positions: int | None = None
    window_range: tuple[int, int] | None = None
    windows: list[WindowBar] = field(default_factory=list)
    domains: list[DomainRow] = field(default_factory=list)
    noise_floor: float | None = None
    # the mean KL sits inside the repeat floor (kldtui.decide.paired.repeat_floor_note), or None
    repeat_floor_note: str | None = None
    figures: list[str] = field(default_factory=list)  # registered figures, one line each (figure_lines)
    # KL by reference confidence, with window-clustered intervals (formats.report.confidence_line)
    buckets: list[str] = field(default_factory=list)
    reference: str | None = None  # what the reference was and its size on disk (hidden-state suites)
    clustered: str | None = None  # a hidden-state suite's contexts, partition and clustered interval
    live: bool = False  # built from the windows compared so far, not from a report
    unit: str = WINDOW_UNIT  # what its windows are called: ComparisonReport.unit (hidden-state: context)

    @property
    def sort_key(self) -> float:
        return self.kl.estimate if self.kl is not None else math.inf


def _num(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _end(value: float | None) -> float | None:
    """An interval's end: an infinite one kept (it overflowed, and is said in words), NaN unknown."""
    return None if value is None or math.isnan(value) else value


def _band(boot: Bootstrap | Interval | HeadlineInterval | None, estimate: float | None = None,
          windows: int | None = None, unit: str = WINDOW_UNIT) -> Band | None:
    est = _num(boot.estimate) if boot is not None else None
    if est is None:
        est = estimate
    if est is None:
        return None
    if boot is None:
        return Band(est, windows=windows, unit=unit)
    return Band(est, _end(boot.ci95_low), _end(boot.ci95_high), windows, unit)


def window_bars(report: ComparisonReport) -> list[WindowBar]:
    table = report.window_table()
    bars = [WindowBar(w, d, kl) for w, d, kl in zip(table.window_index, table.domain, table.kl_mean,
                                                  strict=True)]
    bars.sort(key=lambda b: b.index)
    return bars


def result_from_report(document: ComparisonReport | Mapping[str, Any], path: str | Path | None = None,
                       name: str | None = None) -> ResultData:
    """The result pane's figures; a parsed JSON document is validated first (BadInput, one line)."""
    report = as_report(document, str(path) if path is not None else "report")
    if name is None:
        name = report_name(report, path)
    bars = window_bars(report)
    n_windows = len(bars) or report.windows
    head = kl_headline_interval(report)  # the headline interval (docs/STATISTICS.md), not the bootstrap
    kl = _band(head, report.kl_reference_to_candidate.mean, n_windows, report.unit)
    counts: dict[str, int] = {}
    for bar in bars:
        counts[bar.domain] = counts.get(bar.domain, 0) + 1
    domains = [DomainRow(dname, counts.get(dname, 0), _band(boot, windows=counts.get(dname) or None,
                                                            unit=report.unit))
               for dname, boot in report.domains.items()]
    if not domains:  # a report without domain intervals: plain means of its windows
        for dname, n in counts.items():
            vals = [b.kl for b in bars if b.domain == dname]
            domains.append(DomainRow(dname, n, Band(sum(vals) / len(vals), windows=n, unit=report.unit)))
    nt = report.next_token
    dp = nt.delta_p if nt is not None else None
    floor = report.noise_floor
    stats = report.kl_reference_to_candidate
    quantiles = [(label, value) for key, label in KL_QUANTILES
                 if (value := _num(getattr(stats, key, None))) is not None]
    topk = [(k, f) for k in (report.topk_agreement.k if report.topk_agreement is not None else [])
            if (f := _num(report.topk_agreement.at(k) if report.topk_agreement else None)) is not None]
    if not topk and _num(report.top1_agreement) is not None:
        topk = [(1, float(report.top1_agreement))]  # type: ignore[arg-type]
    floor_note = None
    if floor is not None and kl is not None:
        from kldtui.decide.paired import repeat_floor_note  # here: the viewer starts without NumPy

        floor_note = repeat_floor_note([(name, kl.estimate)], _num(floor.kl_mean))
    return ResultData(
        name=name,
        path=str(path) if path is not None else None,
        original=report.original,
        kl=kl,
        kl_too_few_windows=head.rests_on_too_few_windows,
        js_mean=_num(report.js.mean) if report.js is not None else None,
        top1=_num(report.top1_agreement),
        topk=topk,
        kl_quantiles=quantiles,
        kl_by_position=[PositionRow(b.start, b.stop, b.positions, b.kl_mean,
                                    *((b.ci95_low, b.ci95_high) if not interval_rests_on_too_few(b.windows)
                                      else (None, None)))
                        for b in report.kl_by_position or []],
        provenance=_provenance(report),
        ppl_ratio=(_band(nt.perplexity_ratio_window_cluster_bootstrap, _num(nt.perplexity_ratio), n_windows,
                         report.unit) if nt is not None else None),
        delta_p_mean=_num(dp.mean) if dp is not None else None,
        delta_p_rms=_num(dp.rms) if dp is not None else None,
        delta_p_rms_in_figures=rms_delta_p_shown_as_figure(report),
        positions=report.positions,
        window_range=report.window_range,
        windows=bars,
        domains=domains,
        noise_floor=_num(floor.kl_mean) if floor is not None else None,
        repeat_floor_note=floor_note,
        figures=figure_lines(report),
        buckets=[line] if (line := confidence_line(report)) is not None else [],
        reference=reference_line(report),
        clustered=clustered_line(report),
        unit=report.unit,
    )


def _provenance(report: ComparisonReport) -> Provenance:
    prov = report.provenance
    verified = None
    if prov is not None:
        v = prov.verified
        verified = (f"token hashes {'checked' if v.token_hashes else 'not checked'}, suite hash "
                    f"{'checked' if v.suite_hash else 'not checked'}, logits SHA-256 {v.logits_sha256}")
    return Provenance(
        reference=report.reference_dir, candidate=report.candidate_dir,
        backend=prov.backend if prov is not None else None,
        backend_reason=prov.backend_reason if prov is not None else None,
        threads=prov.threads if prov is not None else None,
        elapsed_seconds=prov.elapsed_seconds if prov is not None else None,
        kldtui_version=prov.kldtui_version if prov is not None else None,
        created_utc=prov.created_utc if prov is not None else None,
        command=prov.command if prov is not None else None,
        suite_hash=report.suite_token_hash_sha256, verified=verified)


def live_result(windows: list[tuple[int, str, float]], name: str = "live",
                unit: str = WINDOW_UNIT) -> ResultData:
    """A partial result from windows compared so far (no intervals yet); ``unit``: what the run's
    windows are called (the dashboard's, a hidden-state suite's ``context``)."""
    bars = [WindowBar(i, d, k) for i, d, k in sorted(windows)]
    counts: dict[str, list[float]] = {}
    for b in bars:
        counts.setdefault(b.domain, []).append(b.kl)
    return ResultData(
        name=name,
        live=True,
        # no interval until the report
        kl=Band(sum(b.kl for b in bars) / len(bars), unit=unit) if bars else None,
        windows=bars,
        domains=[DomainRow(d, len(v), Band(sum(v) / len(v), unit=unit)) for d, v in counts.items()],
        unit=unit,
    )
