"""Two campaign profiles in one work folder (as ``kldtui demo`` and ``kldtui demo --score`` share theirs):
each keeps its own leaderboard and noise model, and resumes to the ranking it would give alone without
measuring anything again (the score demo's run overwrote the logits demo's leaderboard.json and, on the
shared suite, its noise-model-HASH.json, which the logits demo then measured again on every resume).
Folders of earlier versions, which wrote one leaderboard.json and one noise-model-HASH.json for every
profile, still open: each profile reads the old files where they are its own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kldtui.formats.report_names import LEADERBOARD_FILE_NAME, noise_model_file_name
from kldtui.workflow.campaign import shown_candidate
from kldtui.workflow.profile import load_profile
from tests.fixtures_campaign import run_cmd, write_profile
from tests.fixtures_demo import env_with

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # whole campaigns, run again

MINE, THEIRS = {"close": 0.04, "far": 0.2}, {"close-b": 0.06, "far-b": 0.3}


def _run(profile: Path) -> list[dict]:
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _rows(board: Path) -> list[str]:
    return [r["name"] for r in json.loads(board.read_text())["rows"]]


def _captures(model: Path) -> tuple[str, str]:
    doc = json.loads(model.read_text())
    return doc["run1"], doc["run2"]


def _measured(events: list[dict]) -> list[str]:
    """The notices of a noise model measured (saved) in this run."""
    return [e["text"] for e in events if e.get("event") == "Notice" and "noise model saved" in e["text"]]


def _boards(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("ranked")]


def _changed(work: Path, before: dict[Path, int]) -> list[str]:
    return sorted(str(p.relative_to(work)) for p in work.rglob("*")
                  if p.is_file() and before.get(p) != p.stat().st_mtime_ns)


def test_two_profiles_in_one_folder_keep_their_own_leaderboard_and_noise_model(tmp_path: Path) -> None:
    work = tmp_path / "w"
    mine = write_profile(work, MINE, repeat_leader=True, noise=0.05)
    theirs = write_profile(work, THEIRS, repeat_leader=True, noise=0.05, file_name="other.toml")
    _run(mine)
    _run(theirs)
    suite = json.loads((work / "comparison-close.json").read_text())["suite_token_hash_sha256"]
    my_board, their_board = work / LEADERBOARD_FILE_NAME, work / "leaderboard-other.json"
    my_model, their_model = work / noise_model_file_name(suite), work / noise_model_file_name(suite, "other")
    assert their_model.name == f"noise-model-other-{suite[:16]}.json"
    assert _rows(my_board) == ["close", "far"] and _rows(their_board) == ["close-b", "far-b"]
    assert _captures(my_model) == (str(work / "candidates" / "close"), str(work / "repeat" / "close"))
    assert _captures(their_model) == (str(work / "candidates" / "close-b"), str(work / "repeat" / "close-b"))

    # each resumes to its own ranking: nothing captured or measured again, the model given from the first
    # standings on (a noise model being measured again printed "noise model: none" first), and no file
    # but its own leaderboard written
    for profile, board, model in ((mine, my_board, my_model), (theirs, their_board, their_model)):
        before = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
        events = _run(profile)
        assert not [e for e in events if e.get("event") == "CandidateStarted"]
        assert _measured(events) == []
        boards = _boards(events)
        assert [b["final"] for b in boards] == [True], boards
        assert boards[0]["noise_path"] == str(model) and boards[0]["path"] == str(board)
        assert _changed(work, before) == [board.name]

    # a folder of earlier versions, where the other profile ran last: one leaderboard.json and one
    # noise-model-HASH.json, both its own
    my_board.unlink()
    my_model.unlink()
    their_board.rename(my_board)
    their_model.rename(my_model)
    old_model = my_model.read_bytes()
    assert shown_candidate(load_profile(theirs)) == ("close-b", True)  # a reopened dashboard's choice
    assert shown_candidate(load_profile(mine)) == ("close", False)  # not ranked by it: not its own
    events = _run(theirs)  # reads its old model, measures nothing again, writes its own leaderboard
    assert _measured(events) == []
    boards = _boards(events)
    assert [b["final"] for b in boards] == [True] and boards[0]["noise_path"] == str(my_model)
    assert _rows(their_board) == ["close-b", "far-b"] and my_model.read_bytes() == old_model
    assert not their_model.exists()
    events = _run(mine)  # the old model is the other's captures: measured again, into its own file
    assert _measured(events) == [f"noise model saved in {my_model}; the final leaderboard gives it"]
    assert all("measured repeat variation" in b["noise_model"] for b in _boards(events)), _boards(events)
    assert not [e for e in events if e.get("event") == "CandidateStarted"]  # its repeat is on disk
    assert _rows(my_board) == ["close", "far"]
    assert _captures(my_model) == (str(work / "candidates" / "close"), str(work / "repeat" / "close"))
    events = _run(theirs)  # its old model was overwritten by the one it never owned: measured once more
    assert _measured(events) == [f"noise model saved in {their_model}; the final leaderboard gives it"]
    assert _captures(their_model) == (str(work / "candidates" / "close-b"), str(work / "repeat" / "close-b"))



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
    said = (f"{work / 'capture' / 'capture-close.json'}: window 000 (prose) was captured in logits mode, "
            "this run captures in score mode; give the candidate another name (profiles sharing a work "
            "folder each need names of their own)")
    assert proc.stderr.startswith(f"kldtui: error: {said}"), proc.stderr
    assert _changed(work, before) == []
