"""The viewer's and the dashboard's rankings of a campaign folder two profiles share say whose run each
report is, as the folder's ``profiles.json`` records it (``runs``): in one line of 80 columns above the
ranking, and in full in the help (?). A record kldtui did not write is said and names no profile; the
viewer writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.widgets import Static

from kldtui.tui.app import create_app
from tests.fixtures_tui import (
    dashboard,
    drawn_lines,
    open_with_o,
    ranking,
    settle,
    shared_campaign_folder,
    static_text,
    sync,
)

BRIEF = "of 2 profiles: a, b: one.toml; c: two.toml"


def _files(work: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_size, p.lstat().st_mtime_ns) for p in work.iterdir()}


def _full(tmp_path: Path) -> str:
    return (f"whose runs these are, as the profiles.json of each report's folder records it: a, b: profile "
            f"{tmp_path / 'one.toml'}; c: profile {tmp_path / 'two.toml'}")


@sync
async def test_the_viewers_ranking_at_80x24_says_whose_run_each_report_is(tmp_path: Path) -> None:
    work = shared_campaign_folder(tmp_path)
    before = _files(work)
    app = create_app(reports=sorted(work.glob("comparison-*.json")), config_dir=tmp_path / "cfg",
                     remember_theme=False, use_noise_floor=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await ranking(app, pilot, 3)
        # one drawn line of the note above the ranking, whole
        assert BRIEF in [line.strip() for line in drawn_lines(app, "#board-note")], \
            drawn_lines(app, "#board-note")
        await pilot.press("question_mark")
        await pilot.pause()
        in_full = str(app.screen.query_one("#help-notes", Static).render())
        assert _full(tmp_path) in in_full.replace("\n", " "), in_full
    assert _files(work) == before  # the viewer wrote nothing


@sync
async def test_the_viewer_of_one_campaign_report_says_whose_run_it_is(tmp_path: Path) -> None:
    work = shared_campaign_folder(tmp_path)
    app = create_app(reports=[work / "comparison-c.json"], config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        summary = static_text(app, "#result-summary")
        file_line = next(line for line in summary.splitlines() if line.startswith("file "))
        assert f"the run of profile {tmp_path / 'two.toml'}, as profiles.json records it" in file_line, \
            file_line


@pytest.mark.parametrize("case", ["broken", "fifo"])
@sync
async def test_a_record_kldtui_did_not_write_is_said_above_the_ranking(tmp_path: Path, case: str) -> None:
    work = shared_campaign_folder(tmp_path)
    record = work / "profiles.json"
    record.unlink()
    if case == "broken":
        record.write_text("{")
    else:
        os.mkfifo(record)  # never waited on
    before = _files(work)
    app = create_app(reports=sorted(work.glob("comparison-*.json")), config_dir=tmp_path / "cfg",
                     remember_theme=False, use_noise_floor=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await ranking(app, pilot, 3)
        lines = [line.strip() for line in drawn_lines(app, "#board-note")]
        assert "whose runs: not known, a profiles.json is not kldtui's (? says why)" in lines, lines
        assert not any("profiles:" in line for line in lines), lines
        await pilot.press("question_mark")
        await pilot.pause()
        in_full = str(app.screen.query_one("#help-notes", Static).render()).replace("\n", " ")
        assert f"whose runs these are is not known: {record}: " in in_full, in_full
        assert "profile /" not in in_full
    assert _files(work) == before


@sync
async def test_the_dashboards_ranking_says_whose_run_each_report_is(tmp_path: Path) -> None:
    work = shared_campaign_folder(tmp_path / "shared")
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await open_with_o(app, pilot, work)
        await pilot.press("b")
        await ranking(app, pilot, 3)
        assert BRIEF in [line.strip() for line in drawn_lines(app, "#board-note")], \
            drawn_lines(app, "#board-note")
