"""The report (docs/REPORT.md) from window results: per-window entries and columns, the figures
over all positions, window-clustered bootstraps and provenance; for a hidden-state suite also
what each side was, how it was replayed and the suite's clustered statistics
(:mod:`kldtui.stages.compare.suite_stats`)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from kldtui import __version__
from kldtui.errors import BadInput
from kldtui.formats.reference_identity import reference_identity_of
from kldtui.formats.report_model import (
    BACKEND_REASON_MAX,
    REPORT_FORMAT,
    WINDOW_FIGURES,
    Bootstrap,
    Comparator,
    ComparisonReport,
    ConfidenceBucket,
    DeltaP,
    FigureSummary,
    HeadlineInterval,
    InfiniteKL,
    Interval,
    NextToken,
    PositionBucket,
    Provenance,
    ReferenceEncoding,
    SideDescription,
    Stats,
    TopK,
    Verified,
    WindowEntry,
    WindowTable,
)
from kldtui.formats.report_names import headline_of
from kldtui.formats.suite import Suite, load_logits_manifest, logits_manifest_path, unit_name
from kldtui.metrics import figures as registry
from kldtui.metrics import stats as st
from kldtui.metrics.figures import finite
from kldtui.stages.compare.hashing import manifest_sha256
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowFigures, WindowResult
from kldtui.stages.compare.suite_stats import suite_statistics
from kldtui.text import plural

DIRECTION = "KL(reference || candidate)"
TOPK = (1, 5, 10)
TOPK_DEFINITION = ("fraction of positions where the reference's top-1 token is among the "
                   "candidate's k highest logits (ties in its favour)")
INFINITE_KL_DEFINITION = ("positions where the candidate masks (a logit at -inf; a finite logit, however "
                          "low, is not a mask) a token the reference gives a positive probability: "
                          "KL(reference || candidate) is infinite there and left out of the KL "
                          "statistics, which cover the other positions; JS stays finite")


# characters kept free at the end of a long provenance.backend_reason for "; then N other choices"
_MORE_CHOICES_ROOM = 40


def joined_reasons(reasons: Sequence[str]) -> str | None:
    """The report's ``provenance.backend_reason`` from each window's (``WindowResult.backend_reason``,
    in window order; the pipeline's choice can change between windows): each reason once, joined with
    ``; then ``, within :data:`BACKEND_REASON_MAX` characters (the reasons past it are counted: ``; then
    3 other choices``), so that the report loads again. None when a window's is not known (a server's
    figures, an older cache entry)."""
    if not reasons or not all(reasons):
        return None
    distinct = list(dict.fromkeys(reasons))
    room = BACKEND_REASON_MAX - _MORE_CHOICES_ROOM
    kept = [distinct[0][:room]]
    for reason in distinct[1:]:
        if len("; then ".join([*kept, reason])) > room:
            break
        kept.append(reason)
    left = len(distinct) - len(kept)
    return "; then ".join(kept) + (f"; then {plural(left, 'other choice')}" if left else "")


def _concat(results: Sequence[WindowResult], name: str) -> np.ndarray:
    return np.concatenate([getattr(r.rows, name) for r in results])


def build_report(results: Sequence[WindowResult], *, suite: Suite | None = None,
                 reference_dir: str | os.PathLike[str] = "", candidate_dir: str | os.PathLike[str] = "",
                 options: CompareOptions | None = None, window_range: Sequence[int] | None = None,
                 reference_manifest_sha256: str | None = None, suite_token_hash_sha256: str | None = None,
                 reference_identity_sha256: str | None = None,
                 reference_encoding: ReferenceEncoding | None = None, verified: Verified | None = None,
                 elapsed_seconds: float | None = None,
                 backend: str | None = None, threads: int | None = None,
                 command: str | None = None,
                 sides: tuple[SideDescription | None, SideDescription | None] | None = None,
                 comparator: Comparator | None = None) -> ComparisonReport:
    """The report (docs/REPORT.md) from window results, in any order; ``sides`` and
    ``comparator`` say what each side was and how replayed sides were replayed."""
    options = options or CompareOptions()
    if not results:
        raise BadInput(f"{candidate_dir}: no compared windows to report")
    res = sorted(results, key=lambda r: r.window_index)
    idx = [r.window_index for r in res]
    if len(set(idx)) != len(idx):
        raise ValueError("a window appears twice in the results")
    reverse = all(r.reverse for r in res)
    samples, seed = options.bootstrap_samples, options.bootstrap_seed
    # infinite KL rows (masked tokens) make spreads NaN and sums inf: null in the JSON, not a warning
    with np.errstate(over="ignore", invalid="ignore"):
        figs = [r.figures() for r in res]

    if suite is not None and suite_token_hash_sha256 is None:
        suite_token_hash_sha256 = suite.suite_token_hash_sha256
    if reference_manifest_sha256 is None and reference_dir:
        with contextlib.suppress(OSError):
            reference_manifest_sha256 = manifest_sha256(logits_manifest_path(reference_dir))
    if reference_identity_sha256 is None and reference_dir:
        reference_identity_sha256 = reference_identity_of(reference_dir, idx)
    if reference_encoding is None and reference_dir:
        reference_encoding = reference_encoding_of(reference_dir)
    if window_range is None:
        stop = options.stop_window if options.stop_window is not None else idx[-1] + 1
        window_range = [min(options.start_window, idx[0]), max(stop, idx[-1] + 1)]
    elapsed = float(elapsed_seconds if elapsed_seconds is not None
                    else sum(r.elapsed_seconds for r in res))
    nbytes = int(sum(r.bytes_compared for r in res))
    positions = sum(r.positions for r in res)
    backends = sorted({r.backend for r in res})
    if threads is None:  # windows compared one at a time (kldtui run): the count they all ran with
        counts = {r.threads for r in res}
        threads = counts.pop() if len(counts) == 1 else None  # differing, or unknown: null
    backend_reason = joined_reasons([r.backend_reason for r in res])
    provenance = Provenance(
        kldtui_version=__version__,
        backend=backend or "+".join(backends),
        elapsed_seconds=elapsed,
        bytes_compared=nbytes,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        verified=verified or Verified(token_hashes=True, suite_hash=True, logits_sha256="skipped"),
        threads=threads,
        throughput_gb_per_s=nbytes / elapsed / 1e9 if elapsed > 0 else None,
        positions_per_second=positions / elapsed if elapsed > 0 else None,
        command=command,
        backend_reason=backend_reason,
    )
    with_reverse = reverse and figs[0]["kl_reverse_mean"] is not None
    columns: dict[str, Any] = {
        "window_index": [f.window_index for f in figs], "domain": [f.domain for f in figs],
        "positions": [f.positions for f in figs],
        **{fig.name: [f[fig.name] for f in figs] for fig in registry.all_figures()
           if fig.report == "columns" and (fig.name != "kl_reverse_mean" or with_reverse)}}
    reported = _reported(figs)
    with np.errstate(over="ignore", invalid="ignore"):
        suite_stats = None
        if suite is not None:
            suite_sha = None
            with contextlib.suppress(OSError):
                suite_sha = manifest_sha256(suite.path)
            suite_stats = suite_statistics(res, suite, options, suite_sha)
        # the bootstraps' cluster_unit: what the report's windows are called (ComparisonReport.unit,
        # the rule diff's and the leaderboard's JSON follow): a hidden-state suite's are contexts
        unit = unit_name(contexts=suite_stats is not None)
        return ComparisonReport(
            report_format=REPORT_FORMAT,
            direction=DIRECTION,
            positions=positions,
            windows=len(res),
            reference_dir=str(reference_dir),
            candidate_dir=str(candidate_dir),
            window_range=(int(window_range[0]), int(window_range[1])),
            suite_token_hash_sha256=suite_token_hash_sha256,
            reference_manifest_sha256=reference_manifest_sha256,
            reference_identity_sha256=reference_identity_sha256,
            reference_encoding=reference_encoding,
            vocab_size=int(res[0].vocab_size),
            per_window=[_window_entry(r, f, reverse, reported) for r, f in zip(res, figs, strict=True)],
            per_window_arrays=WindowTable(**columns, figures={fig.name: [f[fig.name] for f in figs]
                                                              for fig in reported}),
            domains={d: Bootstrap.of(st.window_cluster_bootstrap(
                [f["kl_mean"] for f in figs if f.domain == d], samples, seed, unit))
                for d in dict.fromkeys(r.domain for r in res)},
            provenance=provenance,
            **_overall_figures(res, figs, reverse, samples, seed, starts=(
                [suite.window(r.window_index).scored_row_start for r in res] if suite is not None else None),
                unit=unit),
            figures=_figure_summaries(res, figs, reported, samples, seed, unit),
            candidate_size=options.candidate_size,
            reference=sides[0] if sides is not None else None,
            candidate=sides[1] if sides is not None else None,
            comparator=comparator,
            suite_statistics=suite_stats,
        )


def reference_encoding_of(reference_dir: str | os.PathLike[str]) -> ReferenceEncoding | None:
    """The lossy encoding the reference was decoded from, as its logits manifest records it
    (``runtime.reference_encoding``: a reference imported from llama.cpp's base file); None for a
    reference of float32 logits."""
    path = logits_manifest_path(reference_dir)
    if not path.is_file():
        return None
    try:
        runtime = load_logits_manifest(path).runtime
    except BadInput:  # not a logits manifest (hidden states: compare read it its own way)
        return None
    doc = runtime.get(ReferenceEncoding.RUNTIME_KEY) if isinstance(runtime, dict) else None
    return None if doc is None else ReferenceEncoding.from_manifest(doc, str(path))


def _or_none(value: float) -> float | None:
    """A figure that can overflow (the perplexity of a broken candidate): None when not finite."""
    return value if math.isfinite(value) else None


def _reported(figs: list[WindowFigures]) -> list[registry.RowFigure]:
    """The registered figures of the report's ``figures`` object: those every window has."""
    return [fig for fig in registry.reported_figures() if all(f[fig.name] is not None for f in figs)]


def _figure_summaries(res: Sequence[WindowResult], figs: list[WindowFigures],
                      reported: list[registry.RowFigure], samples: int, seed: int, unit: str
                      ) -> dict[str, FigureSummary] | None:
    """The ``figures`` object: each registered figure over every position, with a window-cluster
    bootstrap over its window values, resampling ``unit`` s (None when no figure is registered beyond
    the built-in ones)."""
    if not reported:
        return None
    out: dict[str, FigureSummary] = {}
    for fig in reported:
        pooled = fig.pooled_value([r.rows for r in res])
        boot = st.window_cluster_bootstrap(np.array([f[fig.name] for f in figs], dtype=np.float64),
                                           samples, seed, unit)
        unc = fig.pooled_uncertainty([r.rows for r in res])
        out[fig.name] = FigureSummary(
            label=fig.label, definition=fig.definition,
            value=_or_none(float(pooled)) if pooled is not None else None,
            window_cluster_bootstrap=Interval.of({k: _or_none(v) if isinstance(v, float) else v
                                                  for k, v in boot.items()}),
            unit=fig.unit or None, better=fig.better,
            interval=headline_interval([f[fig.name] for f in figs], fig.name),
            per_token_uncertainty=_or_none(unc) if unc is not None else None)
    return out


def headline_interval(window_values: Sequence[float | int | None], name: str) -> HeadlineInterval:
    """The headline interval (docs/STATISTICS.md) of figure ``name`` over its window values, as every
    view computes it (:func:`kldtui.formats.report_names.headline_of`), a figure that is not finite
    written as null (JSON has no infinity)."""
    registry.figure(name)  # a figure this version registers (KeyError otherwise)
    h = headline_of(window_values, name)

    def num(x: float | None) -> float | None:
        return None if x is None else _or_none(x)

    return replace(h, estimate=num(h.estimate), ci95_low=num(h.ci95_low), ci95_high=num(h.ci95_high))


def _window_entry(r: WindowResult, figures: WindowFigures, reverse: bool,
                  reported: list[registry.RowFigure]) -> WindowEntry:
    """One ``per_window`` entry: the original's fields, then this window's figures."""
    return WindowEntry(
        window_index=r.window_index, domain=r.domain, positions=r.positions,
        kl_reference_to_candidate=Stats.of(st.stats_object(finite(r.rows.kl))),
        js=Stats.of(st.stats_object(r.rows.js)),
        top1_agreement=figures["top1_agreement"],
        kl_candidate_to_reference=(Stats.of(st.stats_object(finite(r.rows.kl_reverse)))
                                   if r.rows.kl_reverse is not None and reverse else None),
        **{k: figures[k] for k in WINDOW_FIGURES},
        figures={fig.name: figures[fig.name] for fig in reported})


def _overall_figures(res: Sequence[WindowResult], figs: list[WindowFigures], reverse: bool, samples: int,
                     seed: int, starts: list[int] | None = None, *, unit: str) -> dict[str, Any]:
    """The report's figures over all positions (and over window means, for the bootstraps, whose
    ``cluster_unit`` is ``unit``); ``starts``: each window's first scored position (the position
    buckets count from it)."""
    def pooled(name: str) -> np.ndarray:
        """A registered figure's per-row values over every window (one definition per figure)."""
        values = registry.figure(name).values
        return np.concatenate([values(r.rows) for r in res])

    kl = _concat(res, "kl")
    top1 = pooled("top1_agreement")
    rank = _concat(res, "rank_ref_top")
    lp_ref = _concat(res, "logp_ref_next")
    lp_cand = _concat(res, "logp_cand_next")
    dp = pooled("delta_p_mean")
    nll_r = np.array([f["nll_reference_mean"] for f in figs])
    nll_c = np.array([f["nll_candidate_mean"] for f in figs])
    window_of = np.concatenate([np.full(len(r.rows), i, dtype=np.int64) for i, r in enumerate(res)])
    fin = np.isfinite(kl)  # infinite KL (masked tokens) is counted in "infinite_kl", not averaged
    if not fin.any():
        fin[:] = True
    out: dict[str, Any] = {
        "kl_reference_to_candidate": Stats.of(st.stats_object(kl[fin])),
        "js": Stats.of(st.stats_object(_concat(res, "js"))),
        "top1_agreement": float(np.mean(top1)),
        "kl_window_cluster_bootstrap": Bootstrap.of(st.window_cluster_bootstrap(
            np.array([f["kl_mean"] for f in figs]), samples, seed, unit)),
        "js_window_cluster_bootstrap": Bootstrap.of(st.window_cluster_bootstrap(
            np.array([f["js_mean"] for f in figs]), samples, seed, unit)),
        "topk_agreement": TopK(TOPK_DEFINITION, list(TOPK), {str(k): float(np.mean(rank < k)) for k in TOPK}),
        "next_token": NextToken(
            p_reference=Stats.of(st.stats_object(np.exp(lp_ref))),
            p_candidate=Stats.of(st.stats_object(np.exp(lp_cand))),
            delta_p=DeltaP(**st.stats_object(dp), rms=float(np.sqrt(np.mean(dp * dp)))),
            perplexity_reference=_or_none(float(np.exp(-np.mean(lp_ref)))),
            perplexity_candidate=_or_none(float(np.exp(-np.mean(lp_cand)))),
            perplexity_ratio=_or_none(float(np.exp(np.mean(lp_ref) - np.mean(lp_cand)))),
            perplexity_ratio_window_cluster_bootstrap=Interval.of(
                {k: _or_none(v) if isinstance(v, float) else v
                 for k, v in st.ratio_bootstrap(nll_c, np.exp, nll_r, samples, seed, unit).items()}),
            # log space: finite wherever the perplexities overflow (+inf when a side gives the
            # actual next token probability 0: null in JSON)
            log_perplexity_reference=float(-np.mean(lp_ref)),
            log_perplexity_candidate=float(-np.mean(lp_cand)),
            log_perplexity_ratio=float(np.mean(lp_ref) - np.mean(lp_cand)),
        ),
        "infinite_kl": InfiniteKL(
            definition=INFINITE_KL_DEFINITION,
            rows=int(sum(f["infinite_kl_rows"] for f in figs)),
            windows=[int(f.window_index) for f in figs if f["infinite_kl_rows"]],
            reverse_rows=int(sum(int(np.isposinf(r.rows.kl_reverse).sum()) for r in res
                                 if r.rows.kl_reverse is not None)) if reverse else None),
        "kl_by_reference_confidence": [ConfidenceBucket(**b) for b in  # type: ignore[arg-type]
                                       st.confidence_buckets(_concat(res, "ref_top_prob")[fin], kl[fin],
                                                             top1[fin], window_of[fin])],
        "kl_by_position": [PositionBucket(**b) for b in  # type: ignore[arg-type]
                           st.position_buckets([finite(r.rows.kl) for r in res], intervals=True,
                                               starts=starts)],
        "kl_mean_interval": headline_interval([f["kl_mean"] for f in figs], "kl_mean"),
    }
    if reverse:
        out["kl_candidate_to_reference"] = Stats.of(st.stats_object(finite(_concat(res, "kl_reverse"))))
        out["kl_reverse_window_cluster_bootstrap"] = Bootstrap.of(st.window_cluster_bootstrap(
            [f["kl_reverse_mean"] for f in figs if f["kl_reverse_mean"] is not None], samples, seed, unit))
    return out


__all__ = ["DIRECTION", "TOPK", "build_report"]
