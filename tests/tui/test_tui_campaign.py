"""The dashboard's campaign leaderboard (issue 23 item 1): hidden for one candidate, filled in from
LeaderboardUpdated events as candidates finish, with the same cells as the batch output."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, TabbedContent

from kldtui.events import LeaderboardUpdated, Standing
from kldtui.tui.app import create_app
from kldtui.tui.widgets import CampaignBoard
from kldtui.workflow.standings import cells, table_lines, verdict_words
from tests.fixtures_campaign import scripted_campaign_factory
from tests.fixtures_tui import dashboard, settle, static_text, sync


def _rows(app) -> list[list[str]]:  # type: ignore[no-untyped-def]
    table = app.query_one("#campaign-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@sync
async def test_the_campaign_board_fills_in_as_candidates_finish(tmp_path: Path) -> None:
    holder: dict[str, object] = {}
    app = create_app(pipeline_factory=scripted_campaign_factory(tmp_path, holder),
                     config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.query_one(CampaignBoard).has_class("-shown")
        await pilot.press("r")
        await settle(app, pilot)
        board = app.query_one(CampaignBoard)
        assert board.has_class("-shown") and app.query_one("#tabs", TabbedContent).active == "leaderboard"
        rows = _rows(app)
        assert [r[1] for r in rows] == ["q8", "q4"]
        assert rows[0] == ["1", "q8", "0.0123", "best", "[0.011, 0.0135]", "3.0 GiB", "8.50"]
        assert rows[1][3] == "worse than the best" and rows[1][5:7] == ["-", "-"]
        assert "Campaign leaderboard" in static_text(app, "#campaign-title")
        notes = static_text(app, "#campaign-notes")
        assert "noise model: none" in notes and "leaderboard.json" in notes and "ties:" in notes
        log = [text for _, text in app.main.model.log]
        assert "[campaign] candidate 2/2: q4" in log and "[campaign] best: q8 (mean KL 0.0123)" in log
        await pilot.press("q")


@sync
async def test_a_single_candidate_never_shows_the_campaign_board(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        assert not app.query_one(CampaignBoard).has_class("-shown")
        await pilot.press("q")


def test_the_words_of_each_state_and_verdict() -> None:
    done = Standing("a", "compared", rank=2, mean=0.02, ci_low=0.01, ci_high=0.03)
    assert verdict_words(Standing("a", "running")) == "running…"
    assert verdict_words(Standing("a", "stopped early")) == "stopped early (not ranked)"
    assert verdict_words(Standing("a", "waiting")) == "waiting"
    assert verdict_words(Standing("a", "compared", mark="best")) == "best"
    assert verdict_words(Standing("a", "compared", outcome="a_closer", provisional=True)) == \
        "worse than the best (provisional)"
    for outcome, words in (("a_closer", "worse than the best"), ("indistinguishable", "tied with the best"),
                           ("within_noise", "tied with the best (within noise)"),
                           ("too_few_windows", "no verdict (too few windows)")):
        assert verdict_words(Standing("a", "compared", outcome=outcome)) == words
    assert cells(done)[:5] == ["2", "a", "0.02", "-", "[0.01, 0.03]"]
    lines = table_lines([done, Standing("b", "waiting")])
    assert lines[0].split()[:3] == ["#", "candidate", "mean"]
    assert lines[2].split() == ["-", "b", "-", "waiting", "-", "-", "-"]
    event = LeaderboardUpdated("campaign", rows=(done,))
    assert event.to_dict()["rows"][0]["name"] == "a"  # the --jsonl line carries the rows


@pytest.mark.slow  # a real three-candidate campaign (embedded servers) through the dashboard
@sync
async def test_a_three_candidate_campaign_in_the_dashboard_ranks_as_the_leaderboard_command(
        tmp_path: Path) -> None:
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.workflow.profile import load_profile
    from tests.fixtures_campaign import CANDIDATES, write_profile

    profile = load_profile(write_profile(tmp_path / "c"))
    app = create_app(profile=profile, config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await settle(app, pilot, limit=300)
        work = tmp_path / "c"
        cli = leaderboard_from_files([work / f"comparison-{name}.json" for name in CANDIDATES])
        rows = _rows(app)
        assert [r[1] for r in rows] == [row.name for row in cli.rows] == ["q8", "q4", "q3"]
        provisional = [" (provisional)" if row.provisional else "" for row in cli.rows]
        assert [r[3] for r in rows] == ["best", "worse than the best" + provisional[1],
                                        "worse than the best" + provisional[2]]
        assert [row.outcome_vs_best for row in cli.rows] == [None, "a_closer", "a_closer"]
        for shown, row in zip(rows, cli.rows, strict=True):
            assert float(shown[2]) == pytest.approx(row.mean, rel=1e-3)
        assert app.query_one("#tabs", TabbedContent).active == "leaderboard"
        await pilot.press("q")
