"""``kldtui demo --batch`` as a child process, for the resume and kill tests: the command, its
environment, an uninterrupted run to compare against, and a report without its volatile fields."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

VOLATILE = {"provenance", "reference_dir", "candidate_dir", "reference_manifest_sha256", "command",
            "created_utc"}


def stable(doc: Any) -> Any:
    """The report without fields that name folders, times or hosts."""
    if isinstance(doc, dict):
        return {k: stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [stable(v) for v in doc]
    return doc


def demo_cmd(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kldtui", "demo", "--batch", "--workdir", str(workdir), *extra]


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KLDTUI_EMBEDDED_FAULT", None)
    env.update(extra)
    return env


def run_uninterrupted(workdir: Path) -> Path:
    """The whole demo in one run, never killed: what every resumed run must reproduce."""
    proc = subprocess.run(demo_cmd(workdir), capture_output=True, text=True, timeout=240, env=env_with())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir
