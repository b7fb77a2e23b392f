"""The dashboard and the viewer rank one suite's reports at a time (kldtui.formats.report_names.
suite_groups, the rule kldtui view DIR follows). The viewer's o put a folder of another suite beside
the reports on its board; it is refused as kldtui view DIR refuses a folder of two suites. A report
that records no suite is of no other suite: it ranks beside them, as kldtui view DIR ranks it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from kldtui.tui.app import KldApp, create_app
from kldtui.tui.widgets import LeaderboardTable
from tests.fixtures_decide import two_suite_folder
from tests.fixtures_tui import (
    open_with_o,
    ranking,
    static_text,
    sync,
)


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
async def test_o_beside_a_board_of_another_suite_is_refused_and_the_board_stays(tmp_path: Path) -> None:
    """The viewer of a and b (one suite): o on a folder of c and d (another suite) and o on c's file
    are refused in one line naming each suite's reports and the command that ranks the opened ones;
    a report that records no suite joins the board."""
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
                        f"suite 555555555555: {a}, {b}); rank one suite's: kldtui view "
                        f"{other}/comparison-c.json {other}/comparison-d.json"),
                (other / "comparison-c.json", f"suite 666666666666: {other}/comparison-c.json; suite "
                                              f"555555555555: {a}, {b}); rank one suite's: kldtui view "
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

