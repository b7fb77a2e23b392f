"""NumpyReplay (the torch-free replay) reuses its buffers chunk after chunk, as TorchReplay does:
its figures are bit for bit those of a replay that allocates every intermediate afresh, and one
call allocates a small fixed amount, not a chunk's worth, once its buffers are made."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from kldtui.metrics import replay as rp

HIDDEN, VOCAB, CHUNK = 96, 10_000, 4096  # the last chunk is partial


def _head() -> np.ndarray:
    rng = np.random.default_rng(1)
    return rp.f32_to_bf16((rng.standard_normal((VOCAB, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32))


def _hidden(rows: int, seed: int) -> np.ndarray:
    h = rp.f32_to_bf16(np.random.default_rng(seed).standard_normal((rows, HIDDEN)).astype(np.float32))
    h[1, 3] = 0x7FC0  # a NaN state: its row's logits are NaN, and stay NaN through the rounding
    h[2, 5] = 0x7F80  # an infinite one
    return h


def _fresh(head: np.ndarray, hidden: np.ndarray, output: str) -> np.ndarray:
    """The replay with every intermediate allocated anew per chunk (the arithmetic NumpyReplay had
    before its buffers were reused)."""
    h = rp.bf16_to_f32(hidden)
    out = np.empty((hidden.shape[0], VOCAB), dtype=np.float32)
    for start, stop in rp.chunks(VOCAB, CHUNK):
        product = h @ rp.bf16_to_f32(head[start:stop]).T
        out[:, start:stop] = rp.round_bf16_inplace(product) if output == "bf16" else product
    return out


@pytest.mark.parametrize("output", ["bf16", "f32"])
def test_reused_buffers_give_bit_identical_logits(output: str) -> None:
    head = _head()
    replay = rp.NumpyReplay(head, chunk=CHUNK, output=output)
    with np.errstate(invalid="ignore", over="ignore"):
        for rows, seed in ((48, 2), (17, 3), (48, 4), (64, 5)):  # fewer rows than the buffers, then more
            hidden = _hidden(rows, seed)
            got, want = replay.logits(hidden), _fresh(head, hidden, output)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            assert np.isnan(got[1]).all() and not np.isnan(got[0]).any()


@pytest.mark.parametrize("output", ["bf16", "f32"])
def test_a_call_allocates_a_fixed_small_amount_not_a_chunks_worth(output: str) -> None:
    rows = 64
    replay = rp.NumpyReplay(_head(), chunk=CHUNK, output=output)
    hidden = _hidden(rows, 6)[3:]  # finite rows
    out = replay.new_block(rows - 3)
    replay.logits(hidden, out)  # the buffers are made here
    chunk_product = (rows - 3) * CHUNK * 4
    tracemalloc.start()  # NumPy reports its array allocations to tracemalloc
    try:
        tracemalloc.reset_peak()
        replay.logits(hidden, out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # before the buffers were reused, the BF16 rounding alone allocated 2.25 chunk products per chunk;
    # what is left is NumPy's fixed casting buffer (8,192 elements) and a few views
    assert peak < chunk_product / 8, f"{peak} bytes allocated in one call"
