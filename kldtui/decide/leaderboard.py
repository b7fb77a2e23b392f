"""Ranking candidates measured against one reference: mean KL with intervals, ties marked.

Each row shows its report's headline mean-KL interval (``kl_headline_interval``: the same figures as
the viewer). A row is *tied with the best* when the paired test does not name the best as closer
(:mod:`kldtui.decide.verdict`, docs/STATISTICS.md): the test of ``row - best``,
Holm-corrected over all pairs of candidates, is not significant, or the difference does not clear
the measured repeat variation. Below the minimum window count no row gets a mark.

Where the reports' contexts share sources (a hidden-state suite, :mod:`kldtui.decide.clustered`), the
test's unit is the **source cluster**, as ``kldtui diff``'s verdict counts it: each cluster's mean of its
contexts' KL, paired cluster by cluster (:attr:`Leaderboard.tie_unit`); the rows' intervals stay the
reports' own, over contexts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kldtui.decide.clustered import UNIT as SOURCE_CLUSTER
from kldtui.decide.clustered import (
    SourceClusters,
    check_same_partition,
    cluster_verdict,
    interval_dict,
    paired_contexts,
)
from kldtui.decide.noise import AUTO_FLOOR, NoiseFloor, resolve_floor
from kldtui.decide.paired import (
    DEFAULT_SAMPLES,
    DEFAULT_SEED,
    Interval,
    compare_group,
    confirm_command,
    draw_indices,
    paired_bootstrap,
    repeat_floor_brief,
    repeat_floor_note,
    suite_hash_of,
)
from kldtui.decide.reports import (
    ReportLike,
    WindowValues,
    check_one_suite,
    check_same_suite,
    report_name,
    window_values,
)
from kldtui.decide.verdict import (
    ALPHA,
    MIN_VERDICT_WINDOWS,
    Outcome,
    VerdictInterval,
    family_flips,
    family_resolvable,
    family_size_for,
    family_windows,
    infinite_brief,
    infinite_note,
    json_number,
    noise_brief,
    noise_words,
    verdict_interval,
)
from kldtui.errors import BadInput
from kldtui.formats.report import load_report
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.report_names import kl_headline_interval, report_interval, unique_names
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.metrics.inference import smallest_flip_p
from kldtui.metrics.stats import holm
from kldtui.text import NO_VERDICT_OUTCOMES, TIED_OUTCOMES, no_verdict_words, plain_number


def marks_legend(unit: str = WINDOW_UNIT) -> str:
    """What the tie column's marks mean (LeaderboardRow.mark), as every view of a leaderboard says it,
    over the suite's ``unit`` s (:attr:`Leaderboard.unit`)."""
    return ("tie: best = lowest mean KL, the others are compared with it; tied = not shown different "
            f"from the best; worse = shown worse than the best; no verdict = {no_verdict_words(unit)}")


@dataclass(frozen=True)
class LeaderboardRow:
    rank: int  # 1 = lowest mean KL
    name: str
    path: str | None
    mean: float  # mean of window means of KL(reference || candidate)
    ci_low: float
    ci_high: float
    standard_error: float
    windows: int
    is_best: bool
    tied_with_best: bool  # False for the best row itself
    diff_vs_best: VerdictInterval | None  # this row - best, paired (the verdict interval); None for the best
    ratio_vs_best: Interval | None  # this row / best (percentile bootstrap)
    outcome_vs_best: Outcome | None
    verdict_vs_best: str
    provisional: bool = False
    alone: bool = False  # the only report: nothing to rank it against
    # the headline interval (ci_low, ci_high) rests on too few windows to be trusted (views mark it)
    rests_on_too_few_windows: bool = False
    percentile_ci: tuple[float, float] | None = None  # the report's own percentile window bootstrap
    inside_repeat_floor: bool = False  # mean KL no larger than the repeat KL between two captures
    # more candidates than these windows can tell apart (verdict.family_resolvable): no row has a verdict
    family_too_large: bool = False
    # the units the tie verdicts count where they are not the windows: a hidden-state suite's source
    # clusters (Leaderboard.tie_unit); None: the windows
    tie_units: int | None = None
    # whose run the report is, as the profiles.json of its folder records it (the profile's path; None:
    # none recorded); decide reads no such record: kldtui.workflow.owners.with_whose sets it
    profile: str | None = None

    @property
    def units_tied_over(self) -> int:
        """How many units the tie verdicts count: :attr:`tie_units`, else the windows."""
        return self.windows if self.tie_units is None else self.tie_units

    def to_dict(self, *, unit: str) -> dict[str, Any]:
        """JSON-ready; ``unit``: what the ties resample (``Leaderboard.to_dict``'s ``cluster_unit``); an
        end that is not a finite number (KL over dozens of orders of magnitude) null, as in a report."""
        return {"rank": self.rank, "name": self.name, "path": self.path, "mean": json_number(self.mean),
                "ci95_low": json_number(self.ci_low), "ci95_high": json_number(self.ci_high),
                "standard_error": json_number(self.standard_error),
                "interval_method": "headline (docs/STATISTICS.md)",
                "rests_on_too_few_windows": self.rests_on_too_few_windows,
                "percentile_ci95_low": json_number(self.percentile_ci[0]) if self.percentile_ci else None,
                "percentile_ci95_high": json_number(self.percentile_ci[1]) if self.percentile_ci else None,
                "windows": self.windows, "is_best": self.is_best, "tied_with_best": self.tied_with_best,
                "diff_vs_best": (None if self.diff_vs_best is None else interval_dict(self.diff_vs_best)
                                 if self.tie_units is not None else self.diff_vs_best.to_dict()),
                "ratio_vs_best": self.ratio_vs_best.to_dict(unit=unit) if self.ratio_vs_best else None,
                "outcome_vs_best": self.outcome_vs_best, "verdict_vs_best": self.verdict_vs_best,
                "provisional": self.provisional, "inside_repeat_floor": self.inside_repeat_floor,
                "family_too_large": self.family_too_large,
                **({"profile": self.profile} if self.profile is not None else {})}

    @property
    def mark(self) -> str:
        """The tie mark a view shows: ``best``; ``tied`` (not shown different from the best);
        ``worse`` (shown worse than the best); ``no verdict`` below the windows (source clusters, where
        the ties count them: :attr:`units_tied_over`) a verdict needs, or with
        more candidates than the windows can tell apart (the best row too: nothing is shown about it
        either), or where the verdict cannot be calibrated or its interval has no finite end
        (docs/STATISTICS.md); empty for the only report."""
        if self.alone:
            return ""
        if self.outcome_vs_best in NO_VERDICT_OUTCOMES or (
                self.is_best and (self.units_tied_over < MIN_VERDICT_WINDOWS or self.family_too_large)):
            return "no verdict"
        if self.is_best:
            return "best"
        return "tied" if self.tied_with_best else "worse"


@dataclass(frozen=True)
class Leaderboard:
    rows: list[LeaderboardRow]
    windows: int
    bootstrap_samples: int
    seed: int
    noise_floor: dict[str, Any] | None
    pairing_checked: str
    notes: list[str] = field(default_factory=list)
    # each note in one short line, in the same order (the views above a ranking; the help has them in
    # full), and the noise model's
    brief_notes: list[str] = field(default_factory=list)
    noise_brief: str = noise_brief(None)
    unit: str = WINDOW_UNIT  # what the windows are called (a hidden-state suite's: context)
    # what the tie verdicts count, and how many: the windows; where contexts share sources (a
    # hidden-state suite), its source clusters, each counted once (kldtui.decide.clustered), of
    # ``partition``
    tie_unit: str = WINDOW_UNIT
    tie_units: int = 0
    partition: str | None = None

    @property
    def clustered(self) -> bool:
        """Whether the ties count source clusters rather than the windows (contexts)."""
        return self.tie_unit == SOURCE_CLUSTER

    @property
    def units_tied_over(self) -> int:
        """How many units the tie verdicts count: :attr:`tie_units`, else the windows."""
        return self.tie_units or self.windows

    @property
    def noise_source(self) -> str:
        return self.noise_floor["source"] if self.noise_floor else noise_words(None, self.unit)

    def to_dict(self) -> dict[str, Any]:
        resampled = self.tie_unit.replace(" ", "_")  # source_cluster, as a report's bootstraps say it
        over = " over source clusters (each the mean of its contexts' KL)" if self.clustered else ""
        return {"format": "kldtui-leaderboard-v1", "rows": [r.to_dict(unit=resampled) for r in self.rows],
                "windows": self.windows, "unit": self.unit, "bootstrap_samples": self.bootstrap_samples,
                "seed": self.seed, "cluster_unit": resampled, "tie_units": self.units_tied_over,
                "partition": self.partition, "noise_floor": self.noise_floor,
                "noise_floor_used": self.noise_source, "noise_model": self.noise_source,
                "tie_test": (f"sign-flip test{over} against the best (log-normal check where needed), "
                             "Holm over all pairs, family-wise 5 %"),
                "pairing_checked": self.pairing_checked,
                "notes": self.notes}


def build_leaderboard(documents: Sequence[ReportLike], *, names: Sequence[str] | None = None,
                      paths: Sequence[str | os.PathLike[str] | None] | None = None,
                      samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
                      noise: NoiseFloor | None = AUTO_FLOOR) -> Leaderboard:
    """Rank reports (same reference and suite) by mean KL; mark ties with the best.

    ``noise`` as in :func:`kldtui.decide.paired.paired_diff`: left out, the published default
    applies to the published suite; ``None``: no floor.
    """
    if not documents:
        raise BadInput("no reports to rank; give at least one comparison report")
    path_list = [None if p is None else str(p) for p in (paths or [None] * len(documents))]
    if len(path_list) != len(documents) or (names is not None and len(names) != len(documents)):
        raise ValueError("names and paths must have one entry per report")
    wheres = [p or (names[i] if names else f"report {i + 1}") for i, p in enumerate(path_list)]
    reports = [as_report(r, w) for r, w in zip(documents, wheres, strict=True)]
    check_one_suite(reports, wheres)  # of several suites: which reports belong together
    for i in range(1, len(reports)):  # as kldtui diff refuses them, before their windows
        check_same_partition(reports[0], reports[i], wheres[0], wheres[i])
    values: list[WindowValues] = [window_values(r, w) for r, w in zip(reports, wheres, strict=True)]
    checked = "single report"
    for i in range(1, len(reports)):
        checked = check_same_suite(reports[0], reports[i], wheres[0], wheres[i], values[0], values[i])
    # contexts that share sources: the ties count each source cluster once, as kldtui diff's verdict
    # does (the same reduction, the same refusals); None: the windows are the ties' units
    layout, units = _source_cluster_units(reports, wheres)
    tie_unit = SOURCE_CLUSTER if layout is not None else reports[0].unit
    label = unique_names(list(names) if names else [report_name(r, p) for r, p in
                                                      zip(reports, path_list, strict=True)], path_list)
    if noise is AUTO_FLOOR:
        noise = resolve_floor(None, suite_hash_of(*reports))
    n = values[0].n
    unit = reports[0].unit  # the reports share their suite (check_same_suite)
    if units is None:
        units = [v.kl_mean for v in values]
    m = len(units[0])  # the units the ties count: the windows, or the source clusters
    indices = draw_indices(n, samples, seed)
    cluster_indices = draw_indices(m, samples, seed) if layout is not None else indices
    intervals = [_row_interval(r) for r in reports]
    percentile = [(float(report_interval(r).ci95_low), float(report_interval(r).ci95_high)) for r in reports]
    few = [kl_headline_interval(r).rests_on_too_few_windows for r in reports]
    order = sorted(range(len(reports)), key=lambda i: (intervals[i].estimate, label[i]))
    best = order[0]
    windows = values[0].window_index.tolist()
    # Holm over every pair of candidates (not only "row vs best"): the best is picked by the data, and
    # testing the others against it alone lets the family-wise error grow past 5 % (8.6 % with five
    # identical candidates in simulation); over all pairs it stays under 5 % (docs/STATISTICS.md).
    k = len(reports)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    # enough sign patterns that the test can reach Holm's strictest threshold for this many pairs; and
    # whether these windows can tell this many candidates apart at all (8 windows: at most 4)
    flips = family_flips(len(pairs))
    too_many = k > 2 and m >= MIN_VERDICT_WINDOWS and not family_resolvable(m, len(pairs))
    p_values = []
    pair_intervals: dict[tuple[int, int], VerdictInterval] = {}
    for i, j in pairs:
        pair_intervals[(i, j)] = verdict_interval(units[i], units[j], flips=flips)
        p = pair_intervals[(i, j)].p_value
        p_values.append(1.0 if p is None else p)
    rejected = dict(zip(pairs, holm(p_values), strict=True))
    rows = []
    for rank, i in enumerate(order, start=1):
        iv = intervals[i]
        inside = noise is not None and 0 < iv.estimate <= noise.kl_mean
        tie_units = m if layout is not None else None
        if i == best:
            rows.append(LeaderboardRow(rank, label[i], path_list[i], iv.estimate, iv.ci95_low, iv.ci95_high,
                                       iv.standard_error, n, True, False, None, None, None, "best",
                                       rests_on_too_few_windows=few[i], percentile_ci=percentile[i],
                                       inside_repeat_floor=inside, family_too_large=too_many,
                                       tie_units=tie_units))
            continue
        significant = rejected[(min(i, best), max(i, best))]
        pair_iv = (pair_intervals[(best, i)] if best < i
                   else verdict_interval(units[best], units[i], flips=flips))
        if layout is None:
            stats = compare_group(values[best].kl_mean, values[i].kl_mean, indices, noise, windows,
                                  label[best], label[i], path_list[best], path_list[i],
                                  significant=significant, infinite_a=values[best].infinite_kl_rows,
                                  infinite_b=values[i].infinite_kl_rows, iv=pair_iv, unit=unit)
            outcome: Outcome = stats.outcome
            difference, ratio = stats.interval, stats.ratio
            verdict, provisional = stats.verdict, stats.provisional
        else:  # kldtui diff's verdict over source clusters, held by the family's correction
            difference, decision, verdict = cluster_verdict(
                units[best], units[i], layout, noise, label[best], label[i], unit=unit,
                confirm=lambda name, path: confirm_command(name, path, noise), path_a=path_list[best],
                path_b=path_list[i], significant=significant, iv=pair_iv)
            outcome, provisional = decision.outcome, decision.provisional
            _, ratio = paired_bootstrap(units[best], units[i], cluster_indices)
        if too_many:  # not "tied": no difference could have been shown, however large
            outcome, provisional = "too_few_windows", False
            verdict = (f"{_too_many_words(m, k, tie_unit)}: {label[i]} - {label[best]} = "
                       f"{plain_number(difference.estimate)} KL is an estimate only")
        tied = outcome in TIED_OUTCOMES
        rows.append(LeaderboardRow(rank, label[i], path_list[i], iv.estimate, iv.ci95_low, iv.ci95_high,
                                   iv.standard_error, n, False, tied, difference, ratio,
                                   outcome, verdict, provisional,
                                   rests_on_too_few_windows=few[i], percentile_ci=percentile[i],
                                   inside_repeat_floor=inside, family_too_large=too_many,
                                   tie_units=tie_units))
    notes: list[str] = []
    briefs: list[str] = []
    # what the ties count, in full and in the short line (a logits suite's: its windows, as before)
    over, brief_over = f"{unit}s", ""
    if layout is not None:
        over = (f"the {m} source clusters of the {n} contexts ({layout.partition} partition; each cluster "
                "the mean of its contexts' KL, counted once as kldtui diff's verdict counts it)")
        brief_over = f" over {m} source clusters"

    def note(full: str, brief: str | None = None) -> None:
        notes.append(full)
        briefs.append(full if brief is None else brief)

    if k == 1:
        rows = [dataclasses.replace(rows[0], alone=True)]
        note("one report: nothing to rank it against (give two or more reports to compare them)",
             "one report: nothing to rank it against")
    elif k > 2:
        note(f"ties: sign-flip test over {over} against the best (with a log-normal check where two "
             f"candidates depend differently on {tie_unit} difficulty), Holm-corrected over all "
             f"{len(pairs)} pairs of candidates (at most 5 % chance of any false 'not tied')",
             f"ties: sign-flip test{brief_over} against the best, Holm over all {len(pairs)} pairs "
             "(family-wise 5 %)")
    else:
        note(f"ties: sign-flip test over {over} against the best (95 %; with a log-normal check where the "
             f"two depend differently on {tie_unit} difficulty)",
             f"ties: sign-flip test{brief_over} against the best (95 %)")
    for i in order:
        counts = values[i].infinite_kl_rows
        if counts is not None and counts.any():
            where = values[i].window_index[counts > 0].tolist()
            rows_infinite = int(counts.sum())
            note(infinite_note(label[i], rows_infinite, where, unit), infinite_brief(label[i], rows_infinite))
    if too_many:
        most, needed = family_size_for(m), family_windows(len(pairs))
        note(f"{_too_many_words(m, k, tie_unit)}: over all {len(pairs)} pairs (Holm) a difference must reach "
             f"p <= {plain_number(ALPHA / len(pairs))}, and the sign-flip test over {m} {tie_unit}s gives p "
             f">= {plain_number(smallest_flip_p(m))}; the rows are in order of mean KL only, none is marked "
             f"best, worse or tied ({needed} {tie_unit}s would do, or rank at most {most} candidates at a "
             "time)",
             f"{_too_many_words(m, k, tie_unit)}: in order of mean KL only (needs {needed} {tie_unit}s)")
    if m < MIN_VERDICT_WINDOWS and k > 1:
        sources = (f" the {n} contexts come from {m} sources, each counted once;" if layout is not None
                   else "")
        note(f"too few {tie_unit}s ({m}) for a verdict:{sources} the rows are in order of mean KL only, none "
             f"is marked best, worse or tied (a verdict needs {MIN_VERDICT_WINDOWS})",
             f"too few {tie_unit}s ({m}) for a verdict: in order of mean KL only")
    by_mean = [(label[i], intervals[i].estimate) for i in order]
    repeat_kl = None if noise is None else noise.kl_mean
    floor_note = repeat_floor_note(by_mean, repeat_kl)
    if floor_note:
        note(floor_note, repeat_floor_brief(by_mean, repeat_kl))
    return Leaderboard(rows=rows, windows=n, bootstrap_samples=samples, seed=seed,
                       noise_floor=noise.summary(unit) if noise else None, pairing_checked=checked,
                       notes=notes, brief_notes=briefs, noise_brief=noise_brief(noise, unit), unit=unit,
                       tie_unit=tie_unit, tie_units=m, partition=layout.partition if layout else None)


def _source_cluster_units(reports: Sequence[ComparisonReport], wheres: Sequence[str],
                          ) -> tuple[SourceClusters | None, list[np.ndarray] | None]:
    """Where every report's contexts carry their source clusters (a hidden-state suite): the clusters,
    and each report's source-cluster units (:meth:`SourceClusters.units`: the reduction kldtui diff's
    verdict runs on); BadInput where two reports cover other contexts or other clusters, as diff
    refuses them. (None, None) otherwise: the windows are the units."""
    if any(r.suite_statistics is None for r in reports):
        return None, None
    first = paired_contexts(reports[0], reports[0], wheres[0], wheres[0])
    assert first is not None
    layout, kl_first, _ = first
    units = [layout.units(kl_first)]
    for report, where in zip(reports[1:], wheres[1:], strict=True):
        paired = paired_contexts(reports[0], report, wheres[0], where)
        assert paired is not None
        units.append(layout.units(paired[2]))
    return layout, units


def _too_many_words(windows: int, candidates: int, unit: str) -> str:
    return f"too few {unit}s ({windows}) to tell {candidates} candidates apart"


def _row_interval(report: ComparisonReport) -> Interval:
    """A row's mean-KL interval: the report's headline interval with its own estimate, the mean of
    window means (kl_headline_interval: the report's own, so the leaderboard shows and ranks by what the
    viewer shows; a report of the original comparator's scripts may give its bootstrap another mean),
    the percentile bootstrap's where it has none (under 3 windows); the standard error is the
    bootstrap's."""
    boot = report_interval(report)
    head = kl_headline_interval(report)
    if head.estimate is None or head.ci95_low is None or head.ci95_high is None:
        return Interval(float(boot.estimate), float(boot.standard_error), float(boot.ci95_low),
                        float(boot.ci95_high), boot.bootstrap_samples or 0)
    return Interval(float(head.estimate), float(boot.standard_error), float(head.ci95_low),
                    float(head.ci95_high), boot.bootstrap_samples or 0)


def leaderboard_from_files(paths: Sequence[str | os.PathLike[str]], *, samples: int = DEFAULT_SAMPLES,
                           seed: int = DEFAULT_SEED,
                           noise_path: str | os.PathLike[str] | None = None,
                           use_noise_floor: bool = True) -> Leaderboard:
    """:func:`build_leaderboard` over report files; the floor is ``noise_path``, else the published
    default for the published suite; none with ``use_noise_floor=False``."""
    reports = [load_report(p) for p in paths]
    floor = resolve_floor(noise_path, suite_hash_of(*reports)) if use_noise_floor else None
    return build_leaderboard(reports, paths=list(paths), samples=samples, seed=seed, noise=floor)

