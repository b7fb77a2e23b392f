"""Device scoring (score mode's per-row statistics): the compare kernels' numbers from torch
tensors in any float dtype, and a compact record per position."""

from __future__ import annotations

import numpy as np
import pytest

from kldtui.metrics import ckernel
from kldtui.metrics.kernels import FIELDS, INT_FIELDS, NumpyRowKernel
from tests.fixtures_compare import peaked_rows, perturb

torch = pytest.importorskip("torch")


def _cpu(vocab: int):
    return ckernel.CRowKernel(vocab) if ckernel.available() else NumpyRowKernel(vocab)


def test_bf16_candidate_scores_like_the_cpu_kernel_on_the_widened_values() -> None:
    from kldtui.metrics.score import score_block

    rng = np.random.default_rng(2)
    vocab = 5000
    x = peaked_rows(rng, 12, vocab)
    y = perturb(rng, x, 0.01, 0.3)
    x[3, :50] = -np.inf  # a shared mask
    y[3, :50] = -np.inf
    y[5, int(np.argmax(x[5]))] = -np.inf  # the candidate masks the reference's top token
    yb = torch.from_numpy(y).to(torch.bfloat16)
    tok = rng.integers(0, vocab, size=12)
    got = score_block(torch.from_numpy(x), yb, torch.from_numpy(tok), reverse=True)
    want = _cpu(vocab).block(x, yb.float().numpy(), tok, reverse=True)
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        if f in INT_FIELDS:
            np.testing.assert_array_equal(a, b, err_msg=f)
        else:  # the CPU kernel's float32 path: 1e-6 relative (KL, JS), 1e-6 absolute (logs, entropies)
            logs = f.startswith(("logp", "entropy"))
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 if logs else 1e-15,
                                       err_msg=f)
    assert got.infinite_kl_rows().tolist() == [5]


def test_records_round_trip() -> None:
    from kldtui.metrics.score import RECORD_DTYPE, from_records, to_records

    rng = np.random.default_rng(3)
    x = peaked_rows(rng, 5, 300)
    y = perturb(rng, x)
    stats = _cpu(300).block(x, y, np.arange(5), reverse=True)
    rec = to_records(stats)
    assert rec.dtype == RECORD_DTYPE and RECORD_DTYPE.itemsize == 76
    back = from_records(rec)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(back, f), getattr(stats, f), err_msg=f)
