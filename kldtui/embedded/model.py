"""A tiny deterministic "transformer-ish" language model in NumPy for the embedded server.

Token embeddings, two causal mixing layers (each mixes a token with an exponentially decayed
running average of what came before it), a layer norm and an output projection. Weights come
from a seeded generator, so the same ``seed`` gives bit-identical logits on a machine. The
output scale is chosen so distributions are peaked (entropy around 1-2 nats), like a real model.

``perturb`` imitates a quantized checkpoint: every weight matrix is rounded to a uniform grid
whose step is ``perturb`` times the matrix's standard deviation (round-to-nearest, as a simple
weight-only quantizer does). ``perturb=0`` is the reference; a small value (0.05-0.3) gives a
mean KL against it of roughly 0.003-0.15 (0.1 gives about 0.03).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

HIDDEN = 64
DECAYS = (0.85, 0.6)
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


class TinyModel:
    """``hidden(ids)`` gives per-position states; ``logits(states)`` the raw next-token logits."""

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
        self.out = (rng.standard_normal((d, vocab_size)) * scale).astype(f32)
        self.bias = (rng.standard_normal(vocab_size) * 0.5).astype(f32)
        if perturb > 0:
            self.embed = _quantize(self.embed, perturb)
            self.mix1 = _quantize(self.mix1, perturb)
            self.mix2 = _quantize(self.mix2, perturb)
            self.out = _quantize(self.out, perturb)
            self.bias = _quantize(self.bias, perturb)

    def hidden(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """States ``[len(ids), hidden]``; row ``t`` depends on tokens ``0..t`` only."""
        idx = np.asarray(ids, dtype=np.int64)
        x = self.embed[idx]
        h = np.tanh(np.concatenate([x, _decayed_average(x, DECAYS[0])], axis=1) @ self.mix1)
        h = h + np.tanh(np.concatenate([h, _decayed_average(h, DECAYS[1])], axis=1) @ self.mix2)
        h = h - h.mean(axis=1, keepdims=True)
        h = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + np.float32(1e-5))
        states: np.ndarray = h.astype(np.float32, copy=False)
        return states

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
            logits = (h @ self.out + self.bias).astype(np.float64)
            if temperature <= 0:
                token = int(np.argmax(logits))
            else:
                cdf = np.cumsum(np.exp((logits - logits.max()) / temperature))
                token = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")),
                            self.vocab_size - 1)
            out.append(token)
        return out

    def logits(self, states: np.ndarray) -> np.ndarray:
        """Raw float32 logits ``[rows, vocab_size]`` for the given states."""
        out: np.ndarray = states @ self.out
        out += self.bias
        return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32 (as vLLM computes prompt logprobs)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return result
