"""The real demo pipeline (embedded CPU server, real capture, finalize and compare) driven to the
end through the dashboard, keys only: a campaign of two candidates and the leader's repeat capture
(issue 23), whose live leaderboard ends with a verdict, a tie and a measured noise model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static, TabbedContent

from kldtui.text import table_figure
from kldtui.tui.app import create_app
from kldtui.tui.widgets import CampaignBoard, LeaderboardTable, LogView, ProgressPanel
from tests.fixtures_campaign import noise_model_of
from tests.fixtures_tui import headline_of, settle, static_text, sync, until

pytest.importorskip("kldtui.stages.compare", reason="the compare stage is not in the tree yet")

pytestmark = pytest.mark.slow  # the whole demo through the dashboard


def _rows(app) -> list[list[str]]:  # type: ignore[no-untyped-def]
    table = app.query_one("#campaign-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@sync
async def test_demo_pipeline_runs_to_the_end_through_the_dashboard(tmp_path: Path) -> None:
    from kldtui.workflow.demo import prepare_demo

    profile = prepare_demo(tmp_path / "demo")
    app = create_app(profile=profile, config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        # the suite's windows are on the grid before anything ran
        model = app.main.model
        assert [(w.index, w.state) for w in model.windows.values()] == [(i, "pending") for i in range(12)]
        assert not app.query_one(CampaignBoard).has_class("-shown")  # nothing to show before a run
        await pilot.press("r")
        await settle(app, pilot, limit=300)
        assert {s: v.state for s, v in model.stages.items()} == dict.fromkeys(model.stages, "done")
        work = tmp_path / "demo"
        board = json.loads((work / "leaderboard.json").read_text())
        assert [r["name"] for r in board["rows"]] == ["fine", "coarse"]
        # the campaign's live leaderboard, where the run ends: the verdict, the tie, the noise model
        assert app.query_one("#tabs", TabbedContent).active == "leaderboard"
        rows = _rows(app)
        assert [r[1] for r in rows] == ["fine", "coarse", "fine.repeat"]
        assert rows[0][3] == "best" and rows[1][3].startswith("worse than the best")
        # the measured noise model has one repeat: the decision rules call the verdict provisional
        assert rows[1][3].endswith("(provisional)") == board["rows"][1]["provisional"]
        assert rows[2][3].startswith("tied with fine (its first capture)")  # a second capture of one model
        for row, expected in zip(rows, board["rows"], strict=False):
            assert row[0] == str(expected["rank"])
            assert float(row[2]) == pytest.approx(expected["mean"], rel=1e-3)
        notes = static_text(app, "#campaign-notes")
        # one short line: what a difference must clear, and why verdicts stay provisional (? has it in full)
        assert "noise model: 2 captures (one repeat); B - A must clear" in notes, notes
        assert "leaderboard.json" in notes
        assert "Campaign leaderboard" in static_text(app, "#campaign-title")
        # the grid and the cards show the best candidate, not the last capture (the leader's repeat)
        leader = json.loads((work / "comparison-fine.json").read_text())
        per_window = leader["per_window_arrays"]["kl_mean"]
        assert [w.state for w in app.main.model.windows.values()] == ["compared"] * 12
        assert [w.kl for w in app.main.model.windows.values()] == pytest.approx(per_window)
        assert static_text(app, "#stage-compare").splitlines()[1] == "done · fine (best)"
        boot = headline_of(leader)  # the headline interval (docs/STATISTICS.md)
        names = [r.name for r in app.query_one("#board", LeaderboardTable).results]
        assert names == ["fine", "coarse"]  # the candidates' reports (not the repeat), ranked with ties
        assert app.main.noise_path == str(noise_model_of(work))  # their ties use the measured model
        await pilot.press("question_mark")  # the help has the notes in full
        await pilot.pause()
        in_full = str(app.screen.query_one("#help-notes", Static).render()).replace("\n", " ")
        assert "noise model: measured repeat variation" in in_full, in_full
        assert "not measured with one repeat" in in_full, in_full
        await pilot.press("escape")
        await pilot.pause()
        assert any("ready" in line for line in app.query_one(LogView).shown_lines())
        # run_all stops the server at the end, so q quits at once
        assert not app.main.server_up()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0

    # Reopening the finished work folder shows what is on disk, as if it had just run (issue 15 item 1)
    again = create_app(profile=profile, config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with again.run_test(size=(120, 40)) as pilot:
        await settle(again, pilot)
        # the report the folder names is loaded by a worker that the leaderboard's ranking (an
        # exclusive worker of the same group) may cancel while its thread still runs: wait for
        # what the screen shows, not for the workers
        await until(pilot, lambda: again.query_one("#tabs", TabbedContent).active == "result"
                    and table_figure(boot['estimate']) in static_text(again, "#result-summary"),
                    "the reopened run's report on the Result tab")
        await settle(again, pilot)  # and the ranking that its arrival started
        model = again.main.model
        assert {s: v.state for s, v in model.stages.items()} == dict.fromkeys(model.stages, "done")
        assert model.stages["server"].detail == "stopped"
        assert [w.state for w in model.windows.values()] == ["compared"] * 12
        # reopened, the dashboard shows the leader's run
        assert [w.kl for w in model.windows.values()] == pytest.approx(leader["per_window_arrays"]["kl_mean"])
        assert again.query_one("#tabs").active == "result"
        assert table_figure(boot['estimate']) in static_text(again, "#result-summary")
        assert any("opened an earlier run" in line for line in again.query_one(LogView).shown_lines()) \
            or any("opened an earlier run" in text for _, text in model.log)
        # and the campaign's standings, from its reports and noise model on disk
        assert [r[1] for r in _rows(again)] == ["fine", "coarse", "fine.repeat"]
        assert [r[3] for r in _rows(again)] == [r[3] for r in rows]
        assert "in the work folder" in static_text(again, "#campaign-title")
        assert "noise model: 2 captures (one repeat)" in static_text(again, "#campaign-notes")
        note = again.query_one(ProgressPanel).render().plain
        assert "comparison-fine.json" in note and "kldtui view" in note
        rail = str(again.query_one("#stage-compare", Static).render())
        assert "KL 0.007" in rail
        await pilot.press("q")
