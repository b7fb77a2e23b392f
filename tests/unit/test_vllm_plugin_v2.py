"""The V2 wrapper (PromptLogprobsWorker.compute_prompt_logprobs) driven as vLLM's V2 runner calls it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from kldtui.formats.chunks import ERROR_MARKER, WRITERS_DIR, sanitize_request_id
from kldtui.hook import vllm_plugin as vp
from tests.fixtures_vllm_plugin import V2Request, v2_batch, v2_original

VOCAB = 50


@pytest.fixture
def capture(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path / "cap"))
    monkeypatch.setattr(vp, "_writer_rank_cache", None)
    return tmp_path / "cap"


def _logits_fn(calls):
    gen = torch.Generator().manual_seed(7)
    weight = torch.randn(16, VOCAB, generator=gen)

    def logits_fn(states):
        calls.append(int(states.shape[0]))
        return states @ weight

    return logits_fn, weight


def _chunks(folder):
    return sorted(p.name for p in folder.iterdir())


def _batch():
    # batch order: A (long, finishes here), B (no prompt logprobs), C (chunked, continues),
    # D (resumed after preemption), E (decoding: prompt already done)
    reqs = [
        V2Request("kldtui-A-0-aa", prompt_len=1500, computed=0, scheduled=1500),
        V2Request("kldtui-B-0-bb", prompt_len=100, computed=0, scheduled=100, wants=False),
        V2Request("kldtui-C-0-cc", prompt_len=3000, computed=1000, scheduled=700),
        V2Request("kldtui-D-0-dd", prompt_len=50, computed=0, scheduled=60, prefill_len=60),
        V2Request("kldtui-E-0-ee", prompt_len=40, computed=40, scheduled=1),
    ]
    return reqs, v2_batch(reqs, state_order=[3, 0, 4, 1, 2])


def test_several_requests_across_the_1024_row_slices(capture):
    reqs, (worker, batch, states, prompt_lens) = _batch()
    calls: list[int] = []
    logits_fn, weight = _logits_fn(calls)
    wrapped = vp.wrap_v2(v2_original)
    out = wrapped(worker, logits_fn, states, batch, None, None, prompt_lens)
    vp.flush()  # chunks are written by the background writer
    # vLLM's result is untouched: same rows, same values as without the hook
    expected = v2_original(worker, _logits_fn([])[0], states, batch, None, None, prompt_lens)
    assert out.keys() == expected.keys() == {"kldtui-A-0-aa", "kldtui-C-0-cc"}
    for key in out:
        torch.testing.assert_close(out[key], expected[key])
    assert calls == [1024, 1024, 313]  # 2361 scheduled rows, sliced as vLLM does
    full = (states[: batch.num_tokens] @ weight).numpy()

    a = capture / sanitize_request_id("kldtui-A-0-aa")
    assert _chunks(a) == ["logits.rows-000000-001499.safetensors"]  # last row dropped, crosses 1024
    np.testing.assert_array_equal(load_file(a / _chunks(a)[0])["logits"], full[0:1499])

    c = capture / "kldtui-C-0-cc"
    assert _chunks(c) == ["logits.rows-001000-001700.safetensors"]  # chunked: keeps every row
    np.testing.assert_array_equal(load_file(c / _chunks(c)[0])["logits"], full[1600:2300])
    assert sorted(p.name for p in capture.iterdir()) == [WRITERS_DIR, "kldtui-A-0-aa", "kldtui-C-0-cc"]
    assert all(not p.name.startswith(".pending") for p in capture.glob("*/*"))  # none left


def test_a_prompt_across_steps_gives_contiguous_chunks(capture):
    calls: list[int] = []
    logits_fn, weight = _logits_fn(calls)
    wrapped = vp.wrap_v2(v2_original)
    prompt_len, done, seen = 2048, 0, []
    for step in (1100, 700, 248):  # a 2,048-token prompt in three steps
        worker, batch, states, lens = v2_batch([V2Request("kldtui-r", prompt_len, done, step)], [0],
                                               seed=done)
        wrapped(worker, logits_fn, states, batch, None, None, lens)
        vp.flush()
        seen.append((states[:step] @ weight).numpy())
        done += step
    names = _chunks(capture / "kldtui-r")
    assert names == ["logits.rows-000000-001100.safetensors", "logits.rows-001100-001800.safetensors",
                     "logits.rows-001800-002047.safetensors"]
    got = np.concatenate([load_file(capture / "kldtui-r" / n)["logits"] for n in names])
    np.testing.assert_array_equal(got, np.concatenate(seen)[:2047])


def test_inactive_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_KLD_CAPTURE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    reqs, (worker, batch, states, prompt_lens) = _batch()
    seen_fns = []

    def original(self, logits_fn, *args):
        seen_fns.append(logits_fn)
        return {"x": 1}

    logits_fn, _ = _logits_fn([])
    assert vp.wrap_v2(original)(worker, logits_fn, states, batch, None, None, prompt_lens) == {"x": 1}
    assert seen_fns == [logits_fn]  # vLLM's own callable, not a wrapper
    assert list(tmp_path.iterdir()) == []


def test_not_the_writer_rank_writes_nothing(capture, monkeypatch):
    monkeypatch.setattr(vp, "_writer_rank_cache", False)
    reqs, (worker, batch, states, prompt_lens) = _batch()
    vp.wrap_v2(v2_original)(worker, _logits_fn([])[0], states, batch, None, None, prompt_lens)
    assert not capture.exists()


def test_save_failure_leaves_marker_and_engine_goes_on(capture):
    (capture / "kldtui-A-0-aa").mkdir(parents=True)
    (capture / "kldtui-A-0-aa" / "logits.rows-000000-001499.safetensors").write_bytes(b"old")
    reqs, (worker, batch, states, prompt_lens) = _batch()
    out = vp.wrap_v2(v2_original)(worker, _logits_fn([])[0], states, batch, None, None, prompt_lens)
    vp.flush()
    assert set(out) == {"kldtui-A-0-aa", "kldtui-C-0-cc"}
    marker = (capture / "kldtui-A-0-aa" / ERROR_MARKER).read_text()
    assert "already exists" in marker and "kldtui-A-0-aa" in marker
    assert (capture / "kldtui-A-0-aa" / "logits.rows-000000-001499.safetensors").read_bytes() == b"old"
    assert _chunks(capture / "kldtui-C-0-cc") == ["logits.rows-001000-001700.safetensors"]


def test_rows_vllm_never_computed_are_a_failure_not_silence(capture):
    reqs, (worker, batch, states, prompt_lens) = _batch()

    def original_skipping_rows(self, logits_fn, hidden_states, *args):
        logits_fn(hidden_states[:1024])  # a vLLM that stopped after the first slice
        return {}

    vp.wrap_v2(original_skipping_rows)(worker, _logits_fn([])[0], states, batch, None, None, prompt_lens)
    assert "saw 1024 of the 1499 rows" in (capture / "kldtui-A-0-aa" / ERROR_MARKER).read_text()
    assert "saw 0 of the 700 rows" in (capture / "kldtui-C-0-cc" / ERROR_MARKER).read_text()
    assert not list(capture.glob("*/logits.*"))
