"""Fused per-row kernels: every per-position figure of a comparison from one pass over a row block.

For each row (one scored position) of reference logits ``x`` and candidate logits ``y`` (float32,
``[rows, vocab]``) a kernel computes, in float64:

* ``kl``: KL(reference || candidate) = sum_i p_i (log p_i - log q_i);
* ``kl_reverse``: KL(candidate || reference) (only when asked);
* ``js``: Jensen-Shannon divergence, natural log;
* ``argmax_ref``, ``argmax_cand``: NumPy argmax (first maximum) of each side;
* ``rank_ref_top``: how many candidate logits are strictly greater than the candidate's logit for
  the reference's top-1 token (0: the candidate ranks it first; ties count in its favour), so the
  reference's top token is in the candidate's top k exactly when ``rank_ref_top < k``;
* ``ref_top_prob``: the reference's top probability (the confidence bucket);
* ``logp_ref_next``, ``logp_cand_next``: log-probability of the actual next token;
* ``entropy_ref``, ``entropy_cand``: each side's entropy (natural log), ``log s - h / s``.

Numerics.  Logits are shifted by each row's maximum in float64 (``a = x - max x``,
``b = y - max y``, exact) before anything is exponentiated, and every sum is a float64 sum of
float64 terms.  The fast path needs these per-row sums only::

    s_x = sum e^a      s_y = sum e^b      c_x = sum e^a (a - b)     [c_y = sum e^b (b - a)]
    h_x = sum e^a a    h_y = sum e^b b    m   = sum n log n,  n = e^a + e^b s_x / s_y

and :func:`combine` turns them into the figures: ``KL = c_x / s_x - log(s_x / s_y)`` (the
difference ``a - b`` is formed before the product, so the large common parts of the logits never
enter a sum) and ``JS = H((p+q)/2) - (H(p) + H(q))/2`` from float64 entropies.  Both have an
absolute error of order 1e-15 (JS: ~5e-15).  For rows where that is not small relative to the
result (KL or JS below :data:`PRECISE_BELOW`; rows of the C kernel's float32 path: KL below
:data:`SECOND_ORDER_PRECISE_BELOW`),
:func:`precise_row` recomputes the row from per-element non-negative terms
``p (D + expm1(-D))`` (each term >= 0, so no cancellation between terms, and insensitive to
first order to the normalisers), and identical rows give exactly 0.

Masks and extremes.  A logit at -inf is a mask: probability exactly 0 on its side, terms computed
with ``0 log 0 = 0``.  Where the reference gives a token positive probability and the candidate
masks it, KL(reference || candidate) is +inf (the row is counted by
:meth:`RowStats.infinite_kl_rows`); JS stays finite; the reverse KL likewise.  A finite logit is
never a mask, however low: where its probability underflows float64 (``a`` below
:data:`ZERO_BELOW`, e^-708) its own terms are 0 (``p log p`` is below 1e-300 there), but its
log-ratio against the other side stays the finite ``a - b``, so finite logits always give a finite
KL (rows spanning more than ~708 nats included).  JS is held to [0, log 2].
NaN or +Inf anywhere in a row, or a row without a finite logit, makes its figures NaN (every sum
touches every element), which the caller turns into a one-line error via
:meth:`RowStats.nonfinite_rows`.

Backends share :func:`combine` and :func:`precise_row`: ``CRowKernel`` in :mod:`kldtui.metrics.ckernel`
(the default on a CPU: ``_fastkl.c`` compiled at first use; for rows whose logits are finite and
within 80 of their maximum, i.e. nearly all, it has its own float32 path: float32 exps, the
second-order per-element forms ``KL = sum p g(r)``, ``g(r) = r - 1 + e^-r >= 0``, with
``r = log p - log q`` from an exact difference, and ``JS = 1/2 sum (p + q) phi(r)``,
``phi(r) = log 2 - H(1 / (1 + e^-r)) >= 0``, summed in float64: within :data:`FLOAT32_PATH_BOUND`
(4e-7) relative of the exact value however small the divergence, the bound the tests assert
(measured up to 2.1e-7 on a 163,840-vocabulary suite; the rounding of the float32 normalisers
enters only at second order, and is measured and removed); other rows get the float64 sums above,
in two vectorised passes), :class:`NumpyRowKernel` (the fallback without a C compiler; any machine; a row
at a time, so a thread's working set is a few row-sized float64 buffers, and NumPy releases the
GIL, so a thread pool uses every core; no BLAS call, whose spinning threads would fight the pool)
and :class:`TorchBlockKernel` (CUDA when available; CPU otherwise), which computes the same sums
over a 2-D row block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

LOG2 = math.log(2.0)
# Below this KL the fast path's ~1e-15 absolute error could exceed 1e-6 relative (of KL or of
# JS ~ KL/4), so the row is recomputed with the precise per-element formulation.
PRECISE_BELOW = 1e-8
# The C kernel's float32 path: KL, reverse KL and JS within this relative error of the exact value
# wherever KL >= 1e-8 (second-order sums; tests/unit/test_metrics_kernels.py asserts it, and it is
# what the docs state; measured up to 2.1e-7 at vocabulary 163,840).
FLOAT32_PATH_BOUND = 4e-7
# Its rows (relative error within FLOAT32_PATH_BOUND however small KL is; measured <= 3e-7 down to
# KL 2e-12, 1e-6 at 3e-13) need the precise path only below this.
SECOND_ORDER_PRECISE_BELOW = 1e-11
# exp underflows to 0 below about -745; a row reaching this needs n log n guarded against 0.
UNDERFLOW = -700.0
# Below this a = logit - row max, e^a is below the smallest normal float64 (e^-708): its own terms
# are taken as 0 in every backend alike. Only -inf is a mask (an infinite log-ratio); a finite
# logit down here keeps its finite log-ratio a - b.
ZERO_BELOW = -708.0
TINY = float(np.finfo(np.float64).tiny)

FIELDS = ("kl", "js", "argmax_ref", "argmax_cand", "rank_ref_top", "ref_top_prob",
          "logp_ref_next", "logp_cand_next", "entropy_ref", "entropy_cand", "kl_reverse")
INT_FIELDS = frozenset({"argmax_ref", "argmax_cand", "rank_ref_top"})


@dataclass
class RowStats:
    """Per-row results of a block (or of a whole window once filled)."""

    kl: np.ndarray
    js: np.ndarray
    argmax_ref: np.ndarray
    argmax_cand: np.ndarray
    rank_ref_top: np.ndarray
    ref_top_prob: np.ndarray
    logp_ref_next: np.ndarray
    logp_cand_next: np.ndarray
    entropy_ref: np.ndarray
    entropy_cand: np.ndarray
    kl_reverse: np.ndarray | None = None

    @classmethod
    def empty(cls, rows: int, reverse: bool) -> RowStats:
        def arr(name: str) -> np.ndarray:
            return np.zeros(rows, dtype=np.int64 if name in INT_FIELDS else np.float64)

        return cls(**{f: arr(f) for f in FIELDS if f != "kl_reverse"},
                   kl_reverse=arr("kl_reverse") if reverse else None)

    def __len__(self) -> int:
        return int(self.kl.shape[0])

    def put(self, start: int, block: RowStats) -> None:
        """Copy ``block``'s rows into rows ``start..`` of this object."""
        stop = start + len(block)
        for f in FIELDS:
            dst, src = getattr(self, f), getattr(block, f)
            if dst is not None and src is not None:
                dst[start:stop] = src

    def nonfinite_rows(self) -> np.ndarray:
        """Indices of rows whose figures are invalid (a NaN or +Inf logit, or a row without a
        finite logit, always leads here).  Masked tokens are valid: KL may be +inf and a
        next-token log-probability -inf (the token has probability 0 on that side)."""
        ok = (~np.isnan(self.kl) & np.isfinite(self.js) & np.isfinite(self.ref_top_prob)
              & ~np.isnan(self.logp_ref_next) & (self.logp_ref_next < np.inf)
              & ~np.isnan(self.logp_cand_next) & (self.logp_cand_next < np.inf))
        if self.kl_reverse is not None:
            ok &= ~np.isnan(self.kl_reverse)
        return np.flatnonzero(~ok)

    def infinite_kl_rows(self) -> np.ndarray:
        """Indices of rows where the candidate gives probability 0 to a token the reference
        gives a positive probability (KL(reference || candidate) = +inf)."""
        return np.flatnonzero(np.isposinf(self.kl))


class RowKernel(Protocol):
    """What every compare kernel implements (NumPy, the C kernel, torch): the per-row figures of
    a block of reference rows ``x`` and candidate rows ``y`` (float32 ``[rows, vocab]``), where
    ``next_tokens[i]`` is the token row ``i`` predicts; the reverse KL only when ``reverse``.
    One instance per thread (kernels own scratch buffers)."""

    name: str

    def block(self, x: np.ndarray, y: np.ndarray, next_tokens: np.ndarray,
              reverse: bool = False) -> RowStats: ...


def combine(xp: Any, sx: Any, sy: Any, cx: Any, hx: Any, hy: Any, mlogm: Any,
            cy: Any = None) -> dict[str, Any]:
    """Figures from the per-row sums (see the module docstring); ``xp`` is numpy or torch."""
    lsx = xp.log(sx)
    lsy = xp.log(sy)
    kl = cx / sx - (lsx - lsy)
    hp = lsx - hx / sx
    hq = lsy - hy / sy
    # n = s_x (p + q), sum n = 2 s_x:  sum (p+q) log(p+q) = m / s_x - 2 log s_x
    pq_log_pq = mlogm / sx - 2.0 * lsx
    js = LOG2 - 0.5 * pq_log_pq - 0.5 * (hp + hq)
    out = {"kl": kl, "js": js, "lsx": lsx, "lsy": lsy, "ref_top_prob": 1.0 / sx,
           "entropy_ref": hp, "entropy_cand": hq}
    if cy is not None:
        out["kl_reverse"] = cy / sy - (lsy - lsx)
    return out


def precise_row(x: np.ndarray, y: np.ndarray, reverse: bool) -> tuple[float, float, float | None]:
    """(KL, JS, reverse KL or None) of one row from non-negative per-element terms.

    Slower (a few more passes, expm1/log1p), used only for rows whose divergence is tiny.
    Identical rows give exactly 0.  With ``d = log p - log q`` the KL term is
    ``p (d + expm1(-d))`` for ``|d| < 1`` (no cancellation) and ``p d + q - p`` beyond (no
    overflow); JS likewise uses ``log1p(expm1(-d)/2)`` near ``d = 0`` and logs of the mixture
    elsewhere.
    """
    if np.array_equal(x, y):
        return 0.0, 0.0, (0.0 if reverse else None)
    with np.errstate(all="ignore"):
        a = x.astype(np.float64)
        a -= a.max()
        b = y.astype(np.float64)
        b -= b.max()
        if min(float(a.min()), float(b.min())) < ZERO_BELOW:
            return _precise_masked(a, b, reverse)
        ab = a - b
        ea = np.exp(a)
        eb = np.exp(b)
        sx = float(ea.sum())
        sy = float(eb.sum())
        # c = log(s_x / s_y) from s_x - s_y = sum e^b expm1(a - b): no cancellation when a ~ b
        delta = float(np.sum(eb * np.expm1(ab)))
        c = math.log1p(delta / sy) if math.isfinite(delta) else math.log(sx) - math.log(sy)
        lsy = math.log(sy)
        lx = a - (lsy + c)
        ly = b - lsy
        d = ab - c  # log p - log q
        p = np.exp(lx)
        q = np.exp(ly)
        near = np.abs(d) < 1.0
        em = np.expm1(-np.where(near, d, 0.0))  # q/p - 1 where |d| < 1
        kl = float(np.sum(np.where(near, p * (d + em), p * d + (q - p))))
        klr = None
        if reverse:
            ep = np.expm1(np.where(near, d, 0.0))  # p/q - 1
            klr = float(np.sum(np.where(near, q * (-d + ep), -q * d + (p - q))))
        # JS near d = 0: log(2p/(p+q)) = -log1p(em/2), log(2q/(p+q)) = -d - log1p(em/2)
        lm = np.log1p(0.5 * em)
        near_terms = -0.5 * (p * lm + q * (d + lm))
        # elsewhere: log M = max(lx, ly) + log1p(e^-|d|) - log 2
        log_m = np.maximum(lx, ly) + np.log1p(np.exp(-np.abs(d))) - LOG2
        far_terms = 0.5 * (np.where(p > 0, p * (lx - log_m), 0.0) + np.where(q > 0, q * (ly - log_m), 0.0))
        js = float(np.sum(np.where(near, near_terms, far_terms)))
    return max(kl, 0.0), min(max(js, 0.0), LOG2), (max(klr, 0.0) if klr is not None else None)


def _precise_masked(a: np.ndarray, b: np.ndarray, reverse: bool) -> tuple[float, float, float | None]:
    """:func:`precise_row` for rows with masked tokens (-inf) or probabilities below e^-708 (``a``,
    ``b`` already shifted by the row maxima): the same per-element terms on the tokens neither side
    masks (a finite log-ratio however small the probabilities), plus the one-sided masks' exact
    contributions (infinite KL, ``p log 2 / 2`` to JS)."""
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    ea = np.exp(a)
    eb = np.exp(b)
    only_x = float(ea[fa & ~fb].sum())  # the candidate masks these: infinite KL where positive
    only_y = float(eb[fb & ~fa].sum())
    sx, sy = float(ea.sum()), float(eb.sum())
    ab = a[both] - b[both]
    eab, ebb = ea[both], eb[both]
    normal = (eab > 0) & (ebb > 0) & (np.abs(ab) < 700)
    # s_x - s_y without cancellation where both sides are alike, directly where one underflows
    delta = (float(np.sum(ebb[normal] * np.expm1(ab[normal]))) + float(np.sum(eab[~normal] - ebb[~normal]))
             + only_x - only_y)
    c = math.log1p(delta / sy) if math.isfinite(delta) and delta > -sy else math.log(sx) - math.log(sy)
    lsy = math.log(sy)
    lx = a[both] - (lsy + c)
    ly = b[both] - lsy
    d = ab - c
    p = np.exp(lx)
    q = np.exp(ly)
    near = np.abs(d) < 1.0
    em = np.expm1(-np.where(near, d, 0.0))
    # on the common support sum (q - p) = P(only x) - Q(only y): added back so the terms sum to KL
    p_only, q_only = only_x / sx, only_y / sy
    kl = math.inf if only_x > 0 else float(np.sum(np.where(near, p * (d + em), p * d + (q - p)))) + q_only
    klr = None
    if reverse:
        ep = np.expm1(np.where(near, d, 0.0))
        klr = (math.inf if only_y > 0
               else float(np.sum(np.where(near, q * (-d + ep), -q * d + (p - q)))) + p_only)
    lm = np.log1p(0.5 * em)
    near_terms = -0.5 * (p * lm + q * (d + lm))
    log_m = np.maximum(lx, ly) + np.log1p(np.exp(-np.abs(d))) - LOG2
    far_terms = 0.5 * (p * (lx - log_m) + q * (ly - log_m))
    js = float(np.sum(np.where(near, near_terms, far_terms))) + 0.5 * LOG2 * (p_only + q_only)
    return max(kl, 0.0), min(max(js, 0.0), LOG2), (max(klr, 0.0) if klr is not None else None)


class NumpyRowKernel:
    """Row-at-a-time float64 kernel on NumPy; one instance per thread (it owns scratch buffers).

    Each row is processed in column chunks of :attr:`CHUNK` values so the float64 temporaries
    stay in the core's cache; only ``e^a`` and ``e^b`` are kept row-wide (the mixture term needs
    ``s_x / s_y`` first).  Memory: two float64 rows plus a few chunks.
    """

    name = "numpy"
    CHUNK = 32768

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        c = min(self.CHUNK, vocab)
        self._a = np.empty(c, dtype=np.float64)
        self._b = np.empty(c, dtype=np.float64)
        self._d = np.empty(c, dtype=np.float64)
        self._ea = np.empty(vocab, dtype=np.float64)
        self._eb = np.empty(vocab, dtype=np.float64)
        self._gt = np.empty(vocab, dtype=np.bool_)

    def block(self, x: np.ndarray, y: np.ndarray, next_tokens: np.ndarray,
              reverse: bool = False) -> RowStats:
        """Figures for rows of ``x`` (reference) and ``y`` (candidate), float32 ``[rows, vocab]``;
        ``next_tokens[i]`` is the token row ``i`` predicts."""
        rows = x.shape[0]
        out = RowStats.empty(rows, reverse)
        sums = np.empty((7, rows), dtype=np.float64)
        tok_ab = np.empty((2, rows), dtype=np.float64)
        with np.errstate(all="ignore"):  # NaN/Inf input: flagged by nonfinite_rows(), not warned
            for i in range(rows):
                self._row(x[i], y[i], int(next_tokens[i]), out, i, reverse, sums, tok_ab)
            f = combine(np, sums[0], sums[1], sums[2], sums[3], sums[4], sums[5],
                        sums[6] if reverse else None)
            self.finish(x, y, out, f, tok_ab, reverse)
        return out

    @staticmethod
    def finish(x: np.ndarray, y: np.ndarray, out: RowStats, f: dict[str, np.ndarray],
               tok_ab: np.ndarray, reverse: bool, second_order: np.ndarray | None = None) -> None:
        """Figures from :func:`combine`'s output (the C kernel and score mode's device path finish
        their rows here too); rows whose divergences are too small for the
        first-order forms go to :func:`precise_row`.  ``second_order`` marks rows whose KL and JS
        came from the C kernel's float32 path (relative accuracy FLOAT32_PATH_BOUND however small they are),
        which need the precise path only below :data:`SECOND_ORDER_PRECISE_BELOW` of KL."""
        out.kl[:] = np.maximum(f["kl"], 0.0)
        out.js[:] = np.clip(f["js"], 0.0, LOG2)  # NaN stays NaN (flagged by nonfinite_rows)
        out.ref_top_prob[:] = f["ref_top_prob"]
        out.logp_ref_next[:] = tok_ab[0] - f["lsx"]
        out.logp_cand_next[:] = tok_ab[1] - f["lsy"]
        out.entropy_ref[:] = f["entropy_ref"]
        out.entropy_cand[:] = f["entropy_cand"]
        if reverse:
            assert out.kl_reverse is not None  # RowStats.empty(rows, reverse=True) made it
            out.kl_reverse[:] = np.maximum(f["kl_reverse"], 0.0)
        # KL or JS below PRECISE_BELOW: the precise path (slow: ~6x the fast row); the first-order
        # JS has an absolute error ~5e-15, so it needs JS >= ~1e-8 for 1e-6 relative (JS ~ KL/4)
        tiny = (out.kl < PRECISE_BELOW) | (out.js < PRECISE_BELOW)
        if second_order is not None:
            tiny = np.where(second_order, out.kl < SECOND_ORDER_PRECISE_BELOW, tiny)
        for i in np.flatnonzero(tiny):
            if np.isnan(out.kl[i]) or not np.isfinite(out.js[i]):
                continue
            kl, js, klr = precise_row(np.asarray(x[i]), np.asarray(y[i]), reverse)
            out.kl[i], out.js[i] = kl, min(js, LOG2)
            if reverse and out.kl_reverse is not None:
                out.kl_reverse[i] = klr

    @staticmethod
    def _sums(a: np.ndarray, b: np.ndarray, d: np.ndarray, ea: np.ndarray, eb: np.ndarray,
              reverse: bool) -> tuple[float, float, float, float, float, float]:
        return (float(ea.sum()), float(eb.sum()), float(np.einsum("i,i->", ea, d)),
                float(np.einsum("i,i->", ea, a)), float(np.einsum("i,i->", eb, b)),
                -float(np.einsum("i,i->", eb, d)) if reverse else 0.0)

    @staticmethod
    def _masked_sums(a: np.ndarray, b: np.ndarray, d: np.ndarray, ea: np.ndarray, eb: np.ndarray,
                     reverse: bool) -> tuple[float, float, float, float, float, float]:
        """The sums where probabilities may underflow or tokens be masked (see the module docstring:
        the C kernel's rule): 0 log 0 = 0, and an infinite log-ratio only where the other side is a
        mask (-inf)."""
        ea[a < ZERO_BELOW] = 0.0
        eb[b < ZERO_BELOW] = 0.0
        za, zb = ea == 0.0, eb == 0.0
        ma, mb = np.isneginf(a), np.isneginf(b)  # masks; a finite logit keeps its finite log-ratio
        cx = np.where(za, 0.0, ea * np.where(mb, np.inf, d))
        hx = np.where(za, 0.0, ea * a)
        hy = np.where(zb, 0.0, eb * b)
        cy = float(np.where(zb, 0.0, eb * np.where(ma, np.inf, -d)).sum()) if reverse else 0.0
        return float(ea.sum()), float(eb.sum()), float(cx.sum()), float(hx.sum()), float(hy.sum()), cy

    def _row(self, x: np.ndarray, y: np.ndarray, tok: int, out: RowStats, i: int,
             reverse: bool, sums: np.ndarray, tok_ab: np.ndarray) -> None:
        ax = int(np.argmax(x))
        ay = int(np.argmax(y))
        mx = np.float64(x[ax])
        my = np.float64(y[ay])
        out.argmax_ref[i] = ax
        out.argmax_cand[i] = ay
        out.rank_ref_top[i] = int(np.count_nonzero(np.greater(y, y[ax], out=self._gt)))
        tok_ab[0, i] = np.float64(x[tok]) - mx
        tok_ab[1, i] = np.float64(y[tok]) - my
        underflow = float(x.min()) - mx < UNDERFLOW or float(y.min()) - my < UNDERFLOW
        vocab, step = x.shape[0], self._a.shape[0]
        sx = sy = cx = hx = hy = cy = 0.0
        for s in range(0, vocab, step):
            e = min(s + step, vocab)
            a, b, d = self._a[:e - s], self._b[:e - s], self._d[:e - s]
            ea, eb = self._ea[s:e], self._eb[s:e]
            np.subtract(x[s:e], mx, out=a)  # float32 - float64 -> float64: exact
            np.subtract(y[s:e], my, out=b)
            np.exp(a, out=ea)
            np.exp(b, out=eb)
            np.subtract(a, b, out=d)
            sx_, sy_, cx_, hx_, hy_, cy_ = (self._masked_sums(a, b, d, ea, eb, reverse) if underflow
                                            else self._sums(a, b, d, ea, eb, reverse))
            sx += sx_
            sy += sy_
            cx += cx_
            hx += hx_
            hy += hy_
            cy += cy_
        # n = e^a + e^b s_x/s_y; sum n log n (n log n = 0 where n underflowed to 0)
        ratio = sx / sy
        mlogm = 0.0
        for s in range(0, vocab, step):
            e = min(s + step, vocab)
            n, logn = self._d[:e - s], self._a[:e - s]
            np.multiply(self._eb[s:e], ratio, out=n)
            np.add(n, self._ea[s:e], out=n)
            if underflow:
                np.add(n, TINY, out=logn)
                np.log(logn, out=logn)
            else:
                np.log(n, out=logn)
            mlogm += float(np.einsum("i,i->", n, logn))
        sums[:, i] = (sx, sy, cx, hx, hy, mlogm, cy)


class TorchBlockKernel:
    """The same sums over a 2-D row block with torch (float64), on CUDA or the CPU: host arrays
    in, :func:`kldtui.metrics.score.score_block` on the device."""

    def __init__(self, vocab: int, device: str = "cpu") -> None:
        import torch

        self.torch = torch
        self.vocab = vocab
        self.device = torch.device(device)
        self.name: str = f"torch-{self.device.type}"

    def _on_device(self, rows: Any) -> Any:
        """Host rows copied to the device; rows already a tensor (a replayed block) moved only if
        they are elsewhere."""
        if isinstance(rows, np.ndarray):
            return self.torch.from_numpy(np.ascontiguousarray(rows)).to(self.device, non_blocking=False)
        return rows.to(self.device)

    def block(self, x: np.ndarray, y: np.ndarray, next_tokens: np.ndarray,
              reverse: bool = False) -> RowStats:
        """Rows may be NumPy arrays or torch tensors (a block replayed on the device)."""
        from kldtui.metrics.score import score_block  # the function score mode's hook uses too

        tx = self._on_device(x)
        ty = self._on_device(y)
        torch = self.torch
        tok = torch.from_numpy(np.asarray(next_tokens, dtype=np.int64)).to(self.device)
        return score_block(tx, ty, tok, reverse)
