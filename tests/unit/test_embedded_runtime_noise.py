"""The embedded server's run-to-run noise (``--runtime-noise``) in hidden mode: it moves the final
hidden states the server saves (a real runtime's vary from run to run too), drawn from the run's seed,
the prompt and the chunk, so a resumed capture gets the same states and another run other ones; the
logits it answers are the noisy states' own; and it moves the logits about as much as the same noise
on the logits does."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kldtui.capture_modes import HIDDEN
from kldtui.embedded import server
from kldtui.embedded.model import TinyModel, log_softmax
from kldtui.metrics.replay import bf16_to_f32
from tests.fixtures_hidden import hidden_state_bits

VOCAB = 512
SEED = 7
NOISE = 0.05
PROMPT = np.random.default_rng(3).integers(0, VOCAB, 150).tolist()  # chunks 0-64, 64-128, 128-149


def _serve(folder: Path, runtime_seed: int, noise: float = NOISE) -> tuple[np.ndarray, list[float]]:
    """The hidden states a server of that run saves for PROMPT, and the prompt logprobs it answers."""
    engine = server.Engine(server.ServerConfig(
        vocab_size=VOCAB, model_seed=SEED, runtime_noise=noise, runtime_seed=runtime_seed,
        max_num_batched_tokens=64, capture_dir=folder, mode=HIDDEN))
    answer = engine.complete({"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 0}, "req")
    chunks = sorted(folder.rglob("hidden.rows-*.safetensors"), key=lambda p: p.name)
    assert [p.name for p in chunks] == ["hidden.rows-000000-000064.safetensors",
                                        "hidden.rows-000064-000128.safetensors",
                                        "hidden.rows-000128-000149.safetensors"]
    states = bf16_to_f32(np.concatenate([hidden_state_bits(p) for p in chunks]))
    entries = answer["choices"][0]["prompt_logprobs"][1:]
    logprobs = [entry[str(token)]["logprob"] for entry, token in zip(entries, PROMPT[1:], strict=True)]
    return states, logprobs


def test_runtime_noise_moves_the_hidden_states_by_run_and_a_resumed_run_gets_the_same(tmp_path: Path) -> None:
    clean, _ = _serve(tmp_path / "clean", 0, noise=0.0)
    first, logprobs = _serve(tmp_path / "first", 0)
    resumed, again = _serve(tmp_path / "resumed", 0)  # a server started again for the same run
    other, _ = _serve(tmp_path / "other", 1)  # a repeat capture: the next runtime seed
    assert np.array_equal(first, resumed) and logprobs == again
    assert not np.array_equal(first, clean) and not np.array_equal(first, other)
    assert np.array_equal(first[:, -1], clean[:, -1])  # the bias unit stays 1: it is not a state
    model = TinyModel(VOCAB, seed=SEED)
    moved = float(np.abs(first - clean)[:, :-1].mean())  # Gaussian: its scale x sqrt(2 / pi), BF16-rounded
    assert abs(moved / (model.state_noise_scale(NOISE) * np.sqrt(2 / np.pi)) - 1) < 0.2, moved
    # the answered logprobs are the saved states' own: the replay check compares the two
    own = log_softmax(model.logits(first))[np.arange(len(PROMPT) - 1), PROMPT[1:]]
    np.testing.assert_allclose(logprobs, own, rtol=0, atol=1e-4)


def test_noise_on_the_states_moves_the_logits_about_as_much_as_on_the_logits() -> None:
    model = TinyModel(VOCAB, seed=SEED, perturb=0.05)
    states = model.hidden(PROMPT)
    rng = np.random.default_rng(0)
    clean = log_softmax(model.logits(states))
    p = np.exp(clean)

    def kl(logits: np.ndarray) -> float:
        return float((p * (clean - log_softmax(logits))).sum(axis=1).mean())

    on_logits = kl(model.logits(states) + rng.standard_normal((len(PROMPT), VOCAB)).astype(np.float32)
                   * np.float32(NOISE))
    scale = model.state_noise_scale(NOISE)
    noise = rng.standard_normal((len(PROMPT), model.hidden_size - 1)).astype(np.float32) * np.float32(scale)
    on_states = kl(model.logits(model.noisy_states(states, noise)))
    assert 0.5 < on_states / on_logits < 2, (on_states, on_logits)
