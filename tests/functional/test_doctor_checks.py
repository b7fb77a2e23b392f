"""kldtui doctor: checks computed from a probe of vLLM's Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kldtui.cli.main import main
from kldtui.hook.patching import PATCH_MARKER, PATCHED_FILES
from kldtui.servers.vllm_probe import probe
from kldtui.workflow.doctor import Check, collect, format_checks


def _by_name(checks):
    return {c.name: c for c in checks}


def _fake_vllm_tree(root: Path, patched: bool) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("__version__ = '0.32.0'\n")
    for rel in PATCHED_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(PATCH_MARKER + "\n" if patched else "x = 1\n")
    return root


def test_without_vllm_it_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    found = probe(import_vllm=False)
    if found.get("vllm_found"):  # this interpreter has vLLM: the vLLM venv runs this test too
        return
    checks = _by_name(collect(import_vllm=False))
    assert checks["kldtui"].ok
    assert not checks["vLLM"].ok and "--python" in checks["vLLM"].detail
    assert "capture hook" not in checks


def test_patched_source_tree_is_reported(tmp_path, monkeypatch):
    root = _fake_vllm_tree(tmp_path / "site", patched=True)
    monkeypatch.setenv("PYTHONPATH", str(root))
    checks = _by_name(collect(import_vllm=False, capture_dir=str(tmp_path / "cap")))
    assert checks["vLLM"].ok and str(root / "vllm") in checks["vLLM"].detail
    assert checks["capture patch"].ok
    assert checks["capture hook"].ok and "via patch" in checks["capture hook"].detail
    assert "V1 GPUModelRunner" in checks["capture hook"].detail
    assert str(tmp_path) in checks["capture disk"].detail


def test_unpatched_tree_without_plugin_fails(tmp_path, monkeypatch):
    root = _fake_vllm_tree(tmp_path / "site", patched=False)
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")  # kldtui's plugin is filtered out
    checks = _by_name(collect(import_vllm=False))
    assert not checks["capture patch"].ok and not checks["capture patch"].required
    assert not checks["capture plugin"].ok and "VLLM_PLUGINS" in checks["capture plugin"].detail
    assert not checks["capture hook"].ok and checks["capture hook"].required


def test_bad_python_is_a_failed_check(tmp_path):
    checks = _by_name(collect(python=str(tmp_path / "no-python")))
    assert not checks["vLLM Python"].ok


def test_command_output_and_exit_code(tmp_path, monkeypatch, capsys):
    root = _fake_vllm_tree(tmp_path / "site", patched=True)
    monkeypatch.setenv("PYTHONPATH", str(root))
    assert main(["doctor", "--quick", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= {"kldtui", "vLLM", "capture hook", "capture disk"}
    assert main(["doctor", "--python", sys.executable + "-missing"]) == 1
    assert "[FAIL] vLLM Python" in capsys.readouterr().out


def test_format_marks_required_and_optional():
    text = format_checks([Check("a", True, "fine"), Check("bb", False, "broken"),
                          Check("c", False, "fyi", required=False)])
    assert text.splitlines() == ["[ok  ] a   fine", "[FAIL] bb  broken", "[note] c   fyi"]


def test_gpu_sync_check_error_is_explained():
    from kldtui.servers.vllm_probe import hook_checks

    base = {"plugins": ["kldtui_capture=kldtui.hook.vllm_plugin:register"], "present": {"v1": True},
            "targets": {"v1": "ok"}, "gpu_sync_check_env": "error"}
    ok = _by_name(hook_checks({**base, "gpu_sync_allowed": True}))["GPU sync check"]
    assert ok.ok and "gpu_sync_allowed()" in ok.detail and "pinned" in ok.detail
    bad = _by_name(hook_checks({**base, "gpu_sync_allowed": False}))["GPU sync check"]
    assert not bad.ok and "unset VLLM_GPU_SYNC_CHECK" in bad.detail
    assert "GPU sync check" not in _by_name(hook_checks({**base, "gpu_sync_check_env": None}))


def test_settings_in_effect_are_listed_and_a_bad_one_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KLDTUI_SCORE_ROWS", "64")
    monkeypatch.setenv("HF_TOKEN", "hf_not_for_the_screen")
    check = _by_name(collect(python=str(tmp_path / "no-python")))["settings"]
    assert check.ok and "KLDTUI_SCORE_ROWS=64" in check.detail and "HF_TOKEN=(set)" in check.detail
    assert "hf_not_for_the_screen" not in check.detail
    monkeypatch.setenv("KLDTUI_CAPTURE_QUEUE", "lots")
    check = _by_name(collect(python=str(tmp_path / "no-python")))["settings"]
    assert not check.ok and check.required and "KLDTUI_CAPTURE_QUEUE='lots'" in check.detail
