"""The per-window figures every kldtui report has had (``per_window_arrays`` columns and
``per_window`` entries, docs/REPORT.md), declared through the registry.  Their overall forms
(Stats objects, bootstraps, ``next_token``, ``topk_agreement``) are built by the compare stage's
report module, in the layout readers of the original comparator's reports expect."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kldtui.metrics.figures import RowFigure, Values, register
from kldtui.metrics.kernels import RowStats


def _column(name: str, label: str, definition: str, slots: tuple[str, ...], values: Values,
            **kw: Any) -> None:
    register(RowFigure(name=name, label=label, definition=definition, slots=slots,
                       values=values, report="columns", **kw))


def _p_ref(r: RowStats) -> np.ndarray:
    p: np.ndarray = np.exp(r.logp_ref_next)
    return p


def _p_cand(r: RowStats) -> np.ndarray:
    p: np.ndarray = np.exp(r.logp_cand_next)
    return p


def _delta_p(r: RowStats) -> np.ndarray:
    dp: np.ndarray = _p_cand(r) - _p_ref(r)
    return dp


_KL = ("KL(reference || candidate) per position; positions with infinite KL (masked tokens) "
       "are left out")
_column("kl_mean", "mean KL", "mean " + _KL, ("kl",), lambda r: r.kl, finite_only=True, bounds=(0.0, None))
_column("kl_median", "median KL", "median " + _KL, ("kl",), lambda r: r.kl, finite_only=True,
        aggregation="median")
_column("kl_p99", "KL p99", "99th percentile of " + _KL, ("kl",), lambda r: r.kl, finite_only=True,
        aggregation="p99")
_column("kl_max", "max KL", "largest " + _KL, ("kl",), lambda r: r.kl, finite_only=True,
        aggregation="max")
_column("js_mean", "JS", "mean Jensen-Shannon divergence (natural log)", ("js",), lambda r: r.js,
        bounds=(0.0, math.log(2.0)))
_column("top1_agreement", "top-1", "fraction of positions where both sides' argmax agree",
        ("argmax_ref", "argmax_cand"), lambda r: r.argmax_ref == r.argmax_cand, better="higher",
        bounds=(0.0, 1.0))
_column("p_reference_mean", "p ref", "mean reference probability of the actual next token",
        ("logp_ref_next",), _p_ref, better=None)
_column("p_candidate_mean", "p cand", "mean candidate probability of the actual next token",
        ("logp_cand_next",), _p_cand, better="higher")
_column("delta_p_mean", "Δp mean", "mean of p_candidate - p_reference of the actual next token",
        ("logp_ref_next", "logp_cand_next"), _delta_p, better=None)
_column("delta_p_rms", "Δp rms", "root mean square of p_candidate - p_reference of the actual next token",
        ("logp_ref_next", "logp_cand_next"), _delta_p, aggregation="rms")
_column("nll_reference_mean", "NLL ref", "mean negative log-likelihood of the actual next token, reference",
        ("logp_ref_next",), lambda r: -r.logp_ref_next, better=None)
_column("nll_candidate_mean", "NLL cand", "mean negative log-likelihood of the actual next token, candidate",
        ("logp_cand_next",), lambda r: -r.logp_cand_next)
_column("infinite_kl_rows", "infinite KL rows", "positions where the candidate gives probability 0 to a "
        "token the reference gives a positive probability", ("kl",), lambda r: np.isposinf(r.kl),
        aggregation="count", integer=True, fmt="{:d}")
_column("top5_agreement", "top-5", "fraction of positions where the reference's top-1 token is among "
        "the candidate's 5 highest logits", ("rank_ref_top",), lambda r: r.rank_ref_top < 5, better="higher")
_column("top10_agreement", "top-10", "fraction of positions where the reference's top-1 token is among "
        "the candidate's 10 highest logits", ("rank_ref_top",), lambda r: r.rank_ref_top < 10,
        better="higher")
_column("kl_reverse_mean", "mean reverse KL", "mean KL(candidate || reference) per position (with "
        "--reverse); positions with infinite reverse KL are left out", ("kl_reverse",),
        lambda r: r.kl_reverse, finite_only=True)
