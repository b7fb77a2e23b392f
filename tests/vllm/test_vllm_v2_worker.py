"""The plugin's V2 wrapper around vLLM's real PromptLogprobsWorker.compute_prompt_logprobs.

V2 needs Triton on a GPU; here the two Triton kernels the method calls (the target-token gather
and the top-k scoring) are replaced by torch code computing the same thing, and everything else
(slicing the batch into 1,024-row calls of ``logits_fn``, choosing rows, dropping the last row of
a finished prompt, chunked prompts) is vLLM's own code.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kldtui.formats.chunks import WRITERS_DIR
from kldtui.hook import vllm_plugin as vp

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server

VOCAB, HIDDEN = 64, 16


def _torch_kernels(module, monkeypatch):
    import torch
    from vllm.v1.outputs import LogprobsTensors

    def get_prompt_logprobs_token_ids(num_tokens, query_start_loc, idx_mapping, num_computed_tokens,
                                      all_token_ids):
        out = torch.empty(num_tokens, dtype=torch.int64)
        for b in range(idx_mapping.shape[0]):
            state = int(idx_mapping[b])
            qs, qe = int(query_start_loc[b]), int(query_start_loc[b + 1])
            first = int(num_computed_tokens[state]) + 1
            out[qs:qe] = all_token_ids[state, first:first + (qe - qs)]
        return out

    def compute_topk_scores(logits, num_logprobs, sampled_token_ids, logits_mode=False, **_):
        ids = sampled_token_ids.unsqueeze(-1)
        if num_logprobs > 0:
            ids = torch.cat((ids, torch.topk(logits, num_logprobs, dim=-1).indices), dim=1)
        logp = torch.log_softmax(logits.float(), -1)
        picked = logp.gather(-1, sampled_token_ids.unsqueeze(-1))
        ranks = (logp > picked).sum(-1) + 1
        return LogprobsTensors(logprob_token_ids=ids, logprobs=logp.gather(-1, ids),
                               selected_token_ranks=ranks)

    monkeypatch.setattr(module, "get_prompt_logprobs_token_ids", get_prompt_logprobs_token_ids)
    monkeypatch.setattr(module, "compute_topk_scores", compute_topk_scores)


def test_real_v2_worker_with_the_plugin(tmp_path, monkeypatch, vllm_version):
    import torch
    import vllm.v1.worker.gpu.sample.prompt_logprob as module
    from safetensors.torch import load_file
    from vllm.sampling_params import SamplingParams

    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    monkeypatch.setattr(vp, "_registered", {})
    assert vp.install()["v2"] == "plugin"
    _torch_kernels(module, monkeypatch)

    worker = module.PromptLogprobsWorker(8, torch.device("cpu"))
    # (req_id, state index, prompt_len, computed, scheduled, wants prompt logprobs)
    reqs = [("kldtui-A-0-a", 5, 1500, 0, 1500, True), ("kldtui-B-0-b", 2, 100, 0, 100, False),
            ("kldtui-C-0-c", 0, 3000, 1000, 700, True)]
    gen = torch.Generator().manual_seed(3)
    all_token_ids = torch.randint(0, VOCAB, (8, 3100), generator=gen)
    num_computed = torch.zeros(8, dtype=torch.int64)
    prompt_lens = np.zeros(8, dtype=np.int32)
    for rid, state, plen, done, _, wants in reqs:
        worker.add_request(rid, state, SamplingParams(max_tokens=1, prompt_logprobs=1 if wants else None))
        num_computed[state] = done
        prompt_lens[state] = plen
    sched = np.array([r[4] for r in reqs], dtype=np.int32)
    qsl = np.concatenate([[0], np.cumsum(sched)]).astype(np.int32)
    idx = np.array([r[1] for r in reqs], dtype=np.int32)
    batch = SimpleNamespace(
        req_ids=[r[0] for r in reqs], idx_mapping_np=idx, idx_mapping=torch.from_numpy(idx),
        num_scheduled_tokens=sched, num_tokens=int(qsl[-1]), query_start_loc_np=qsl,
        query_start_loc=torch.from_numpy(qsl), num_computed_prefill_tokens_np=np.array([r[3] for r in reqs]),
        prefill_len_np=np.array([r[2] for r in reqs]))
    hidden = torch.randn(int(qsl[-1]) + 16, HIDDEN, generator=gen)  # padded like a CUDA-graph batch
    weight = torch.randn(HIDDEN, VOCAB, generator=gen)
    calls = []

    def compute_logits(h):
        calls.append(int(h.shape[0]))
        return h @ weight

    out = worker.compute_prompt_logprobs(compute_logits, hidden, batch, all_token_ids, num_computed,
                                         prompt_lens)
    vp.flush()  # the chunks are written by the hook's background writer
    assert calls == [1024, 1024, 252]  # vLLM's 1,024-row slices over the whole batch
    assert set(out) == {"kldtui-A-0-a"}  # C is chunked: vLLM holds its rows back until it finishes
    full = hidden[: int(qsl[-1])] @ weight
    a = load_file(tmp_path / "kldtui-A-0-a" / "logits.rows-000000-001499.safetensors")["logits"]
    torch.testing.assert_close(a, full[0:1499], rtol=0, atol=0)
    # the row mapping agrees with vLLM's own result for A: log-softmax at the target token
    targets = all_token_ids[5, 1:1500]
    mine = torch.log_softmax(a, -1)[torch.arange(1499), targets]
    torch.testing.assert_close(mine, out["kldtui-A-0-a"].logprobs[:, 0])
    c = load_file(tmp_path / "kldtui-C-0-c" / "logits.rows-001000-001700.safetensors")["logits"]
    torch.testing.assert_close(c, full[1600:2300], rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [WRITERS_DIR, "kldtui-A-0-a", "kldtui-C-0-c"]
