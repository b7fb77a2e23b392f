"""The whole-tree checks of the default test run (mypy, import-linter, ruff), started as child
processes when the session starts so that they run beside the other tests instead of after them.

``tests/conftest.py`` starts the checks that the selected tests ask for (``@pytest.mark.seam_check
("mypy")``) once collection is done; a test then waits for its check's result with
``seam_checks.result(name)``. A check that was not started (a test selected some other way) starts
when asked. Whatever is still running when the session ends is stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import IO

from tests.paths import REPO

_LINT_IMPORTS = ("import sys; from importlinter.cli import lint_imports_command; "
                 "sys.exit(lint_imports_command())")

# name -> argv (run in the repository root, with the repository first on PYTHONPATH)
COMMANDS: dict[str, list[str]] = {
    "mypy": [sys.executable, "-m", "mypy"],
    "lint-imports": [sys.executable, "-c", _LINT_IMPORTS, "--no-cache"],
    "ruff": [sys.executable, "-m", "ruff", "check", "--no-cache", "kldtui", "tests", "benchmarks"],
}
TIMEOUT_S = 900.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    returncode: int
    output: str  # stdout and stderr together, in the order they were written

    def tail(self, n: int = 6000) -> str:
        return self.output[-n:]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _lower_priority() -> None:
    # the tests beside it keep their pace (several of them run servers with deadlines)
    with contextlib.suppress(OSError):
        os.nice(5)


@dataclass
class SeamChecks:
    """The checks of one test session: started at most once each, stopped at the end."""

    running: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=dict)
    done: dict[str, CheckResult] = field(default_factory=dict)

    def start(self, name: str) -> None:
        if name in self.running or name in self.done:
            return
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in result() or stop_all()
        proc = subprocess.Popen(COMMANDS[name], cwd=REPO, env=_environment(), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_lower_priority)
        self.running[name] = (proc, log)

    def result(self, name: str, timeout: float = TIMEOUT_S) -> CheckResult:
        """The finished check (started now if nobody started it)."""
        if name not in self.done:
            self.start(name)
            proc, log = self.running.pop(name)
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._stop(proc)
                returncode = proc.wait()
            log.seek(0)
            output = log.read().decode("utf-8", errors="replace")
            log.close()
            self.done[name] = CheckResult(name, returncode, output)
        return self.done[name]

    def stop_all(self) -> None:
        for proc, log in self.running.values():
            self._stop(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            log.close()
        self.running.clear()

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def wanted(marks: list[tuple[str, ...]]) -> list[str]:
    """The check names that ``seam_check`` marks ask for, each once, in order; unknown names fail."""
    names: list[str] = []
    for args in marks:
        for name in args:
            if name not in COMMANDS:
                raise ValueError(f"seam_check({name!r}): no such check (known: {', '.join(COMMANDS)})")
            if name not in names:
                names.append(name)
    return names


