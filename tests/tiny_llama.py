"""A tiny Llama that vLLM's CPU build serves, built locally with transformers (no Hub access),
and everything ``examples/tiny-vllm-cpu.toml`` needs (``scripts/make_tiny_vllm_example.sh``).

It lives with the tests, not in the package: its users are the real-vLLM tests, the benchmarks
and the example script, all in a checkout; no kldtui command needs it, and it needs the test
extras (torch, transformers, tokenizers). Builders of other tiny models from the same weights
(a GGUF for llama.cpp) belong next to it.

Shape (see docs/VLLM_CPU.md): hidden 128, 4 heads (head_dim 32, which the CPU attention
kernels accept), intermediate 256, 2 layers, vocabulary 4096, ``initializer_range=0.5`` for
peaked distributions. Weights are deterministic for a given seed. :func:`build_tiny_llama`
saves the float32 model; :func:`build_bf16_copy` saves the same weights rounded to bfloat16
(a ready "quantized candidate", mean KL about 0.06 against the float32 one).

:func:`build_example` also trains a small byte-level BPE tokenizer (``tokenizers``) into the
float32 model's folder and writes a small text corpus with its SOURCES.toml, so ``kldtui
prepare`` can make a suite for the model without any download.

torch and transformers are imported lazily: importing this module costs nothing.

    python -m tests.tiny_llama DIR     # from a checkout: DIR/tiny-llama, tiny-llama-bf16,
                                       # tiny-corpus.jsonl, tiny-sources.toml
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

VOCAB_SIZE = 4096
HIDDEN_SIZE = 128
NUM_HEADS = 4
INTERMEDIATE_SIZE = 256
NUM_LAYERS = 2
MAX_POSITIONS = 4096
DEFAULT_SEED = 1234
_STAMP = "kldtui-tiny-llama.json"


def tiny_llama_config(vocab_size: int = VOCAB_SIZE) -> Any:
    """The ``transformers.LlamaConfig`` of the tiny model."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=0.5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        dtype="float32",
    )


def _stamp(seed: int, dtype: str, vocab_size: int) -> dict[str, Any]:
    return {"seed": seed, "dtype": dtype, "vocab_size": vocab_size, "hidden_size": HIDDEN_SIZE,
            "num_layers": NUM_LAYERS, "num_heads": NUM_HEADS}


def _is_built(out_dir: Path, stamp: dict[str, Any]) -> bool:
    try:
        found = json.loads((out_dir / _STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return found == stamp and (out_dir / "config.json").is_file() and any(
        out_dir.glob("*.safetensors"))


def _save(model: Any, out_dir: Path, stamp: dict[str, Any]) -> Path:
    """Save into a temporary sibling folder, then rename it into place (never half-written)."""
    import shutil
    import tempfile

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / _STAMP).write_text(json.dumps(stamp, sort_keys=True) + "\n", encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def load_tiny_llama(model_dir: str | os.PathLike[str]) -> Any:
    """Load a saved tiny model with transformers, in float32, in eval mode."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(Path(model_dir), dtype=torch.float32)
    model.eval()
    return model


def build_tiny_llama(out_dir: str | os.PathLike[str], seed: int = DEFAULT_SEED,
                     vocab_size: int = VOCAB_SIZE) -> Path:
    """Build (or reuse, if already built with the same seed) the float32 tiny Llama."""
    import torch
    from transformers import LlamaForCausalLM

    out = Path(out_dir)
    stamp = _stamp(seed, "float32", vocab_size)
    if _is_built(out, stamp):
        return out
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config(vocab_size)).to(torch.float32)  # type: ignore[arg-type]
    model.eval()
    return _save(model, out, stamp)


def build_bf16_copy(src_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Save the float32 model's weights rounded to bfloat16 (config dtype ``bfloat16``)."""
    import torch

    src = Path(src_dir)
    out = Path(out_dir)
    base = json.loads((src / _STAMP).read_text(encoding="utf-8"))
    stamp = {**base, "dtype": "bfloat16"}
    if _is_built(out, stamp):
        return out
    model = load_tiny_llama(src).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    return _save(model, out, stamp)


def reference_logits(model_dir: str | os.PathLike[str], token_ids: list[int]) -> Any:
    """Transformers' float32 logits ``[len(token_ids), vocab]`` for one prompt (a torch tensor)."""
    import torch

    model = load_tiny_llama(model_dir)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([token_ids], dtype=torch.long))
    return out.logits[0].to(torch.float32)


# --- the newcomer's example: tokenizer, corpus, sources ----------------------------------------

TOKENIZER_VOCAB = 1024  # below the model's 4096: every id the tokenizer makes is a valid input
_WORDS = ("the a one two model reads writes token window score reference candidate value list "
          "table river city north south light heavy small large quick slow data file path open close "
          "for while if else return print sum range len import class def with from into over under "
          "because after before again never always often early late report measure").split()


def corpus_rows(n: int = 800, seed: int = 7) -> list[dict[str, str]]:
    """Deterministic prose-like rows (a few blank ones, as wikitext has)."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if i % 9 == 0:
            rows.append({"text": ""})
            continue
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 24))]
        rows.append({"text": " ".join(words).capitalize() + "."})
    return rows


def build_tokenizer(out_dir: str | os.PathLike[str], rows: list[dict[str, str]] | None = None,
                    vocab_size: int = TOKENIZER_VOCAB) -> Path:
    """Train a byte-level BPE on the corpus and save it as a transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    if (out / "tokenizer.json").is_file():
        return out
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([r["text"] for r in (rows or corpus_rows()) if r["text"]], trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(out)
    return out


SOURCES_TOML = """# The tiny example's text source (kldtui prepare --sources): one local JSON Lines file.
[[source]]
domain = "prose"
dataset = "tiny-corpus.jsonl"
split = "train"
windows = 3
text_field = "text"
"""


def build_example(root: str | os.PathLike[str]) -> dict[str, Path]:
    """The tiny float32 model (with its tokenizer), its bf16 copy, the corpus and SOURCES.toml."""
    import json

    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    f32 = build_tiny_llama(out / "tiny-llama")
    bf16 = build_bf16_copy(f32, out / "tiny-llama-bf16")
    rows = corpus_rows()
    build_tokenizer(f32, rows)
    corpus = out / "tiny-corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sources = out / "tiny-sources.toml"
    sources.write_text(SOURCES_TOML, encoding="utf-8")
    return {"model": f32, "candidate": bf16, "corpus": corpus, "sources": sources}


if __name__ == "__main__":
    import sys

    built = build_example(sys.argv[1] if len(sys.argv) > 1 else ".")
    for what, path in built.items():
        print(f"{what}: {path}")
