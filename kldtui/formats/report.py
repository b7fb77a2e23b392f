"""Comparison reports: atomic writing, loading (kldtui's and the original comparator's) and the
human-readable summary.  The schema is docs/REPORT.md; the typed model is
:mod:`kldtui.formats.report_model`."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.folder_lock import check_output_file
from kldtui.formats import untrusted_json
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.report_model import (
    REPORT_FORMAT,
    REPORT_LIMIT,
    REPORT_REMEDY,
    ComparisonReport,
    HeadlineInterval,
    Interval,
)
from kldtui.formats.report_names import MIN_INTERVAL_WINDOWS, interval_rests_on_too_few, kl_headline_interval
from kldtui.text import PRECISE_DIGITS, human_bytes, interval_ends, plain_number, plural, table_figure, top_k


def write_report(path: str | os.PathLike[str] | ComparisonReport | Mapping[str, Any],
                 report: ComparisonReport | Mapping[str, Any] | str | os.PathLike[str]) -> Path:
    """Write ``report`` to ``path`` atomically (keys sorted, 2-space indent); nothing appears under
    ``path`` unless the whole document was written.  Accepts ``(path, report)`` or ``(report, path)``;
    a mapping is written as it is (tools that write their own documents)."""
    if isinstance(path, ComparisonReport | Mapping):
        path, report = report, path
    assert isinstance(path, str | os.PathLike) and isinstance(report, ComparisonReport | Mapping)
    # the output-file rule's one owner, in words true for every writer (the compare command's
    # --output, a run's or campaign's work folder, the dashboard): no other name can be given now
    target = check_output_file(path, what="comparison report", fixed_name=True)
    if isinstance(report, ComparisonReport):
        doc = report.to_json()
        try:  # never leave on disk a report that load_report would refuse
            ComparisonReport.from_json(json.loads(json.dumps(doc, allow_nan=False)), "")
        except BadInput as exc:
            detail = str(exc).removeprefix(": ").split("; not a comparison report")[0]
            raise BadInput(f"{target}: the comparison gives an impossible report ({detail}); nothing was "
                           "written: check its inputs") from None
        write_json_atomic(target, doc)
    else:
        write_json_atomic(target, dict(report))
    return target


def load_report(path: str | os.PathLike[str]) -> ComparisonReport:
    """Read and validate a comparison report file (kldtui's or the original comparator's);
    BadInput naming the file (and the field) and what to do on anything else."""
    p = Path(path)
    doc = untrusted_json.read_json(p, what="comparison report", remedy=REPORT_REMEDY, limit=REPORT_LIMIT)
    return ComparisonReport.from_json(doc, str(p))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _f(value: Any, digits: int = PRECISE_DIGITS) -> str:
    """A figure of the summary (kldtui.text.plain_number's words, six significant digits unless told),
    ``n/a`` for one unknown or not finite."""
    return plain_number(value, digits) if _number(value) else "n/a"


def _ends(low: float | None, high: float | None, shown: Callable[[Any], str] = _f) -> str:
    """``[low, high]``; an end that overflowed in words (kldtui.text.interval_ends), an unknown one
    ``n/a``."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"[{shown(low)}, {shown(high)}]"
    return interval_ends(low, high, shown)


def _over_every_position(estimate: str, overall: str, unit: str, measure: str = "") -> str:
    """Beside an interval and its estimate (from the values of the report's ``unit`` s), the figure over
    every position (in ``measure``: `` %``) where it reads otherwise: windows of unequal positions, or
    a figure that is not a mean (an RMS). Nothing where the two read the same."""
    if overall == estimate:
        return ""
    return f" (from the {unit}s' values; over every position {overall}{measure})"


def _text(value: str | None) -> str:
    """Free text from the report (a folder, a version) on one line
    (:func:`~kldtui.formats.untrusted_json.printable_name`: its loader allows line breaks and tabs)."""
    return "?" if value is None else untrusted_json.printable_name(value)


def _interval(low: Any, high: Any, windows: int | None, unit: str) -> str:
    """``95% CI [low, high]``, or why there is none (too few windows, or the report's ``unit`` s:
    :attr:`ComparisonReport.unit`)."""
    if interval_rests_on_too_few(windows):
        return f"(no interval: too few {unit}s)"
    return f"95% CI {_ends(low, high)}"


def domain_windows(report: ComparisonReport) -> dict[str, int]:
    """How many windows each domain has (what its interval rests on)."""
    counts: dict[str, int] = {}
    for domain in report.window_table().domain:
        counts[domain] = counts.get(domain, 0) + 1
    return counts


def reference_line(report: ComparisonReport) -> str | None:
    """What the reference was and its size on disk against the same windows as F32 logits, when
    the report says (a hidden-state suite's or a replayed reference's report)."""
    ref = report.reference
    if ref is None:
        return None
    what = f"{ref.kind} ({ref.file_dtype})" if ref.file_dtype else ref.kind
    if ref.lm_head_file_sha256 is not None:
        what += " + LM head"
    line = f"reference: {what}"
    if ref.bytes_on_disk is not None:
        line += f", {human_bytes(ref.bytes_on_disk)} on disk"
        if ref.full_logits_bytes and ref.bytes_on_disk:
            ratio = ref.full_logits_bytes / ref.bytes_on_disk
            times = f"{ratio:.1f}x more" if ratio >= 1 else f"{1 / ratio:.1f}x less"
            line += f"; as F32 logits {human_bytes(ref.full_logits_bytes)} ({times})"
    return line


def clustered_line(report: ComparisonReport) -> str | None:
    """A hidden-state suite's contexts, the partition they are from and the mean KL's interval with
    source clusters resampled within strata."""
    stats = report.suite_statistics
    if stats is None:
        return None
    boot = stats.kl_stratified_source_cluster_bootstrap.micro
    sel = stats.context_selection
    clusters = stats.kl_source_cluster_bootstrap.cluster_count
    head = (f"{plural(stats.contexts, 'context')} ({sel.partition} partition); mean KL "
            f"{table_figure(boot.estimate)}")
    if interval_rests_on_too_few(clusters):  # the interval's units are the source clusters
        return (f"{head} ({plural(clusters or 0, 'source cluster')}: too few for a 95 % interval, which "
                f"needs {MIN_INTERVAL_WINDOWS})")
    return (f"{head} {interval_ends(boot.ci95_low, boot.ci95_high, table_figure)} (95%, source clusters "
            "resampled within strata)")


def summary_text(report: ComparisonReport) -> str:
    """A human-readable multi-line summary; the first line is the headline.

    The headline interval is the report's ``kl_mean_interval`` (docs/STATISTICS.md), with its own
    estimate (the mean of window means), the original comparator's window bootstrap beside it. An
    interval that rests on too few windows (:func:`interval_rests_on_too_few`) is not printed as a
    95 % interval: the line says how many windows there are instead."""
    boot = report.kl_window_cluster_bootstrap
    mean_iv = kl_headline_interval(report)
    kl = report.kl_reference_to_candidate
    # a hidden-state suite's windows are its contexts (resampled as if independent here; the line
    # with source clusters below is the interval to read)
    unit = report.unit
    n = report.windows
    counted = f"{plural(n, unit)}, {plural(report.positions, 'position')}"
    # the headline interval's own estimate, the mean of window means; the original comparator's
    # bootstrap says its own where it differs (a report of its scripts may take another mean)
    estimate = _f(mean_iv.estimate)
    if interval_rests_on_too_few(n):
        head = (f"KL(reference || candidate) = {estimate}  ({counted}: too few {unit}s for a "
                f"95 % interval, which needs {MIN_INTERVAL_WINDOWS})")
    else:
        theirs = _f(boot.estimate)
        theirs = "" if theirs == estimate else f"{theirs} "
        head = (f"KL(reference || candidate) = {estimate}  95% interval "
                f"{_ends(mean_iv.ci95_low, mean_iv.ci95_high)}  ({counted}; the original comparator's "
                f"{unit} bootstrap {theirs}{_ends(boot.ci95_low, boot.ci95_high)})")
    p99_9 = f"  p99.9 {_f(kl.p99_9)}" if _number(kl.p99_9) else ""
    lines = [
        head,
        f"  candidate {_text(report.candidate_dir)}  vs reference {_text(report.reference_dir)}"
        + (f"  ({report.candidate_size.describe()})" if report.candidate_size is not None else ""),
        f"  per-token KL: mean {_f(kl.mean)}  median {_f(kl.median)}  p95 {_f(kl.p95)}"
        f"  p99 {_f(kl.p99)}{p99_9}  max {_f(kl.max)}",
    ]
    if report.js is not None:
        js = report.js
        lines.append(f"  JS: mean {_f(js.mean)}  median {_f(js.median)}  p99 {_f(js.p99)}")
    topk = report.topk_agreement
    if topk is not None:
        lines.append("  top-k agreement: " + "  ".join(top_k(k, topk.at(k), 4) for k in topk.k))
    else:
        lines.append(f"  top-k agreement: {top_k(1, report.top1_agreement, 4)}")
    rev = report.kl_candidate_to_reference
    if rev is not None:
        rb = report.kl_reverse_window_cluster_bootstrap
        lines.append(f"  KL(candidate || reference) = {_f(rb.estimate if rb else rev.mean)}  "
                     f"{_interval(rb and rb.ci95_low, rb and rb.ci95_high, n, unit)}")
    nt = report.next_token
    if nt is not None:
        pb = nt.perplexity_ratio_window_cluster_bootstrap
        dp = nt.delta_p
        overall = _f(nt.perplexity_ratio)
        if interval_rests_on_too_few(n):
            ratio = f"{overall} (no interval: too few {unit}s)"
        elif pb is None or pb.estimate is None:
            ratio = f"{overall} [n/a, n/a]"
        else:  # the bootstrap's own estimate, exp of the windows' mean NLL difference
            ratio = (f"{_f(pb.estimate)} {_ends(pb.ci95_low, pb.ci95_high)}"
                     f"{_over_every_position(_f(pb.estimate), overall, unit)}")
        rms = "" if rms_delta_p_shown_as_figure(report) else f" rms {_f(dp and dp.rms)}"
        lines.append(f"  next token: perplexity ref {_f(nt.perplexity_reference)}  cand "
                     f"{_f(nt.perplexity_candidate)}  ratio {ratio}  "
                     f"Δp mean {_f(dp and dp.mean)}{rms}")
    if report.domains:
        counts = domain_windows(report)

        def domain(name: str, b: Any) -> str:
            m = counts.get(name)
            if interval_rests_on_too_few(m):
                return f"{name} {_f(b.estimate)} ({plural(m or 0, unit)}: no interval)"
            return f"{name} {_f(b.estimate)} {_ends(b.ci95_low, b.ci95_high)}"

        lines.append("  by domain: " + "  ".join(domain(name, b) for name, b in report.domains.items()))
    lines.extend(f"  {line}" for line in figure_lines(report))
    lines.extend(f"  {line}" for line in (clustered_line(report), reference_line(report)) if line is not None)
    lines.extend(f"  {line}" for line in bucket_lines(report))
    prov = report.provenance
    unchecked = prov.verified.window_identity_unchecked if prov is not None else None
    if unchecked:
        lines.append(f"  window identity NOT checked for {len(unchecked)} file(s) without header metadata "
                     f"({', '.join(_text(u) for u in unchecked[:3])}{', ...' if len(unchecked) > 3 else ''})")
    if report.reference_encoding is not None:
        lines.append(f"  {report.reference_encoding.line()}")
    if prov is not None:
        # why that backend, as the compare said it ("compare backend: c-kernel, 8 threads (REASON)")
        why = f" ({prov.backend_reason})" if prov.backend_reason else ""
        lines.append(f"  {_text(prov.backend)} backend{why}, {_f(prov.elapsed_seconds, 4)} s, "
                     f"{_f(prov.throughput_gb_per_s, 3)} GB/s compared; kldtui {_text(prov.kldtui_version)}")
    elif report.original:
        lines.append("  (original comparator report)")
    return "\n".join(lines)


def rms_delta_p_shown_as_figure(report: ComparisonReport) -> bool:
    """The report carries llama.cpp's RMS Δp among its figures (in %, with its interval): the next-token
    line then leaves out the same figure as a fraction (one figure, shown once)."""
    return "rms_delta_p" in (report.figures or {})


def figure_lines(report: ComparisonReport) -> list[str]:
    """One line per registered per-row figure the report carries (its ``figures`` object): label,
    the 95 % window-cluster interval with its own estimate (the mean of the window values), unit;
    the value over every position beside it where that reads otherwise (windows of unequal positions,
    a figure that is not a mean), alone where there is no interval. Formatted as the figure's
    registration says (kldtui.metrics.figures), 6 significant digits for one this kldtui does not
    register (a report from a newer version)."""
    from kldtui.formats.report_names import figure_headline_interval
    from kldtui.metrics.figures import get  # here, not at the top: the viewer starts without NumPy

    lines = []
    for name, fig in (report.figures or {}).items():
        known = get(name)
        show = known.format if known is not None else _f
        head = figure_headline_interval(report, name)  # from its windows: the stored one is not proof
        boot = fig.window_cluster_bootstrap
        shown: Interval | HeadlineInterval | None = None
        if not interval_rests_on_too_few(report.windows):  # no "95 %" from a few windows
            if head is not None and head.ci95_low is not None and head.ci95_high is not None:
                shown = head
            elif boot is not None and boot.ci95_low is not None and boot.ci95_high is not None:
                shown = boot
        unit = f" {fig.unit}" if fig.unit else ""
        per_token = (f"; per position as llama.cpp counts it ± {show(fig.per_token_uncertainty)}"
                     if fig.per_token_uncertainty is not None else "")
        overall = show(fig.value)
        if shown is None:
            lines.append(f"{fig.label} {overall}{unit}{per_token}")
            continue
        estimate = show(shown.estimate)  # the interval's own: never an estimate it is not about
        lines.append(f"{fig.label} {estimate} {_ends(shown.ci95_low, shown.ci95_high, show)}{unit}"
                     f"{_over_every_position(estimate, overall, report.unit, unit)}{per_token}")
    return lines


def confidence_label(low: float, high: float) -> str:
    """A reference-confidence bucket as the report states it: ``[0.95,1.0]`` (the last one closed)."""
    return f"[{low:g},{high:g}{']' if high >= 1.0 else ')'}"


def depth_label(start: int, stop: int) -> str:
    """A bucket of positions in the window: ``0-255``."""
    return f"{start}-{stop - 1}"


def _bucket(label: str, kl_mean: float | None, low: float | None, high: float | None, positions: int,
            windows: int | None) -> str:
    shown = low is not None and high is not None and not interval_rests_on_too_few(windows)
    # a table's figures: a q8's bucket of 0.0001844 keeps its digits, as in the ranking
    interval = f" {_ends(low, high, table_figure)}" if shown else ""
    return f"{label} {table_figure(kl_mean) if _number(kl_mean) else 'n/a'}{interval} (n={positions})"


def confidence_line(report: ComparisonReport) -> str | None:
    """KL by reference confidence in one line, each bucket with its window-clustered 95 % interval
    (docs/STATISTICS.md) where the report has it and the bucket's windows are enough for one; None
    for a report without the buckets."""
    conf = report.kl_by_reference_confidence
    if not conf:
        return None
    return "KL by reference confidence: " + "  ".join(
        _bucket(confidence_label(b.low, b.high), b.kl_mean, b.ci95_low, b.ci95_high, b.positions, b.windows)
        for b in conf)


def depth_line(report: ComparisonReport) -> str | None:
    """KL by depth in the window (bands of positions) in one line, as :func:`confidence_line`."""
    depth = report.kl_by_position
    if not depth:
        return None
    return f"KL by depth in the {report.unit}: " + "  ".join(
        _bucket(depth_label(b.start, b.stop), b.kl_mean, b.ci95_low, b.ci95_high, b.positions, b.windows)
        for b in depth)


def bucket_lines(report: ComparisonReport) -> list[str]:
    """:func:`confidence_line` and :func:`depth_line`, those the report has (the text summary)."""
    return [line for line in (confidence_line(report), depth_line(report)) if line is not None]


def headline(report: ComparisonReport) -> dict[str, Any]:
    """The figures a finished compare stage reports (the dashboard's compare card, the batch's
    ``StageFinished`` line): mean KL and its 95 % interval as every other view shows them, the headline
    interval (:func:`~kldtui.formats.report_names.kl_headline_interval`, docs/STATISTICS.md, with
    ``rests_on_too_few_windows`` where it should be marked, not headlined), and the original
    comparator's percentile window bootstrap beside it under its own names, as the leaderboard's rows
    carry it."""
    head = kl_headline_interval(report)
    boot = report.kl_window_cluster_bootstrap
    return {"kl_mean": head.estimate, "ci95_low": head.ci95_low, "ci95_high": head.ci95_high,
            "rests_on_too_few_windows": head.rests_on_too_few_windows,
            "percentile_ci95_low": boot.ci95_low, "percentile_ci95_high": boot.ci95_high,
            "top1_agreement": report.top1_agreement, "windows": report.windows}


__all__ = ["REPORT_FORMAT", "ComparisonReport", "clustered_line", "figure_lines", "headline", "load_report",
           "reference_line", "summary_text", "write_report"]
