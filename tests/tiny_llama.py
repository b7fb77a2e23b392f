"""The tiny Llama builders live in :mod:`kldtui.workflow.tiny_llama` (the newcomer's vLLM example
uses them too); tests import them from here as before."""

from kldtui.workflow.tiny_llama import (  # noqa: F401
    DEFAULT_SEED,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    MAX_POSITIONS,
    NUM_HEADS,
    NUM_LAYERS,
    VOCAB_SIZE,
    build_bf16_copy,
    build_tiny_llama,
    load_tiny_llama,
    reference_logits,
    tiny_llama_config,
)
