"""Fixtures of the real-vLLM chain test (tests/vllm/test_vllm_chain.py).

The chain runs through kldtui's own stages the way a user runs them: the reference is served,
captured and finalized into the suite's ``ref/`` with the Pipeline API (what ``kldtui demo``
does for its reference), candidates run as ``kldtui run --batch --profile P`` subprocesses.
Profiles are made from the shipped ``examples/tiny-vllm-cpu.toml`` with only paths, the dtype and
the run name changed, so the example is exercised too.

Everything here runs with the vLLM venv's python (scripts/run_vllm_tests.sh); the servers are
``sys.executable -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.paths import EXAMPLES

EXAMPLE_PROFILE = EXAMPLES / "tiny-vllm-cpu.toml"
CONTEXT = 2048
WINDOWS = ("prose", "code")
SUITE_SEED = 20261129
RUN_TIMEOUT_S = 480.0


# --- models, suite ------------------------------------------------------------------------------

def build_models(root: Path) -> tuple[Path, Path]:
    """The tiny float32 Llama and its bf16 copy under ``root`` (paths name our servers in ps)."""
    from tests.tiny_llama import build_bf16_copy, build_tiny_llama

    f32 = build_tiny_llama(root / "tiny-f32")
    return f32, build_bf16_copy(f32, root / "tiny-bf16")


def write_chain_suite(root: Path) -> Path:
    """Two 2,048-token windows of fixed random ids inside the tiny vocabulary (ids >= 3)."""
    import numpy as np

    from kldtui.formats.suite_writer import write_suite
    from tests.tiny_llama import VOCAB_SIZE

    rng = np.random.default_rng(SUITE_SEED)
    windows = [(domain, [int(x) for x in rng.integers(3, VOCAB_SIZE, CONTEXT)]) for domain in WINDOWS]
    write_suite(root, windows)
    return root


# --- profiles -----------------------------------------------------------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def dump_toml(doc: dict[str, Any]) -> str:
    """A profile's tables as TOML: ``[section]`` per table, ``[[section]]`` per entry of a list of
    tables (a campaign's ``[[candidates]]``)."""
    lines: list[str] = []
    for section, value in doc.items():
        tables, head = (value, f"[[{section}]]") if isinstance(value, list) else ([value], f"[{section}]")
        for table in tables:
            lines.append(head)
            lines += [f"{key} = {_toml_value(v)}" for key, v in table.items()]
            lines.append("")
    return "\n".join(lines)


def write_profile(path: Path, *, model: Path, dtype: str, suite_dir: Path, workdir: Path,
                  run_name: str) -> Path:
    """``examples/tiny-vllm-cpu.toml`` with this test's paths, ``--dtype DTYPE`` and run name."""
    doc = tomllib.loads(EXAMPLE_PROFILE.read_text(encoding="utf-8"))
    doc["reference"] = {"local_dir": str(suite_dir)}  # the chain captures its reference itself
    cand = doc["candidate"]
    cand["model"] = str(model)
    cand["python"] = sys.executable  # the vLLM venv (this test runs in it)
    args = list(cand["vllm_args"])
    assert "--dtype" in args, f"{EXAMPLE_PROFILE}: vllm_args no longer name --dtype"
    args[args.index("--dtype") + 1] = dtype
    cand["vllm_args"] = args
    cand["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    doc["run"]["workdir"] = str(workdir)
    doc["run"]["run_name"] = run_name
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path


# --- running the stages -------------------------------------------------------------------------

def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def capture_reference(profile_path: Path) -> Path:
    """Serve, capture and finalize the profile's model into the suite's ``ref/`` (Pipeline API)."""
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import load_profile

    profile = load_profile(profile_path)
    assert profile.reference.local_dir is not None
    ref_dir = profile.reference.local_dir / "ref"
    events: list[Any] = []
    pipeline = Pipeline(profile, events.append, output_dir=ref_dir, output_kind="reference")
    try:
        pipeline.serve()
        pipeline.capture()
        pipeline.finalize()
    except Exception as exc:  # noqa: BLE001 - any failure fails the test, with the server's log
        pytest.fail(f"reference capture failed: {type(exc).__name__}: {exc}\nserver log:\n"
                    f"{_tail(profile.run.workdir / 'server.log')}")
    finally:
        pipeline.stop_server(reason="reference captured")
    return ref_dir


def kldtui_run_batch(profile_path: Path, workdir: Path) -> dict[str, Any]:
    """``python -m kldtui run --batch --profile P``; return the comparison report it left."""
    log = profile_path.with_suffix(".out")
    with open(log, "wb") as out:
        try:
            proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile",
                                   str(profile_path)], stdout=out, stderr=subprocess.STDOUT,
                                  cwd=profile_path.parent, timeout=RUN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kldtui run --batch took over {RUN_TIMEOUT_S:.0f} s:\n{_tail(log)}\n"
                        f"server log:\n{_tail(workdir / 'server.log')}")
    if proc.returncode != 0:
        pytest.fail(f"kldtui run --batch exited {proc.returncode}:\n{_tail(log)}\n"
                    f"server log:\n{_tail(workdir / 'server.log')}")
    from kldtui.formats.report import load_report

    return load_report(workdir / "comparison.json").to_json()  # the JSON document, validated


# --- left-over servers --------------------------------------------------------------------------

def leftover_servers(root: Path) -> list[str]:
    """Processes of servers started under ``root``: vLLM entry points naming a path under it
    (``pgrep -f vllm.entrypoints``), and any process (engine core, workers) whose environment
    has ``VLLM_KLD_CAPTURE_DIR`` under it. Other sessions' vLLM servers are not ours."""
    mine = str(root).rstrip("/") + "/"
    found: list[str] = []
    pgrep = subprocess.run(["pgrep", "-af", "vllm.entrypoints"], capture_output=True, text=True,
                           check=False)
    found += [line for line in pgrep.stdout.splitlines() if mine in line]
    marker = f"VLLM_KLD_CAPTURE_DIR={mine}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v.startswith(marker) for v in environ.split(b"\0")):
            found.append(f"pid {pid} (capture dir under {root})")
    return sorted(set(found))


# --- transformers' KL ---------------------------------------------------------------------------

def transformers_kl(reference_model: Path, candidate_model: Path, candidate_dtype: str,
                    token_windows: list[list[int]]) -> float:
    """Mean KL(reference || candidate) over rows 0..N-2 of every window, in float64, from
    transformers' logits: the reference in float32, the candidate in ``candidate_dtype``."""
    import torch
    from transformers import LlamaForCausalLM

    def load(path: Path, dtype: torch.dtype) -> Any:
        return LlamaForCausalLM.from_pretrained(path, dtype=dtype).eval()

    ref = load(reference_model, torch.float32)
    cand = load(candidate_model, getattr(torch, candidate_dtype))
    total, count = 0.0, 0
    with torch.no_grad():
        for ids in token_windows:
            x = torch.tensor([ids], dtype=torch.long)
            p = torch.log_softmax(ref(input_ids=x).logits[0, :-1].double(), dim=-1)
            q = torch.log_softmax(cand(input_ids=x).logits[0, :-1].double(), dim=-1)
            total += float((p.exp() * (p - q)).sum(dim=-1).sum())
            count += p.shape[0]
    return total / count
