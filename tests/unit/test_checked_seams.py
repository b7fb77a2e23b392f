"""The seams are checked by the README's test command (plain ``pytest``): import-linter keeps the
layers (pyproject [tool.importlinter]: a lower layer never imports a higher one, nothing outside
kldtui/tui imports Textual), mypy checks the type hints of kldtui/ (pyproject [tool.mypy]:
untyped functions and implicit Any returns fail) and ruff the code (pyproject [tool.ruff]; with
BLE, every broad except says why it is broad)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.paths import REPO

ROOT = REPO


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_import_contracts_are_kept() -> None:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    out = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "broken" in out.stdout and " 0 broken" in out.stdout


def test_mypy_reports_nothing_on_kldtui() -> None:
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout


def test_ruff_reports_nothing() -> None:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "kldtui", "tests",
                          "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
