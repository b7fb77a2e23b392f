"""Real llama.cpp fixtures: run with the llama.cpp environment's python
(scripts/run_llama_cpp_tests.sh). Everything here fails (never skips) when llama-cpp-python is
missing: the step must prove the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_llama_cpp import require_llama_cpp


@pytest.fixture(scope="session")
def llama_cpp_version() -> str:
    return require_llama_cpp()


@pytest.fixture(scope="session")
def ggufs(tmp_path_factory, llama_cpp_version) -> dict[str, Path]:
    """The tiny Llama (float32, bf16, tokenizer) and its F32, Q8_0 and Q4_0 GGUFs, made by llama.cpp."""
    from tests.tiny_gguf import build_tiny_ggufs

    return build_tiny_ggufs(tmp_path_factory.mktemp("models"))
