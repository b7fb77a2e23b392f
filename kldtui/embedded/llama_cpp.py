"""``python -m kldtui.embedded.llama_cpp --model FILE.gguf``: the embedded OpenAI-compatible
server (:mod:`kldtui.embedded.server`) running a GGUF file through llama-cpp-python instead of
the tiny model. kldtui launches it for ``[candidate] kind = "llama-cpp"``
(:mod:`kldtui.servers.llama_cpp`).

Everything the capture sees is the embedded server's: the same requests and answers, the same
prefill chunks of ``--max-num-batched-tokens`` rows going through the same chunk writer (logits
mode) or scoring session (score mode: no candidate logits written). The model side:

- the prompt's token ids are evaluated exactly as sent: ``Llama.eval`` takes ids, so nothing is
  re-tokenized and no BOS is added (a suite whose model wants BOS carries it in its tokens);
- ``logits_all``: llama.cpp keeps the logits of every prompt position (float32, the model's
  vocabulary wide: what ``llama_vocab_n_tokens`` says, which is the GGUF's token list);
- the KV cache is float32 by default (``--kv-type f32``): llama.cpp's default F16 cache rounds
  keys and values and moves logits by up to 0.8 on the tiny test model, against 0.0015 with F32
  (the weights' quantization is what is measured, not the cache's); ``--kv-type f16`` gives
  llama.cpp's default;
- ``--n-ctx`` (default 4096; 0: the model's trained context), ``--n-batch``, ``--n-threads``,
  ``--n-threads-batch``, ``--n-gpu-layers`` (offload, with a GPU build of llama-cpp-python),
  ``--seed`` and ``--llama-arg KEY=VALUE`` (any other ``llama_cpp.Llama`` keyword; VALUE is read
  as JSON when it parses, else as a string) pass through to ``llama_cpp.Llama``.

Memory: llama-cpp-python holds ``n_ctx x vocab`` float32 logits (``logits_all``), 2.7 GB for a
4,096-token context and a 163,840-token vocabulary, on top of the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.embedded.__main__ import add_server_arguments, run_server, server_config
from kldtui.embedded.server import NoiseDraw, Prefill
from kldtui.servers.llama_cpp import llama_keywords, unknown_llama_keywords
from kldtui.text import human_bytes

PROG = "kldtui.embedded.llama_cpp"
KV_TYPES = {"f32": 0, "f16": 1}  # ggml_type ids of the KV cache (GGML_TYPE_F32, GGML_TYPE_F16)


class GgufModel:
    """A GGUF model as the server's :class:`~kldtui.embedded.server.PromptModel`."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        import llama_cpp

        self.path = path
        self.llm = llama_cpp.Llama(str(path), logits_all=True, verbose=False, **kwargs)
        self._vocab = int(self.llm.n_vocab())
        self.n_ctx = int(self.llm.n_ctx())

    @property
    def vocab_size(self) -> int:
        return self._vocab

    def prefill(self, prompt: list[int]) -> Prefill:
        if len(prompt) >= self.n_ctx:
            raise ValueError(f"the prompt has {len(prompt)} tokens, the context {self.n_ctx}; raise n_ctx")
        self.llm.reset()
        self.llm.eval(prompt)  # ids as they are: no tokenizer, no BOS
        return _GgufPrefill(self, len(prompt))


class _GgufPrefill:
    def __init__(self, model: GgufModel, n: int) -> None:
        self.model = model
        self.n = n

    def logits(self, start: int, end: int) -> np.ndarray:
        # a copy: the next eval reuses llama-cpp-python's score buffer
        return np.array(self.model.llm.scores[start:end], dtype=np.float32)

    def hidden(self, start: int, end: int) -> np.ndarray | None:
        return None  # llama.cpp gives logits or embeddings, not both from one evaluation

    def with_state_noise(self, start: int, end: int, logit_noise: float,
                         draw: NoiseDraw) -> tuple[np.ndarray, np.ndarray] | None:
        return None  # no hidden states (above)

    def next_logits(self, generated: list[int]) -> np.ndarray:
        llm = self.model.llm
        if generated:
            if self.n + len(generated) >= self.model.n_ctx:
                raise ValueError("generation runs past the context")
            llm.eval(generated[-1:])
        return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)


def llama_value(text: str) -> Any:
    """A ``--llama-arg`` value: JSON when it parses (numbers, true/false, lists), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}",
                                description="kldtui's embedded OpenAI-compatible server running a GGUF "
                                "file through llama-cpp-python, capturing prompt logits like the vLLM hook.")
    p.add_argument("--model", type=Path, required=True, help="the .gguf file")
    p.add_argument("--n-ctx", type=int, default=4096, help="context length (0: the model's trained one)")
    p.add_argument("--n-batch", type=int, default=512)
    p.add_argument("--n-threads", type=int, default=None)
    p.add_argument("--n-threads-batch", type=int, default=None)
    p.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to a GPU (-1: all)")
    p.add_argument("--kv-type", choices=sorted(KV_TYPES), default="f32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--llama-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="any other llama_cpp.Llama keyword (repeatable)")
    add_server_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    kwargs: dict[str, Any] = {"n_ctx": args.n_ctx, "n_batch": args.n_batch, "n_ubatch": args.n_batch,
                              "n_threads": args.n_threads, "n_threads_batch": args.n_threads_batch,
                              "n_gpu_layers": args.n_gpu_layers, "seed": args.seed,
                              "type_k": KV_TYPES[args.kv_type], "type_v": KV_TYPES[args.kv_type]}
    given: list[str] = []
    for item in args.llama_arg:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            print(f"{PROG}: --llama-arg {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        kwargs[key] = llama_value(value)
        given.append(key)
    if not args.model.is_file():
        print(f"{PROG}: {args.model}: GGUF file not found", file=sys.stderr)
        return 2
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        print(f"{PROG}: llama-cpp-python cannot be imported ({exc}); pip install llama-cpp-python "
              "into this interpreter's environment (or scripts/setup_llama_cpp.sh)", file=sys.stderr)
        return 2
    unknown = unknown_llama_keywords(given, llama_keywords())
    if unknown:
        print(f"{PROG}: --llama-arg {unknown}", file=sys.stderr)
        return 2
    try:
        model = GgufModel(args.model, **kwargs)
    except (ValueError, TypeError, OSError) as exc:
        print(f"{PROG}: {args.model}: llama.cpp cannot load it ({exc})", file=sys.stderr)
        return 2
    config = server_config(args, PROG, model=str(args.model), vocab_size=model.vocab_size,
                           max_model_len=model.n_ctx)
    if isinstance(config, int):
        return config
    what = (f"GGUF {args.model} through llama-cpp-python, vocab {model.vocab_size}, n_ctx {model.n_ctx}, "
            f"KV cache {args.kv_type}, n_gpu_layers {args.n_gpu_layers}, logits of every position "
            f"{human_bytes(model.n_ctx * model.vocab_size * 4)}")
    return run_server(args, PROG, config, model, what)


if __name__ == "__main__":
    raise SystemExit(main())
