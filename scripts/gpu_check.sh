#!/usr/bin/env bash
# GPU readiness check (issue 14 item 5): for a GPU machine with torch + CUDA, no vLLM, no network.
# Generates a full-vocabulary window on the GPU, checks the CUDA compare backend against the CPU
# kernel (same tolerances as the tests), times it, writes a bf16 CUDA tensor through the capture
# hook's chunk writer, and times device scoring (score mode's per-row statistics) of a bf16 chunk.
# Under a minute on one GPU; the time limit (GPU_CHECK_TIMEOUT, default 280 s) keeps it under 5.
#   scripts/gpu_check.sh                       # full size on cuda:0
#   scripts/gpu_check.sh --device cpu --rows 32 --vocab 4096   # dry run without a GPU
# Needs only this checkout (kldtui/, benchmarks/gpu_check.py) and a Python with torch and numpy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-}"
if [ -z "$py" ]; then
    if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py="python3"; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec timeout "${GPU_CHECK_TIMEOUT:-280}" "$py" "$root/benchmarks/gpu_check.py" "$@"
