"""A leaderboard as the field publishes it: a Markdown table for a model card, CSV, and
llama.cpp perplexity's ``--kl-divergence`` statistics block.

:func:`export_table` joins a :class:`~kldtui.decide.leaderboard.Leaderboard` with the reports it
ranks into :class:`ExportRow` s; :func:`to_markdown`, :func:`to_csv` and :func:`to_llama_cpp` write
them. Every figure is read from a report (or the leaderboard's row: the report's headline interval,
worked out again from its per-window values as every view does, and the paired verdict), so an
export always says what the report JSON says (CSV at full precision; Markdown and the llama.cpp
block rounded for reading). The campaign's ``leaderboard.json`` is :func:`leaderboard_document`.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kldtui.decide.leaderboard import Leaderboard, LeaderboardRow
from kldtui.decide.windows_needed import UNRESOLVED, WindowsNeeded, for_reports
from kldtui.errors import BadInput
from kldtui.formats.model_size import ModelSize
from kldtui.formats.report_model import ComparisonReport
from kldtui.formats.report_names import interval_rests_on_too_few, too_few_text
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.formats.untrusted_json import markdown_literal
from kldtui.text import human_bytes, human_count, interval_ends, outcome_words

if TYPE_CHECKING:
    from kldtui.decide.noise import NoiseFloor

@dataclass(frozen=True)
class ExportRow:
    """One candidate's figures as its report and the leaderboard give them."""

    rank: int
    name: str
    verdict: str  # best, or kldtui.text.outcome_words: as the campaign's standings say it
    mean: float  # mean KL (the leaderboard's: the report's own estimate)
    ci_low: float
    ci_high: float
    median: float
    p99: float
    p99_9: float | None
    max: float
    rms_delta_p: float | None  # per cent (llama.cpp's RMS Δp)
    same_top_p: float | None  # per cent of positions whose argmax is the reference's (llama.cpp's Same top p)
    top1_agreement: float | None  # fraction: the reference's top token is the candidate's top-1 (ties count)
    perplexity_ratio: float | None
    domains: dict[str, float]  # per-domain mean KL (window-cluster estimate)
    size: ModelSize | None
    windows: int
    positions: int
    report: ComparisonReport = field(repr=False)
    path: str | None = None
    outcome: str | None = None  # the verdict's outcome against the best (None for the best)
    # for a difference from the best the verdict leaves unresolved: the windows that would resolve it
    windows_needed: WindowsNeeded | None = None
    profile: str | None = None  # whose run the report is, as its folder's profiles.json records it


@dataclass(frozen=True)
class ExportTable:
    rows: list[ExportRow]
    domains: list[str]
    windows: int
    suite_hash: str | None
    reference_identity: str | None
    kldtui_versions: list[str]
    noise_model: str
    notes: list[str]
    unit: str = WINDOW_UNIT  # what the windows are called (the leaderboard's: a hidden-state suite's context)

    @property
    def several_profiles(self) -> bool:
        """Whether the rows are the runs of more than one profile, as their folders' profiles.json record
        them (:attr:`ExportRow.profile`): then the llama.cpp block names each row's."""
        return len({r.profile for r in self.rows if r.profile is not None}) > 1


def _verdict(row: LeaderboardRow, unit: str) -> str:
    if row.is_best:  # as the standings say it: nothing is shown about the best either without a verdict
        return "no verdict" if row.mark == "no verdict" else "best"
    return outcome_words(row.outcome_vs_best, row.verdict_vs_best, row.provisional, unit=unit)


def _rms_delta_p(report: ComparisonReport) -> float | None:
    fig = (report.figures or {}).get("rms_delta_p")
    if fig is not None and fig.value is not None:
        return fig.value
    nt = report.next_token
    rms = nt.delta_p.rms if nt is not None and nt.delta_p is not None else None
    return None if rms is None else 100.0 * rms


def _same_top_p(report: ComparisonReport) -> float | None:
    fig = (report.figures or {}).get("same_top_p")
    if fig is not None and fig.value is not None:
        return fig.value
    return None if report.top1_agreement is None else 100.0 * report.top1_agreement


def _top1(report: ComparisonReport) -> float | None:
    topk = report.topk_agreement
    if topk is not None and topk.at(1) is not None:
        return topk.at(1)
    return report.top1_agreement


def export_table(board: Leaderboard, reports: Sequence[ComparisonReport], *,
                 names: Sequence[str] | None = None,
                 paths: Sequence[str | os.PathLike[str] | None] | None = None,
                 noise: NoiseFloor | None = None) -> ExportTable:
    """``board``'s rows with their reports' figures. Rows find their report by path (the
    leaderboard of files) or by name (``names``, as given to ``build_leaderboard``). A row whose
    difference from the best is not resolved says how many windows would resolve it, in the units the
    board's ties count (a hidden-state suite's source clusters; :mod:`kldtui.decide.windows_needed`,
    against ``noise``: the floor the board was built with)."""
    path_list = [None if p is None else str(p) for p in (paths or [None] * len(reports))]
    by_path = {p: r for p, r in zip(path_list, reports, strict=True) if p is not None}
    by_name = dict(zip(names, reports, strict=True)) if names is not None else {}
    rows: list[ExportRow] = []
    for row in board.rows:
        report = by_path.get(row.path) if row.path is not None else None
        report = report or by_name.get(row.name)
        if report is None:
            if len(reports) == len(board.rows) == 1:
                report = reports[0]
            else:
                raise ValueError(f"no report for leaderboard row {row.name!r}: give names or paths")
        kl = report.kl_reference_to_candidate
        nt = report.next_token
        rows.append(ExportRow(
            rank=row.rank, name=row.name, verdict=_verdict(row, board.tie_unit), mean=row.mean,
            ci_low=row.ci_low,
            ci_high=row.ci_high, median=kl.median, p99=kl.p99, p99_9=kl.p99_9, max=kl.max,
            rms_delta_p=_rms_delta_p(report), same_top_p=_same_top_p(report), top1_agreement=_top1(report),
            perplexity_ratio=nt.perplexity_ratio if nt is not None else None,
            domains={d: b.estimate for d, b in report.domains.items()}, size=report.candidate_size,
            windows=report.windows, positions=report.positions, report=report, path=row.path,
            outcome=row.outcome_vs_best, profile=row.profile))
    pairs = len(rows) * (len(rows) - 1) // 2  # the leaderboard's Holm family: every pair
    rows = [replace(r, windows_needed=for_reports(rows[0].report, r.report, noise, comparisons=max(1, pairs),
                                                  by_source_cluster=board.clustered))
            if r.rank > 1 and r.outcome in UNRESOLVED else r for r in rows]
    domains = list(dict.fromkeys(d for r in rows for d in r.domains))
    first = rows[0].report if rows else None
    versions = sorted({r.report.provenance.kldtui_version for r in rows if r.report.provenance is not None})
    return ExportTable(rows=rows, domains=domains, windows=board.windows,
                       suite_hash=first.suite_token_hash_sha256 if first else None,
                       reference_identity=(first.reference_identity_sha256 or first.reference_manifest_sha256)
                       if first else None,
                       kldtui_versions=versions, noise_model=board.noise_source, notes=list(board.notes),
                       unit=board.unit)


# ----------------------------------------------------------------------------- shared cells


def _g(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def _size_cells(size: ModelSize | None) -> tuple[str, str, str]:
    if size is None:
        return "-", "-", "-"
    return (human_bytes(size.size_bytes) if size.size_bytes is not None else "-",
            human_count(size.parameters) if size.parameters is not None else "-",
            f"{size.bits_per_weight:.3f}" if size.bits_per_weight is not None else "-")


MARKDOWN_HEADERS = ["#", "candidate", "size", "parameters", "bpw", "mean KL", "95% interval", "median KL",
                    "p99 KL", "p99.9 KL", "max KL", "RMS Δp %", "same top-1 %", "top-1 agreement",
                    "PPL ratio"]


def _short_hash(value: str | None) -> str:
    return "-" if not value else value[:12]


def how_measured(table: ExportTable) -> list[str]:
    """The footer: what a reader needs to reproduce or trust the table (its units called
    ``table.unit``). The verdicts' test is the ties note's (the notes follow), said there once."""
    r = table.rows[0] if table.rows else None
    positions = f" x {r.positions // max(r.windows, 1)} positions" if r is not None else ""
    version = ", ".join(table.kldtui_versions) or "unknown"
    units = f"{table.unit}s"
    return [f"KL(reference || candidate), natural log, mean over {table.windows} {units}{positions}; "
            f"interval: 95 %, the report's headline interval over {units} (kl_mean_interval); per-domain "
            f"columns: mean KL of that domain's {units}",
            f"noise model: {table.noise_model}",
            f"suite hash {_short_hash(table.suite_hash)}, reference identity "
            f"{_short_hash(table.reference_identity)}, kldtui {version}"]


def _interval_cell(r: ExportRow) -> str:
    """The row's 95 % interval, or why there is none (too few windows: no "95 %" from a few)."""
    if interval_rests_on_too_few(r.windows):
        return too_few_text(r.windows, short=True, unit=r.report.unit)
    return interval_ends(r.ci_low, r.ci_high, _g)


def to_markdown(table: ExportTable) -> str:
    """A GitHub-flavoured Markdown table with a short "how measured" footer."""
    headers = MARKDOWN_HEADERS + [f"KL {d}" for d in table.domains] + ["verdict"]
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if h not in ("candidate", "verdict") else "---" for h in headers) + "|"]
    for r in table.rows:
        size, params, bpw = _size_cells(r.size)
        cells = [str(r.rank), markdown_literal(r.name), size, params, bpw, _g(r.mean),
                 _interval_cell(r), _g(r.median), _g(r.p99), _g(r.p99_9), _g(r.max),
                 _g(r.rms_delta_p), _g(r.same_top_p, 5), _g(r.top1_agreement, 5), _g(r.perplexity_ratio, 5)]
        cells += [_g(r.domains.get(d)) for d in table.domains] + [_verdict_cell(r)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"<sub>{markdown_literal(line)}</sub>  " for line in how_measured(table)]
    lines += [f"<sub>note: {markdown_literal(n)}</sub>  " for n in table.notes]
    lines += [f"<sub>{markdown_literal(line)}</sub>  " for line in windows_lines(table)]
    return "\n".join(lines).rstrip() + "\n"


def _verdict_cell(row: ExportRow) -> str:
    """The verdict, and for an unresolved one the windows (the verdict's units: a hidden-state suite's
    source clusters) that would resolve it."""
    need = row.windows_needed
    if need is None or need.windows is None:
        return row.verdict
    units = f"{need.unit}s"
    if row.verdict.endswith(")"):  # "no verdict (too few windows)": one bracket, not two in a row
        return f"{row.verdict[:-1]}; ~{need.windows} {units} to resolve)"
    return f"{row.verdict} (~{need.windows} {units} to resolve)"


# Names, notes and versions come from reports and folder names others share: in Markdown they are text
# (markdown_literal), in a CSV opened by a spreadsheet never a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_text(text: str) -> str:
    """A text cell a spreadsheet does not take as a formula (OWASP's rule: a leading ``'``)."""
    return "'" + text if text.startswith(_FORMULA_START) else text


CSV_COLUMNS = ["rank", "candidate", "verdict", "windows_to_resolve", "size_bytes", "parameters",
               "bits_per_weight", "size_source",
               "kl_mean", "kl_ci95_low", "kl_ci95_high", "kl_median", "kl_p99", "kl_p99_9", "kl_max",
               "rms_delta_p_percent", "same_top_p_percent", "top1_agreement", "perplexity_ratio", "windows",
               "positions", "suite_token_hash_sha256", "reference_identity_sha256", "kldtui_version",
               "report"]


def _num(value: float | int | None) -> str:
    """Full precision (repr): the CSV reads back to the report's own numbers."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def to_csv(table: ExportTable) -> str:
    """One row per candidate, every figure at full precision; the "how measured" facts as columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    # whose run each report is, where a row's folder records it (kldtui.workflow.owners): after "report"
    profiles = any(r.profile is not None for r in table.rows)
    writer.writerow(CSV_COLUMNS + (["profile"] if profiles else []) + [f"kl_mean_{d}" for d in table.domains])
    for r in table.rows:
        s = r.size
        prov = r.report.provenance
        writer.writerow([
            r.rank, _csv_text(r.name), r.verdict,
            _num(r.windows_needed.windows if r.windows_needed else None),
            _num(s.size_bytes if s else None), _num(s.parameters if s else None),
            _num(s.bits_per_weight if s else None), _csv_text(s.source) if s else "", _num(r.mean),
            _num(r.ci_low),
            _num(r.ci_high), _num(r.median), _num(r.p99), _num(r.p99_9), _num(r.max), _num(r.rms_delta_p),
            _num(r.same_top_p), _num(r.top1_agreement), _num(r.perplexity_ratio), r.windows, r.positions,
            r.report.suite_token_hash_sha256 or "",
            r.report.reference_identity_sha256 or r.report.reference_manifest_sha256 or "",
            _csv_text(prov.kldtui_version) if prov else "", _csv_text(r.path or "")]
            + ([_csv_text(r.profile or "")] if profiles else [])
            + [_num(r.domains.get(d)) for d in table.domains])
    return out.getvalue()


# ----------------------------------------------------------------------------- llama.cpp


def _proportion_se(p: float, count: int) -> float:
    """llama.cpp's ± of a proportion over positions: sqrt(p (1 - p) / (count - 1))."""
    return math.sqrt(p * (1 - p) / (count - 1)) if count > 1 else 0.0


def llama_cpp_block(row: ExportRow) -> list[str]:
    """One candidate's statistics in the layout ``llama-perplexity --kl-divergence`` prints
    (tools/perplexity): its section titles, labels and number formats, so scripts that read
    llama.cpp's output read this. Lines whose figure a kldtui report does not hold (Δp's 75 % and
    25 % quantiles, the NLL correlation) are left out. The ± of Mean KLD and of the perplexity ratio
    is kldtui's window-clustered standard error (llama.cpp's treats positions as independent and
    is smaller); Same top p's and RMS Δp's are llama.cpp's own per-position ones where the report
    has them."""
    rep = row.report
    kl = rep.kl_reference_to_candidate
    nt = rep.next_token
    lines: list[str] = []
    if nt is not None and nt.perplexity_candidate is not None and nt.perplexity_reference is not None:
        lines += ["====== Perplexity statistics ======",
                  f"Mean PPL(Q)                   : {nt.perplexity_candidate:10.6f}",
                  f"Mean PPL(base)                : {nt.perplexity_reference:10.6f}"]
        ratio_se = (nt.perplexity_ratio_window_cluster_bootstrap.standard_error
                    if nt.perplexity_ratio_window_cluster_bootstrap is not None else None)
        if nt.log_perplexity_ratio is not None and math.isfinite(nt.log_perplexity_ratio):
            lines.append(f"Mean ln(PPL(Q)/PPL(base))     : {nt.log_perplexity_ratio:10.6f}")
        if nt.perplexity_ratio is not None:
            unc = f" ± {ratio_se:10.6f}" if ratio_se is not None else ""
            lines.append(f"Mean PPL(Q)/PPL(base)         : {nt.perplexity_ratio:10.6f}{unc}")
        lines.append(f"Mean PPL(Q)-PPL(base)         : "
                     f"{nt.perplexity_candidate - nt.perplexity_reference:10.6f}")
        lines.append("")
    se = rep.kl_window_cluster_bootstrap.standard_error
    lines += ["====== KL divergence statistics ======",
              f"Mean    KLD: {kl.mean:10.6f} ± {se:10.6f}",
              f"Maximum KLD: {kl.max:10.6f}"]
    for label, value in (("99.9%   KLD", kl.p99_9), ("99.0%   KLD", kl.p99), ("95.0%   KLD", kl.p95),
                         ("90.0%   KLD", kl.p90), ("Median  KLD", kl.median), ("10.0%   KLD", kl.p10),
                         (" 5.0%   KLD", kl.p5), (" 1.0%   KLD", kl.p1), (" 0.1%   KLD", kl.p0_1),
                         ("Minimum KLD", kl.min)):
        if value is not None:
            lines.append(f"{label}: {value:10.6f}")
    lines.append("")
    dp = nt.delta_p if nt is not None else None
    if dp is not None:
        lines.append("====== Token probability statistics ======")
        if dp.mean is not None:
            lines.append(f"Mean    Δp: {100.0 * dp.mean:6.3f} %")
        for label, value in (("Maximum Δp", dp.max), ("99.9%   Δp", dp.p99_9), ("99.0%   Δp", dp.p99),
                             ("95.0%   Δp", dp.p95), ("90.0%   Δp", dp.p90), ("Median  Δp", dp.median),
                             ("10.0%   Δp", dp.p10), (" 5.0%   Δp", dp.p5), (" 1.0%   Δp", dp.p1),
                             (" 0.1%   Δp", dp.p0_1), ("Minimum Δp", dp.min)):
            if value is not None:
                lines.append(f"{label}: {100.0 * value:6.3f}%")
    if row.rms_delta_p is not None:
        rms_unc = _per_token_uncertainty(rep, "rms_delta_p")
        tail = f" ± {rms_unc:5.3f} %" if rms_unc is not None else " %"
        lines.append(f"RMS Δp    : {row.rms_delta_p:6.3f}{tail}")
    if row.same_top_p is not None:
        p = row.same_top_p / 100.0
        lines.append(f"Same top p: {row.same_top_p:6.3f} ± {100.0 * _proportion_se(p, row.positions):5.3f} %")
    return lines


def _per_token_uncertainty(report: ComparisonReport, name: str) -> float | None:
    """llama.cpp's own ± of a registered figure, where the report carries it."""
    fig = (report.figures or {}).get(name)
    if fig is None:
        return None
    value = getattr(fig, "per_token_uncertainty", None)
    if value is None:
        value = fig.extra.get("per_token_uncertainty")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def to_llama_cpp(table: ExportTable) -> str:
    """Each candidate's llama.cpp-style block under a line naming it (and, where the rows are the runs of
    more than one profile, its profile: :attr:`ExportTable.several_profiles`), in leaderboard order."""
    out: list[str] = []
    several = table.several_profiles
    for r in table.rows:
        units = f"{r.report.unit}s"
        whose = f"; the run of profile {r.profile}" if several and r.profile is not None else ""
        out.append(f"# kldtui: {r.name} (rank {r.rank}, {r.verdict}); {r.windows} {units}, {r.positions} "
                   f"positions, every position scored; ± of Mean KLD and of the PPL ratio: {units} "
                   f"resampled{whose}")
        out += llama_cpp_block(r)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def leaderboard_document(board: Leaderboard, table: ExportTable) -> dict[str, Any]:
    """The leaderboard as JSON: what ``kldtui leaderboard --json`` writes and the campaign's
    leaderboard.json (``board``'s fields, and per unresolved row how many windows would resolve it,
    from ``table``, its :func:`export_table`)."""
    doc = board.to_dict()
    doc["windows_needed"] = {r.name: r.windows_needed.to_dict() for r in table.rows
                             if r.windows_needed is not None}
    return doc


def windows_lines(table: ExportTable) -> list[str]:
    """One line per unresolved difference from the best: how many windows would resolve it."""
    if not table.rows:
        return []
    best = table.rows[0].name
    return [f"{r.name} vs {best}: {r.windows_needed.words()}" for r in table.rows
            if r.windows_needed is not None]


@dataclass(frozen=True)
class ExportFormat:
    """One of ``kldtui leaderboard --format``'s exports: how it is written, and the file-name
    suffixes (any case) that say it: ``-o FILE`` without ``--format`` takes the format its name
    says, and a name saying another format is refused. A format without suffixes of its own (the
    llama.cpp block is plain text) is never inferred."""

    render: Callable[[ExportTable], str]
    suffixes: tuple[str, ...] = ()


EXPORTS: dict[str, ExportFormat] = {
    "markdown": ExportFormat(to_markdown, (".md", ".markdown")),
    "csv": ExportFormat(to_csv, (".csv",)),
    "llama-cpp": ExportFormat(to_llama_cpp),
}
FORMATS = tuple(EXPORTS)


def format_named_by(path: str | os.PathLike[str]) -> str | None:
    """The export format whose suffix ``path``'s name ends in (any case), or None."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    return next((name for name, fmt in EXPORTS.items() if suffix in fmt.suffixes), None)


def render(table: ExportTable, fmt: str) -> str:
    """``fmt`` is one of :data:`FORMATS`."""
    if fmt not in EXPORTS:
        raise BadInput(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    return EXPORTS[fmt].render(table)


__all__ = ["CSV_COLUMNS", "EXPORTS", "FORMATS", "MARKDOWN_HEADERS", "ExportFormat", "ExportRow",
           "ExportTable", "export_table", "format_named_by", "how_measured", "llama_cpp_block", "render",
           "to_csv", "to_llama_cpp", "to_markdown", "windows_lines"]
