"""Drivers that call the plugin's wrappers exactly the way vLLM 0.32/0.33 calls the wrapped methods.

They were written from the vLLM 0.32.0 / 0.33.0 sources (identical in both releases):

* V2: ``vllm/v1/worker/gpu/model_runner.py`` calls
  ``self.prompt_logprobs_worker.compute_prompt_logprobs(self.model.compute_logits, hidden_states,
  input_batch, all_token_ids, num_computed_tokens, prompt_lens)`` and
  ``compute_prompt_logprobs_with_chunking`` calls ``logits_fn`` on
  ``hidden_states[: input_batch.num_tokens][start : start + 1024]`` for consecutive starts.
* V1: ``GPUModelRunner._get_prompt_logprobs_dict(hidden_states, num_scheduled_tokens)`` calls
  ``self.model.compute_logits(hidden_states[offset : offset + num_logits])`` once per request,
  ``offset = self.query_start_loc.np[req_idx]``,
  ``num_logits = min(num_tokens, len(prompt) - num_computed_tokens - 1)``.

The real classes are exercised in tests/vllm/ (needs the vLLM venv); these drivers let the
default run cover the same calling pattern without vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

CHUNK_SIZE = 1024  # vllm/v1/worker/gpu/sample/prompt_logprob.py


def v2_original(self: Any, logits_fn: Any, hidden_states: torch.Tensor, input_batch: Any,
                all_token_ids: Any, num_computed_tokens: Any, prompt_lens: np.ndarray) -> dict:
    """The slicing and row selection of PromptLogprobsWorker.compute_prompt_logprobs."""
    idx = input_batch.idx_mapping_np
    needs = self.uses_prompt_logprobs[idx]
    if not np.any(needs):
        return {}
    lens = prompt_lens[idx]
    computed = input_batch.num_computed_prefill_tokens_np
    needs = needs & (computed < lens) & ~(lens < input_batch.prefill_len_np)
    if not np.any(needs):
        return {}
    states = hidden_states[: input_batch.num_tokens]
    logits_parts = [logits_fn(states[s:s + CHUNK_SIZE]) for s in range(0, states.shape[0], CHUNK_SIZE)]
    all_logits = torch.cat(logits_parts)
    chunked = computed + input_batch.num_scheduled_tokens < lens
    out = {}
    for i, req_id in enumerate(input_batch.req_ids):
        if not needs[i]:
            continue
        start, end = input_batch.query_start_loc_np[i], input_batch.query_start_loc_np[i + 1]
        if not chunked[i]:
            end -= 1
        if start < end:
            out[req_id] = torch.log_softmax(all_logits[start:end], -1)
    return out


@dataclass
class V2Request:
    req_id: str
    prompt_len: int
    computed: int  # num_computed_prefill_tokens
    scheduled: int
    wants: bool = True
    prefill_len: int | None = None  # > prompt_len: resumed after preemption


def v2_batch(requests: list[V2Request], state_order: list[int], hidden: int = 16,
             pad_rows: int = 8, seed: int = 0) -> tuple[Any, Any, torch.Tensor, np.ndarray]:
    """(worker, input_batch, hidden_states, prompt_lens) with the attribute names vLLM uses."""
    max_reqs = max(state_order) + 1
    worker = SimpleNamespace(uses_prompt_logprobs=np.zeros(max_reqs, dtype=bool))
    prompt_lens = np.zeros(max_reqs, dtype=np.int32)
    for req, state in zip(requests, state_order, strict=True):
        worker.uses_prompt_logprobs[state] = req.wants
        prompt_lens[state] = req.prompt_len
    sched = np.array([r.scheduled for r in requests], dtype=np.int32)
    qsl = np.concatenate([[0], np.cumsum(sched)]).astype(np.int32)
    num_tokens = int(qsl[-1])
    batch = SimpleNamespace(
        req_ids=[r.req_id for r in requests],
        idx_mapping_np=np.array(state_order, dtype=np.int32),
        num_scheduled_tokens=sched,
        num_tokens=num_tokens,
        query_start_loc_np=qsl,
        num_computed_prefill_tokens_np=np.array([r.computed for r in requests], dtype=np.int32),
        prefill_len_np=np.array([r.prefill_len or r.prompt_len for r in requests], dtype=np.int32),
    )
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(num_tokens + pad_rows, hidden, generator=gen)
    return worker, batch, states, prompt_lens


@dataclass
class V1Request:
    prompt_token_ids: list[int]
    num_computed_tokens: int


class TinyModel(torch.nn.Module):
    """compute_logits returns ``vocab + pad`` columns (like an LM head padded for TP)."""

    def __init__(self, hidden: int, vocab: int, pad: int = 3, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(hidden, vocab + pad, generator=gen),
                                         requires_grad=False)
        self.calls = 0

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return hidden_states @ self.weight


@dataclass
class V1Runner:
    """The attributes of GPUModelRunner that _get_prompt_logprobs_dict reads."""

    model: TinyModel
    vocab: int
    requests: dict[str, V1Request] = field(default_factory=dict)
    num_prompt_logprobs: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.input_batch = SimpleNamespace(req_id_to_index={})
        self.query_start_loc = SimpleNamespace(np=np.zeros(0, dtype=np.int32))
        self.model_config = SimpleNamespace(get_vocab_size=lambda: self.vocab)

    def schedule(self, order: list[tuple[str, int]]) -> dict[str, int]:
        """Lay out the batch: (req_id, scheduled tokens) in batch order."""
        self.input_batch.req_id_to_index = {rid: i for i, (rid, _) in enumerate(order)}
        self.query_start_loc.np = np.concatenate([[0], np.cumsum([n for _, n in order])]).astype(np.int32)
        return dict(order)


def v1_original(self: V1Runner, hidden_states: torch.Tensor, num_scheduled_tokens: dict[str, int]) -> dict:
    """The loop of GPUModelRunner._get_prompt_logprobs_dict (scores only)."""
    out = {}
    for req_id in list(self.num_prompt_logprobs):
        num_tokens = num_scheduled_tokens.get(req_id)
        if num_tokens is None:
            continue
        request = self.requests[req_id]
        start_idx = request.num_computed_tokens
        num_logits = min(num_tokens, len(request.prompt_token_ids) - (start_idx + 1))
        if num_logits <= 0:
            continue
        offset = self.query_start_loc.np[self.input_batch.req_id_to_index[req_id]].item()
        logits = self.model.compute_logits(hidden_states[offset:offset + num_logits])
        out[req_id] = torch.log_softmax(logits[:, : self.vocab], -1)
    return out


def rank_layout(dp: int, pp: int, pcp: int, tp: int) -> dict[str, list[list[int]]]:
    """Group ranks per dimension, built as vLLM's initialize_model_parallel does
    (layout DP x PP x PCP x TP; a dimension's groups: move it last, reshape to 2-D)."""
    all_ranks = torch.arange(dp * pp * pcp * tp).reshape(-1, dp, pp, pcp, tp)
    return {
        "tp": [x.tolist() for x in all_ranks.view(-1, tp).unbind(0)],
        "pcp": [x.tolist() for x in all_ranks.transpose(3, 4).reshape(-1, pcp).unbind(0)],
        "pp": [x.tolist() for x in all_ranks.transpose(2, 4).reshape(-1, pp).unbind(0)],
        "dp": [x.tolist() for x in all_ranks.transpose(1, 4).reshape(-1, dp).unbind(0)],
    }


def group_of(groups: list[list[int]], rank: int) -> list[int]:
    return next(g for g in groups if rank in g)
