"""patches/vllm-kld-capture.patch and `kldtui patch`."""

from __future__ import annotations

from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput, KldError
from kldtui.hook.patching import (
    PATCHED_FILES,
    apply_patch,
    patch_file,
    patch_status,
)
from tests.fixtures_patch import VLLM_VENV, check_patch_applies_and_compiles, released_vllm_sources
from tests.paths import REPO


def test_patch_applies_to_released_vllm_0_32_and_compiles(tmp_path):
    site = released_vllm_sources()
    if site is None:
        pytest.skip(f"the vLLM 0.32.0 venv ({VLLM_VENV}) is not set up; the vllm step covers this")
    check_patch_applies_and_compiles(site, tmp_path / "src")


def test_patch_is_a_unified_diff_of_the_two_hooked_files():
    text = patch_file().read_text()
    heads = [line[6:] for line in text.splitlines() if line.startswith("+++ b/")]
    assert heads == list(PATCHED_FILES)
    assert text.count("from kldtui.hook.vllm_plugin import") == 2


def _fake_sources(root: Path, body: str) -> Path:
    for rel in PATCHED_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def test_conflicting_sources_are_left_untouched(tmp_path, capsys):
    src = _fake_sources(tmp_path / "v", "print('not vllm 0.32')\n")
    assert patch_status(src).state == "conflicts"
    assert main(["patch", "--vllm-src", str(src), "--check"]) == 1
    with pytest.raises(KldError, match="nothing was changed"):
        apply_patch(src)
    assert main(["patch", "--vllm-src", str(src)]) == 1
    assert "does not apply" in capsys.readouterr().err
    for rel in PATCHED_FILES:
        assert (src / rel).read_text() == "print('not vllm 0.32')\n"
    left = sorted(p.name for p in src.rglob("*") if p.is_file())
    assert left == sorted(Path(f).name for f in PATCHED_FILES)


def test_not_a_vllm_checkout_is_bad_input(tmp_path, capsys):
    with pytest.raises(BadInput, match="not found"):
        patch_status(tmp_path)
    assert main(["patch", "--vllm-src", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--vllm-src" in err


def test_print_shows_the_patch(capsys):
    assert main(["patch", "--vllm-src", ".", "--print"]) == 0
    assert capsys.readouterr().out == patch_file().read_text()


def test_patch_hands_device_logits_to_save_chunk_which_checks_the_rank_first():
    """The V1 hunk must not copy to the CPU on every rank before save_chunk checks the rank."""
    text = (REPO / "patches" / "vllm-kld-capture.patch").read_text()
    added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert not any(".to(" in line or ".cpu()" in line for line in added)
    assert any(line.strip() == "logits," for line in added)
