"""Hidden mode (issue 22): what the server saves (the final normalized hidden states, BF16, and for
the replay check's sample the live logits too), through the vLLM hook's V1 and V2 wrappers and a
mode sink; the embedded model whose logits are literally ``h · Wᵀ``; the replay check's sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from kldtui.capture_modes import HIDDEN, MODE_ENV, ChunkRows
from kldtui.capture_modes.hidden import HIDDEN_CHUNKS
from kldtui.embedded.model import TinyModel
from kldtui.errors import BadInput
from kldtui.formats.chunks import (
    ERROR_MARKER,
    LOGITS_CHUNKS,
    check_chunk_dir,
    request_tag,
    wants_live_logits,
    window_of_request,
)
from kldtui.formats.fidelity import NewContext, write_context_suite
from kldtui.formats.suite_writer import write_suite
from kldtui.hook import vllm_plugin as vp
from kldtui.metrics.replay import NumpyReplay, bf16_to_f32, f32_to_bf16
from tests.fixtures_capture_io import InlineIO
from tests.fixtures_hidden import hidden_state_bits
from tests.fixtures_vllm_plugin import TinyModel as TorchTinyModel
from tests.fixtures_vllm_plugin import V1Request, V1Runner, V2Request, v1_original, v2_batch, v2_original


def _bf16_values(x: np.ndarray) -> np.ndarray:
    return bf16_to_f32(f32_to_bf16(x))


def test_the_embedded_models_logits_are_h_times_w_and_replay_exactly() -> None:
    model = TinyModel(1024, seed=3)
    ids = np.random.default_rng(0).integers(0, 1024, 200)
    h = model.hidden(ids)
    assert h.shape == (200, model.hidden_size) and model.head.shape == (1024, model.hidden_size)
    assert np.array_equal(h[:, -1], np.ones(200, dtype=np.float32))  # the bias unit
    # both hold BF16 values: stored as BF16 they are unchanged
    assert np.array_equal(_bf16_values(h), h) and np.array_equal(_bf16_values(model.head), model.head)
    live = model.logits(h)
    assert np.array_equal(live, h @ model.head.T)
    replayed = NumpyReplay(f32_to_bf16(model.head), chunk=300, output="f32").logits(f32_to_bf16(h))
    np.testing.assert_allclose(replayed, live, rtol=0, atol=1e-5)  # FP32 summation order only


def test_request_tags_ask_for_live_logits_and_keep_their_window() -> None:
    for live in (False, True):
        tag = request_tag("run-live", 12, "0a1b2c3d", live=live)
        for rid in (tag, f"cmpl-{tag}-0-ffffffff", f"cmpl-{tag}"):
            assert window_of_request(rid) == 12 and wants_live_logits(rid) is live
    assert not wants_live_logits("cmpl-abc-live-0-1")


def _suite(tmp_path, n: int = 40):
    rng = np.random.default_rng(1)
    return write_suite(tmp_path / "suite", [("prose", rng.integers(0, 50, n).tolist())])


def test_the_sink_writes_bf16_hidden_chunks_and_for_a_marked_request_the_live_logits(tmp_path) -> None:
    suite = _suite(tmp_path)
    window = suite.windows[0]
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(39, 12)).astype(np.float32)
    logits = rng.normal(size=(39, 53)).astype(np.float32)  # 3 padded vocabulary columns
    io = InlineIO(tmp_path / "cap")
    sink = HIDDEN.server_sink(io, {})
    plain = "cmpl-" + request_tag("r", 0, "00000001")
    marked = "cmpl-" + request_tag("r", 0, "00000002", live=True)
    for rid in (plain, marked):
        pieces = [sink.take(rid, 0, ChunkRows(logits[:20], 50, hidden[:20])),
                  sink.take(rid, 20, ChunkRows(logits[20:], 50, hidden[20:]))]
        assert sink.put(rid, 0, pieces, 50)
        checked = check_chunk_dir(tmp_path / "cap" / rid, window, check_values=True, kind=HIDDEN_CHUNKS)
        assert checked.vocab_size == 50 and checked.names == ["hidden.rows-000000-000039.safetensors"]
        data = hidden_state_bits(checked.chunks[0].path)
        assert data.dtype == np.uint16 and data.shape == (39, 12)
        assert np.array_equal(data, f32_to_bf16(hidden))  # rounded to nearest even once
    assert sorted(p.name for p in (tmp_path / "cap" / plain).iterdir()) == [
        "hidden.rows-000000-000039.safetensors"]
    live = check_chunk_dir(tmp_path / "cap" / marked, window, kind=LOGITS_CHUNKS)
    assert np.array_equal(load_file(live.chunks[0].path)["logits"], logits[:, :50])
    assert io.failed == []


def test_the_sink_fails_a_request_without_hidden_states(tmp_path) -> None:
    io = InlineIO(tmp_path / "cap")
    assert HIDDEN.server_sink(io, {}).save("req", 0, ChunkRows(np.zeros((3, 5), np.float32), 5)) is False
    assert "passed no hidden states" in io.failed[0]
    assert [p.name for p in (tmp_path / "cap" / "req").iterdir()] == [ERROR_MARKER]


def test_a_chunk_of_other_states_or_width_is_refused(tmp_path) -> None:
    from kldtui.formats.chunks import write_kind_chunk

    suite = _suite(tmp_path, 10)
    window = suite.windows[0]
    folder = tmp_path / "cap"
    meta = {"semantic_point": "after_final_rmsnorm_before_lm_head", "vocab_size": "50", "hidden_size": "4"}
    write_kind_chunk(folder, "a", 0, HIDDEN_CHUNKS, np.zeros((5, 4), np.uint16), meta)
    write_kind_chunk(folder, "a", 5, HIDDEN_CHUNKS, np.zeros((4, 6), np.uint16), {**meta, "hidden_size": "6"})
    with pytest.raises(BadInput, match=r"hidden states 6 wide, other chunks are 4"):
        check_chunk_dir(folder / "a", window, kind=HIDDEN_CHUNKS)
    write_kind_chunk(folder, "b", 0, HIDDEN_CHUNKS, np.zeros((9, 4), np.uint16),
                     {**meta, "semantic_point": "before_final_norm"})
    with pytest.raises(BadInput, match=r"semantic_point 'before_final_norm'"):
        check_chunk_dir(folder / "b", window, kind=HIDDEN_CHUNKS)
    nan = np.zeros((9, 4), np.uint16)
    nan[7, 2] = 0x7FC0
    write_kind_chunk(folder, "c", 0, HIDDEN_CHUNKS, nan, meta)
    with pytest.raises(BadInput, match=r"window 000 .*: NaN or Inf in the captured hidden states at rows 7; "
                                       r"capture this context again$"):
        check_chunk_dir(folder / "c", window, kind=HIDDEN_CHUNKS, check_values=True)


def test_torch_states_are_rounded_on_their_device_and_bf16_ones_copied() -> None:
    from kldtui.capture_modes.hidden import source_dtype
    from kldtui.metrics.replay import bf16_host_bits
    from kldtui.metrics.replay import rows_to_bf16 as to_bf16

    x = torch.randn(7, 9)
    y = to_bf16(x)
    assert y.dtype == torch.bfloat16 and source_dtype(x) == "F32"
    assert np.array_equal(bf16_host_bits(y), f32_to_bf16(x.numpy()))
    b = x.to(torch.bfloat16)
    c = to_bf16(b)
    assert source_dtype(b) == "BF16" and c.data_ptr() != b.data_ptr()  # the engine may reuse b's memory
    b.zero_()
    assert np.array_equal(bf16_host_bits(c), f32_to_bf16(x.numpy()))


def test_the_replay_sample_prefers_sentinels_and_spreads_evenly(tmp_path) -> None:
    ctx = [NewContext([1, 2, 3, 4], "s", sentinel=i in (3, 5, 8)) for i in range(10)]
    suite = write_context_suite(tmp_path / "s", ctx)
    assert HIDDEN.live_sample(suite, suite.windows, 2) == {3, 8}
    assert HIDDEN.live_sample(suite, suite.windows, None) == {3, 5, 8}  # all three (default 4)
    assert HIDDEN.live_sample(suite, suite.windows[:3], 2) == {0, 2}  # no sentinel among them
    assert HIDDEN.live_sample(suite, suite.windows, 0) == frozenset()
    plain = write_suite(tmp_path / "w", [("p", [1, 2, 3])] * 9)
    assert HIDDEN.live_sample(plain, plain.windows, 3) == {0, 4, 8}


@pytest.fixture
def capture(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path / "cap"))
    monkeypatch.setenv(MODE_ENV, "hidden")
    monkeypatch.setattr(vp, "_writer_rank_cache", None)
    monkeypatch.setattr(vp, "_sinks", {})
    return tmp_path / "cap"


def test_v1_saves_the_tensor_passed_to_compute_logits(capture) -> None:
    hidden, vocab = 16, 40
    runner = V1Runner(TorchTinyModel(hidden, vocab), vocab)
    rid = "cmpl-" + request_tag("r", 0, "0000000a", live=True) + "-0-1"
    runner.requests[rid] = V1Request(list(range(300)), 0)
    runner.num_prompt_logprobs[rid] = 1
    wrapped = vp.wrap_v1(v1_original)
    states, expected_h, expected_l = [], [], []
    for seed, n in enumerate((256, 44)):
        sched = runner.schedule([(rid, n)])
        s = torch.randn(n + 3, hidden, generator=torch.Generator().manual_seed(seed))
        wrapped(runner, s, sched)
        k = min(n, 299 - runner.requests[rid].num_computed_tokens)
        expected_h.append(s[:k].numpy())
        expected_l.append((s[:k] @ runner.model.weight)[:, :vocab].numpy())
        runner.requests[rid].num_computed_tokens += n
        states.append(s)
    vp.flush()
    names = sorted(p.name for p in (capture / rid).iterdir())
    assert names == ["hidden.rows-000000-000256.safetensors", "hidden.rows-000256-000299.safetensors",
                     "logits.rows-000000-000256.safetensors", "logits.rows-000256-000299.safetensors"]
    got_h = np.concatenate([hidden_state_bits(capture / rid / n) for n in names[:2]])
    assert np.array_equal(got_h, f32_to_bf16(np.concatenate(expected_h)))
    got_l = np.concatenate([load_file(capture / rid / n)["logits"] for n in names[2:]])
    np.testing.assert_array_equal(got_l, np.concatenate(expected_l))


def test_v2_saves_each_requests_rows_of_the_logits_fn_input(capture) -> None:
    reqs = [V2Request("cmpl-" + request_tag("r", 1, "000000bb") + "-0-1", prompt_len=1500, computed=0,
                      scheduled=1500),
            V2Request("cmpl-" + request_tag("r", 2, "000000cc") + "-0-1", prompt_len=3000, computed=1000,
                      scheduled=700)]
    worker, batch, states, prompt_lens = v2_batch(reqs, state_order=[1, 0])
    weight = torch.randn(16, 50, generator=torch.Generator().manual_seed(7))
    wrapped = vp.wrap_v2(v2_original)
    wrapped(worker, lambda x: x @ weight, states, batch, None, None, prompt_lens)
    vp.flush()
    a = capture / reqs[0].req_id
    assert sorted(p.name for p in a.iterdir()) == ["hidden.rows-000000-001499.safetensors"]
    got = hidden_state_bits(a / "hidden.rows-000000-001499.safetensors")
    assert np.array_equal(got, f32_to_bf16(states[:1499].numpy()))  # across the 1,024-row slices
    c = capture / reqs[1].req_id
    got = hidden_state_bits(c / "hidden.rows-001000-001700.safetensors")
    assert np.array_equal(got, f32_to_bf16(states[1500:2200].numpy()))
