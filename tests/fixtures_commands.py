"""How kldtui names itself in the commands it prints to copy (kldtui.text.kldtui_command), made to
differ from the documented ``kldtui``: started by a path that ``kldtui`` on PATH is not, as after the
README's quick start (``.venv/bin/kldtui`` with no venv activated)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from kldtui.text import kldtui_command
from tests.paths import REPO


def started_from_a_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """kldtui as if started by ``tmp_path/my venv/bin/kldtui`` (a space in it: quoted): the words every
    printed command names it by, checked to be that path and not ``kldtui``."""
    program = tmp_path / "my venv" / "bin" / "kldtui"
    monkeypatch.setattr(sys, "argv", [str(program)])
    named = kldtui_command()
    assert shlex.split(named) == [str(program)], named
    return named


def runnable_venv_kldtui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """:func:`started_from_a_venv`, with a program at that path that runs this checkout's kldtui (this
    interpreter's ``-m kldtui``), so that a printed command can be run as copied."""
    program = tmp_path / "my venv" / "bin" / "kldtui"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "
                       '-m kldtui "$@"\n')
    program.chmod(0o755)
    assert os.access(program, os.X_OK)
    return started_from_a_venv(tmp_path, monkeypatch)
