"""Shared pytest configuration. Area-specific fixtures live in tests/fixtures_*.py modules."""

from __future__ import annotations

import os

import pytest

# Tests never reach the Hub or any network: the Hub client talks to the local test server only.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")


@pytest.fixture(autouse=True, scope="session")
def _verified_cache_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests' verified-hash records go to a folder of their own, not the user's cache."""
    if "KLDTUI_VERIFIED_CACHE" not in os.environ:
        os.environ["KLDTUI_VERIFIED_CACHE"] = str(tmp_path_factory.mktemp("verified-cache"))
