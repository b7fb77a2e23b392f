"""A dashboard opened on a work folder whose run is another profile's (``WORKDIR/profiles.json``,
kldtui.workflow.owners): it showed that profile's ``comparison.json``, its windows and KL as this
profile's earlier run, though this profile's run would be refused there. Now it says whose the folder's
run is and what to do, shows none of it as this profile's, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from kldtui.tui.app import create_app
from kldtui.workflow.profile import load_profile
from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import build_suite, single_profile
from tests.fixtures_tui import make_report, settle, sync, write_report


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
