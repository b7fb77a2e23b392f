"""Campaign profiles sharing one work folder: candidates keep their folders and reports by name, so a
profile that names its candidates as another does, in another mode, is refused, not captured over."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures_campaign import run_cmd, write_profile
from tests.fixtures_demo import env_with

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # whole campaigns, run again

MINE = {"close": 0.04, "far": 0.2}


def _run(profile: Path) -> list[dict]:
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _changed(work: Path, before: dict[Path, int]) -> list[str]:
    return sorted(str(p.relative_to(work)) for p in work.rglob("*")
                  if p.is_file() and before.get(p) != p.stat().st_mtime_ns)


def test_a_profile_naming_its_candidates_as_another_in_another_mode_is_refused(tmp_path: Path) -> None:
    """Candidates keep their folders and reports by name: a profile sharing the work folder that names
    its candidates as another profile does, in another mode, is refused before any server starts (each
    candidate failed after its server started, with a word on [run] run_name, which a campaign does not
    use), the other profile's captures left as they are."""
    work = tmp_path / "w"
    _run(write_profile(work, MINE))
    clash = write_profile(work, MINE, file_name="score.toml")
    clash.write_text(clash.read_text() + '\n[capture]\nmode = "score"\n')
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
    proc = subprocess.run(run_cmd(clash), capture_output=True, text=True, timeout=300, env=env_with())
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "server: started" not in proc.stdout
    said = (f"{work / 'capture' / 'capture-close.json'}: window 0 was captured in logits mode, this run "
            "captures in score mode; give the candidate another name to keep both (profiles sharing a work "
            "folder each need names of their own), or remove its record to capture it again")
    assert proc.stderr.startswith(f"kldtui: error: {said}"), proc.stderr
    assert _changed(work, before) == []
