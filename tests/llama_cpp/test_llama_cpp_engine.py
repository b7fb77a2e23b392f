"""llama.cpp itself on the tiny model: the GGUFs its converter and quantizer make, read by
kldtui's GGUF reader; the server's model (kldtui.embedded.llama_cpp.GgufModel) gives the logits
of every prompt position, the F32 GGUF's within float32 noise of transformers' (with the F32 KV
cache kldtui uses by default; llama.cpp's default F16 cache moves them by far more)."""

from __future__ import annotations

import numpy as np
import pytest

from kldtui.formats.gguf import read_gguf

pytestmark = pytest.mark.llama_cpp


def test_the_ggufs_are_what_llama_cpp_made(ggufs) -> None:
    import gguf  # llama.cpp's own reader, as a second opinion

    for name, bits in (("f32", 32.0), ("q8_0", 8.5), ("q4_0", 6.0)):
        info = read_gguf(ggufs[name])
        theirs = gguf.GGUFReader(str(ggufs[name]))
        assert info.tensor_bytes == sum(int(t.n_bytes) for t in theirs.tensors)
        assert info.parameters == sum(int(t.n_elements) for t in theirs.tensors)
        assert info.data_offset == theirs.data_offset
        types = {t.name: t.tensor_type.name for t in theirs.tensors}
        assert {t.name: t.type_name for t in info.tensors} == types
        assert info.vocab_size == 4096 and info.architecture == "llama"
        assert info.bits_per_weight == pytest.approx(bits, abs=0.1)
    assert read_gguf(ggufs["q8_0"]).file_type == "Q8_0" and read_gguf(ggufs["q4_0"]).file_type == "Q4_0"


def _mean_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    def lsm(x: np.ndarray) -> np.ndarray:
        y = x.astype(np.float64)
        y -= y.max(axis=1, keepdims=True)
        return y - np.log(np.exp(y).sum(axis=1, keepdims=True))

    p, q = lsm(p_logits), lsm(q_logits)
    return float((np.exp(p) * (p - q)).sum(axis=1).mean())


def test_logits_of_every_position_match_transformers(ggufs) -> None:
    from kldtui.embedded.llama_cpp import KV_TYPES, GgufModel
    from tests.tiny_llama import reference_logits

    ids = [int(i) for i in np.random.default_rng(3).integers(3, 4096, 300)]
    want = reference_logits(ggufs["model"], ids).numpy()
    model = GgufModel(ggufs["f32"], n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                      type_k=KV_TYPES["f32"], type_v=KV_TYPES["f32"])
    assert model.vocab_size == 4096
    run = model.prefill(ids)
    got = np.concatenate([run.logits(0, 256), run.logits(256, 300)])
    assert got.shape == (300, 4096) and got.dtype == np.float32
    # float32 arithmetic in two engines, rounding amplified by the tiny model's large weights
    # (logits of std 5.7): measured mean KL 1e-9 to 1e-8, 99.9 % of |differences| below 0.003, the
    # largest from 0.002 to 0.17 between runs; llama.cpp's default F16 KV cache gives KL 2e-4
    # (one run in six here gave a mean KL of 1.7e-5 on a loaded machine; the same GGUF gave 1.3e-9
    # in every run since: the figures below are printed when it fails, to find which side moved)
    diff = np.abs(got - want)
    kl = _mean_kl(want, got)
    assert kl < 1e-6, (f"mean KL {kl:.3g}; |logit difference| median {np.median(diff):.3g}, 99.9 % "
                       f"{np.quantile(diff, 0.999):.3g}, max {diff.max():.3g} at row "
                       f"{int(np.unravel_index(diff.argmax(), diff.shape)[0])}")
    assert np.quantile(diff, 0.999) < 0.01 and np.median(diff) < 1e-4
    # generation continues from the prompt: the next token's logits are the last row's
    assert np.array_equal(run.next_logits([]), got[-1])
    # a second prompt starts afresh (no cache carried over)
    again = model.prefill(ids[:50]).logits(0, 50)
    assert _mean_kl(want[:50], again) < 1e-6


def test_the_keywords_llama_takes_are_read_from_the_engine() -> None:
    """What a profile's llama_args are held against (kldtui.servers.llama_cpp.llama_keywords): the
    named keywords of this llama-cpp-python's Llama, without its catch-all **kwargs."""
    from kldtui.servers.llama_cpp import llama_keywords, unknown_llama_keywords

    known = llama_keywords()
    assert {"n_ctx", "n_batch", "flash_attn", "type_k", "type_v", "logits_all"} <= set(known)
    assert "kwargs" not in known and "self" not in known
    assert unknown_llama_keywords(["flash_attn", "offload_kqv"], known) is None
    assert unknown_llama_keywords(["flash_atn"], known) == ("'flash_atn' is not a llama_cpp.Llama keyword; "
                                                           "did you mean 'flash_attn'?")
