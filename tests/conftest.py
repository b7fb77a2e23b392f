"""Shared pytest configuration. Area-specific helpers live in tests/fixtures_*.py modules.

The whole-tree checks (mypy, import-linter, ruff: tests/seam_checks.py) start as child processes
as soon as collection has chosen the tests that need them, so they run beside the rest of the
session; their tests collect the results."""

from __future__ import annotations

import os
import signal

import pytest

from tests.seam_checks import SeamChecks, wanted

# Tests never reach the Hub or any network: the Hub client talks to the local test server only.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")


@pytest.fixture(autouse=True, scope="session")
def _verified_cache_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests' verified-hash records go to a folder of their own, not the user's cache."""
    if "KLDTUI_VERIFIED_CACHE" not in os.environ:
        os.environ["KLDTUI_VERIFIED_CACHE"] = str(tmp_path_factory.mktemp("verified-cache"))


_CHECKS = pytest.StashKey[SeamChecks]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_CHECKS] = SeamChecks()
    # A session started as a shell's background job (`pytest &`) inherits SIGINT ignored, and so
    # would every server the tests start: they would ignore the SIGINT that stops them and wait for
    # the SIGTERM that follows. The tests are about kldtui, not about how the session was started.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    marks = [mark.args for item in session.items for mark in item.iter_markers("seam_check")]
    for name in wanted(marks):
        session.config.stash[_CHECKS].start(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    checks = config.stash.get(_CHECKS, None)
    if checks is not None:
        checks.stop_all()


@pytest.fixture(scope="session")
def seam_checks(pytestconfig: pytest.Config) -> SeamChecks:
    return pytestconfig.stash[_CHECKS]
