"""scripts/gpu_check.sh, dry-run on the CPU: every step runs and the summary says OK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_dry_run_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_TIMEOUT": "250"}
    proc = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--rows", "24", "--vocab", "3000",
                           "--check-rows", "24", "--block", "8", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "gpu_check: OK"
    summary = json.loads(next(ln for ln in lines if ln.startswith("summary: "))[len("summary: "):])
    assert summary["agreement"]["ok"] and summary["agreement"]["infinite_kl_rows"] == [2]
    assert summary["chunk"]["ok"] and Path(summary["chunk"]["path"]).exists()
    assert summary["compare_gb_per_s"] > 0
    from kldtui.metrics.score import RECORD_DTYPE

    assert summary["score"]["ok"] and summary["score"]["bytes_per_position"] == RECORD_DTYPE.itemsize == 76
    steps = [ln.split(" ", 1)[0] for ln in lines if ln[:1].isdigit()]
    assert steps == [str(n) for n in range(1, 10)]  # one line per check
    assert summary["staging"]["ok"] and summary["staging"]["padded_to"] == 3064
    assert summary["score_chunk"]["ok"] and 0 <= summary["score_chunk"]["precise_fraction"] <= 1
    assert summary["backend_choice"]["ok"] and "with_server" in summary["backend_choice"]
    assert "skipped" in summary["vllm"]  # no vLLM GPU build here: said, not failed
    assert any(ln.startswith("9 ") and "skip (" in ln for ln in lines)
