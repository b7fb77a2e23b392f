"""Where the repository's own files are, for tests in any folder under tests/ (one owner of the
repository root, so that moving a test module never changes what it reads)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
EXAMPLE_SUITE = EXAMPLES / "suite"
