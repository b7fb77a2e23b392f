"""Shared pytest configuration. Area-specific helpers live in tests/fixtures_*.py modules.

The whole-tree checks (mypy, import-linter, ruff: tests/seam_checks.py) start as child processes
as soon as collection has chosen the tests that need them (under pytest-xdist, when the worker that
runs them reaches their module), so they run beside the rest of the session; their tests collect
the results."""

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


@pytest.hookimpl(optionalhook=True)  # the vLLM and llama.cpp venvs run pytest without xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, at most four (each runs servers and whole pipelines; more
    workers on a many-core host buy little and multiply the session fixtures' memory)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _seam_marks(items: list[pytest.Item]) -> list[tuple[str, ...]]:
    return [mark.args for item in items for mark in item.iter_markers("seam_check")]


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under pytest-xdist every worker collects every test and runs only some: the checks start
    # with the first test of a module that asks for one (pytest_runtest_setup), on the worker that
    # got that module (--dist loadfile keeps a module on one worker), so each runs once.
    if session.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for name in wanted(_seam_marks(session.items)):
        session.config.stash[_CHECKS].start(name)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and any(item.iter_markers("seam_check")):
        module = [other for other in item.session.items if other.path == item.path]
        for name in wanted(_seam_marks(module)):
            item.config.stash[_CHECKS].start(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    checks = config.stash.get(_CHECKS, None)
    if checks is not None:
        checks.stop_all()


@pytest.fixture(scope="session")
def seam_checks(pytestconfig: pytest.Config) -> SeamChecks:
    return pytestconfig.stash[_CHECKS]
