"""A tiny deterministic "transformer-ish" language model in NumPy for the embedded server.

Token embeddings, two causal mixing layers (each mixes a token with an exponentially decayed
running average of what came before it), a final norm and an LM head. Weights come from a seeded
generator, so the same ``seed`` gives bit-identical logits on a machine. The output scale is
chosen so distributions are peaked (entropy around 1-2 nats), like a real model.

The logits are literally ``h · Wᵀ``, as a served model's head computes them, so a hidden-state
capture of this model replays exactly (issue 22, docs/REPLAY.md): :meth:`TinyModel.hidden` gives
the final normalized states ``h`` ``[rows, HIDDEN + 1]`` and :attr:`TinyModel.head` is ``W``
``[vocab, HIDDEN + 1]``. Both hold BF16 values (a BF16 checkpoint's head, a BF16 server's final
states), widened to float32; the last column of ``h`` is a constant 1 whose head column is the
output bias, so no bias is added outside the product. The product is accumulated in float32 (the
logits stay float32, as a float32 head returns them).

``perturb`` imitates a quantized checkpoint: every weight matrix is rounded to a uniform grid
whose step is ``perturb`` times the matrix's standard deviation (round-to-nearest, as a simple
weight-only quantizer does). ``perturb=0`` is the reference; a small value (0.05-0.3) gives a
mean KL against it of roughly 0.003-0.15 (0.1 gives about 0.03).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from kldtui.metrics.replay import round_bf16_inplace

HIDDEN = 64
DECAYS = (0.85, 0.6)
HEAD_TENSOR_KEY = "head"  # the head's name in the manifest: TinyModel.head, not a checkpoint's tensor
OUTPUT_SCALE = 6.0  # logit standard deviation at a 4096-token vocabulary (entropy ~1.5 nats)


def output_scale(vocab_size: int) -> float:
    """Logit scale growing with log(vocab) so larger vocabularies stay about as peaked."""
    return OUTPUT_SCALE * math.sqrt(math.log(vocab_size) / math.log(4096))


def _quantize(w: np.ndarray, perturb: float) -> np.ndarray:
    if perturb <= 0:
        return w
    step = perturb * float(w.std())
    return (np.round(w / step) * step).astype(w.dtype)


def _decayed_average(x: np.ndarray, decay: float) -> np.ndarray:
    """Causal ``s_t = decay * s_{t-1} + (1 - decay) * x_t`` (row ``t`` sees rows ``0..t``)."""
    out = np.empty_like(x)
    state = np.zeros(x.shape[1], dtype=x.dtype)
    keep = x.dtype.type(decay)
    take = x.dtype.type(1.0 - decay)
    for t in range(x.shape[0]):
        state = keep * state + take * x[t]
        out[t] = state
    return out


def _bf16_values(x: np.ndarray) -> np.ndarray:
    """``x`` (float32) rounded to BF16 values, kept as float32."""
    return round_bf16_inplace(np.array(x, dtype=np.float32, copy=True))


class TinyModel:
    """``hidden(ids)`` gives the final normalized states ``h``; ``logits(h)`` the raw next-token
    logits ``h · Wᵀ`` with ``W = head``."""

    def __init__(self, vocab_size: int = 4096, seed: int = 0, perturb: float = 0.0,
                 hidden: int = HIDDEN) -> None:
        if vocab_size < 2:
            raise ValueError("vocab_size must be at least 2")
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.perturb = float(perturb)
        d = hidden
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.embed = rng.standard_normal((vocab_size, d)).astype(f32)
        self.mix1 = (rng.standard_normal((2 * d, d)) / math.sqrt(2 * d)).astype(f32)
        self.mix2 = (rng.standard_normal((2 * d, d)) / math.sqrt(2 * d)).astype(f32)
        scale = output_scale(vocab_size) / math.sqrt(d)
        out = (rng.standard_normal((d, vocab_size)) * scale).astype(f32)
        bias = (rng.standard_normal(vocab_size) * 0.5).astype(f32)
        if perturb > 0:
            self.embed = _quantize(self.embed, perturb)
            self.mix1 = _quantize(self.mix1, perturb)
            self.mix2 = _quantize(self.mix2, perturb)
            out = _quantize(out, perturb)
            bias = _quantize(bias, perturb)
        # the LM head [vocab, HIDDEN + 1]: the output projection and, in the last column, the bias
        self.head = _bf16_values(np.concatenate([out.T, bias[:, None]], axis=1))

    @property
    def hidden_size(self) -> int:
        """The width of the final states (the head's second dimension)."""
        return int(self.head.shape[1])

    def _final(self, h: np.ndarray) -> np.ndarray:
        """Normalized states ``[rows, HIDDEN]`` -> final states: BF16 values and the bias unit."""
        out = np.empty((h.shape[0], h.shape[1] + 1), dtype=np.float32)
        out[:, :-1] = h
        round_bf16_inplace(out[:, :-1])
        out[:, -1] = 1.0
        return out

    def hidden(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Final states ``[len(ids), hidden_size]``; row ``t`` depends on tokens ``0..t`` only."""
        idx = np.asarray(ids, dtype=np.int64)
        x = self.embed[idx]
        h = np.tanh(np.concatenate([x, _decayed_average(x, DECAYS[0])], axis=1) @ self.mix1)
        h = h + np.tanh(np.concatenate([h, _decayed_average(h, DECAYS[1])], axis=1) @ self.mix2)
        h = h - h.mean(axis=1, keepdims=True)
        h = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + np.float32(1e-5))
        return self._final(h.astype(np.float32, copy=False))

    def sample(self, num_tokens: int, seed: int = 0, temperature: float = 1.0,
               first_token: int | None = None) -> list[int]:
        """Token ids drawn from the model itself (incremental, O(n)): text the model finds likely,
        so a suite built from it has realistic next-token probabilities and perplexity."""
        rng = np.random.default_rng(seed)
        d = self.embed.shape[1]
        s1: np.ndarray = np.zeros(d, dtype=np.float32)
        s2: np.ndarray = np.zeros(d, dtype=np.float32)
        token = int(rng.integers(self.vocab_size)) if first_token is None else int(first_token)
        out = [token]
        while len(out) < num_tokens:
            x = self.embed[token]
            s1 = np.float32(DECAYS[0]) * s1 + np.float32(1.0 - DECAYS[0]) * x
            h = np.tanh(np.concatenate([x, s1]) @ self.mix1)
            s2 = np.float32(DECAYS[1]) * s2 + np.float32(1.0 - DECAYS[1]) * h
            h = h + np.tanh(np.concatenate([h, s2]) @ self.mix2)
            h = h - h.mean()
            h = h / np.sqrt((h * h).mean() + np.float32(1e-5))
            logits = self.logits(self._final(h[None, :].astype(np.float32)))[0].astype(np.float64)
            if temperature <= 0:
                token = int(np.argmax(logits))
            else:
                cdf = np.cumsum(np.exp((logits - logits.max()) / temperature))
                token = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")),
                            self.vocab_size - 1)
            out.append(token)
        return out

    def write_head(self, folder: str | os.PathLike[str]) -> None:
        """The LM head in the published ``lm-head/`` layout, into the new folder ``folder``: what
        ``kldtui export-head`` writes from a checkpoint, for a model that has none. Written beside it
        and renamed into place once whole, so a stopped write leaves no half head to be taken for one."""
        from kldtui.formats import fidelity as fid
        from kldtui.formats.atomic import write_new_folder

        # refused onto a folder that holds anything: never overwritten
        write_new_folder(folder, lambda staging: fid.write_lm_head(
            staging, self.head, checkpoint_tensor_key=HEAD_TENSOR_KEY,
            kind="LM head of kldtui's built-in model (no checkpoint)",
            extra={"model_seed": self.seed, "perturb": self.perturb}))

    def state_noise_scale(self, logit_noise: float) -> float:
        """The standard deviation of run-to-run noise on the final states (the bias unit aside) that
        moves each logit by ``logit_noise``, as a root mean square over the vocabulary: noise ``e`` on
        the states moves logit ``i`` by ``W_i · e``, whose standard deviation is ``|W_i|`` times the
        noise's, so this is ``logit_noise`` over the head rows' root-mean-square norm. Chosen so the
        KL it causes is that of ``logit_noise`` on each logit: on the demo's model (vocabulary 2048,
        perturb 0.05), 0.05 of either gives a mean KL of 7.2e-4."""
        rows = self.head[:, :-1]
        return logit_noise / math.sqrt(float(np.einsum("ij,ij->", rows, rows)) / rows.shape[0])

    def noisy_states(self, states: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """``states`` with ``noise`` ``[rows, hidden_size - 1]`` added to all but the bias unit (a
        constant 1), rounded to BF16 values again, as a BF16 server's states are."""
        out = np.array(states, dtype=np.float32, copy=True)
        out[:, :-1] += noise
        round_bf16_inplace(out[:, :-1])
        return out

    def logits(self, states: np.ndarray) -> np.ndarray:
        """Raw float32 logits ``[rows, vocab_size]`` of final states: ``states · headᵀ``."""
        out: np.ndarray = np.asarray(states, dtype=np.float32) @ self.head.T
        return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32 (as vLLM computes prompt logprobs)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return result
