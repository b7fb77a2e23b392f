"""The dashboard and the viewer rank one suite's reports at a time (kldtui.formats.report_names.
suite_groups, the rule kldtui view DIR follows). One work folder holds kldtui demo and kldtui demo
--hidden: the dashboard of either ranked all of the folder's reports on one untied ranking ("no tie
marks: ... different suites") under the campaign's own; it now ranks its run's suite's and says in one
line how many of other suites it leaves out. The viewer's o put a folder of another suite beside the
reports on its board; it is refused as kldtui view DIR refuses a folder of two suites. A report that
records no suite is of no other suite: it ranks beside them, as kldtui view DIR ranks it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from textual.widgets import Static

from kldtui.tui.app import KldApp, create_app
from kldtui.tui.screens.board import PROVISIONAL_LEGEND
from kldtui.tui.widgets import LeaderboardTable
from tests.fixtures_commands import started_from_a_venv
from tests.fixtures_decide import OTHER_SUITE_HASH, make_report, suite_domains, two_suite_folder, write_report
from tests.fixtures_tui import (
    ScriptedPipeline,
    drawn_lines,
    open_with_o,
    ranking,
    settle,
    static_text,
    sync,
    until,
)

BRIEF = "2 reports of another suite left out: ? names them and how to rank them"


def _other_suite_folder(tmp_path: Path) -> Path:
    """A folder of two reports of another suite than the board's: comparison-c.json, comparison-d.json."""
    both = two_suite_folder(tmp_path / "both")
    other = tmp_path / "hidden"
    other.mkdir()
    for name in "cd":
        shutil.copy(both / f"comparison-{name}.json", other / f"comparison-{name}.json")
    return other


def _told(app: KldApp) -> list[Any]:
    return list(app._notifications)


def _rows(app: KldApp) -> list[str]:
    table = app.screen.query_one("#board", LeaderboardTable)
    return [str(table.get_row_at(i)[table.column("candidate")]) for i in range(table.row_count)]


@sync
async def test_o_beside_a_board_of_another_suite_is_refused_and_the_board_stays(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    """The viewer of a and b (one suite): o on a folder of c and d (another suite) and o on c's file
    are refused in one line naming each suite's reports and the command that ranks the opened ones
    (kldtui named as it was started: here .venv/bin/kldtui, not on PATH); a report that records no
    suite joins the board."""
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    a, b = folder / "comparison-a.json", folder / "comparison-b.json"
    other = _other_suite_folder(tmp_path)
    old = json.loads(a.read_text())
    del old["suite_token_hash_sha256"]
    old["candidate_dir"] = "/runs/old"
    (tmp_path / "old.json").write_text(json.dumps(old))
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        await ranking(app, pilot, 2)
        for opened, words in (
                (other, f"suite 666666666666: {other}/comparison-c.json, {other}/comparison-d.json; "
                        f"suite 555555555555: {a}, {b}); rank one suite's: {kldtui} view "
                        f"{other}/comparison-c.json {other}/comparison-d.json"),
                (other / "comparison-c.json", f"suite 666666666666: {other}/comparison-c.json; suite "
                                              f"555555555555: {a}, {b}); rank one suite's: {kldtui} view "
                                              f"{other}/comparison-c.json")):
            await open_with_o(app, pilot, opened)
            told = _told(app)[-1]
            assert told.message == (f"{opened} and the leaderboard hold reports of 2 suites, which no "
                                    f"leaderboard ranks together ({words}"), told.message
            assert told.severity == "error"
            assert _rows(app) == ["a", "b"]
        await open_with_o(app, pilot, tmp_path / "old.json")
        await ranking(app, pilot, 3)
        assert sorted(_rows(app)) == ["a", "b", "old"]
        assert "no tie marks" not in static_text(app, "#board-note")


def _demo_with_other_suites(tmp_path: Path) -> tuple[Any, Path]:
    """The demo's profile, its work folder holding a report of its suite (comparison-mine.json), one
    that records no suite (comparison-old.json) and two of another suite's (as kldtui demo --hidden
    leaves them: comparison-c.json, comparison-d.json)."""
    from kldtui.formats.suite import load_suite
    from kldtui.workflow.demo import prepare_demo

    work = tmp_path / "demo"
    profile = prepare_demo(work)
    suite = load_suite(profile.workspace().suite_dir).suite_token_hash_sha256
    kl, domains = [0.01 + 0.001 * i for i in range(16)], suite_domains(16)
    for name, scale, shift, recorded in (("mine", 1, 0.0, suite), ("old", 2, 0.0, None),
                                         ("c", 1, 0.0, OTHER_SUITE_HASH), ("d", 1, 0.01, OTHER_SUITE_HASH)):
        write_report(work / f"comparison-{name}.json", make_report(
            [v * scale + shift for v in kl], domains, candidate_dir=f"/runs/{name}", suite_hash=recorded))
    return profile, work


@sync
async def test_the_dashboard_ranks_its_suites_reports_and_says_how_many_it_leaves_out(
        tmp_path: Path, monkeypatch: Any) -> None:
    """At 80x24: the ranking holds the run's suite's report and the one that records no suite, tie
    marks and all; one short line says how many of another suite are left out, and the help (?) names
    them and the command that ranks them (kldtui named as it was started: here .venv/bin/kldtui)."""
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    profile, work = _demo_with_other_suites(tmp_path)
    app = create_app(profile=profile, config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("b")
        table = await ranking(app, pilot, 2)
        assert _rows(app) == ["mine", "old"]
        assert [table.get_row_at(i)[table.column("tie")] for i in range(2)] == ["best", "worse (p)"]
        # what "(p)" means, in one line of 80 columns under the table (no noise model backs "worse")
        assert drawn_lines(app, "#board-verdict")[0].strip() == PROVISIONAL_LEGEND
        note = static_text(app, "#board-note").splitlines()
        assert note[0].startswith("2 reports by mean KL") and BRIEF in note, note
        assert not any("no tie marks" in line for line in note), note
        await pilot.press("question_mark")
        await pilot.pause()
        assert (f"left out: 2 reports of another suite than this run's (suite 666666666666: "
                f"comparison-c.json, comparison-d.json); rank them: {kldtui} view {work}/comparison-c.json "
                f"{work}/comparison-d.json") in \
            str(app.screen.query_one("#help-notes", Static).render()).splitlines()


@sync
async def test_a_dashboard_that_learns_its_suite_from_its_report_leaves_the_other_suites(
        tmp_path: Path) -> None:
    """The suite not downloaded yet, the dashboard ranks the work folder's earlier reports; once its run's
    report says its suite, those of another suite leave the ranking and the note says so."""
    other = _other_suite_folder(tmp_path)

    def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        return ScriptedPipeline(emit, cancel, report_path=tmp_path / "comparison.json")

    app = create_app(pipeline_factory=factory, config_dir=tmp_path / "cfg", theme="kldtui-dark",
                     reports=[other / "comparison-c.json", other / "comparison-d.json"])
    async with app.run_test(size=(120, 40)) as pilot:
        await ranking(app, pilot, 2)
        assert _rows(app) == ["c", "d"]
        await pilot.press("r")
        await settle(app, pilot)
        await until(pilot, lambda: _rows(app) == ["tiny-candidate"], "the run's report alone on the ranking")
        await settle(app, pilot)
        assert "left out: 2 reports of another suite than this run's (suite 666666666666" in \
            static_text(app, "#board-note")
