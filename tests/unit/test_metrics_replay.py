"""The replay arithmetic (kldtui.metrics.replay) against a float64 replay: BF16 conversions exact,
FP32 accumulation within its bound, BF16 output equal to the correctly rounded float64 logits
except where the float64 value sits within the accumulation error of a rounding boundary, and the
distributions within KL 1e-9 of the correctly rounded ones (docs/REPLAY.md states the measured
figures at the Kimi K3 width)."""

from __future__ import annotations

import numpy as np
import pytest

from kldtui.metrics import replay as rp
from kldtui.metrics.kernels import NumpyRowKernel

torch = pytest.importorskip("torch")


def _data(rows: int = 24, hidden: int = 1024, vocab: int = 5000,
          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    h = rp.f32_to_bf16(rng.standard_normal((rows, hidden)).astype(np.float32))
    w = rp.f32_to_bf16((rng.standard_normal((vocab, hidden)) * 3 / np.sqrt(hidden)).astype(np.float32))
    return h, w


def _bf16_of(x: np.ndarray) -> np.ndarray:
    """float64 values rounded to BF16 through float32 (a double rounding, which differs from the
    direct rounding only for values within 2^-24 relative of a BF16 midpoint: far below the
    FP32 accumulation error this test allows at such points)."""
    return rp.bf16_to_f32(rp.f32_to_bf16(x.astype(np.float32)))


def test_bf16_conversions() -> None:
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.4e38, np.inf, -np.inf, 1e-40], dtype=np.float32)
    bits = rp.f32_to_bf16(x)
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1.0); 1 + 3*2^-8 rounds up to 1 + 2^-6
    np.testing.assert_array_equal(rp.bf16_to_f32(bits)[:4], [1.0, 1.0, 1.015625, -2.5])
    assert np.isinf(rp.bf16_to_f32(bits)[4])  # beyond BF16's range: infinity
    assert rp.bf16_to_f32(bits)[5] == np.inf and rp.bf16_to_f32(bits)[6] == -np.inf
    assert np.isnan(rp.bf16_to_f32(rp.f32_to_bf16(np.array([np.nan], np.float32))))[0]
    t = torch.from_numpy(x[:4]).bfloat16().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits[:4], t)  # torch's own rounding
    y = np.array([1.00390625, 7.3, np.nan], np.float32)
    rounded = rp.round_bf16_inplace(y.copy())
    np.testing.assert_array_equal(rounded[:2], rp.bf16_to_f32(rp.f32_to_bf16(y[:2])))
    assert np.isnan(rounded[2])
    every = np.arange(0, 1 << 16, dtype=np.uint16)
    finite = np.isfinite(rp.bf16_to_f32(every))
    np.testing.assert_array_equal(rp.f32_to_bf16(rp.bf16_to_f32(every))[finite], every[finite])


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_fp32_output_within_the_accumulation_bound(backend: str) -> None:
    h, w = _data()
    exact = rp.replay_float64(h, w)
    got = (rp.NumpyReplay(w, chunk=1500, output="f32").logits(h) if backend == "numpy"
           else rp.TorchReplay(rp.torch_bf16(w), chunk=1500, output="f32").logits(rp.torch_bf16(h)).numpy())
    # |error| <= n * eps32 * sum |h_i w_i| (a worst-case bound for any summation order)
    bound = 1024 * 2.0 ** -24 * (np.abs(rp.bf16_to_f32(h)).astype(np.float64)
                                  @ np.abs(rp.bf16_to_f32(w)).astype(np.float64).T)
    assert np.all(np.abs(got - exact) <= bound)
    assert np.abs(got - exact).max() < 1e-4


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_bf16_output_is_the_rounded_float64_replay(backend: str) -> None:
    h, w = _data()
    exact = rp.replay_float64(h, w)
    got = (rp.NumpyReplay(w, chunk=1234, output="bf16").logits(h) if backend == "numpy"
           else rp.TorchReplay(rp.torch_bf16(w), chunk=1234).logits(rp.torch_bf16(h)).numpy())
    want = _bf16_of(exact)
    differ = got != want
    assert differ.mean() < 1e-3
    # where they differ, the float64 value is within the FP32 accumulation error of a rounding
    # midpoint; everywhere the error is at most half a BF16 step plus the accumulation error
    midpoint = (got[differ].astype(np.float64) + want[differ]) / 2
    assert np.all(np.abs(exact[differ] - midpoint) < 1e-4)
    assert np.all(np.abs(got - exact) <= np.abs(exact) * 2.0 ** -8 + 1e-4)
    # as distributions: KL(correctly rounded || replay) tiny
    stats = NumpyRowKernel(w.shape[0]).block(want, got, np.zeros(h.shape[0], np.int64))
    assert stats.kl.max() < 1e-6


def test_the_widened_fp32_path_is_the_same_arithmetic() -> None:
    """On a CPU without native BF16 GEMMs the chunks are widened to FP32 and the product rounded to
    BF16: the same values as the native path up to the order of the FP32 additions."""
    h, w = _data(rows=16, vocab=3000)
    native = rp.TorchReplay(rp.torch_bf16(w), chunk=700)
    widened = rp.TorchReplay(rp.torch_bf16(w), chunk=700)
    widened.native_bf16 = False
    a = native.logits(rp.torch_bf16(h)).numpy()
    b = widened.logits(rp.torch_bf16(h)).numpy()
    assert (a != b).mean() < 1e-3
    exact = rp.replay_float64(h, w)
    assert np.all(np.abs(b - exact) <= np.abs(exact) * 2.0 ** -8 + 1e-4)


def test_chunking_changes_nothing_beyond_the_accumulation_error() -> None:
    h, w = _data(rows=8, vocab=3000)
    a = rp.TorchReplay(rp.torch_bf16(w), chunk=3000, output="f32").logits(rp.torch_bf16(h)).numpy()
    b = rp.TorchReplay(rp.torch_bf16(w), chunk=7, output="f32").logits(rp.torch_bf16(h)).numpy()
    assert np.abs(a - b).max() < 1e-4
    assert list(rp.chunks(25, 10)) == [(0, 10), (10, 20), (20, 25)]


@pytest.mark.parametrize("output", ["bf16", "f32"])
@pytest.mark.parametrize("native", [True, False])
def test_reused_buffers_change_nothing_between_calls(output: str, native: bool) -> None:
    """The product and widened-head buffers a replay keeps between calls: a call with fewer rows, a
    last chunk shorter than the others, and a call after a larger one give what a fresh replay gives."""
    h, w = _data(rows=9, vocab=250)
    replay = rp.TorchReplay(rp.torch_bf16(w), chunk=100, output=output)
    replay.native_bf16 = native
    for rows in (9, 3, 9, 1):
        got = replay.logits(rp.torch_bf16(h[:rows])).numpy()
        want = rp.TorchReplay(rp.torch_bf16(w), chunk=100, output=output)
        want.native_bf16 = native
        assert np.array_equal(got, want.logits(rp.torch_bf16(h[:rows])).numpy())
    if native and output == "bf16":  # the BF16 GEMM's output: F.linear chunk by chunk, widened exactly
        import torch

        linear = torch.cat([torch.nn.functional.linear(rp.torch_bf16(h), rp.torch_bf16(w[s:s + 100]))
                            for s in range(0, 250, 100)], dim=1).float().numpy()
        assert np.array_equal(replay.logits(rp.torch_bf16(h)).numpy(), linear)


def test_device_memory_statement() -> None:
    _, w = _data(rows=1, vocab=300, hidden=64)
    head = rp.torch_bf16(w)
    resident = rp.TorchReplay(head, chunk=100)
    assert resident.device_bytes(16) == 16 * 300 * 4 + 16 * 100 * 2 + 300 * 64 * 2  # BF16 product
    resident.native_bf16 = False  # a CPU without BF16 matrix instructions: FP32 product, its rounding,
    assert resident.device_bytes(16) == (16 * 300 * 4 + 16 * 100 * (4 + 2) + 100 * 64 * 4  # a wide chunk
                                         + 300 * 64 * 2)
    shape = rp.ReplayShape(rows=2047, vocab=163840, hidden=7168, chunk=10240)
    assert shape.head_bytes == 2_348_810_240  # the published head's payload
    assert shape.flops() == 2 * 2047 * 163840 * 7168
