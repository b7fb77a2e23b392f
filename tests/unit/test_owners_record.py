"""A work folder's profiles.json (kldtui.workflow.owners) is untrusted: whatever holds its name, the
run says so in one line naming it and what to do, never a traceback, never a wait on a FIFO, and a
claim never writes through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.workflow.owners import claim, load_record, owner_problem
from kldtui.workflow.profile import load_profile
from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import single_profile
from tests.fixtures_hostile import returns_at_once

REMEDY = "delete it (each profile that runs there next records itself again)"


def _profile(tmp_path: Path, name: str = "a.toml"):  # type: ignore[no-untyped-def]
    return load_profile(single_profile(tmp_path / name, tmp_path / "suite", tmp_path / "work"))


def test_the_first_profile_claims_the_folder_and_the_next_is_refused(tmp_path: Path) -> None:
    first, second = _profile(tmp_path), _profile(tmp_path, "b.toml")
    ws = first.workspace()
    said: list[object] = []
    claim(first, ws, said.append, "run")
    assert not said
    assert owner_problem(first, ws) is None
    assert load_record(ws.owners_path).owners == {"comparison.json": "../a.toml"}
    problem = owner_problem(second, second.workspace())
    assert problem is not None and problem.startswith(f"{tmp_path / 'b.toml'}: the work folder ")
    with pytest.raises(BadInput, match="give this profile its own"):
        claim(second, second.workspace(), said.append, "run")
    assert load_record(ws.owners_path).owners == {"comparison.json": "../a.toml"}


@pytest.mark.parametrize(("content", "problem"), [
    ("{", "profiles record is not valid JSON"),
    ('{"format": "other", "owners": {}}', "not a kldtui profiles record"),
    ('{"format": "kldtui-profiles-v1", "owners": []}', "not a kldtui profiles record"),
    ('{"format": "kldtui-profiles-v1", "owners": {"../comparison.json": "a.toml"}}',
     "the owner of '../comparison.json' holds"),
    ('{"format": "kldtui-profiles-v1", "owners": {"comparison.json": 3}}',
     "the owner of 'comparison.json' its profile expected text"),
    ('{"format": "kldtui-profiles-v1", "owners": {"comparison.json": "a\\tb.toml"}}',
     "the owner of 'comparison.json' its profile holds a control character"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "suites": []}', "not a kldtui profiles record"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "suites": {"reference-run": "a\\nb"}}',
     "the owner of 'reference-run' its suite holds a control character"),
])
def test_a_damaged_record_is_one_line_naming_it(tmp_path: Path, content: str, problem: str) -> None:
    profile = _profile(tmp_path)
    path = tmp_path / "work" / PROFILES_FILE_NAME
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(BadInput) as caught:
        owner_problem(profile, profile.workspace())
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and problem in text and text.endswith(REMEDY) and "\n" not in text


def test_a_fifo_or_a_link_is_refused_at_once_and_never_written_through(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    ws = profile.workspace()
    ws.workdir.mkdir()  # type: ignore[union-attr]
    os.mkfifo(ws.owners_path)
    [raised] = returns_at_once(lambda: owner_problem(profile, ws))
    assert isinstance(raised, BadInput) and str(raised).startswith(f"{ws.owners_path}: ")
    assert str(raised).endswith(REMEDY), raised
    ws.owners_path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"format": "kldtui-profiles-v1", "owners": {}}))
    ws.owners_path.symlink_to(elsewhere)
    with pytest.raises(BadInput, match=f"^{ws.owners_path}: a link holds the profiles record's name; "):
        claim(profile, ws, lambda event: None, "run")
    assert json.loads(elsewhere.read_text())["owners"] == {}


def test_a_profile_read_from_no_file_claims_nothing(tmp_path: Path) -> None:
    from dataclasses import replace

    profile = replace(_profile(tmp_path), path=None)
    claim(profile, profile.workspace(), lambda event: None, "run")
    assert not (tmp_path / "work" / PROFILES_FILE_NAME).exists()


def test_a_project_folder_moved_whole_keeps_its_owner(tmp_path: Path) -> None:
    """profiles.json records the profile relative to the work folder: both moved together, the
    profile still owns its run, and another profile there is still refused."""
    import shutil

    project = tmp_path / "project"
    for name in ("a.toml", "b.toml"):
        path = single_profile(project / name, project / "suite", project / "work")
        path.write_text(path.read_text().replace(f'"{project}/', '"'))  # paths relative to the profile
    profile = load_profile(project / "a.toml")
    claim(profile, profile.workspace(), lambda event: None, "run")
    moved = tmp_path / "elsewhere" / "project"
    shutil.move(project, moved)
    profile = load_profile(moved / "a.toml")
    assert profile.workspace().workdir == moved / "work"
    assert owner_problem(profile, profile.workspace()) is None
    other = load_profile(moved / "b.toml")
    problem = owner_problem(other, other.workspace())
    assert problem is not None and f"holds the run of profile {moved / 'a.toml'} " in problem


def test_a_part_of_a_gone_suite_changes_hands_and_of_a_suite_still_there_is_refused(tmp_path: Path) -> None:
    """reference-run/ (and a campaign candidate's run) is one suite's: profiles.json records the suite's
    folder; a profile of another suite is refused while that folder holds a suite, and takes the part
    over, with a warning, once it holds none (moved or deleted)."""
    from kldtui.events import Notice

    path = single_profile(tmp_path / "a.toml", tmp_path / "suite", tmp_path / "work")
    profile = load_profile(path)
    claim(profile, profile.workspace(), lambda event: None, "run")
    ws = profile.workspace()
    assert json.loads(ws.owners_path.read_text())["suites"] == {"reference-run": "../suite"}
    moved = load_profile(single_profile(path, tmp_path / "suite2", tmp_path / "work"))
    said: list[object] = []
    assert owner_problem(moved, moved.workspace()) is None  # suite/ holds no suite-manifest.json
    claim(moved, moved.workspace(), said.append, "run")
    assert [(e.text, e.level) for e in said if isinstance(e, Notice)] == [
        (f"{ws.owners_path}: reference-run was suite {tmp_path / 'suite'}'s, which is gone; it is suite "
         f"{tmp_path / 'suite2'}'s now", "warning")]
    assert json.loads(ws.owners_path.read_text())["suites"] == {"reference-run": "../suite2"}
    (tmp_path / "suite2").mkdir()
    (tmp_path / "suite2" / "suite-manifest.json").write_text("{}")
    back = load_profile(single_profile(path, tmp_path / "suite", tmp_path / "work"))
    problem = owner_problem(back, back.workspace())
    assert problem is not None and problem.endswith(
        f"holds reference-run/, the reference capture of suite {tmp_path / 'suite2'} ({ws.owners_path}), "
        f"which this profile's suite {tmp_path / 'suite'} would write over; give this profile its own "
        "[run] workdir")
