"""The figures the result pane shows, read from a comparison report (no Textual here).

Reads the typed report (:mod:`kldtui.formats.report_model`) of kldtui or of the original
comparator; kldtui's extra figures are used when present. Missing figures are ``None`` and shown
as "-".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui.formats.report import figure_lines
from kldtui.formats.report_model import Bootstrap, ComparisonReport, Interval, as_report
from kldtui.formats.report_names import report_interval, report_name


@dataclass(frozen=True)
class Band:
    """An estimate with its 95 % interval (either bound may be unknown)."""

    estimate: float
    low: float | None = None
    high: float | None = None

    def text(self, fmt: str = "{:.5f}") -> str:
        if self.low is None or self.high is None:
            return fmt.format(self.estimate)
        return f"{fmt.format(self.estimate)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


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


@dataclass
class ResultData:
    name: str
    path: str | None = None
    original: bool = False
    kl: Band | None = None
    js_mean: float | None = None
    top1: float | None = None
    ppl_ratio: Band | None = None
    delta_p_mean: float | None = None
    delta_p_rms: float | None = None
    positions: int | None = None
    window_range: tuple[int, int] | None = None
    windows: list[WindowBar] = field(default_factory=list)
    domains: list[DomainRow] = field(default_factory=list)
    noise_floor: float | None = None
    figures: list[str] = field(default_factory=list)  # registered figures, one line each (figure_lines)
    live: bool = False  # built from the windows compared so far, not from a report

    @property
    def sort_key(self) -> float:
        return self.kl.estimate if self.kl is not None else math.inf


def _num(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _band(boot: Bootstrap | Interval | None, estimate: float | None = None) -> Band | None:
    est = _num(boot.estimate) if boot is not None else None
    if est is None:
        est = estimate
    if est is None:
        return None
    if boot is None:
        return Band(est)
    return Band(est, _num(boot.ci95_low), _num(boot.ci95_high))


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
    kl = _band(report_interval(report), report.kl_reference_to_candidate.mean)
    counts: dict[str, int] = {}
    for bar in bars:
        counts[bar.domain] = counts.get(bar.domain, 0) + 1
    domains = [DomainRow(dname, counts.get(dname, 0), _band(boot)) for dname, boot in report.domains.items()]
    if not domains:  # a report without domain intervals: plain means of its windows
        for dname, n in counts.items():
            vals = [b.kl for b in bars if b.domain == dname]
            domains.append(DomainRow(dname, n, Band(sum(vals) / len(vals))))
    nt = report.next_token
    dp = nt.delta_p if nt is not None else None
    floor = report.noise_floor
    return ResultData(
        name=name,
        path=str(path) if path is not None else None,
        original=report.original,
        kl=kl,
        js_mean=_num(report.js.mean) if report.js is not None else None,
        top1=_num(report.top1_agreement),
        ppl_ratio=(_band(nt.perplexity_ratio_window_cluster_bootstrap, _num(nt.perplexity_ratio))
                   if nt is not None else None),
        delta_p_mean=_num(dp.mean) if dp is not None else None,
        delta_p_rms=_num(dp.rms) if dp is not None else None,
        positions=report.positions,
        window_range=report.window_range,
        windows=bars,
        domains=domains,
        noise_floor=_num(floor.kl_mean) if floor is not None else None,
        figures=figure_lines(report),
    )


def live_result(windows: list[tuple[int, str, float]], name: str = "live") -> ResultData:
    """A partial result from windows compared so far (no intervals yet)."""
    bars = [WindowBar(i, d, k) for i, d, k in sorted(windows)]
    counts: dict[str, list[float]] = {}
    for b in bars:
        counts.setdefault(b.domain, []).append(b.kl)
    return ResultData(
        name=name,
        live=True,
        kl=Band(sum(b.kl for b in bars) / len(bars)) if bars else None,
        windows=bars,
        domains=[DomainRow(d, len(v), Band(sum(v) / len(v))) for d, v in counts.items()],
    )
