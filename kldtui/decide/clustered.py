"""The paired comparison of two candidates over a hidden-state suite's contexts, clustered by source
(docs/STATISTICS.md, "Clustered suites").  ``kldtui diff`` adds it when both reports carry the
suite's per-context identities (``per_context``).

Contexts drawn from one source are not independent, so the verdict's unit is the **source
cluster**: each cluster's mean of its contexts' KL differences (B - A), through the same decision
rule as every verdict (:func:`kldtui.decide.verdict.decide` on :func:`verdict_interval` over those
units; :func:`kldtui.metrics.clusters.cluster_units` makes them).  Beside it, in the published paired
receipt's terms: the mean and median of the per-context differences, their stratified
source-cluster bootstrap weighted by the strata's context counts (the estimate is the observed mean),
per-stratum differences, how many contexts each candidate wins, and the largest differences.

Both reports must cover the same contexts, from one partition: a verdict names the partition it
used (``analysis`` while tuning, ``qualification`` to confirm once); two reports of different
partitions are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kldtui.decide.noise import NoiseFloor
from kldtui.decide.reports import check_finite_means
from kldtui.decide.verdict import (
    METHOD,
    Decision,
    Outcome,
    VerdictInterval,
    closer,
    decide,
    sentence,
    verdict_interval,
)
from kldtui.errors import BadInput
from kldtui.formats.report_model import ComparisonReport
from kldtui.metrics import clusters as cl

LARGEST = 20
UNIT = "source cluster"
# what the paired receipt's bootstrap beside the verdict is (kldtui diff --json): another interval of another
# figure, by another method, which may hold zero where the verdict names a difference or the reverse
RECEIPT_BOOTSTRAP = ("percentile bootstrap of the mean per-context difference B - A, source clusters "
                     "resampled within allocation strata weighted by their context counts: the published "
                     "paired receipt's figure, not the verdict's interval (verdict_interval)")
# the command that confirms a provisional difference, given the closer candidate's name and report path
# (kldtui.decide.paired.confirm_command with the noise model at hand)
Confirm = Callable[[str, str | None], str]


@dataclass(frozen=True)
class ClusteredPaired:
    """B compared with A over contexts clustered by source (see the module docstring)."""

    partition: str
    contexts: int
    clusters: int
    mean_difference: float  # B - A, over contexts
    median_difference: float
    bootstrap: dict[str, Any]  # stratified source-cluster bootstrap of the mean difference
    per_stratum: dict[str, dict[str, Any]]
    interval: VerdictInterval  # over source clusters
    outcome: Outcome
    provisional: bool
    verdict: str
    wins: dict[str, int]
    largest: list[dict[str, Any]] = field(default_factory=list)

    def independent_rows_note(self) -> str:
        """Which to trust, where kldtui diff's rows above its verdict (the table, the figures, the
        per-context listing), which count the contexts as independent, sit beside this verdict
        (docs/STATISTICS.md, "Clustered suites"). Both are right by their own unit; side by side they
        read as a contradiction. (The leaderboard's tie column counts source clusters, as this verdict
        does.)"""
        return (f"each row above counts the {self.contexts} contexts as independent; the verdict counts each "
                f"of the {self.clusters} source clusters once and is the one to trust where they disagree")

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "contexts": self.contexts, "source_clusters": self.clusters,
                "difference_direction": "B - A of per-context mean KL(reference || candidate)",
                "interpretation": "negative values favour B",
                "paired_context_difference": {"mean": self.mean_difference, "median": self.median_difference,
                                              "bootstrap": {**self.bootstrap, "method": RECEIPT_BOOTSTRAP}},
                "per_allocation_stratum": self.per_stratum,
                "verdict_interval": interval_dict(self.interval),
                "outcome": self.outcome, "provisional": self.provisional, "verdict": self.verdict,
                "win_count": self.wins, "largest_absolute_context_differences": self.largest}


def interval_dict(iv: VerdictInterval) -> dict[str, Any]:
    """A verdict interval over source clusters, JSON-ready: its method and unit say so (``kldtui diff
    --json``'s ``clustered.verdict_interval``, the leaderboard's ``diff_vs_best``)."""
    return {**iv.to_dict(), "method": METHOD.replace("over windows", f"over {UNIT}s"), "unit": UNIT}


def check_same_partition(a: ComparisonReport, b: ComparisonReport, where_a: str, where_b: str) -> None:
    """Refuse (BadInput) two hidden-state suite reports of different partitions."""
    if a.suite_statistics is None or b.suite_statistics is None:
        return
    pa, pb = a.suite_statistics.context_selection.partition, b.suite_statistics.context_selection.partition
    if pa != pb:
        raise BadInput(f"{where_a} covers the {pa} partition and {where_b} the {pb} one; compare candidates "
                       "on the same contexts (--context-filter)")


@dataclass(frozen=True)
class SourceClusters:
    """How a hidden-state suite's contexts sit in source clusters: the contexts in order, each one's
    cluster key and allocation stratum, and the partition they come from. Two reports pair cluster by
    cluster only where they share it (:func:`paired_contexts`)."""

    partition: str
    contexts: tuple[int, ...]  # context indices, ascending
    keys: tuple[str, ...]  # each context's source cluster key
    strata: tuple[str, ...]  # each context's allocation stratum

    @property
    def clusters(self) -> int:
        return len(set(self.keys))

    def units(self, values: np.ndarray) -> np.ndarray:
        """Per-context ``values`` (in :attr:`contexts` order) reduced to one per source cluster, the mean
        of its contexts' (:func:`kldtui.metrics.clusters.cluster_units`): the units every verdict over
        such a suite counts."""
        units, _ = cl.cluster_units(values, self.keys)
        return units


def _contexts(report: ComparisonReport) -> dict[int, tuple[float, str, str, str]]:
    stats = report.suite_statistics
    assert stats is not None
    return {e.context_index: (e.kl_reference_to_candidate.mean, e.source_cluster, e.allocation_stratum,
                              e.partition) for e in stats.per_context}


def paired_contexts(a: ComparisonReport, b: ComparisonReport, where_a: str, where_b: str,
                    ) -> tuple[SourceClusters, np.ndarray, np.ndarray] | None:
    """The contexts' source clusters and each report's per-context mean KL over them, in context order;
    None when a report has no per-context identities (a logits suite's windows). BadInput when the
    reports come from different partitions, or cover other contexts, or a context has another source
    cluster, stratum or partition in each: they do not pair cluster by cluster."""
    if a.suite_statistics is None or b.suite_statistics is None:
        return None
    check_same_partition(a, b, where_a, where_b)
    ca, cb = _contexts(a), _contexts(b)
    if sorted(ca) != sorted(cb):
        raise BadInput(f"{where_a} and {where_b} cover different contexts; compare both candidates on the "
                       "same contexts")
    order = sorted(ca)
    for i in order:
        if ca[i][1:] != cb[i][1:]:
            raise BadInput(f"{where_a} and {where_b}: context {i} has another source cluster, stratum or "
                           "partition in each; the reports come from different suites")
    for where, by_context in ((where_a, ca), (where_b, cb)):
        check_finite_means([by_context[i][0] for i in order], order, where, "kl_reference_to_candidate.mean",
                           "context")
    layout = SourceClusters(partition=a.suite_statistics.context_selection.partition, contexts=tuple(order),
                            keys=tuple(ca[i][1] for i in order), strata=tuple(ca[i][2] for i in order))
    return layout, np.array([ca[i][0] for i in order]), np.array([cb[i][0] for i in order])


def cluster_verdict(units_a: np.ndarray, units_b: np.ndarray, layout: SourceClusters,
                    noise: NoiseFloor | None, name_a: str, name_b: str, *, unit: str,
                    confirm: Confirm | None = None, path_a: str | None = None, path_b: str | None = None,
                    significant: bool | None = None,
                    iv: VerdictInterval | None = None) -> tuple[VerdictInterval, Decision, str]:
    """The verdict on B against A over source clusters (``units_a``, ``units_b``:
    :meth:`SourceClusters.units`), its interval, decision and sentence naming the partition: what
    ``kldtui diff`` says of two such reports, and the leaderboard's tie column of each candidate
    against the best. ``unit``: what the
    reports' windows are called (contexts: the noise model's repeat variation is over all of them);
    ``confirm``: the command that confirms a provisional difference, for the candidate this verdict names
    the closer (:func:`kldtui.decide.verdict.closer` over the source clusters; ``path_a``, ``path_b``: the
    reports); ``significant``: the family's decision (Holm over the leaderboard's pairs), None for the
    pair alone; ``iv``: the interval when the caller has it."""
    iv = iv if iv is not None else verdict_interval(units_a, units_b)
    decision = decide(iv, noise, layout.contexts, significant=significant, unit=unit)
    how = confirm(*closer(iv, (name_a, path_a), (name_b, path_b))) if confirm is not None else None
    text = sentence(decision, iv, float(np.mean(units_a)), name_a, name_b, how, unit=UNIT,
                    scope=f"{layout.partition} partition")
    return iv, decision, text


def clustered_paired(a: ComparisonReport, b: ComparisonReport, where_a: str, where_b: str, *,
                     noise: NoiseFloor | None, name_a: str, name_b: str, confirm: Confirm | None = None,
                     path_a: str | None = None, path_b: str | None = None,
                     samples: int = cl.DEFAULT_SAMPLES,
                     seed: int = cl.DEFAULT_SEED) -> ClusteredPaired | None:
    """The clustered comparison, or None when a report has no per-context identities (a logits
    suite's windows); BadInput when the reports cover other contexts, other clusters or other
    partitions (:func:`paired_contexts`). ``confirm``, ``path_a``, ``path_b``: as
    :func:`cluster_verdict`'s."""
    paired = paired_contexts(a, b, where_a, where_b)
    if paired is None:
        return None
    layout, kl_a, kl_b = paired
    keys, strata = list(layout.keys), list(layout.strata)
    d = kl_b - kl_a
    iv, decision, text = cluster_verdict(layout.units(kl_a), layout.units(kl_b), layout, noise, name_a,
                                         name_b, unit=a.unit, confirm=confirm, path_a=path_a,
                                         path_b=path_b)
    per_stratum = {}
    for s in sorted(set(strata)):
        mask = np.asarray(strata) == s
        per_stratum[s] = {"contexts": int(mask.sum()), "source_clusters": len(set(np.asarray(keys)[mask])),
                          "mean_difference": float(d[mask].mean()),
                          "median_difference": float(np.median(d[mask]))}
    order = layout.contexts
    largest = [{"context_index": order[i], "difference": float(d[i]), "allocation_stratum": strata[i],
                "source_cluster": keys[i]} for i in np.argsort(-np.abs(d), kind="stable")[:LARGEST]]
    return ClusteredPaired(
        partition=layout.partition, contexts=len(order), clusters=layout.clusters,
        mean_difference=float(d.mean()), median_difference=float(np.median(d)),
        bootstrap=cl.paired_difference_bootstrap(d, keys, strata, samples, seed), per_stratum=per_stratum,
        interval=iv, outcome=decision.outcome, provisional=decision.provisional, verdict=text,
        wins={"a": int((d > 0).sum()), "b": int((d < 0).sum()), "tie": int((d == 0).sum()),
              "tie_tolerance": 0},
        largest=largest)


__all__ = ["ClusteredPaired", "Confirm", "SourceClusters", "UNIT", "check_same_partition", "cluster_verdict",
           "clustered_paired", "interval_dict", "paired_contexts"]
