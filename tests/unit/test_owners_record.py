"""A work folder's profiles.json (kldtui.workflow.owners) is untrusted: whatever holds its name, the
run says so in one line naming it and what to do, never a traceback, never a wait on a FIFO, and a
claim never writes through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.formats.suite import load_suite
from kldtui.stages.verify import RECORD_NAME
from kldtui.workflow.owners import claim, load_record, owner_problem, spans
from kldtui.workflow.profile import load_profile
from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import build_suite, campaign_profile, downloading_profile, single_profile
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
    ('{"format": "kldtui-profiles-v1", "owners": {}, "downloads": []}', "not a kldtui profiles record"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "downloads": {"reference": 3}}',
     "the owner of 'reference' its profile expected text"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "downloads": {"a\\nb": "a.toml"}}',
     "the owner of 'a\\\\x0ab' holds a control character"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "runs": {"comparison-q.json": "a.toml"}}',
     "the run of 'comparison-q.json' is not its profile and windows"),
    ('{"format": "kldtui-profiles-v1", "owners": {}, "runs": {"comparison-q.json": {"profile": "a.toml", '
     '"windows": 3}}}', "the owner of 'comparison-q.json' its run's windows expected text"),
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


def test_spans_say_window_indices_as_runs() -> None:
    assert [spans(i) for i in ([0, 1, 2, 3], [5], [0, 2, 3, 4, 7, 9, 10], [3, 1, 2, 2])] == [
        "0-3", "5", "0,2-4,7,9-10", "1-3"]


def _downloaded(folder: Path, repo_id: str, revision: str | None, commit: str) -> None:
    """``folder`` holding a suite downloaded from ``repo_id`` (what its download record says)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite-manifest.json").write_text("{}")
    (folder / RECORD_NAME).write_text(json.dumps({"format": 1, "repo_id": repo_id, "revision": revision,
                                                  "commit": commit, "windows": [0]}))


def test_a_download_of_another_suite_into_the_folder_another_profile_downloaded_into_is_refused(
        tmp_path: Path) -> None:
    """Profiles downloading their suite without a local_dir all name WORKDIR/reference: one of another
    repository or revision is refused (the folder's download record says what it holds); one of the same
    suite shares it; the one that downloaded it may change it; a gone profile's folder changes hands."""
    from kldtui.events import Notice

    work = tmp_path / "work"
    first = load_profile(downloading_profile(tmp_path / "a.toml", "org/suite-x", work, {"qa": 0.1}))
    claim(first, first.workspace(), lambda event: None, "campaign")
    assert load_record(work / PROFILES_FILE_NAME).downloads == {"reference": "../a.toml"}
    _downloaded(work / "reference", "org/suite-x", None, "c" * 40)

    def problem(name: str, repo_id: str, revision: str | None = None) -> str | None:
        profile = load_profile(downloading_profile(tmp_path / name, repo_id, work, {"q" + name[0]: 0.1},
                                                   revision=revision))
        return owner_problem(profile, profile.workspace())

    said = problem("b.toml", "org/suite-y")
    owners = work / PROFILES_FILE_NAME
    assert said == (f"{tmp_path / 'b.toml'}: {work / 'reference'} in the work folder {work} holds the "
                    f"suite profile {tmp_path / 'a.toml'} downloaded from org/suite-x (commit {'c' * 12}) "
                    f"({owners}), which this profile's [reference] repo_id org/suite-y would download over; "
                    "set [reference] local_dir to a folder of its own for this suite (or give this profile "
                    "its own [run] workdir)")
    other_revision = problem("c.toml", "org/suite-x", "v2")
    assert "repo_id org/suite-x (revision v2) would download over" in str(other_revision)
    # the same suite: any revision, or the commit it holds
    assert problem("d.toml", "org/suite-x") is None
    assert problem("e.toml", "org/suite-x", "c" * 40) is None
    # its own folder: refused nothing
    own = load_profile(downloading_profile(tmp_path / "b.toml", "org/suite-y", work, {"qb": 0.1},
                                           local_dir=tmp_path / "suite-y"))
    assert owner_problem(own, own.workspace()) is None
    # the profile that downloaded it changes its own suite
    changed = load_profile(downloading_profile(tmp_path / "a.toml", "org/suite-z", work, {"qa": 0.1}))
    assert owner_problem(changed, changed.workspace()) is None
    # its file gone: the next profile takes the folder over, with a warning
    (tmp_path / "a.toml").unlink()
    other = load_profile(downloading_profile(tmp_path / "b.toml", "org/suite-y", work, {"qb": 0.1}))
    events: list[object] = []
    claim(other, other.workspace(), events.append, "campaign")
    assert [(e.text, e.level) for e in events if isinstance(e, Notice)] == [
        (f"{owners}: {work / 'reference'} held the suite profile {tmp_path / 'a.toml'} downloaded from "
         f"org/suite-x (commit {'c' * 12}), whose file is gone; {tmp_path / 'b.toml'} downloads org/suite-y "
         "there now", "warning")]
    assert load_record(owners).downloads == {"reference": "../b.toml"}


def test_a_download_stopped_before_its_suite_manifest_came_is_still_the_folders_suite(tmp_path: Path) -> None:
    """A first download stopped before any file left no suite manifest: the folder was read as holding no
    suite and handed to the next profile of another repository, which fetched its own over it. The
    download record written before the first file (state "downloading") says what the folder holds: the
    other profile is refused, and told the download did not finish; the same suite shares it."""
    work = tmp_path / "work"
    first = load_profile(downloading_profile(tmp_path / "a.toml", "org/suite-x", work, {"qa": 0.1}))
    claim(first, first.workspace(), lambda event: None, "campaign")
    folder = work / "reference"
    folder.mkdir(parents=True)
    (folder / RECORD_NAME).write_text(json.dumps({"format": 1, "repo_id": "org/suite-x", "revision": None,
                                                  "commit": "c" * 40, "windows": [], "state": "downloading"}))
    other = load_profile(downloading_profile(tmp_path / "b.toml", "org/suite-y", work, {"qb": 0.1}))
    said = owner_problem(other, other.workspace())
    assert said is not None and (f"holds the suite profile {tmp_path / 'a.toml'} began to download (not "
                                 f"finished) from org/suite-x (commit {'c' * 12})") in said, said
    same = load_profile(downloading_profile(tmp_path / "c.toml", "org/suite-x", work, {"qc": 0.1}))
    assert owner_problem(same, same.workspace()) is None
    # a folder whose record is gone with it holds no suite: the next profile takes it
    (folder / RECORD_NAME).unlink()
    assert owner_problem(other, other.workspace()) is None


def test_a_candidates_report_over_other_windows_of_another_profile_is_refused(tmp_path: Path) -> None:
    """Two campaigns of one suite naming a candidate alike share comparison-NAME.json: over the same
    windows they may, over others the second is refused, naming both; the profile itself may change
    its windows; a gone profile's report changes hands."""
    from kldtui.events import Notice

    build_suite(tmp_path / "suite", windows=4)
    suite, work = load_suite(tmp_path / "suite"), tmp_path / "work"

    def profile(name: str, **run: object):  # type: ignore[no-untyped-def]
        return load_profile(campaign_profile(tmp_path / name, tmp_path / "suite", work, {"q": 0.1}, **run))

    first = profile("a.toml")
    claim(first, first.workspace(), lambda event: None, "campaign", first.windows(suite))
    owners = work / PROFILES_FILE_NAME
    assert load_record(owners).runs["comparison-q.json"].windows == "0-3"
    fewer = profile("b.toml", stop_window=2)
    assert owner_problem(fewer, fewer.workspace(), fewer.windows(suite)) == (
        f"{tmp_path / 'b.toml'}: the work folder {work} holds campaign candidate q's report "
        f"(comparison-q.json) over the windows 0-3 of profile {tmp_path / 'a.toml'} ({owners}), which this "
        "profile's run over windows 0-1 would write over; give the candidate another name, the two profiles "
        "the same [run] windows, or this profile its own [run] workdir")
    with pytest.raises(BadInput, match="give the candidate another name"):
        claim(fewer, fewer.workspace(), lambda event: None, "campaign", fewer.windows(suite))
    # no windows to say (no suite yet): nothing to refuse on them
    assert owner_problem(fewer, fewer.workspace()) is None
    same = profile("c.toml", stop_window=4)
    assert owner_problem(same, same.workspace(), same.windows(suite)) is None
    mine = profile("a.toml", start_window=1)
    claim(mine, mine.workspace(), lambda event: None, "campaign", mine.windows(suite))
    assert load_record(owners).runs["comparison-q.json"].windows == "1-3"
    (tmp_path / "a.toml").unlink()
    events: list[object] = []
    claim(fewer, fewer.workspace(), events.append, "campaign", fewer.windows(suite))
    assert [(e.text, e.level) for e in events if isinstance(e, Notice)] == [
        (f"{owners}: comparison-q.json covered the windows 1-3 of profile {tmp_path / 'a.toml'}, whose file "
         f"is gone; it covers {tmp_path / 'b.toml'}'s, windows 0-1, now", "warning")]
    assert load_record(owners).runs["comparison-q.json"].profile == "../b.toml"
