"""Real-vLLM fixtures: run with the vLLM venv's python (scripts/run_vllm_tests.sh).

Everything here fails (never skips) when vLLM is missing: the vllm step must prove the hook.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_vllm_server import CONTEXT, require_vllm


@pytest.fixture(scope="session")
def vllm_version() -> str:
    return require_vllm()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, vllm_version) -> Path:
    from tests.tiny_llama import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-f32")


@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    """Three 2,048-token windows with fixed random ids (the vocabulary is 4096)."""
    import numpy as np

    from kldtui.formats.suite_writer import write_suite

    rng = np.random.default_rng(20260101)
    windows = [(d, [int(x) for x in rng.integers(3, 4096, CONTEXT)])
               for d in ("prose", "code", "instruction")]
    return write_suite(tmp_path_factory.mktemp("suite"), windows)


@pytest.fixture(scope="session")
def tp_reference(tmp_path_factory, vllm_version):
    """The tensor-parallel tests' shared start: the tiny float32 Llama, a two-window suite and its
    reference captured at tensor-parallel size 1 (served, captured and finalized into ``ref/``)."""
    from tests.fixtures_vllm_tp import make_tp_reference

    return make_tp_reference(tmp_path_factory.mktemp("tp"))
