"""The V1 wrapper (GPUModelRunner._get_prompt_logprobs_dict + the model's compute_logits)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from kldtui.formats.chunks import ERROR_MARKER
from kldtui.hook import vllm_plugin as vp
from tests.fixtures_vllm_plugin import TinyModel, V1Request, V1Runner, v1_original

HIDDEN, VOCAB = 16, 40


@pytest.fixture
def capture(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path / "cap"))
    monkeypatch.setattr(vp, "_writer_rank_cache", None)
    return tmp_path / "cap"


def _runner(prompts):
    runner = V1Runner(TinyModel(HIDDEN, VOCAB), VOCAB)
    for rid, n in prompts.items():
        runner.requests[rid] = V1Request(list(range(n)), 0)
        runner.num_prompt_logprobs[rid] = 1
    return runner


def _step(runner, wrapped, order, seed):
    """One engine step: schedule, run, advance num_computed_tokens as the engine does."""
    sched = runner.schedule(order)
    states = torch.randn(sum(sched.values()) + 5, HIDDEN, generator=torch.Generator().manual_seed(seed))
    out = wrapped(runner, states, sched)
    vp.flush()  # chunks are written by the background writer
    expected = {}
    for rid, n in order:
        req = runner.requests[rid]
        offset = runner.query_start_loc.np[runner.input_batch.req_id_to_index[rid]]
        k = min(n, len(req.prompt_token_ids) - req.num_computed_tokens - 1)
        if k > 0:
            expected[rid] = (req.num_computed_tokens,
                             (states[offset:offset + k] @ runner.model.weight)[:, :VOCAB].numpy())
        req.num_computed_tokens += n
    return out, expected


def test_two_requests_chunked_prefill(capture):
    runner = _runner({"kldtui-a-0-1": 600, "kldtui-b-0-2": 300})
    wrapped = vp.wrap_v1(v1_original)
    rows = {"kldtui-a-0-1": [], "kldtui-b-0-2": []}
    steps = [[("kldtui-a-0-1", 256)], [("kldtui-a-0-1", 168), ("kldtui-b-0-2", 88)],
             [("kldtui-a-0-1", 176), ("kldtui-b-0-2", 80)], [("kldtui-b-0-2", 132)]]
    for seed, order in enumerate(steps):
        out, expected = _step(runner, wrapped, order, seed)
        for rid, (start, logits) in expected.items():
            rows[rid].append((start, logits))
            assert out[rid].shape[0] == logits.shape[0]
        assert "compute_logits" not in vars(runner.model)  # the model is restored after each step
    for rid, n in (("kldtui-a-0-1", 600), ("kldtui-b-0-2", 300)):
        names = sorted(p.name for p in (capture / rid).iterdir())
        starts = [s for s, _ in rows[rid]]
        ends = starts[1:] + [n - 1]
        pairs = zip(starts, ends, strict=True)
        assert names == [f"logits.rows-{s:06d}-{e:06d}.safetensors" for s, e in pairs]
        got = np.concatenate([load_file(capture / rid / f)["logits"] for f in names])
        np.testing.assert_array_equal(got, np.concatenate([x for _, x in rows[rid]]))
        assert got.shape == (n - 1, VOCAB)  # padded vocab columns dropped


def test_warmup_dummy_and_plain_requests(capture):
    runner = _runner({"_dummy_req_0": 50})
    runner.requests["plain"] = V1Request(list(range(20)), 0)  # no prompt_logprobs: not in the dict
    wrapped = vp.wrap_v1(v1_original)
    _step(runner, wrapped, [("_dummy_req_0", 50), ("plain", 20)], 0)
    assert not capture.exists()


def test_inactive_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_KLD_CAPTURE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    runner = _runner({"kldtui-r": 30})
    seen = []

    def original(self, hidden_states, num_scheduled_tokens):
        seen.append(self.model.compute_logits)
        return v1_original(self, hidden_states, num_scheduled_tokens)

    _step(runner, vp.wrap_v1(original), [("kldtui-r", 30)], 0)
    assert seen == [runner.model.compute_logits]  # the model's own bound method
    assert list(tmp_path.iterdir()) == []


def test_save_failure_is_logged_and_marked(capture, caplog):
    runner = _runner({"kldtui-r": 30})
    (capture / "kldtui-r").mkdir(parents=True)
    (capture / "kldtui-r" / "logits.rows-000000-000029.safetensors").write_bytes(b"x")
    out, expected = _step(runner, vp.wrap_v1(v1_original), [("kldtui-r", 30)], 0)
    assert set(out) == {"kldtui-r"}
    assert "already exists" in (capture / "kldtui-r" / ERROR_MARKER).read_text()
    assert any("kldtui capture" in r.getMessage() for r in caplog.records)


def test_a_request_vllm_skipped_is_marked_failed(capture):
    runner = _runner({"kldtui-r": 30})

    def original_without_logits(self, hidden_states, num_scheduled_tokens):
        return {}

    _step(runner, vp.wrap_v1(original_without_logits), [("kldtui-r", 30)], 0)
    assert "computed no prompt logits" in (capture / "kldtui-r" / ERROR_MARKER).read_text()
