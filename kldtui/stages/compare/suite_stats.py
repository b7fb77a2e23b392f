"""The statistics of a hidden-state suite's comparison (docs/REPORT.md, "Suites of contexts"):
micro and macro means, context, source-cluster and stratified source-cluster bootstraps
(:mod:`kldtui.metrics.clusters`), per-stratum and per-class intervals, depth buckets, the
highest-KL and most top-1-discordant contexts, and one identity entry per context, under the
published comparator's names.  Built only for suites of contexts (a logits suite's windows have
no sources or strata beyond their domain)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kldtui.formats import fidelity as fid
from kldtui.formats.report_model import (
    ClusterBootstrap,
    ContextEntry,
    ContextRank,
    ContextSelection,
    DepthBucket,
    Stats,
    StratifiedBootstrap,
    SuiteStatistics,
)
from kldtui.formats.suite import Suite
from kldtui.metrics import clusters as cl
from kldtui.metrics import stats as st
from kldtui.metrics.figures import finite
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult

RANKED = 20  # contexts listed in high_kld_contexts and top1_discordant_contexts


def _selection(options: CompareOptions, infos: Sequence[fid.ContextInfo]) -> ContextSelection:
    analysis = sum(1 for i in infos if i.partition == "analysis")
    qualification = len(infos) - analysis
    partition = "analysis" if not qualification else "qualification" if not analysis else "mixed"
    return ContextSelection(filter=options.contexts.describe(), partition=partition, analysis=analysis,
                            qualification=qualification, sentinels=sum(1 for i in infos if i.sentinel),
                            strata=list(options.strata))


def _rank(info: fid.ContextInfo, kl: float, top1: float) -> ContextRank:
    return ContextRank(context_index=info.index, allocation_stratum=info.allocation_stratum,
                       source_cluster=info.cluster_key, partition=info.partition, kl_mean=kl,
                       top1_agreement=top1)


def suite_statistics(results: Sequence[WindowResult], suite: Suite, options: CompareOptions,
                     suite_manifest_sha256: str | None) -> SuiteStatistics | None:
    """The statistics of ``results`` (sorted by index) when the suite's windows are contexts."""
    if not fid.is_context_suite(suite):
        return None
    by_index = {w.index: w for w in suite.windows}
    infos = []
    for r in results:
        info = fid.context_info(by_index[r.window_index])
        assert info is not None  # a context suite's windows are contexts
        infos.append(info)
    samples, seed = options.bootstrap_samples, options.bootstrap_seed
    kl_means = np.array([r.kl_mean for r in results])
    top1 = np.array([r.top1_agreement for r in results])
    keys = [i.cluster_key for i in infos]
    strata = [i.allocation_stratum for i in infos]
    classes = [i.semantic_class for i in infos]
    all_kl = finite(np.concatenate([r.rows.kl for r in results]))
    stratum_means = [float(kl_means[np.asarray(strata) == s].mean()) for s in sorted(set(strata))]

    def groups(names: list[str]) -> dict[str, ClusterBootstrap]:
        out = {}
        for name in sorted(set(names)):
            mask = np.asarray(names) == name
            out[name] = ClusterBootstrap.of(cl.cluster_bootstrap(kl_means[mask], list(np.asarray(keys)[mask]),
                                                                 samples, seed))
        return out

    rows = min(len(r.rows) for r in results)
    buckets = []
    for start, stop in cl.depth_edges(rows):
        values = finite(np.concatenate([r.rows.kl[start:stop] for r in results]))
        buckets.append(DepthBucket(rows=f"{start:04d}-{stop - 1:04d}", start=start, stop=stop,
                                   positions=int(values.size),
                                   kl_reference_to_candidate=Stats.of(st.stats_object(values))))
    by_kl = np.argsort(-kl_means, kind="stable")[:RANKED]
    by_top1 = np.argsort(top1, kind="stable")[:RANKED]
    per_context = []
    for r, info in zip(results, infos, strict=True):
        identity = {k: v for k, v in info.identity().items()
                    if k not in ("context_index", "allocation_stratum", "partition", "sentinel")}
        per_context.append(ContextEntry(
            context_index=info.index, allocation_stratum=info.allocation_stratum, partition=info.partition,
            sentinel=info.sentinel, source_cluster=info.cluster_key, positions=r.positions,
            kl_reference_to_candidate=Stats.of(st.stats_object(finite(r.rows.kl))),
            js=Stats.of(st.stats_object(r.rows.js)), top1_agreement=float(r.top1_agreement), extra=identity))
    return SuiteStatistics(
        contexts=len(results), context_selection=_selection(options, infos),
        kl_micro_token_mean=float(all_kl.mean()),
        kl_macro_allocation_stratum_mean=float(np.mean(stratum_means)),
        context_depth_buckets=buckets,
        kl_context_bootstrap=ClusterBootstrap.of(cl.context_bootstrap(kl_means, samples, seed)),
        kl_source_cluster_bootstrap=ClusterBootstrap.of(cl.cluster_bootstrap(kl_means, keys, samples, seed)),
        kl_stratified_source_cluster_bootstrap=StratifiedBootstrap.of(
            cl.stratified_cluster_bootstrap(kl_means, keys, strata, samples, seed)),
        allocation_strata=groups(strata), semantic_classes=groups(classes),
        high_kld_contexts=[_rank(infos[i], float(kl_means[i]), float(top1[i])) for i in by_kl],
        top1_discordant_contexts=[_rank(infos[i], float(kl_means[i]), float(top1[i])) for i in by_top1],
        per_context=per_context, suite_manifest_sha256=suite_manifest_sha256)


__all__ = ["RANKED", "suite_statistics"]
