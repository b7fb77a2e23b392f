"""Per-row statistics from device tensors: the one function behind the compare stage's torch
backend and score mode's hook-side scoring (issue 16), so both produce the same numbers.

:func:`score_block` takes reference and candidate logits as torch tensors ``[rows, vocab]`` on
any device and in any float dtype (float32, bfloat16, float16; widened to float64 before
anything is exponentiated), computes the per-row sums of :mod:`kldtui.metrics.kernels` on that
device in float64, and returns a :class:`~kldtui.metrics.kernels.RowStats`: every per-row figure
the compare stage's report needs.  Rows whose KL or JS is below
:data:`~kldtui.metrics.kernels.PRECISE_BELOW` are recomputed on the CPU with
:func:`~kldtui.metrics.kernels.precise_row` (only those rows are copied off the device).
Device memory: about six float64 copies of the block (``rows x vocab x 8`` bytes each), so a
caller bounds it by the block's rows (e.g. 128 rows of a 163,840 vocabulary: 1 GiB).

:func:`to_records` / :func:`from_records` pack a block's figures into :data:`RECORD_DTYPE`
(76 bytes per position) for score-mode files.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kldtui import settings
from kldtui.metrics.kernels import ZERO_BELOW, NumpyRowKernel, RowKernel, RowStats, combine

RECORD_DTYPE = np.dtype([("kl", "<f8"), ("kl_reverse", "<f8"), ("js", "<f8"), ("ref_top_prob", "<f8"),
                         ("logp_ref_next", "<f8"), ("logp_cand_next", "<f8"), ("entropy_ref", "<f8"),
                         ("entropy_cand", "<f8"), ("argmax_ref", "<i4"), ("argmax_cand", "<i4"),
                         ("rank_ref_top", "<i4")])


class _HostRows:
    """Row ``i`` of a device tensor as a float32 NumPy array, copied only when asked (the
    precise path needs a few rows)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.t[int(i)].float().cpu().numpy(), dtype=np.float32)


def score_block(tx: Any, ty: Any, tok: Any, reverse: bool = False) -> RowStats:
    """Per-row figures of reference rows ``tx`` and candidate rows ``ty`` (torch, same device);
    ``tok[i]`` is the token row ``i`` predicts (int64 tensor on that device)."""
    import torch

    rows = int(tx.shape[0])
    out = RowStats.empty(rows, reverse)
    ax = torch.argmax(tx, dim=1)  # first maximum, like NumPy
    ay = torch.argmax(ty, dim=1)
    y_at_ax = ty.gather(1, ax[:, None])
    rank = (ty > y_at_ax).sum(dim=1)
    a = tx.double()
    a -= a.gather(1, ax[:, None])
    b = ty.double()
    b -= b.gather(1, ay[:, None])
    tok_a = a.gather(1, tok[:, None])[:, 0]
    tok_b = b.gather(1, tok[:, None])[:, 0]
    ea = torch.exp(a)
    eb = torch.exp(b)
    # own terms 0 below ZERO_BELOW; only -inf is a mask (the C kernel's rule, see kernels' docstring)
    ea = torch.where(a < ZERO_BELOW, 0.0, ea)
    eb = torch.where(b < ZERO_BELOW, 0.0, eb)
    za, zb = ea == 0, eb == 0
    ma, mb = torch.isneginf(a), torch.isneginf(b)
    sx = ea.sum(dim=1)
    sy = eb.sum(dim=1)
    d = a - b
    inf = torch.tensor(math.inf, dtype=d.dtype, device=d.device)
    cx = torch.where(za, 0.0, ea * torch.where(mb, inf, d)).sum(dim=1)
    hx = torch.where(za, 0.0, ea * a).sum(dim=1)
    hy = torch.where(zb, 0.0, eb * b).sum(dim=1)
    cy = torch.where(zb, 0.0, eb * torch.where(ma, inf, -d)).sum(dim=1) if reverse else None
    n = ea + eb * (sx / sy)[:, None]
    mlogm = torch.special.xlogy(n, n).sum(dim=1)  # 0 log 0 = 0
    f = combine(torch, sx, sy, cx, hx, hy, mlogm, cy)
    out.argmax_ref[:] = ax.cpu().numpy()
    out.argmax_cand[:] = ay.cpu().numpy()
    out.rank_ref_top[:] = rank.cpu().numpy()
    f_np = {k: v.cpu().numpy() for k, v in f.items()}
    tok_ab = np.stack([tok_a.cpu().numpy(), tok_b.cpu().numpy()])
    with np.errstate(all="ignore"):
        NumpyRowKernel.finish(_HostRows(tx), _HostRows(ty), out, f_np, tok_ab, reverse)  # type: ignore[arg-type]
    return out


def score_rows(x: Any, y: Any, tokens: np.ndarray) -> np.ndarray:
    """Score mode's records (reverse KL included) of float32 reference rows ``x`` (host rows, or a
    torch tensor: a hidden-state reference replayed on the candidate's device) against
    candidate rows ``y``. A torch tensor on an accelerator is scored on its own device
    (:func:`score_block`, ``x`` copied there); CPU rows (a CPU tensor or a NumPy array) with the
    compare stage's C kernel when it is built (``score_block`` on the CPU costs about 20x more;
    ``KLDTUI_SCORE_KERNEL=torch`` forces it for CPU tensors), else NumPy."""
    from kldtui.metrics import ckernel

    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    if hasattr(y, "detach") and hasattr(y, "device"):
        ty = y.detach()
        if ty.device.type != "cpu" or settings.SCORE_KERNEL.get() == "torch":
            import torch

            tx = (x.to(ty.device) if hasattr(x, "detach")  # replayed on the device already
                  else torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(ty.device))
            tok = torch.from_numpy(tokens).to(ty.device)
            return to_records(score_block(tx, ty, tok, reverse=True))
        y = ty.float().numpy()
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    yy = np.ascontiguousarray(y, dtype=np.float32)
    xx = np.ascontiguousarray(x, dtype=np.float32)
    vocab = int(yy.shape[1])
    # the compare stage's CPU rule (kldtui.stages.compare.backends), which this layer cannot import
    kernel: RowKernel = ckernel.CRowKernel(vocab) if ckernel.available() else NumpyRowKernel(vocab)
    return to_records(kernel.block(xx, yy, tokens, reverse=True))


def device_copy(logits: Any, vocab: int) -> tuple[Any, Any]:
    """``logits[:, :vocab]`` copied on its device (a kernel on the current stream, no sync) and an
    event after the copy, made with ``blocking=True``: the thread that waits on it sleeps. Score
    mode's hook keeps the engine's thread to this (device memory: one chunk per queued chunk)."""
    import torch

    copy = logits.detach()[..., :vocab].clone()
    event = torch.cuda.Event(blocking=True)
    event.record()
    return copy, event


def current_device() -> int:
    import torch

    return int(torch.cuda.current_device())


def wait_on_device(index: int, event: Any) -> None:
    """On the thread that scores a :func:`device_copy`: make its device current first (else the
    thread's first CUDA call opens a context on GPU 0, from every rank not on GPU 0), then wait."""
    import torch

    torch.cuda.set_device(index)
    event.synchronize()


def to_records(stats: RowStats) -> np.ndarray:
    """The figures of ``stats`` as one :data:`RECORD_DTYPE` record per row (``kl_reverse`` NaN
    when it was not computed)."""
    rec = np.zeros(len(stats), dtype=RECORD_DTYPE)
    for name in RECORD_DTYPE.names or ():
        v = getattr(stats, name)
        rec[name] = np.nan if v is None else v
    return rec


def from_records(rec: np.ndarray, reverse: bool = True) -> RowStats:
    """Inverse of :func:`to_records`."""
    out = RowStats.empty(int(rec.shape[0]), reverse)
    for name in RECORD_DTYPE.names or ():
        if name == "kl_reverse" and not reverse:
            continue
        getattr(out, name)[:] = rec[name]
    return out


__all__ = ["RECORD_DTYPE", "current_device", "device_copy", "from_records", "score_block", "score_rows",
           "to_records", "wait_on_device"]
