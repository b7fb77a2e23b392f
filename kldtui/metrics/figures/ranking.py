"""The figures quantization engineers rank candidates by (issue 25), besides mean KL: how often a
confident reference prediction flips, the entropy shift, and llama.cpp's "Same top p" and "RMS Δp"
as its perplexity tool reports them (in per cent; its per-position uncertainty is kept beside kldtui's
window-clustered interval, ``FigureSummary.per_token_uncertainty``)."""

from __future__ import annotations

import math

import numpy as np

from kldtui.metrics.figures import RowFigure, register
from kldtui.metrics.kernels import RowStats
from kldtui.text import signed_table_figure, table_figure

CONFIDENT = 0.9  # the reference's top probability from which a prediction counts as confident


def _flips(r: RowStats) -> np.ndarray:
    out: np.ndarray = (r.ref_top_prob >= CONFIDENT) & (r.argmax_ref != r.argmax_cand)
    return out


def _same_top(r: RowStats) -> np.ndarray:
    out: np.ndarray = r.argmax_ref == r.argmax_cand
    return out


def _delta_p(r: RowStats) -> np.ndarray:
    out: np.ndarray = np.exp(r.logp_cand_next) - np.exp(r.logp_ref_next)
    return out


def _proportion_se(values: np.ndarray) -> float:
    """llama.cpp's ± for a proportion: sqrt(p (1 - p) / (count - 1)), positions as independent."""
    n = values.size
    p = float(np.mean(values))
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else math.nan


def _rms_se(values: np.ndarray) -> float:
    """llama.cpp's ± for RMS Δp: half the standard error of the mean of Δp^2 over the RMS."""
    n = values.size
    sq = values * values
    mse = float(np.mean(sq))
    var = float(np.mean(sq * sq)) - mse * mse
    se = math.sqrt(var / (n - 1)) if n > 10 and var > 0 else 0.0
    return 0.5 / math.sqrt(mse) * se if mse > 0 else math.nan


register(RowFigure(
    name="confident_flip_rate", label="confident flips", unit="per 10,000 tokens", fmt=table_figure,
    definition=(f"positions where the reference's top probability is at least {CONFIDENT} and the "
                "candidate's argmax is another token, per 10,000 positions"),
    slots=("ref_top_prob", "argmax_ref", "argmax_cand"), values=_flips, scale=10_000.0,
    bounds=(0.0, 10_000.0)))

# Same top p and RMS Δp in llama.cpp perplexity's precision (%6.3f, docs/EXPORTS.md): read beside its
# output; both are per cent from 0 to 100, where three decimals neither vanish nor run on
register(RowFigure(
    name="same_top_p", label="Same top p", unit="%", fmt="{:.3f}", better="higher",
    definition=("per cent of positions where the candidate's argmax is the reference's (llama.cpp "
                "perplexity's \"Same top p\")"),
    slots=("argmax_ref", "argmax_cand"), values=_same_top, scale=100.0, bounds=(0.0, 100.0),
    per_token_uncertainty=lambda v: 100.0 * _proportion_se(v)))

register(RowFigure(
    name="rms_delta_p", label="RMS Δp", unit="%", fmt="{:.3f}", aggregation="rms",
    definition=("root mean square, in per cent, of p_candidate - p_reference of the actual next token "
                "(llama.cpp perplexity's \"RMS Δp\")"),
    slots=("logp_ref_next", "logp_cand_next"), values=_delta_p, scale=100.0, bounds=(0.0, 100.0),
    per_token_uncertainty=lambda v: 100.0 * _rms_se(v)))


def _entropy_shift(r: RowStats) -> np.ndarray:
    out: np.ndarray = r.entropy_cand - r.entropy_ref
    return out


register(RowFigure(
    name="entropy_shift", label="entropy shift", unit="nats", fmt=signed_table_figure, better=None,
    definition=("mean of H(candidate) - H(reference) per position, natural log: above 0 the candidate is "
                "less sure than the reference, below 0 more"),
    slots=("entropy_ref", "entropy_cand"), values=_entropy_shift))
