"""How kldtui names itself in the commands it prints to copy (kldtui.text.kldtui_command), made to
differ from the documented ``kldtui``: started by a path that ``kldtui`` on PATH is not, as after the
README's quick start (``.venv/bin/kldtui`` with no venv activated)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from kldtui.text import kldtui_command


def started_from_a_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """kldtui as if started by ``tmp_path/my venv/bin/kldtui`` (a space in it: quoted): the words every
    printed command names it by, checked to be that path and not ``kldtui``."""
    program = tmp_path / "my venv" / "bin" / "kldtui"
    monkeypatch.setattr(sys, "argv", [str(program)])
    named = kldtui_command()
    assert shlex.split(named) == [str(program)], named
    return named
