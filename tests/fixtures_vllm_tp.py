"""Fixtures of the tensor-parallel real-vLLM tests (tests/vllm/test_tp_*.py).

The reference is the tiny float32 Llama captured at tensor-parallel size 1 through kldtui's own
pipeline; the candidate is the same model served at tensor-parallel size 2 (docs/VLLM_CPU.md,
"Tensor parallelism"), which kldtui attaches to (``kind = "attach"``), so one server start serves
several tests. The only difference between the two sides is vLLM's tensor-parallel arithmetic:
the row-parallel layers' all-reduce adds partial sums in another order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_vllm_chain import capture_reference, dump_toml, write_chain_suite, write_profile
from tests.fixtures_vllm_server import SERVED_NAME, TP2_ARGS, TP2_ENV, VllmServer

# What tensor parallelism 2 may change against tensor parallelism 1 (float32 weights and arithmetic),
# measured on vllm-cpu 0.32.0, 2 windows x 2047 rows (docs/VLLM_CPU.md): mean KL 2.0e-11, the largest
# row's KL 1.5e-9, logits within 1.5e-4 absolute (of logits up to about 30), top-1 agreement 1.0.
# The bounds leave a margin over what was seen (500x, 70x, 7x) and stay far below any quantization's
# (the bf16 copy of the same weights: mean KL 0.06).
TP_MEAN_KL = 1e-8
TP_MAX_KL = 1e-7
TP_LOGIT_ATOL = 1e-3


@dataclass
class TpReference:
    root: Path
    model: Path
    suite: Path
    ref_dir: Path


def make_tp_reference(root: Path) -> TpReference:
    from tests.tiny_llama import build_tiny_llama

    model = build_tiny_llama(root / "models" / "tiny-f32")
    suite = write_chain_suite(root / "suite")
    profile = write_profile(root / "reference.toml", model=model, dtype="float32", suite_dir=suite,
                            workdir=root / "work-tp1", run_name="tp1")
    return TpReference(root, model, suite, capture_reference(profile))


def start_tp2(ref: TpReference, name: str, capture_dir: Path, *, env: dict[str, str] | None = None,
              port: int | None = None, max_num_seqs: int = 1) -> VllmServer:
    """A TP=2 server of the float32 model, its capture folder ``capture_dir``, ready."""
    capture_dir.mkdir(parents=True, exist_ok=True)
    server = VllmServer(ref.model, ref.root / f"{name}.log", capture_dir, max_num_seqs, ref.root,
                        extra_args=TP2_ARGS, extra_env={**TP2_ENV, **(env or {})}, port=port)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def attach_profile(ref: TpReference, name: str, server: VllmServer, capture_dir: Path,
                   mode: str = "logits") -> tuple[Path, Path]:
    """A profile that captures the suite through the running ``server`` (kind = "attach")."""
    workdir = ref.root / f"work-{name}"
    doc: dict[str, dict[str, Any]] = {
        "reference": {"local_dir": str(ref.suite)},
        "candidate": {"kind": "attach", "url": server.url, "served_model_name": SERVED_NAME,
                      "server_capture_dir": str(capture_dir), "request_timeout": 300.0},
        "capture": {"mode": mode},
        "run": {"workdir": str(workdir), "run_name": name},
        "compare": {"bootstrap_samples": 1000, "bootstrap_seed": 1, "reverse": True},
    }
    path = ref.root / f"{name}.toml"
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path, workdir


def writer_records(capture_dir: Path) -> list[dict[str, Any]]:
    import json

    folder = capture_dir / ".kldtui-writers"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def process_title(pid: int) -> str:
    """What vLLM named the process (``VLLM::Worker_TP0``; setproctitle rewrites its argv)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "(gone)"


def worker_titles(capture_dir: Path) -> dict[int, str]:
    """The live vLLM worker processes of the server capturing into ``capture_dir`` (by their
    environment; other servers on the machine are not ours): pid -> title."""
    found = {}
    marker = f"VLLM_KLD_CAPTURE_DIR={capture_dir}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        title = process_title(int(pid))
        if not title.startswith("VLLM::Worker"):
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found[int(pid)] = title
    return found


def start_run(profile: Path) -> subprocess.Popen[bytes]:
    """``kldtui run --batch --profile P`` in the background (its output beside the profile)."""
    out = open(profile.with_suffix(".out"), "ab")  # noqa: SIM115 - the child holds it
    return subprocess.Popen([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                            stdout=out, stderr=subprocess.STDOUT, cwd=profile.parent)


def wait_for(condition: Any, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)
