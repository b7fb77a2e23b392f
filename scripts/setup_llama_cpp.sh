#!/usr/bin/env bash
# Create (or reuse) the cached llama.cpp environment of the GGUF tests (tests/llama_cpp) and of
# scripts/make_tiny_gguf_example.sh:
#
#   ROOT=~/.cache/kldtui/llama-cpp-$VERSION
#   ROOT/src/llama_cpp_python-$VERSION/   llama-cpp-python's source distribution: its vendored
#                                         llama.cpp has convert_hf_to_gguf.py and tools/perplexity
#   ROOT/$LEVEL/wheel/*.whl               llama-cpp-python built from it, for one instruction-set
#                                         level (x86_64-v3, aarch64)
#   ROOT/$LEVEL/venv/                     that wheel + kldtui (editable) + the converter's and the
#                                         tests' packages
#   ROOT/$LEVEL/bin/llama-perplexity      llama.cpp's own KLD tool (only with --perplexity)
#
# Why a portable build (GGML_NATIVE=OFF) at a named level, not -march=native: (1) the cache may be
# copied to, or shared with, hosts whose CPUs differ (CI machines, GPU hosts: many are AVX2 or
# aarch64); a build for x86-64-v3 (AVX2, FMA, F16C, BMI2: ggml's defaults with GGML_NATIVE off)
# runs on every one of them, so LEVEL names what it needs and the script refuses a host without
# it. (2) A native build on this project's AVX-512/AMX Xeon crashes: ggml's AMX matrix kernel
# (ggml_backend_amx_mul_mat) segfaults on the tiny model's Q8_0 and Q4_0 weights, while the
# x86-64-v3 build computes them. KV cache and logits are float32 either way; the level changes
# speed and the last bits of rounding, not what the tests check.
#
#   scripts/setup_llama_cpp.sh                # prints the venv's python on the last line
#   scripts/setup_llama_cpp.sh --perplexity   # also builds llama-perplexity (cmake, one target)
#   KLDTUI_LLAMA_CPP_ROOT=DIR, KLDTUI_LLAMA_CPP_VERSION=X.Y.Z override the defaults.
# Idempotent and safe to run concurrently (one flock per ROOT); fails (exit 1) when anything
# cannot be installed or built, never leaving a half-built venv marked healthy.
set -euo pipefail

VERSION="${KLDTUI_LLAMA_CPP_VERSION:-0.3.36}"
ROOT="${KLDTUI_LLAMA_CPP_ROOT:-$HOME/.cache/kldtui/llama-cpp-$VERSION}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY_BASE="${KLDTUI_LLAMA_CPP_BASE_PYTHON:-python3.11}"
WANT_PERPLEXITY=0
[[ "${1:-}" == "--perplexity" ]] && WANT_PERPLEXITY=1

log() { echo "setup_llama_cpp: $*" >&2; }

level() {  # the instruction-set level this host runs, and the ggml flags that build for it
    case "$(uname -m)" in
        x86_64)
            local flags
            flags=" $(grep -m1 -E '^flags[[:space:]]*:' /proc/cpuinfo | cut -d: -f2) "
            for f in avx2 fma f16c bmi2; do
                [[ "$flags" == *" $f "* ]] || { log "this CPU lacks $f: the x86-64-v3 build cannot run here"; exit 1; }
            done
            echo "x86_64-v3";;
        aarch64) echo "aarch64";;
        *) log "unsupported machine $(uname -m)"; exit 1;;
    esac
}
LEVEL="$(level)"
# GGML_NATIVE=OFF: ggml's own defaults then enable SSE4.2/AVX/AVX2/BMI2/FMA/F16C on x86_64 and
# nothing beyond (no AVX-512, no AMX); on aarch64 the compiler's baseline.
GGML_FLAGS="-DGGML_NATIVE=OFF ${KLDTUI_LLAMA_CPP_CMAKE_ARGS:-}"
HERE="$ROOT/$LEVEL"
SRC="$ROOT/src/llama_cpp_python-$VERSION"
VENV="$HERE/venv"
STAMP="$VENV/.kldtui-setup-ok"
PIPLOG="$HERE/pip.log"
# What the converter (convert_hf_to_gguf.py), kldtui and the tests need besides llama-cpp-python.
EXTRA=(numpy gguf "torch==2.13.0" transformers tokenizers safetensors sentencepiece protobuf
       textual rich httpx huggingface_hub pytest pytest-timeout)

mkdir -p "$HERE"
exec 9>"$ROOT.lock"
flock 9

pip_q() {  # pip in the venv, quiet: its output goes to $PIPLOG and is shown only when it fails
    if ! "$VENV/bin/python" -m pip "$@" >>"$PIPLOG" 2>&1; then
        tail -n 40 "$PIPLOG" >&2
        log "pip $* failed (full log: $PIPLOG)"
        return 1
    fi
}

# 1. the source distribution (the converter and llama.cpp's sources come from it)
if [[ ! -f "$SRC/vendor/llama.cpp/convert_hf_to_gguf.py" ]]; then
    log "fetching llama-cpp-python $VERSION's source distribution"
    tmp="$(mktemp -d "$ROOT/.src.XXXXXX")"
    "$PY_BASE" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" \
        >&2 || { rm -rf "$tmp"; log "cannot download llama-cpp-python==$VERSION"; exit 1; }
    mkdir -p "$ROOT/src"
    tar -xzf "$tmp"/llama_cpp_python-"$VERSION".tar.gz -C "$tmp"
    rm -rf "$SRC"
    mv "$tmp/llama_cpp_python-$VERSION" "$SRC"
    rm -rf "$tmp"
fi

# 2. the wheel, built once per CPU key (about 7.5 CPU-minutes)
WHEEL="$(ls "$HERE"/wheel/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
if [[ -z "$WHEEL" ]]; then
    log "building llama-cpp-python $VERSION for $LEVEL; this takes 5-15 minutes"
    rm -rf "$HERE/wheel.tmp"
    CMAKE_ARGS="$GGML_FLAGS" \
        "$PY_BASE" -m pip wheel -q --no-deps "$SRC" -w "$HERE/wheel.tmp" >>"$PIPLOG" 2>&1 \
        || { tail -n 40 "$PIPLOG" >&2; log "the wheel build failed (log: $PIPLOG)"; exit 1; }
    rm -rf "$HERE/wheel" && mv "$HERE/wheel.tmp" "$HERE/wheel"
    WHEEL="$(ls "$HERE"/wheel/llama_cpp_python-"$VERSION"-*.whl | head -n 1)"
fi

# 3. the venv
healthy() {
    [[ -x "$VENV/bin/python" && -f "$STAMP" ]] || return 1
    "$VENV/bin/python" - "$VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
assert md.version("llama_cpp_python") == sys.argv[1]
import llama_cpp, gguf, torch, transformers, numpy, safetensors, httpx, pytest, pytest_timeout  # noqa: F401
llama_cpp.llama_backend_init()
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
    log "reusing $VENV (llama-cpp-python $VERSION, $LEVEL)"
else
    log "building $VENV"
    rm -rf "$VENV"
    : > "$PIPLOG"
    "$PY_BASE" -m venv "$VENV"
    pip_q install --upgrade pip
    pip_q install "$WHEEL"
    pip_q install "${EXTRA[@]}"
    pip_q install -e "$REPO"   # with its dependencies, as pyproject.toml names them
    date -u +%FT%TZ > "$STAMP"
    healthy || { rm -f "$STAMP"; log "the new venv at $VENV fails its health check (log: $PIPLOG)"; exit 1; }
fi
if ! kldtui_points_here; then
    log "pointing kldtui in $VENV at $REPO"
    pip_q install -e "$REPO"
    kldtui_points_here || { log "kldtui in $VENV does not import from $REPO"; exit 1; }
fi

# 4. llama-perplexity (only its target and what it links: ggml, llama, llama-common)
if [[ "$WANT_PERPLEXITY" == 1 && ! -x "$HERE/bin/llama-perplexity" ]]; then
    log "building llama-perplexity from $SRC/vendor/llama.cpp (one target; a few minutes)"
    BUILD="$HERE/perplexity-build"
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        $GGML_FLAGS -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >"$HERE/perplexity-build.log" 2>&1 \
        || { tail -n 30 "$HERE/perplexity-build.log" >&2; log "cmake configure failed"; exit 1; }
    cmake --build "$BUILD" --target llama-perplexity -j "${KLDTUI_BUILD_JOBS:-2}" \
        >>"$HERE/perplexity-build.log" 2>&1 \
        || { tail -n 30 "$HERE/perplexity-build.log" >&2; log "llama-perplexity build failed"; exit 1; }
    mkdir -p "$HERE/bin"
    cp "$(find "$BUILD" -type f -name llama-perplexity -perm -u+x | head -n 1)" "$HERE/bin/llama-perplexity.tmp"
    mv "$HERE/bin/llama-perplexity.tmp" "$HERE/bin/llama-perplexity"
    rm -rf "$BUILD"
fi
echo "$VENV/bin/python"
