"""The tiny Llama of :mod:`tests.tiny_llama` as GGUF files, made by llama.cpp itself: its own
``convert_hf_to_gguf.py`` (from llama-cpp-python's source distribution, which vendors llama.cpp)
turns the float32 model and its tokenizer into an F32 GGUF, and llama.cpp's quantizer
(``llama_cpp.llama_model_quantize``, the library call behind ``llama-quantize``) makes Q8_0 and
Q4_0 copies of it. Used by the GGUF tests (tests/llama_cpp) and scripts/make_tiny_gguf_example.sh.

Everything runs in the llama.cpp environment of scripts/setup_llama_cpp.sh (llama-cpp-python,
gguf, torch, transformers); :func:`llama_cpp_source` finds the converter there.

The tiny tokenizer is a byte-level BPE trained here, so the converter's table of known
pre-tokenizers (keyed by a hash of how a tokenizer splits a fixed text) cannot know it; the
conversion runs with that one lookup answering "gpt-2" (the byte-level split the tokenizer uses)
for an unknown hash. Nothing else of the converter changes. The tokenizer has 1,024 tokens and
the model 4,096 rows: the converter pads the GGUF vocabulary to 4,096 with ``[PAD...]`` tokens,
so llama.cpp's logits have the model's 4,096 columns, like vLLM's.

    python -m tests.tiny_gguf DIR    # DIR/tiny-llama (built if missing), DIR/tiny-llama-f32.gguf,
                                     # -q8_0.gguf and -q4_0.gguf, DIR/tiny-gguf-sources.toml
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.tiny_llama import SOURCES_TOML, build_example

QUANTS = {"q8_0": 7, "q4_0": 2}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0, LLAMA_FTYPE_MOSTLY_Q4_0

_CONVERT = r"""
import runpy, sys
src = sys.argv[1]
sys.path.insert(0, src)
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:  # the tiny tokenizer's hash is nobody's: it splits like GPT-2
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def llama_cpp_source() -> Path:
    """The vendored llama.cpp of llama-cpp-python's source distribution (setup_llama_cpp.sh)."""
    import llama_cpp

    version = llama_cpp.__version__
    default = Path.home() / ".cache/kldtui" / f"llama-cpp-{version}"
    root = Path(os.environ.get("KLDTUI_LLAMA_CPP_ROOT", default))
    src = root / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(f"{src}/convert_hf_to_gguf.py not found; run scripts/setup_llama_cpp.sh")
    return src


def convert_f32(model_dir: Path, out: Path) -> Path:
    """llama.cpp's converter: the float32 safetensors model + tokenizer -> an F32 GGUF."""
    if out.is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    proc = subprocess.run([sys.executable, "-c", _CONVERT, str(llama_cpp_source()), str(model_dir),
                           "--outfile", str(tmp), "--outtype", "f32"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"convert_hf_to_gguf.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    os.replace(tmp, out)
    return out


_QUANTIZE = r"""
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = int(sys.argv[3])
params.nthread = int(sys.argv[4])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params))
"""


def quantize(src: Path, out: Path, ftype: int, threads: int = 2) -> Path:
    """llama.cpp's quantizer (``llama_model_quantize``) from the F32 GGUF, in a child process
    whose log (a line per tensor) is kept out of the caller's output unless it fails."""
    if out.is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    proc = subprocess.run([sys.executable, "-c", _QUANTIZE, str(src), str(tmp), str(ftype), str(threads)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize({src} -> {out.name}) returned {proc.returncode}:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    os.replace(tmp, out)
    return out


# The GGUF example's suite: 8 windows (enough for verdicts) of 512 tokens (kldtui prepare
# --context-length 512), so llama.cpp's base file scores positions 256..510 of each.
GGUF_SOURCES_TOML = SOURCES_TOML.replace("windows = 3", "windows = 8")


def build_tiny_ggufs(root: str | os.PathLike[str]) -> dict[str, Path]:
    """The tiny example (tests.tiny_llama.build_example) plus its F32, Q8_0 and Q4_0 GGUFs and
    the GGUF example's sources (``tiny-gguf-sources.toml``)."""
    out = Path(root)
    built = build_example(out)
    sources = out / "tiny-gguf-sources.toml"
    sources.write_text(GGUF_SOURCES_TOML, encoding="utf-8")
    built["gguf_sources"] = sources
    f32 = convert_f32(built["model"], out / "tiny-llama-f32.gguf")
    files = {"f32": f32}
    for name, ftype in QUANTS.items():
        files[name] = quantize(f32, out / f"tiny-llama-{name}.gguf", ftype)
    return {**built, **files}


if __name__ == "__main__":
    for what, path in build_tiny_ggufs(sys.argv[1] if len(sys.argv) > 1 else ".").items():
        print(f"{what}: {path}")
