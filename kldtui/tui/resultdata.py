"""The figures the result pane shows, read from a comparison report (no Textual here).

Accepts kldtui's reports and the original comparator's (kldtui's schema is a superset, so the
original fields are read first and kldtui's extras are used when present). Missing figures are
``None`` and shown as "-".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    live: bool = False  # built from the windows compared so far, not from a report

    @property
    def sort_key(self) -> float:
        return self.kl.estimate if self.kl is not None else math.inf


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _band(obj: Any, estimate: float | None = None) -> Band | None:
    if not isinstance(obj, dict):
        return Band(estimate) if estimate is not None else None
    est = _num(obj.get("estimate"))
    if est is None:
        est = estimate
    if est is None:
        return None
    return Band(est, _num(obj.get("ci95_low")), _num(obj.get("ci95_high")))


def _stat(report: dict[str, Any], key: str, stat: str = "mean") -> float | None:
    obj = report.get(key)
    return _num(obj.get(stat)) if isinstance(obj, dict) else None


def window_bars(report: dict[str, Any]) -> list[WindowBar]:
    bars: list[WindowBar] = []
    arrays = report.get("per_window_arrays")
    if isinstance(arrays, dict) and isinstance(arrays.get("kl_mean"), list):
        idx, dom, kl = arrays.get("window_index") or [], arrays.get("domain") or [], arrays["kl_mean"]
        for i, value in enumerate(kl):
            v = _num(value)
            if v is not None and i < len(idx):
                bars.append(WindowBar(int(idx[i]), str(dom[i]) if i < len(dom) else "", v))
    elif isinstance(report.get("per_window"), list):
        for entry in report["per_window"]:
            if not isinstance(entry, dict):
                continue
            stats = entry.get("kl_reference_to_candidate")
            v = _num(stats.get("mean")) if isinstance(stats, dict) else _num(entry.get("kl_mean"))
            w = entry.get("window_index")
            if v is not None and isinstance(w, int):
                bars.append(WindowBar(w, str(entry.get("domain", "")), v))
    bars.sort(key=lambda b: b.index)
    return bars


def result_from_report(report: dict[str, Any], path: str | Path | None = None,
                       name: str | None = None) -> ResultData:
    if name is None:
        name = report_name(report, path)
    bars = window_bars(report)
    kl_mean = _stat(report, "kl_reference_to_candidate")
    kl = _band(report_interval(report), kl_mean)
    counts: dict[str, int] = {}
    for bar in bars:
        counts[bar.domain] = counts.get(bar.domain, 0) + 1
    domains: list[DomainRow] = []
    dom_obj = report.get("domains")
    if isinstance(dom_obj, dict):
        for dname, obj in dom_obj.items():
            domains.append(DomainRow(str(dname), counts.get(str(dname), 0), _band(obj)))
    else:
        for dname, n in counts.items():
            vals = [b.kl for b in bars if b.domain == dname]
            domains.append(DomainRow(dname, n, Band(sum(vals) / len(vals))))
    nt_obj = report.get("next_token")
    nt: dict[str, Any] = nt_obj if isinstance(nt_obj, dict) else {}
    ppl = _num(nt.get("perplexity_ratio"))
    dp_obj = nt.get("delta_p")
    dp: dict[str, Any] = dp_obj if isinstance(dp_obj, dict) else {}
    wr = report.get("window_range")
    floor = report.get("noise_floor")
    return ResultData(
        name=name,
        path=str(path) if path is not None else None,
        original=report.get("report_format") in (None, "original"),  # "original": load_report's mark
        kl=kl,
        js_mean=_stat(report, "js"),
        top1=_num(report.get("top1_agreement")),
        ppl_ratio=_band(nt.get("perplexity_ratio_window_cluster_bootstrap"), ppl) if nt else None,
        delta_p_mean=_num(dp.get("mean")),
        delta_p_rms=_num(dp.get("rms")),
        positions=int(report["positions"]) if isinstance(report.get("positions"), int) else None,
        window_range=(int(wr[0]), int(wr[1])) if isinstance(wr, list) and len(wr) == 2 else None,
        windows=bars,
        domains=domains,
        noise_floor=_num(floor.get("kl_mean")) if isinstance(floor, dict) else None,
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
