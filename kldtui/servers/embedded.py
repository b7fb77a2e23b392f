"""``kind = "embedded"``: kldtui's built-in CPU server (``python -m kldtui.embedded``) with a tiny
deterministic model: the demo's, and the tests'. No GPU, no download.

Keys (besides the common ``served_model_name``, ``request_timeout``, ``api_key_env`` and the
launched server's ``python``, ``vllm_args`` (appended), ``env``, ``host``, ``port``,
``startup_timeout``)::

    model_seed = 0                 # seed of the model's weights
    vocab_size = 4096
    perturb = 0.0                  # quantization-like rounding step (0: the reference model)
    max_num_batched_tokens = 256
    runtime_noise = 0.0            # run-to-run noise of the logits (standard deviation), like a
                                   # runtime whose kernels are not batch-invariant (0: bit-exact);
                                   # in hidden mode on the hidden states, moving the logits as much
    runtime_seed = 0               # which run: a repeat capture (a campaign's noise model) adds 1

``[reference] capture = "embedded"`` serves the candidate's model unperturbed (the demo's
reference), as ``NAME-reference``, without runtime noise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui import bounds
from kldtui.servers.base import LaunchConfig, LaunchedKind, ServerConfig, fill, inherit

EMBEDDED_MODULE = "kldtui.embedded"


@dataclass(frozen=True)
class EmbeddedConfig(LaunchConfig):
    kind: str = "embedded"
    model_seed: int = 0
    vocab_size: int = 4096
    perturb: float = 0.0
    max_num_batched_tokens: int = 256
    runtime_noise: float = 0.0
    runtime_seed: int = 0


class EmbeddedKind(LaunchedKind):
    name = "embedded"
    summary = "kldtui's built-in CPU server with a tiny deterministic model (the demo)"
    config_type = EmbeddedConfig
    builtin = True
    forbidden = {"model": "kind = 'embedded' serves its built-in model; remove model, or set kind = 'vllm'"}

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        """The launched kind's checks, then the built-in model's values (a negative seed or a
        vocabulary of 10^12 crashed the server; a NaN or negative perturbation gave a KL of 0)."""
        config = super().configure(values, base_dir=base_dir, label=label)
        c: EmbeddedConfig = self.own(config)
        bounds.seed(c.model_seed, f"{label} model_seed", bounds.MAX_EMBEDDED_SEED)
        bounds.whole_in(c.vocab_size, f"{label} vocab_size", 2, bounds.MAX_EMBEDDED_VOCAB,
                        "a vocabulary size")
        bounds.non_negative(c.perturb, f"{label} perturb")
        bounds.whole_in(c.max_num_batched_tokens, f"{label} max_num_batched_tokens", 1, 1 << 24,
                        "a token count")
        bounds.non_negative(c.runtime_noise, f"{label} runtime_noise")
        bounds.seed(c.runtime_seed, f"{label} runtime_seed", bounds.MAX_EMBEDDED_SEED)
        return config

    def repeat_config(self, config: ServerConfig) -> ServerConfig:
        """The built-in model is deterministic: a repeat run is told so by its ``runtime_seed``
        (the same logits again without ``runtime_noise``)."""
        c: EmbeddedConfig = self.own(config)
        seed = c.runtime_seed + 1 if c.runtime_seed < bounds.MAX_EMBEDDED_SEED else 0
        return dataclasses.replace(c, runtime_seed=seed)

    def reference_config(self, candidate: ServerConfig, values: dict[str, Any], *, base_dir: Path,
                         label: str) -> ServerConfig:
        config: ServerConfig = inherit(EmbeddedConfig, candidate, label=label, perturb=0.0, runtime_noise=0.0,
                                       served_model_name=candidate.served_model_name + "-reference")
        return config

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        c: EmbeddedConfig = self.own(config)
        h = c.host if host is None else host
        p = c.port if port is None else port
        values = {"model": "", "host": h, "port": str(p), "served_model_name": c.served_model_name}
        argv = [c.python, "-m", EMBEDDED_MODULE, "--port", str(p), "--host", h,
                "--served-model-name", c.served_model_name, "--model-seed", str(c.model_seed),
                "--vocab-size", str(c.vocab_size), "--perturb", repr(float(c.perturb)),
                "--max-num-batched-tokens", str(c.max_num_batched_tokens), "--max-num-seqs", "1"]
        if c.runtime_noise > 0:
            argv += ["--runtime-noise", repr(float(c.runtime_noise)), "--runtime-seed", str(c.runtime_seed)]
        return argv + [fill(a, values) for a in c.vllm_args]

    def describe(self, config: ServerConfig) -> str:
        return "the embedded server"

    def head_command(self, config: ServerConfig, folder: Path) -> list[str] | None:
        """The built-in model has no checkpoint: the server's own command, told the same model, writes
        its head (``--write-lm-head``) instead of serving."""
        return self.argv(config) + ["--write-lm-head", str(folder)]

    def model_vocab(self, config: ServerConfig) -> int | None:
        vocab: int = self.own(config).vocab_size  # the built-in model is as wide as it is told
        return vocab

    def vocabulary_fix(self, config: ServerConfig, vocab: int) -> str:
        return f"set vocab_size = {vocab}"


KIND = EmbeddedKind()
