"""Paired, window-clustered comparison of two candidates measured against one reference.

The unit of resampling is the window (positions inside a window are strongly correlated). For
two candidates A and B on the same windows, every bootstrap resample draws window indices with
replacement once and applies them to both, so the window-to-window variation they share
cancels in the difference. Conventions follow the original comparator (docs/FORMATS.md):
``numpy.random.default_rng(seed)``, one ``(samples, windows)`` integer draw, the estimate on the
original windows, the standard error as the resample standard deviation (``ddof=1``) and the
95 % interval as the 2.5 % and 97.5 % quantiles (NumPy's default, linear) of the resamples.
See docs/STATISTICS.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kldtui.decide.clustered import UNIT as CLUSTER_UNIT
from kldtui.decide.clustered import ClusteredPaired, check_same_partition, clustered_paired
from kldtui.decide.noise import AUTO_FLOOR, NoiseFloor, resolve_floor
from kldtui.decide.reports import (
    ReportLike,
    WindowValues,
    check_same_suite,
    report_name,
    window_values,
)
from kldtui.decide.verdict import METHOD as VERDICT_METHOD
from kldtui.decide.verdict import (
    MIN_VERDICT_WINDOWS,
    Outcome,
    VerdictInterval,
    closer,
    decide,
    evidence,
    family_decisions,
    headline,
    infinite_note,
    json_number,
    noise_words,
    sentence,
)
from kldtui.decide.verdict import verdict_interval as verdict_interval
from kldtui.errors import BadInput
from kldtui.formats.report import confidence_label, depth_label, load_report
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.report_names import unique_names
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.metrics.inference import flip_ratio_interval
from kldtui.text import interval_ends, kldtui_command, plain_number, shell_arg, table_figure

DEFAULT_SAMPLES = 10_000
DEFAULT_SEED = 1
QUANTILES = (0.025, 0.975)



# ---------------------------------------------------------------------------- pure statistics
def draw_indices(n_windows: int, samples: int, seed: int) -> np.ndarray:
    """The resampled window indices, ``(samples, n_windows)``, as the original comparator draws them."""
    if n_windows < 1:
        raise BadInput("no windows to resample")
    if samples < 2:
        raise BadInput(f"--bootstrap-samples must be at least 2 (got {samples})")
    if seed < 0:
        raise BadInput(f"--seed must be a non-negative integer (got {seed})")
    from kldtui.metrics.stats import bootstrap_indices

    return bootstrap_indices(n_windows, samples, seed)


def resample_counts(indices: np.ndarray, n_windows: int) -> np.ndarray:
    """How often each window is drawn in each resample: ``(samples, n_windows)`` float64."""
    samples = indices.shape[0]
    flat = (indices + (np.arange(samples, dtype=np.int64) * n_windows)[:, None]).ravel()
    return np.bincount(flat, minlength=samples * n_windows).reshape(samples, n_windows).astype(np.float64)


def resampled_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sums of the resampled window values: ``values`` (..., n) against counts (B, n) -> (..., B)."""
    out: np.ndarray = np.asarray(values, dtype=np.float64) @ counts.T
    return out


@dataclass(frozen=True)
class Interval:
    """A bootstrap estimate: ``estimate`` on the original windows, the resamples' standard
    deviation and the 95 % percentile interval."""

    estimate: float
    standard_error: float
    ci95_low: float
    ci95_high: float
    bootstrap_samples: int

    def excludes(self, value: float) -> bool:
        return not self.ci95_low <= value <= self.ci95_high

    def to_dict(self, *, unit: str) -> dict[str, Any]:
        """JSON-ready; a non-finite figure (a ratio over a zero mean) becomes null. ``unit``: what was
        resampled (:attr:`PairedDiff.unit`, :attr:`Leaderboard.unit`: a hidden-state suite's contexts)."""
        return {"estimate": json_number(self.estimate), "standard_error": json_number(self.standard_error),
                "ci95_low": json_number(self.ci95_low), "ci95_high": json_number(self.ci95_high),
                "bootstrap_samples": self.bootstrap_samples, "cluster_unit": unit}

    def text(self) -> str:
        """The estimate and its interval in a table's figures (kldtui.text.table_figure)."""
        return f"{table_figure(self.estimate)} {interval_ends(self.ci95_low, self.ci95_high, table_figure)}"


@dataclass(frozen=True)
class BatchIntervals:
    """Bootstrap results for a batch of suites (leading axes of the input): arrays, not floats."""

    estimate: np.ndarray
    standard_error: np.ndarray
    ci95_low: np.ndarray
    ci95_high: np.ndarray
    bootstrap_samples: int

    def item(self, *index: int) -> Interval:
        return Interval(float(self.estimate[index]), float(self.standard_error[index]),
                        float(self.ci95_low[index]), float(self.ci95_high[index]), self.bootstrap_samples)


def _batch(estimate: np.ndarray, resampled: np.ndarray) -> BatchIntervals:
    lo, hi = np.quantile(resampled, QUANTILES, axis=-1)
    return BatchIntervals(np.asarray(estimate, dtype=np.float64), np.std(resampled, axis=-1, ddof=1),
                          lo, hi, int(resampled.shape[-1]))


def batch_mean_ci(values: np.ndarray, indices: np.ndarray) -> BatchIntervals:
    """Window-cluster bootstrap of the mean of window means for ``values`` (..., n) at once."""
    v = np.asarray(values, dtype=np.float64)
    n = v.shape[-1]
    return _batch(v.mean(axis=-1), resampled_sums(v, resample_counts(indices, n)) / n)


def batch_paired_ci(a: np.ndarray, b: np.ndarray, indices: np.ndarray,
                    ) -> tuple[BatchIntervals, BatchIntervals]:
    """Paired bootstrap of ``mean(B) - mean(A)`` and ``mean(B) / mean(A)`` for (..., n) arrays:
    each resample applies the same window indices to A and B. A resample whose A sum is 0
    makes that ratio interval NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[-1]
    counts = resample_counts(indices, n)
    sa = resampled_sums(a, counts)
    sb = resampled_sums(b, counts)
    diff = _batch(b.mean(axis=-1) - a.mean(axis=-1), (sb - sa) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = sb / sa
        estimate = b.sum(axis=-1) / a.sum(axis=-1)
    ratios = np.where(np.isfinite(ratios).all(axis=-1, keepdims=True), ratios, np.nan)
    return diff, _batch(estimate, ratios)


def bootstrap_mean(values: np.ndarray, indices: np.ndarray) -> Interval:
    """The window-cluster bootstrap of the mean of window means (the comparator's object)."""
    return batch_mean_ci(np.asarray(values, dtype=np.float64).reshape(-1), indices).item()


def paired_bootstrap(a: np.ndarray, b: np.ndarray, indices: np.ndarray) -> tuple[Interval, Interval]:
    """Difference ``mean(B) - mean(A)`` and ratio ``mean(B) / mean(A)`` with the same resampled
    windows for both (see :func:`batch_paired_ci`)."""
    diff, ratio = batch_paired_ci(np.asarray(a, dtype=np.float64).reshape(-1),
                                  np.asarray(b, dtype=np.float64).reshape(-1), indices)
    return diff.item(), ratio.item()


def classify(diff: Interval, threshold: float) -> str:
    """The seed's rule on a percentile interval (kept for reference; verdicts use
    :func:`kldtui.decide.verdict.decide`)."""
    if diff.ci95_low > threshold:
        return "a_closer"
    if diff.ci95_high < -threshold:
        return "b_closer"
    if diff.excludes(0.0):
        return "within_noise"
    return "indistinguishable"


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True)
class PairedStats:
    """The paired comparison over one group of windows (all, or one domain)."""

    windows: int
    mean_a: float
    mean_b: float
    difference: Interval  # B - A, percentile bootstrap (the original comparator's convention)
    ratio: Interval  # B / A, percentile bootstrap
    interval: VerdictInterval  # B - A, the interval verdicts use
    noise_threshold: float | None
    outcome: Outcome
    provisional: bool
    verdict: str
    infinite_kl_rows_a: int = 0  # positions where A gives 0 to a token the reference predicts
    infinite_kl_rows_b: int = 0

    @property
    def excludes_zero(self) -> bool:
        return self.interval.excludes(0.0)

    def to_dict(self, *, unit: str) -> dict[str, Any]:
        """JSON-ready; ``unit``: what the windows are called (:attr:`PairedDiff.unit`)."""
        return {"windows": self.windows, "mean_a": self.mean_a, "mean_b": self.mean_b,
                "difference_b_minus_a": self.difference.to_dict(unit=unit),
                "ratio_b_over_a": self.ratio.to_dict(unit=unit),
                "verdict_interval": self.interval.to_dict(),
                "excludes_zero": self.excludes_zero, "noise_threshold": self.noise_threshold,
                "outcome": self.outcome, "provisional": self.provisional, "verdict": self.verdict,
                "infinite_kl_rows_a": self.infinite_kl_rows_a, "infinite_kl_rows_b": self.infinite_kl_rows_b}


def confirm_command(better: str, better_path: str | None, noise: NoiseFloor | None = None) -> str:
    """The one command that settles a provisional difference. Without a measured repeat: a repeat
    capture of the better one, and the noise model of the two captures. Where the noise model already
    has two captures of one model (one repeat cannot see an offset shared by every window of a
    capture): a third capture of that model, and the noise model of all three, since a model of two
    captures again would leave the difference provisional. A deterministic server's (the noise model
    says so): none, since every capture gives the same ("")."""
    if noise is not None and noise.kind == "deterministic":
        return ""
    captures = noise.repeat.sources if noise is not None and noise.repeat is not None else ()
    if len(captures) >= 2:
        ours = better_path is not None and any(_same_path(better_path, c) for c in captures)
        model = better if ours else f"the model of {captures[0]}"
        listed = " ".join(shell_arg(c) for c in captures)
        return (f"capture {model} once more, compare it with the reference (AGAIN.json), then run "
                f"`{kldtui_command()} noise {listed} AGAIN.json --output noise.json` and diff again with "
                "--noise noise.json")
    report = shell_arg(better_path) if better_path else shell_arg(f"{better}.json")
    return (f"capture {better} again, compare it with the reference (AGAIN.json), then run "
            f"`{kldtui_command()} noise {report} AGAIN.json --output noise.json` and diff again with "
            "--noise noise.json")


def _same_path(a: str, b: str) -> bool:
    """Whether two report paths name one file (as written: the noise model's may be relative to where
    it was made)."""
    return os.path.normpath(a) == os.path.normpath(b) or os.path.abspath(a) == os.path.abspath(b)


def compare_group(a: np.ndarray, b: np.ndarray, indices: np.ndarray, noise: NoiseFloor | None,
                  window_indices: Sequence[int], name_a: str, name_b: str,
                  path_a: str | None = None, path_b: str | None = None,
                  significant: bool | None = None, infinite_a: np.ndarray | None = None,
                  infinite_b: np.ndarray | None = None, iv: VerdictInterval | None = None,
                  unit: str = WINDOW_UNIT) -> PairedStats:
    """One group of windows: the percentile bootstrap (compatibility fields), the verdict interval
    and the decision (:mod:`kldtui.decide.verdict`). ``significant``: the family's decision for this
    group (Holm over every verdict given together); ``iv``: the group's verdict interval when the
    caller has it. ``infinite_a``/``infinite_b``: per-window counts of positions with infinite KL
    (left out of the window means); the sentence says so, calling the windows ``unit``
    (:attr:`ComparisonReport.unit`: a hidden-state suite's are contexts)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff, ratio = paired_bootstrap(a, b, indices)
    iv = iv if iv is not None else verdict_interval(a, b)
    decision = decide(iv, noise, window_indices, significant=significant, unit=unit)
    better, better_path = closer(iv, (name_a, path_a), (name_b, path_b))
    text = sentence(decision, iv, float(a.mean()), name_a, name_b,
                    confirm_command(better, better_path, noise), unit=unit)
    windows = [int(w) for w in window_indices]
    inf_a = _infinite(infinite_a, windows)
    inf_b = _infinite(infinite_b, windows)
    for name, (rows, where) in ((name_a, inf_a), (name_b, inf_b)):
        if rows:
            text += "; " + infinite_note(name, rows, where, unit)
    return PairedStats(
        windows=int(a.size), mean_a=float(a.mean()), mean_b=float(b.mean()), difference=diff, ratio=ratio,
        interval=iv, noise_threshold=decision.noise_value, outcome=decision.outcome,
        provisional=decision.provisional, verdict=text, infinite_kl_rows_a=inf_a[0],
        infinite_kl_rows_b=inf_b[0])


def _infinite(counts: np.ndarray | None, windows: list[int]) -> tuple[int, list[int]]:
    """(positions with infinite KL, windows that have any) for one candidate over a group."""
    if counts is None:
        return 0, []
    c = np.asarray(counts, dtype=np.int64)
    return int(c.sum()), [w for w, k in zip(windows, c.tolist(), strict=True) if k]


@dataclass(frozen=True)
class FigureDiff:
    """One figure users rank by (the reports' registered per-row figures, and JS), A against B: each
    side's value and the mean of the per-window differences B - A with the sign-flip test's 95 %
    interval over windows (exact when the differences are symmetric about their mean)."""

    name: str
    label: str
    unit: str | None
    better: str | None
    a: float
    b: float
    difference: float
    ci95_low: float | None
    ci95_high: float | None
    windows: int

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "unit": self.unit, "better": self.better, "a": self.a, "b": self.b,
                "difference_b_minus_a": self.difference, "ci95_low": self.ci95_low,
                "ci95_high": self.ci95_high, "windows": self.windows,
                "method": "sign-flip test of the per-window differences, 95 %"}


def figure_differences(a: ComparisonReport, b: ComparisonReport) -> list[FigureDiff]:
    """:class:`FigureDiff` for every figure both reports carry per window (windows in the same order:
    the caller checked the pairing)."""
    ta, tb = a.window_table(), b.window_table()
    oa = sorted(range(len(ta.window_index)), key=lambda i: ta.window_index[i])
    ob = sorted(range(len(tb.window_index)), key=lambda i: tb.window_index[i])
    columns: list[tuple[str, str, str | None, str | None, list[float | None], list[float | None]]] = []
    if ta.js_mean is not None and tb.js_mean is not None:
        columns.append(("js_mean", "JS", None, "lower", list(ta.js_mean), list(tb.js_mean)))
    for name, summary in (a.figures or {}).items():
        other = (b.figures or {}).get(name)
        if other is None or name not in ta.figures or name not in tb.figures:
            continue
        columns.append((name, summary.label, summary.unit, summary.better, list(ta.figures[name]),
                        list(tb.figures[name])))
    out = []
    for name, label, unit, better, col_a, col_b in columns:
        va = np.array([np.nan if col_a[i] is None else col_a[i] for i in oa], dtype=np.float64)
        vb = np.array([np.nan if col_b[i] is None else col_b[i] for i in ob], dtype=np.float64)
        ok = np.isfinite(va) & np.isfinite(vb)
        if ok.sum() < 1:
            continue
        d = vb[ok] - va[ok]
        lo = hi = None
        if d.size >= MIN_VERDICT_WINDOWS:  # fewer: no verdict, and the interval is mostly unbounded
            low, high = flip_ratio_interval(np.ones_like(d), d, null=0.0)
            if math.isfinite(float(low)) and math.isfinite(float(high)):
                lo, hi = float(low) + 0.0, float(high) + 0.0  # + 0.0: no "-0" where no window differs
        out.append(FigureDiff(name, label, unit, better, float(va[ok].mean()), float(vb[ok].mean()),
                              float(d.mean()) + 0.0, lo, hi, int(d.size)))
    return out


@dataclass(frozen=True)
class BucketPair:
    """One bucket of KL by reference confidence or by depth in the window, A and B side by side, each
    with its report's own window-clustered 95 % interval (the reports keep a bucket's pooled mean, not
    its per-window values, so the two are not paired)."""

    kind: Literal["reference_confidence", "depth"]
    label: str
    a: float | None
    a_low: float | None
    a_high: float | None
    b: float | None
    b_low: float | None
    b_high: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": self.label, "kl_a": self.a, "ci95_low_a": self.a_low, "ci95_high_a": self.a_high,
                "kl_b": self.b, "ci95_low_b": self.b_low, "ci95_high_b": self.b_high}


def bucket_pairs(a: ComparisonReport, b: ComparisonReport) -> list[BucketPair]:
    """:class:`BucketPair` for every bucket both reports carry (same bounds), confidence first."""
    out = []
    conf_b = {(x.low, x.high): x for x in b.kl_by_reference_confidence or ()}
    for x in a.kl_by_reference_confidence or ():
        y = conf_b.get((x.low, x.high))
        if y is not None:
            out.append(BucketPair("reference_confidence", confidence_label(x.low, x.high), x.kl_mean,
                                  x.ci95_low, x.ci95_high, y.kl_mean, y.ci95_low, y.ci95_high))
    depth_b = {(x.start, x.stop): x for x in b.kl_by_position or ()}
    for p in a.kl_by_position or ():
        q = depth_b.get((p.start, p.stop))
        if q is not None:
            out.append(BucketPair("depth", depth_label(p.start, p.stop), p.kl_mean, p.ci95_low, p.ci95_high,
                                  q.kl_mean, q.ci95_low, q.ci95_high))
    return out


def repeat_floor_note(names_means: Sequence[tuple[str, float]], repeat_kl: float | None) -> str | None:
    """The note for candidates whose mean KL sits inside the repeat floor (``repeat_kl``: the KL between
    two captures of one model), where KLD stops predicting task accuracy; None when none does or no
    repeat KL is known. diff, the leaderboard and the viewer show it."""
    inside = _inside_repeat_floor(names_means, repeat_kl)
    if not inside or repeat_kl is None:
        return None
    shown = ", ".join(f"{n} ({plain_number(m)})" for n, m in inside)
    return (f"inside the repeat floor: {shown} {'has' if len(inside) == 1 else 'have'} a mean KL no larger "
            f"than the KL between two captures of one model ({plain_number(repeat_kl)}); at that level "
            "KLD "
            "stops predicting task accuracy (published work finds the KLD-to-benchmark correlation near zero "
            "among near-baseline quants): rank these by task accuracy instead")


def _inside_repeat_floor(names_means: Sequence[tuple[str, float]],
                         repeat_kl: float | None) -> list[tuple[str, float]]:
    if repeat_kl is None or not repeat_kl > 0:
        return []
    return [(n, m) for n, m in names_means if m <= repeat_kl]


def repeat_floor_brief(names_means: Sequence[tuple[str, float]], repeat_kl: float | None) -> str | None:
    """:func:`repeat_floor_note` in one short line."""
    inside = _inside_repeat_floor(names_means, repeat_kl)
    if not inside or repeat_kl is None:
        return None
    return (f"inside the repeat floor ({plain_number(repeat_kl)}): {', '.join(n for n, _ in inside)}; "
            "rank these by task accuracy")


@dataclass(frozen=True)
class PairedDiff:
    """``kldtui diff``'s result: B compared with A, overall and per domain."""

    name_a: str
    name_b: str
    path_a: str | None
    path_b: str | None
    overall: PairedStats
    domains: dict[str, PairedStats]
    window_index: list[int]
    domain: list[str]
    kl_a: list[float]
    kl_b: list[float]
    bootstrap_samples: int
    seed: int
    pairing_checked: str
    noise_floor: dict[str, Any] | None = None  # NoiseFloor.summary(), or None when none was used
    notes: list[str] = field(default_factory=list)
    infinite_a: list[int] = field(default_factory=list)  # per window: positions with infinite KL
    infinite_b: list[int] = field(default_factory=list)
    figures: list[FigureDiff] = field(default_factory=list)  # the other figures users rank by, A vs B
    buckets: list[BucketPair] = field(default_factory=list)  # KL by confidence and by depth, A and B
    # a hidden-state suite's contexts clustered by source (kldtui.decide.clustered): its verdict is
    # the verdict, over source clusters, naming the partition
    clustered: ClusteredPaired | None = None
    unit: str = WINDOW_UNIT  # what the windows are called (a hidden-state suite's: context)

    @property
    def verdict(self) -> str:
        return self.clustered.verdict if self.clustered is not None else self.overall.verdict

    @property
    def outcome(self) -> Outcome:
        """The outcome of :attr:`verdict`: the clustered verdict's over source clusters where contexts
        share sources, else the overall one's."""
        return self.clustered.outcome if self.clustered is not None else self.overall.outcome

    @property
    def provisional(self) -> bool:
        """Whether :attr:`verdict` names a difference the noise model cannot fully back."""
        return self.clustered.provisional if self.clustered is not None else self.overall.provisional

    @property
    def headline(self) -> str:
        """:attr:`verdict` in one short line (:func:`kldtui.decide.verdict.headline`)."""
        return headline(self.outcome, self.provisional, self.verdict_interval, self.name_a, self.name_b,
                        self.verdict_unit)

    @property
    def verdict_interval(self) -> VerdictInterval:
        """The interval :attr:`verdict` rests on: the clustered verdict's over source clusters where
        contexts share sources, else the overall one's over the windows (views draw it beside the
        verdict, never the other)."""
        return self.clustered.interval if self.clustered is not None else self.overall.interval

    @property
    def verdict_unit(self) -> str:
        """What :attr:`verdict_interval` counts: ``source cluster``, else :attr:`unit`."""
        return CLUSTER_UNIT if self.clustered is not None else self.unit

    @property
    def per_window_difference(self) -> list[float]:
        return [b - a for a, b in zip(self.kl_a, self.kl_b, strict=True)]

    @property
    def noise_source(self) -> str:
        return self.noise_floor["source"] if self.noise_floor else noise_words(None, self.unit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "kldtui-paired-diff-v1",
            "a": {"name": self.name_a, "path": self.path_a},
            "b": {"name": self.name_b, "path": self.path_b},
            "direction": "B - A of per-window mean KL(reference || candidate)",
            "overall": self.overall.to_dict(unit=self.unit),
            "domains": {d: s.to_dict(unit=self.unit) for d, s in self.domains.items()},
            "per_window": {"window_index": self.window_index, "domain": self.domain,
                           "kl_a": self.kl_a, "kl_b": self.kl_b,
                           "difference": self.per_window_difference,
                           "infinite_kl_rows_a": self.infinite_a, "infinite_kl_rows_b": self.infinite_b},
            "bootstrap_samples": self.bootstrap_samples,
            "seed": self.seed,
            "cluster_unit": self.unit,
            "pairing_checked": self.pairing_checked,
            "noise_floor": self.noise_floor,
            "noise_floor_used": self.noise_source,
            "noise_model": self.noise_source,
            "verdict_method": {"interval": VERDICT_METHOD, "level": 0.95,
                               "min_windows": MIN_VERDICT_WINDOWS,
                               "family": "Holm over the overall and per-domain verdicts, family-wise 5 %"},
            "verdict": self.verdict,
            "notes": self.notes,
            "figures": {f.name: f.to_dict() for f in self.figures},
            "kl_by_reference_confidence": [x.to_dict() for x in self.buckets
                                           if x.kind == "reference_confidence"],
            "kl_by_depth": [x.to_dict() for x in self.buckets if x.kind == "depth"],
            **({"clustered": self.clustered.to_dict()} if self.clustered is not None else {}),
        }


def paired_values(a: ReportLike, b: ReportLike, where_a: str, where_b: str,
                  ) -> tuple[WindowValues, WindowValues, str]:
    a, b = as_report(a, where_a), as_report(b, where_b)
    va, vb = window_values(a, where_a), window_values(b, where_b)
    checked = check_same_suite(a, b, where_a, where_b, va, vb)
    return va, vb, checked


def suite_hash_of(*reports: ReportLike) -> str | None:
    for r in reports:
        h = as_report(r).suite_token_hash_sha256
        if h:
            return h
    return None


def paired_diff(a_doc: ReportLike, b_doc: ReportLike, *, samples: int = DEFAULT_SAMPLES,
                seed: int = DEFAULT_SEED, noise: NoiseFloor | None = AUTO_FLOOR,
                name_a: str | None = None, name_b: str | None = None,
                path_a: str | os.PathLike[str] | None = None,
                path_b: str | os.PathLike[str] | None = None) -> PairedDiff:
    """Compare candidate B with candidate A (two reports on the same reference and suite).

    ``noise``: a floor to use; left out, the published default applies when the reports come
    from the published suite (else none); ``None`` uses no floor. The overall bootstrap draws
    ``default_rng(seed).integers(0, n, (samples, n))``; each domain draws its own indices with a
    fresh ``default_rng(seed)`` over its windows.
    """
    where_a = str(path_a) if path_a is not None else (name_a or "A")
    where_b = str(path_b) if path_b is not None else (name_b or "B")
    if path_a is not None and path_b is not None and Path(path_a).resolve() == Path(path_b).resolve():
        raise BadInput(f"{where_a}: diffing a report with itself; give the reports of two candidates")
    a, b = as_report(a_doc, where_a), as_report(b_doc, where_b)
    check_same_partition(a, b, where_a, where_b)
    va, vb, checked = paired_values(a, b, where_a, where_b)
    ca, cb = a.candidate_dir, b.candidate_dir
    if np.array_equal(va.kl_mean, vb.kl_mean) and (not ca or not cb or os.path.normpath(str(ca)) ==
                                                    os.path.normpath(str(cb))):
        raise BadInput(f"{where_a} and {where_b} are the same report (same candidate, identical per-window "
                       "KL); give the reports of two candidates")
    if name_a is None or name_b is None:
        auto = unique_names([report_name(a, path_a), report_name(b, path_b)],
                            [None if path_a is None else str(path_a),
                             None if path_b is None else str(path_b)])
        name_a, name_b = name_a or auto[0], name_b or auto[1]
    if name_a == name_b:
        name_a, name_b = f"{name_a} (A)", f"{name_b} (B)"
    if noise is AUTO_FLOOR:
        noise = resolve_floor(None, suite_hash_of(a, b))
    notes = []
    if noise is not None and noise.suite_token_hash_sha256 and suite_hash_of(a, b) and \
            noise.suite_token_hash_sha256 != suite_hash_of(a, b):
        raise BadInput(f"the noise model ({noise.source}) was measured on another suite than "
                       f"{where_a}; measure it on this suite with kldtui noise")
    if noise is not None and noise.kind == "published":
        notes.append("the published repeat KL was measured on window 0 only and applies to every window")
    pa = None if path_a is None else str(path_a)
    pb = None if path_b is None else str(path_b)
    # the overall verdict and every domain's are one family: Holm over those that get a verdict
    masks = [np.ones(va.n, dtype=bool)] + [np.array([x == d for x in va.domain]) for d in va.domains()]
    # a domain is checked for difficulty dependence where all the windows show it (verdict.evidence)
    outer = evidence(va.kl_mean, vb.kl_mean) if va.n >= 3 else None
    ivs = [verdict_interval(va.kl_mean[m], vb.kl_mean[m], within=None if k == 0 else outer)
           for k, m in enumerate(masks)]
    significant = family_decisions([1.0 if iv.p_value is None else iv.p_value for iv in ivs],
                                   [iv.windows for iv in ivs])
    overall = compare_group(va.kl_mean, vb.kl_mean, draw_indices(va.n, samples, seed), noise,
                            va.window_index.tolist(), name_a, name_b, pa, pb, significant=significant[0],
                            infinite_a=va.infinite_kl_rows, infinite_b=vb.infinite_kl_rows, iv=ivs[0],
                            unit=a.unit)
    domains: dict[str, PairedStats] = {}
    for k, d in enumerate(va.domains(), start=1):
        mask = masks[k]
        domains[d] = compare_group(va.kl_mean[mask], vb.kl_mean[mask],
                                   draw_indices(int(mask.sum()), samples, seed), noise,
                                   va.window_index[mask].tolist(), name_a, name_b, pa, pb,
                                   significant=significant[k],
                                   infinite_a=_part(va.infinite_kl_rows, mask),
                                   infinite_b=_part(vb.infinite_kl_rows, mask), iv=ivs[k], unit=a.unit)
    family = sum(1 for iv in ivs if iv.windows >= MIN_VERDICT_WINDOWS)
    if family > 1:
        notes.append(f"the overall and per-domain verdicts are held together: Holm's correction over the "
                     f"{family} verdicts keeps the chance of any false winner among them at 5 %")
    floor_note = repeat_floor_note([(name_a, overall.mean_a), (name_b, overall.mean_b)],
                                   None if noise is None else noise.kl_mean)
    if floor_note:
        notes.append(floor_note)
    # its confirming command names the candidate the clustered verdict names the closer, over the source
    # clusters (not the contexts' mean, which may point the other way)
    clustered = clustered_paired(a, b, where_a, where_b, noise=noise, name_a=name_a, name_b=name_b,
                                 confirm=lambda name, path: confirm_command(name, path, noise), path_a=pa,
                                 path_b=pb, samples=samples, seed=seed)
    if clustered is not None:
        notes.append(f"contexts share sources: {clustered.independent_rows_note()}")
    few = [f"{d} ({s.windows})" for d, s in domains.items() if s.outcome == "too_few_windows"]
    if few:
        notes.append(f"no verdict for domains with fewer than {MIN_VERDICT_WINDOWS} {a.unit}s: "
                     f"{', '.join(few)}")
    return PairedDiff(
        name_a=name_a, name_b=name_b,
        path_a=None if path_a is None else str(path_a), path_b=None if path_b is None else str(path_b),
        overall=overall, domains=domains,
        window_index=va.window_index.tolist(), domain=list(va.domain),
        kl_a=va.kl_mean.tolist(), kl_b=vb.kl_mean.tolist(),
        infinite_a=[] if va.infinite_kl_rows is None else va.infinite_kl_rows.tolist(),
        infinite_b=[] if vb.infinite_kl_rows is None else vb.infinite_kl_rows.tolist(),
        bootstrap_samples=samples, seed=seed, pairing_checked=checked,
        noise_floor=noise.summary(a.unit) if noise else None, notes=notes, figures=figure_differences(a, b),
        buckets=bucket_pairs(a, b), clustered=clustered, unit=a.unit)


def _part(counts: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
    return None if counts is None else counts[mask]


def paired_diff_files(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str], *,
                      samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
                      noise_path: str | os.PathLike[str] | None = None,
                      use_noise_floor: bool = True) -> PairedDiff:
    """:func:`paired_diff` on two report files; the floor is ``noise_path``, else the published
    default for the published suite; none with ``use_noise_floor=False``."""
    a, b = load_report(path_a), load_report(path_b)
    floor = resolve_floor(noise_path, suite_hash_of(a, b)) if use_noise_floor else None
    return paired_diff(a, b, samples=samples, seed=seed, noise=floor, path_a=path_a, path_b=path_b)
