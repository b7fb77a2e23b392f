#!/usr/bin/env bash
# The first run on a GPU host (issues 14 and 21): one prepared script, one line per check and a
# summary. A full-vocabulary window on the GPU, the CUDA compare backend against the CPU kernel
# (same tolerances as the tests), a bf16 CUDA tensor through the capture hook's chunk writer, device
# scoring of a bf16 chunk; then a bf16 chunk with a padded vocabulary staged under torch's and vLLM's
# sync checks at "error" with its source overwritten by NaN right after staging (the file must stay
# bit-equal), score mode's time per chunk, device memory peak and precise-row fraction (on real rows
# with --reference SUITE/ref/logits_000.safetensors), the compare backend kldtui picks while a server
# runs, and, where a vLLM GPU build is installed in this Python, a tiny model served with the V2
# runner and prefix caching, hit by two concurrent smoke requests. No network needed.
# A few minutes on one GPU; the time limit (GPU_CHECK_TIMEOUT, default 600 s) keeps it under 10.
#   scripts/gpu_check.sh                       # full size on cuda:0
#   scripts/gpu_check.sh --reference SUITE/ref/logits_000.safetensors   # score mode on real rows
#   scripts/gpu_check.sh --device cpu --rows 32 --vocab 4096   # every step that can run without a GPU
# Needs only this checkout (kldtui/, benchmarks/gpu_check.py and measure.py) and a Python with torch
# and numpy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-}"
if [ -z "$py" ]; then
    if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py="python3"; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec timeout "${GPU_CHECK_TIMEOUT:-600}" "$py" "$root/benchmarks/gpu_check.py" "$@"
