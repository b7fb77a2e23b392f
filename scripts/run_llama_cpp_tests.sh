#!/usr/bin/env bash
# The real llama.cpp step: set up (or reuse) the llama-cpp-python environment and llama-perplexity
# (scripts/setup_llama_cpp.sh --perplexity) and the vLLM CPU venv (the GGUF tests rank GGUF quants
# beside a vLLM candidate against a float32 reference captured through vLLM), then run the tests
# marked llama_cpp with the llama.cpp environment's python. Fails, never skips, when either
# engine cannot be installed.
#   scripts/run_llama_cpp_tests.sh [extra pytest args]
#   KLDTUI_LLAMA_CPP_TESTS="tests/llama_cpp/test_llama_cpp_server.py" scripts/run_llama_cpp_tests.sh
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PY="$(scripts/setup_llama_cpp.sh --perplexity | tail -n 1)"
[[ -x "$PY" ]] || { echo "run_llama_cpp_tests: setup did not give a python ($PY)" >&2; exit 1; }
VLLM_PY="$(scripts/setup_vllm_cpu.sh | tail -n 1)"
[[ -x "$VLLM_PY" ]] || { echo "run_llama_cpp_tests: the vLLM setup did not give a python ($VLLM_PY)" >&2; exit 1; }
read -r -a TARGETS <<< "${KLDTUI_LLAMA_CPP_TESTS:-tests/llama_cpp}"
export KLDTUI_VLLM_PYTHON="$VLLM_PY"
# this checkout's kldtui in every process the tests start (servers, python -m kldtui from other
# folders), whichever checkout another run pointed the shared venvs at since
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export KLDTUI_LLAMA_PERPLEXITY="$(dirname "$(dirname "$(dirname "$PY")")")/bin/llama-perplexity"
# a base folder of its own: pytest sessions of other checkouts on this host prune the numbered
# /tmp/pytest-of-USER/pytest-N folders, and a long run's models and logs must not vanish under it
BASE="${TMPDIR:-/tmp}/kldtui-llama-cpp-tests"
rc=0
"$PY" -m pytest -q -m llama_cpp -p no:cacheprovider --basetemp "$BASE" "${TARGETS[@]}" "$@" || rc=$?
# a passing run's models, reports and logs go (about 300 MB); a failing run's stay to be looked at
if [[ $rc -eq 0 ]]; then rm -rf "$BASE"; fi
exit "$rc"
