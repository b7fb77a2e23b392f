"""Fixtures shared by the functional tests (commands and the pipeline end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_demo import run_uninterrupted


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo work folder after one uninterrupted ``kldtui demo --batch``: read only, so the resume
    and kill tests share one run."""
    return run_uninterrupted(tmp_path_factory.mktemp("demo-full"))
