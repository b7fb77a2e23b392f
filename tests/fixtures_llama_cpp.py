"""Fixtures of the real llama.cpp tests (tests/llama_cpp), run with the llama.cpp environment's
python (scripts/run_llama_cpp_tests.sh): the tiny GGUFs (tests/tiny_gguf.py), a suite, the
example profiles (examples/tiny-gguf*.toml) with this test's paths, and the two other tools the
step provides: the vLLM venv's python (``KLDTUI_VLLM_PYTHON``, for the float32 reference and the
bf16 candidate) and llama.cpp's ``llama-perplexity`` (``KLDTUI_LLAMA_PERPLEXITY``).

Everything here fails (never skips) when an engine is missing: the step must prove them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_vllm_chain import dump_toml
from tests.paths import EXAMPLES

CONTEXT = 512          # llama.cpp's base file scores positions 256..510 of each window
WINDOWS = 8            # enough windows for verdicts
SUITE_SEED = 20261201
RUN_TIMEOUT_S = 600.0


def require_llama_cpp() -> str:
    try:
        import llama_cpp
    except Exception as exc:  # noqa: BLE001 - a broken install fails the test, said plainly
        pytest.fail(f"llama-cpp-python is not importable from {sys.executable} ({type(exc).__name__}: "
                    f"{exc}); run scripts/run_llama_cpp_tests.sh, which installs it")
    return str(llama_cpp.__version__)


def tool(variable: str, what: str) -> Path:
    value = os.environ.get(variable)
    if not value or not Path(value).is_file():
        pytest.fail(f"{variable} does not name {what} ({value!r}); run scripts/run_llama_cpp_tests.sh")
    return Path(value)


def write_suite_of_random_ids(root: Path) -> Path:
    """``WINDOWS`` windows of ``CONTEXT`` fixed random ids inside the tiny vocabulary (ids >= 3)."""
    import numpy as np

    from kldtui.formats.suite_writer import write_suite
    from tests.tiny_llama import VOCAB_SIZE

    rng = np.random.default_rng(SUITE_SEED)
    domains = ("prose", "code")
    write_suite(root, [(domains[i % 2], [int(x) for x in rng.integers(3, VOCAB_SIZE, CONTEXT)])
                       for i in range(WINDOWS)])
    return root


def example_profile(name: str, path: Path, *, suite_dir: Path, workdir: Path, models: dict[str, Path],
                    vllm_python: str | None = None) -> Path:
    """``examples/NAME`` with this test's paths (the models, the suite, the work folder), for a
    ``[candidate]`` profile or each ``[[candidates]]`` table of a campaign."""
    doc = tomllib.loads((EXAMPLES / name).read_text(encoding="utf-8"))
    doc["reference"]["local_dir"] = str(suite_dir)
    if "model" in doc["reference"]:
        doc["reference"]["model"] = str(models["model"])
    tables = doc["candidates"] if "candidates" in doc else [doc["candidate"]]
    for cand in tables:
        key = Path(cand["model"]).name
        cand["model"] = str(models[{"tiny-llama-bf16": "candidate", "tiny-llama-q8_0.gguf": "q8_0",
                                    "tiny-llama-q4_0.gguf": "q4_0"}[key]])
        if cand.get("kind") == "vllm":
            cand["python"] = vllm_python
            cand["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    doc["run"]["workdir"] = str(workdir)
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def kldtui(*args: str, cwd: Path, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m kldtui ARGS`` with this interpreter; the output is returned, failures fail."""
    try:
        proc = subprocess.run([sys.executable, "-m", "kldtui", *args], capture_output=True, text=True,
                              cwd=cwd, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"kldtui {' '.join(args)} took over {timeout:.0f} s:\n{exc.stdout}\n{exc.stderr}")
    return proc


def run_profile(profile: Path, workdir: Path, *, reports: tuple[str, ...] = ("comparison.json",),
                timeout: float = RUN_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """``kldtui run --batch`` of ``profile``; its reports (file name -> JSON) and its output
    (``"stdout"`` -> {"text": ...})."""
    proc = kldtui("run", "--batch", "--profile", str(profile), cwd=profile.parent, timeout=timeout)
    if proc.returncode != 0:
        logs = "\n".join(f"{log}:\n{tail(log)}" for log in sorted(workdir.rglob("server*.log")))
        pytest.fail(f"kldtui run --batch --profile {profile.name} exited {proc.returncode}:\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\nserver logs:\n{logs}")
    from kldtui.formats.report import load_report

    out: dict[str, dict[str, Any]] = {name: load_report(workdir / name).to_json() for name in reports}
    out["stdout"] = {"text": proc.stdout}
    return out


MEAN_KLD = re.compile(r"^Mean\s+KLD:\s+(-?[0-9.]+(?:e[-+]?\d+)?)\s+±\s+([0-9.]+(?:e[-+]?\d+)?)", re.M)


def llama_perplexity_kld(binary: Path, model: Path, base: Path, n_ctx: int, log: Path) -> float:
    """llama.cpp's own mean KLD of ``model`` against the base file, computed as kldtui's llama-cpp
    server computes the candidate: F32 KV cache, flash attention off (llama-cpp-python's default;
    llama-perplexity's ``auto`` turns it on, which moved the tiny Q8_0's KLD from 0.194414 to
    0.194703), one sequence per batch."""
    argv = [str(binary), "-m", str(model), "--kl-divergence-base", str(base), "--kl-divergence",
            "-c", str(n_ctx), "-b", str(n_ctx), "-ub", str(n_ctx), "-ctk", "f32", "-ctv", "f32",
            "-t", "2", "--no-warmup", "-fa", "off"]
    # llama-perplexity prints through a logging thread whose queue is never drained at exit (its
    # logger is allocated and never destroyed), so the last lines are lost whenever that thread
    # lags: on a loaded 2-core machine most runs, when ggml's OpenMP threads spin between graph
    # nodes and starve it. OMP_WAIT_POLICY=PASSIVE lets them sleep (4 runs of 4 kept the Mean KLD
    # line here, against 1 of 3 without); the computation is deterministic, so a run that lost it
    # anyway runs again
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    for _ in range(8):
        with open(log, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False,
                                  env=env)
        found = MEAN_KLD.search(log.read_text(errors="replace"))
        if proc.returncode != 0 or found:
            break
    if proc.returncode != 0 or not found:
        pytest.fail(f"llama-perplexity exited {proc.returncode} without a Mean KLD line:\n{tail(log)}")
    return float(found.group(1))
