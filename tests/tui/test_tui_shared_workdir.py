"""A dashboard opened on a work folder whose run is another profile's (``WORKDIR/profiles.json``,
kldtui.workflow.owners): it showed that profile's ``comparison.json``, its windows and KL as this
profile's earlier run, though this profile's run would be refused there. Now it says whose the folder's
run is and what to do, shows none of it as this profile's, and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kldtui.tui.app import create_app
from kldtui.workflow.profile import load_profile
from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import build_suite, single_profile
from tests.fixtures_tui import make_report, settle, static_text, sync, write_report


def _files(work: Path) -> dict[str, tuple[int, int]]:
    """Every file of the work folder, its size and modification time."""
    return {str(p.relative_to(work)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(work.rglob("*")) if p.is_file()}


@sync
async def test_a_dashboard_on_another_profiles_run_says_whose_it_is_and_shows_none_of_it(
        tmp_path: Path) -> None:
    build_suite(tmp_path / "suite")
    work = tmp_path / "work"
    work.mkdir()
    theirs = single_profile(tmp_path / "a.toml", tmp_path / "suite", work)
    mine = single_profile(tmp_path / "b.toml", tmp_path / "suite", work, stop_window=2)
    write_report(work / "comparison.json", make_report("theirs", 0.02, seed=1))
    owners = work / PROFILES_FILE_NAME
    said = (f"{mine}: the work folder {work} holds the run of profile {theirs} (comparison.json, candidate/, "
            f"compare/, capture/), which this profile's would mix with or write over ({owners}); give this "
            "profile its own [run] workdir")  # the line its run is refused with
    for owner, ours in (("../a.toml", False), ("../b.toml", True)):
        owners.write_text(json.dumps({"format": "kldtui-profiles-v1", "owners": {"comparison.json": owner}}))
        before = _files(work)
        app = create_app(profile=load_profile(mine), config_dir=tmp_path / "cfg", remember_theme=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            model = app.main.model
            log = [text for _, text in model.log]
            warned = [n.message for n in app._notifications if n.severity == "warning"]
            kls = [w.kl for w in model.windows.values()]
            if ours:  # its own earlier run: shown as it always was
                assert any("opened an earlier run" in text for text in log), log
                assert said not in warned and all(kl is not None for kl in kls[:2]), (warned, kls)
                assert app.main.own_report == (work / "comparison.json").resolve()
                continue
            assert f"[run] {said}" in log and warned == [said], (log, warned)
            # none of it as this profile's: no earlier run, no KL on the grid, no report of its own
            assert not any("opened an earlier run" in text for text in log), log
            assert kls and all(kl is None for kl in kls), kls
            assert {view.state for view in model.stages.values()} == {"idle"}, model.stages
            assert app.main.own_report is None and model.result_path is None
        assert _files(work) == before  # the dashboard wrote nothing there


@sync
async def test_a_campaigns_dashboard_on_another_campaigns_leaderboard_says_whose_it_is(
        tmp_path: Path) -> None:
    """Two campaigns whose profiles share a file name (``x/kldtui.toml``, ``work/kldtui.toml``) in one
    work folder: the second's dashboard showed the first's leader and its report as its own."""
    from kldtui.workflow.demo import prepare_demo

    work = tmp_path / "demo"
    profile = prepare_demo(work)
    first = profile.candidates[0].name
    write_report(profile.member_workspace(first).report, make_report(first, 0.02, seed=1))
    theirs = tmp_path / "x" / "kldtui.toml"
    theirs.parent.mkdir()
    theirs.write_text("")  # the owner's file is there: its run is not gone
    owners = work / PROFILES_FILE_NAME
    owners.write_text(json.dumps({"format": "kldtui-profiles-v1",
                                  "owners": {"leaderboard.json": "../x/kldtui.toml"}}))
    before = _files(work)
    app = create_app(profile=profile, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        log = [text for _, text in app.main.model.log]
        said = (f"{profile.path}: the work folder {work} holds the leaderboard and noise models of profile "
                f"{theirs} (leaderboard.json, named after the profile's file name, which is this one's too) "
                f"({owners}); give this profile its own [run] workdir or another file name")
        assert f"[run] {said}" in log, log
        assert not any("opened an earlier run" in text for text in log), log
        assert app.main.model.shown_candidate is None and app.main.own_report is None
    assert _files(work) == before


def _viewer_case(work: Path, tmp_path: Path, case: str) -> str | None:
    """``work``'s profiles.json as ``case`` leaves it; what the viewer says of the report's owner (None:
    nothing)."""
    owners = work / PROFILES_FILE_NAME
    if owners.exists() or owners.is_symlink():
        owners.unlink()
    record = {"format": "kldtui-profiles-v1", "owners": {"comparison.json": "../a.toml"}}
    if case == "none":
        return None
    if case == "other file":  # a campaign's leaderboard only: the run report has no owner recorded
        owners.write_text(json.dumps({**record, "owners": {"leaderboard.json": "../a.toml"}}))
        return None
    if case == "owner":
        owners.write_text(json.dumps(record))
        return f"the run of profile {tmp_path / 'a.toml'}, as profiles.json records it"
    if case == "gone":  # the recorded profile's file is gone (renamed or deleted)
        owners.write_text(json.dumps({**record, "owners": {"comparison.json": "../gone.toml"}}))
        return (f"the run of profile {tmp_path / 'gone.toml'} (whose file is gone), as profiles.json "
                "records it")
    if case == "broken":
        owners.write_text("{")
        return f"whose run it is is not known: {owners}: profiles record is not valid JSON"
    if case == "link":  # a link to a record that names a profile: not followed, nothing taken from it
        (tmp_path / "planted.json").write_text(json.dumps(record))
        owners.symlink_to(tmp_path / "planted.json")
        return f"whose run it is is not known: {owners}: a link holds the profiles record's name"
    os.mkfifo(owners)  # hostile: never waited on
    return f"whose run it is is not known: {owners}: is a FIFO (named pipe), not a regular file"


@sync
async def test_the_viewer_of_a_work_folder_says_whose_run_its_report_is(tmp_path: Path) -> None:
    """``kldtui view WORKDIR`` showed ``comparison.json`` without saying which profile's run it is, in a
    work folder several profiles share. It says the profile profiles.json records (read only), says a
    broken or hostile record as such and names no profile from it, and writes nothing."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "a.toml").write_text("")
    report = write_report(work / "comparison.json", make_report("theirs", 0.02, seed=1))
    for case in ("none", "other file", "owner", "gone", "broken", "link", "fifo"):
        said = _viewer_case(work, tmp_path, case)
        before = _files(work)
        app = create_app(reports=[report], config_dir=tmp_path / "cfg", remember_theme=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            summary = static_text(app, "#result-summary")
            file_line = next(line for line in summary.splitlines() if line.startswith("file "))
            if said is None:
                assert "(" not in file_line and "profile" not in summary, (case, summary)
            else:
                assert said in file_line, (case, file_line)
            if case in ("broken", "link", "fifo"):
                assert "the run of profile" not in summary, summary
        assert _files(work) == before, case  # the viewer wrote nothing


def test_kldtui_view_of_a_work_folder_without_a_terminal_says_whose_run_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.cli.main import main

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "a.toml").write_text("")
    write_report(work / "comparison.json", make_report("theirs", 0.02, seed=1))
    (work / PROFILES_FILE_NAME).write_text(json.dumps({"format": "kldtui-profiles-v1",
                                                       "owners": {"comparison.json": "../a.toml"}}))
    assert main(["view", str(work)]) == 0
    out, err = capsys.readouterr()
    assert err == (f"kldtui: {work / 'comparison.json'}: the run of profile {tmp_path / 'a.toml'}, as "
                   "profiles.json records it\n")
    assert out.startswith("KL(reference || candidate) = ")  # the summary, as before
