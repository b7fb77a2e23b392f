"""The "next:" commands a run prints can be copied into a shell as they are: ``kldtui demo --batch``
run from a folder whose name has a space, into a work folder named with a space, a ``$`` and
parentheses, prints its leaderboard, diff and view commands, and each runs through ``bash -c`` in
that folder (kldtui.text.shell_arg quotes every path; kldtui names itself as it was started)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a whole demo campaign, then three commands


def test_a_demos_printed_next_steps_run_in_bash_from_a_folder_named_with_a_space(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    here = tmp_path / "my runs"
    here.mkdir()
    workdir = "w $HOME (1)"
    done = subprocess.run([sys.executable, "-m", "kldtui", "demo", "--batch", "--workdir", workdir],
                          cwd=here, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("next: "))
    commands = [line.removeprefix("next: ").strip() for line in lines[start:start + 3]]
    assert [c.split(" kldtui ")[1].split()[0] for c in commands] == ["leaderboard", "diff", "view"], commands
    assert f"'{workdir}/comparison-fine.json'" in commands[2], commands  # quoted, not expanded
    for command in commands:
        ran = subprocess.run([bash, "-c", command], cwd=here, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert ran.returncode == 0, (command, ran.stdout[-2000:], ran.stderr[-2000:])
        assert "comparison-fine" in ran.stdout + ran.stderr, (command, ran.stdout[-2000:])
