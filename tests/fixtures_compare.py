"""Helpers for the compare-stage tests: small suites on disk and a plain float64 oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.special import log_softmax, rel_entr

from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.suite import Suite
from kldtui.formats.suite_writer import write_suite


def peaked_rows(rng: np.random.Generator, rows: int, vocab: int,
                targets: np.ndarray | None = None) -> np.ndarray:
    """Realistic LLM-like rows: a heavy background and one token boosted from unsure to near one-hot."""
    x = rng.standard_normal((rows, vocab)) * 2.5
    tgt = targets if targets is not None else rng.integers(0, vocab, size=rows)
    x[np.arange(rows), tgt] += rng.uniform(3.0, 24.0, size=rows)
    return x.astype(np.float32)


def perturb(rng: np.random.Generator, x: np.ndarray, low: float = 0.01, high: float = 0.3) -> np.ndarray:
    scale = rng.uniform(low, high, size=(x.shape[0], 1))
    return (x + rng.standard_normal(x.shape) * scale).astype(np.float32)


def make_suite(root: Path, *, windows: int = 3, context: int = 33, vocab: int = 500, seed: int = 0,
               domains: tuple[str, ...] = ("prose", "code", "instruction"),
               candidate: Callable[[np.random.Generator, np.ndarray], np.ndarray] | None = None,
               ) -> tuple[Suite, Path, Path, dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """A suite with ``ref/`` and ``candidate/``; returns the suite, both folders and, per window,
    (reference logits, candidate logits, next-token ids)."""
    rng = np.random.default_rng(seed)
    toks = [(domains[i % len(domains)], [int(t) for t in rng.integers(0, vocab, size=context)])
            for i in range(windows)]
    suite = write_suite(root, toks)
    data: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    ref_w, cand_w = [], []
    for w, (_, ids) in zip(suite.windows, toks, strict=True):
        nxt = np.asarray(ids[1:], dtype=np.int64)
        x = peaked_rows(rng, context - 1, vocab, np.where(rng.random(context - 1) < 0.6, nxt,
                                                          rng.integers(0, vocab, size=context - 1)))
        y = candidate(rng, x) if candidate is not None else perturb(rng, x)
        data[w.index] = (x, y, nxt)
        ref_w.append(write_logits_array(root / "ref", w, x, context))
        cand_w.append(write_logits_array(root / "candidate", w, y, context))
    write_logits_manifest(root / "ref", suite, ref_w, kind="reference")
    write_logits_manifest(root / "candidate", suite, cand_w, kind="candidate")
    return suite, root / "ref", root / "candidate", data


def _divergences_longdouble(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KL, reverse KL and JS per row, summed in x87 extended precision (64-bit mantissa).

    A plain float64 sum (e.g. ``scipy.special.rel_entr(p, q).sum()``) has an absolute error near
    1e-16, i.e. it is itself off by 1e-4 relative for rows with KL ~ 1e-12; the oracle must be
    better than the kernel it checks."""
    ld = np.longdouble

    def log_softmax_ld(v: np.ndarray) -> np.ndarray:
        v = v.astype(ld)
        v = v - v.max(axis=1, keepdims=True)
        return v - np.log(np.exp(v).sum(axis=1, keepdims=True))

    lp, lq = log_softmax_ld(x), log_softmax_ld(y)
    p, q = np.exp(lp), np.exp(lq)
    lm = np.log((p + q) / 2)
    kl = (p * (lp - lq)).sum(axis=1)
    klr = (q * (lq - lp)).sum(axis=1)
    js = 0.5 * (p * (lp - lm)).sum(axis=1) + 0.5 * (q * (lq - lm)).sum(axis=1)
    return kl.astype(np.float64), klr.astype(np.float64), js.astype(np.float64)


def oracle_rows(x: np.ndarray, y: np.ndarray, nxt: np.ndarray) -> dict[str, np.ndarray]:
    """Plain per-row figures: scipy float64 for probabilities, extended precision for divergences."""
    lp = log_softmax(x.astype(np.float64), axis=1)
    lq = log_softmax(y.astype(np.float64), axis=1)
    p = np.exp(lp)
    rows = np.arange(x.shape[0])
    ax = np.argmax(x, axis=1)
    kl, klr, js = _divergences_longdouble(x, y)
    scipy_kl = rel_entr(p, np.exp(lq)).sum(axis=1)
    # the scipy float64 value agrees wherever float64 can resolve it
    assert np.all(np.abs(scipy_kl - kl) <= 1e-12 + 1e-6 * kl)
    return {
        "kl": kl,
        "kl_reverse": klr,
        "js": js,
        "argmax_ref": ax,
        "argmax_cand": np.argmax(y, axis=1),
        "rank_ref_top": (y > y[rows, ax][:, None]).sum(axis=1),
        "ref_top_prob": p.max(axis=1),
        "logp_ref_next": lp[rows, nxt],
        "logp_cand_next": lq[rows, nxt],
        "entropy_ref": _entropy_longdouble(x),
        "entropy_cand": _entropy_longdouble(y),
    }


def _entropy_longdouble(x: np.ndarray) -> np.ndarray:
    """Each row's entropy (natural log) in extended precision, in log space (-inf logits: 0 log 0 = 0)."""
    a = x.astype(np.longdouble)
    a = a - a.max(axis=1, keepdims=True)
    lp = a - np.log(np.sum(np.exp(a), axis=1, keepdims=True))
    p = np.exp(lp)
    return np.asarray(-np.sum(np.where(np.isfinite(lp), p * lp, 0), axis=1), dtype=np.float64)


def rel_err(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
