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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kldtui.decide.noise import NoiseFloor
from kldtui.decide.verdict import METHOD, VerdictInterval, decide, sentence, verdict_interval
from kldtui.errors import BadInput
from kldtui.formats.report_model import ComparisonReport
from kldtui.metrics import clusters as cl

LARGEST = 20
UNIT = "source cluster"


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
    outcome: str
    provisional: bool
    verdict: str
    wins: dict[str, int]
    largest: list[dict[str, Any]] = field(default_factory=list)

    def independent_rows_note(self, rows: str, verdict: str = "the verdict") -> str:
        """Which to trust, where figures that count the contexts as independent (``rows``, a singular
        subject: "each row above" of kldtui diff, "the tie column" of the viewer) sit beside this
        verdict (``verdict``): the one sentence every view says it in (docs/STATISTICS.md, "Clustered
        suites"). Both are right by their own unit; side by side they read as a contradiction."""
        return (f"{rows} counts the {self.contexts} contexts as independent; {verdict} counts each of the "
                f"{self.clusters} source clusters once and is the one to trust where they disagree")

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "contexts": self.contexts, "source_clusters": self.clusters,
                "difference_direction": "B - A of per-context mean KL(reference || candidate)",
                "interpretation": "negative values favour B",
                "paired_context_difference": {"mean": self.mean_difference, "median": self.median_difference,
                                              "bootstrap": self.bootstrap},
                "per_allocation_stratum": self.per_stratum,
                "verdict_interval": {**self.interval.to_dict(),
                                     "method": METHOD.replace("over windows", f"over {UNIT}s"), "unit": UNIT},
                "outcome": self.outcome, "provisional": self.provisional, "verdict": self.verdict,
                "win_count": self.wins, "largest_absolute_context_differences": self.largest}


def check_same_partition(a: ComparisonReport, b: ComparisonReport, where_a: str, where_b: str) -> None:
    """Refuse (BadInput) two hidden-state suite reports of different partitions."""
    if a.suite_statistics is None or b.suite_statistics is None:
        return
    pa, pb = a.suite_statistics.context_selection.partition, b.suite_statistics.context_selection.partition
    if pa != pb:
        raise BadInput(f"{where_a} covers the {pa} partition and {where_b} the {pb} one; compare candidates "
                       "on the same contexts (--context-filter)")


def _contexts(report: ComparisonReport, where: str) -> dict[int, tuple[float, str, str, str]]:
    stats = report.suite_statistics
    assert stats is not None
    return {e.context_index: (e.kl_reference_to_candidate.mean, e.source_cluster, e.allocation_stratum,
                              e.partition) for e in stats.per_context}


def clustered_paired(a: ComparisonReport, b: ComparisonReport, where_a: str, where_b: str, *,
                     noise: NoiseFloor | None, name_a: str, name_b: str, confirm: str | None = None,
                     samples: int = cl.DEFAULT_SAMPLES,
                     seed: int = cl.DEFAULT_SEED) -> ClusteredPaired | None:
    """The clustered comparison, or None when a report has no per-context identities (a logits
    suite's windows); BadInput when the reports cover other contexts, other clusters or other
    partitions."""
    if a.suite_statistics is None or b.suite_statistics is None:
        return None
    check_same_partition(a, b, where_a, where_b)
    pa = a.suite_statistics.context_selection.partition
    ca, cb = _contexts(a, where_a), _contexts(b, where_b)
    if sorted(ca) != sorted(cb):
        raise BadInput(f"{where_a} and {where_b} cover different contexts; compare both candidates on the "
                       "same contexts")
    order = sorted(ca)
    for i in order:
        if ca[i][1:] != cb[i][1:]:
            raise BadInput(f"{where_a} and {where_b}: context {i} has another source cluster, stratum or "
                           "partition in each; the reports come from different suites")
    kl_a = np.array([ca[i][0] for i in order])
    kl_b = np.array([cb[i][0] for i in order])
    keys = [ca[i][1] for i in order]
    strata = [ca[i][2] for i in order]
    d = kl_b - kl_a
    units_a, _ = cl.cluster_units(kl_a, keys)
    units_b, _ = cl.cluster_units(kl_b, keys)
    iv = verdict_interval(units_a, units_b)
    decision = decide(iv, noise, order, unit=a.unit)  # the noise model's offset: every context's
    text = sentence(decision, iv, float(units_a.mean()), name_a, name_b, confirm, unit=UNIT)
    text += f" ({pa} partition)"
    per_stratum = {}
    for s in sorted(set(strata)):
        mask = np.asarray(strata) == s
        per_stratum[s] = {"contexts": int(mask.sum()), "source_clusters": len(set(np.asarray(keys)[mask])),
                          "mean_difference": float(d[mask].mean()),
                          "median_difference": float(np.median(d[mask]))}
    largest = [{"context_index": order[i], "difference": float(d[i]), "allocation_stratum": strata[i],
                "source_cluster": keys[i]} for i in np.argsort(-np.abs(d), kind="stable")[:LARGEST]]
    return ClusteredPaired(
        partition=pa, contexts=len(order), clusters=len(set(keys)), mean_difference=float(d.mean()),
        median_difference=float(np.median(d)),
        bootstrap=cl.paired_difference_bootstrap(d, keys, strata, samples, seed), per_stratum=per_stratum,
        interval=iv, outcome=decision.outcome, provisional=decision.provisional, verdict=text,
        wins={"a": int((d > 0).sum()), "b": int((d < 0).sum()), "tie": int((d == 0).sum()),
              "tie_tolerance": 0},
        largest=largest)


__all__ = ["ClusteredPaired", "UNIT", "check_same_partition", "clustered_paired"]
