"""A bad environment variable stops a command with one line naming it, exit 2, before any output
file is written (kldtui/settings.py; the unit tests are in tests/unit/test_settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kldtui.cli.main import main
from tests.paths import EXAMPLE_SUITE as EXAMPLE


def test_a_command_stops_with_exit_2_on_a_bad_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KLDTUI_NO_MMAP", "sometimes")
    code = main(["compare", "--suite-manifest", str(EXAMPLE / "suite-manifest.json"), "--reference-dir",
                 str(EXAMPLE / "ref"), "--candidate-dir", str(EXAMPLE / "candidate"), "--output",
                 str(tmp_path / "r.json"), "--backend", "numpy"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and "KLDTUI_NO_MMAP='sometimes'" in err
    assert not (tmp_path / "r.json").exists()
