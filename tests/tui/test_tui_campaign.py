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
from tests.fixtures_tui import dashboard, feed, screen_lines, settle, static_text, sync, until


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
        assert rows[0] == ["1", "q8", "0.0123", "best", "[0.011, 0.0135]", "3.00 GiB", "8.50"]
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
    # the leader's repeat: against its first capture, not "the best" (a board of too few windows has none)
    for outcome, provisional, words in (
            ("indistinguishable", False, "tied with q8 (its first capture)"),
            ("within_noise", True, "tied with q8 (its first capture) (provisional)"),
            ("a_closer", False, "differs from q8 (its first capture)"),
            ("too_few_windows", False, "no verdict (too few windows)")):
        repeat = Standing("q8.repeat", "compared", outcome=outcome, provisional=provisional, repeat_of="q8")
        assert verdict_words(repeat) == words
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
        # the ranking of the reports under the campaign board, on the same tab, says each of the
        # campaign's notes once: the board says them, the ranking only what the board does not
        # (the ranking takes the campaign's reports as they load: wait for all three)
        await until(pilot, lambda: static_text(app, "#board-note").startswith("3 reports by mean KL"),
                    "the ranking of the three reports", limit=90)
        await settle(app, pilot)
        shown = static_text(app, "#campaign-notes").splitlines()
        ranking = static_text(app, "#board-note").splitlines()
        assert [line.split(":")[0] for line in shown[:2]] == ["noise model", "note"], shown
        assert ranking[1:] == [], ranking  # both of its notes are the board's
        assert not set(ranking) & {line.removeprefix("note: ") for line in shown}, (shown, ranking)
        await pilot.press("q")


@pytest.mark.parametrize("fail", [False, True], ids=["done", "one-candidate-failed"])
@sync
async def test_after_a_campaign_the_stage_cards_show_the_best_candidate_not_the_repeat_capture(
        tmp_path: Path, fail: bool) -> None:
    from kldtui.formats.report import headline, load_report
    from kldtui.tui.model import stage_figures

    holder: dict[str, object] = {}
    app = create_app(pipeline_factory=scripted_campaign_factory(tmp_path, holder, repeat=True, fail=fail),
                     config_dir=tmp_path / "cfg", theme="kldtui-dark")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await settle(app, pilot)
        leader, repeat = tmp_path / "comparison-q8.json", tmp_path / "repeat" / "comparison-q8.json"
        best, again = headline(load_report(leader)), headline(load_report(repeat))
        kl_best, kl_again = (stage_figures({"kl_mean": h["kl_mean"]})[0] for h in (best, again))
        assert kl_best != kl_again  # the two captures read differently on a card
        compare = static_text(app, "#stage-compare").splitlines()
        assert compare[1] == "done · q8 (best)"  # which candidate the figures are of
        assert compare[2].split(" · ")[0] == kl_best and kl_again not in compare[2]
        for stage in ("server", "capture", "finalize"):
            assert "· q8 (best)" in static_text(app, f"#stage-{stage}").splitlines()[1]
        assert static_text(app, "#stage-capture").splitlines()[2] == "windows 8/8"
        assert "q8" not in static_text(app, "#stage-reference")  # the reference is every candidate's
        table = load_report(leader).window_table()
        assert [w.kl for w in app.main.model.windows.values()] == table.kl_mean  # the grid: the leader's
        result = app.main.current_result
        assert result is not None and result.path == str(leader) and result.name == "q8"

        log = [text for _, text in app.main.model.log]
        assert "[campaign] repeat capture of the leader 3/3: q8.repeat" in log
        # what to do next is the campaign's (its reports together), never one candidate's single-run
        # lines ("diff comparison-q8.json OTHER/comparison.json"), which its first report used to log
        assert not [line for line in log if "OTHER/comparison.json" in line], log
        assert f"[campaign] the stage cards show the best candidate, q8 (its report {leader})" in log
        await pilot.press("q")


def test_the_cards_name_the_candidate_that_runs_and_count_only_its_windows() -> None:
    from kldtui.events import CandidateStarted, ResultReady, StageStarted, WindowState
    from kldtui.tui.model import DashboardModel, ShownCandidate
    from kldtui.tui.widgets.stage_rail import state_with_candidate

    model = DashboardModel()
    model.set_windows([(w, "prose") for w in range(4)])
    model.apply(CandidateStarted("campaign", name="q8", number=1, total=2))
    for w in range(4):
        model.apply(WindowState("compare", window_index=w, state="compared", figures={"kl": 0.01}))
    model.apply(ResultReady("compare", path="comparison-q8.json"))
    model.apply(CandidateStarted("campaign", name="q8.repeat", number=3, total=3, repeat=True))
    assert model.shown_candidate == ShownCandidate("q8.repeat", "repeat capture")
    # the result keeps the name of the candidate it came from, whoever runs when the screen shows it
    assert (model.result_path, model.result_name) == ("comparison-q8.json", "q8")
    model.apply(StageStarted("capture"))
    model.apply(WindowState("capture", window_index=0, state="captured"))
    # the windows the candidate before reached are not this one's
    assert model.card_figures("capture")["windows"] == "1/4"
    shown = model.shown_candidate
    assert state_with_candidate("running", shown, 40, False) == "running · q8.repeat (repeat capture)"
    assert state_with_candidate("running", shown, 20, False) == "running · q8.repeat"
    assert state_with_candidate("capture 25%", shown, 13, False) == "capture 25%"  # progress first
    # a server's "stopped" is not its mark's word ("●", its stage done): it stays, the name goes
    assert state_with_candidate("stopped", ShownCandidate("fine-hidden", "best"), 13, False) == "stopped"
    # a card that is done has no room for both at 13 columns: the name alone (its mark says done)
    assert state_with_candidate("done", ShownCandidate("fine-hidden", "best"), 13, True) == "fine-hidden"
    assert state_with_candidate("failed", ShownCandidate("q8", "best"), 13, True) == "failed · q8"
    assert state_with_candidate("done", ShownCandidate("q8", "best"), 13, True) == "done · q8"
    long_name = ShownCandidate("Q4_K_M-imatrix", "best")
    # cut in its middle, its end kept (kldtui.text.short_name): "Q4_K_…" read as every Q4_K_ quant
    assert state_with_candidate("done", long_name, 13, True) == "Q4_K…-imatrix"
    assert state_with_candidate("done", long_name, 3, True) == "don"  # no room for a readable cut
    assert state_with_candidate("done", None, 13, True) == "done"


@sync
async def test_at_80x24_a_done_card_shows_the_candidates_name_whole(tmp_path: Path) -> None:
    """At 80x24 the hidden demo's Capture, Finalize and Compare cards read "done · f…dden" for
    "fine-hidden": the state and the name do not both fit in a card's 13 columns. The name takes
    the line alone (the card's mark says done); at 200 columns both are shown, as before."""
    from kldtui.events import CandidateStarted, StageFinished, StageStarted

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await feed(app, pilot, CandidateStarted("campaign", name="fine-hidden", number=1, total=2),
                   *(event for stage in ("capture", "finalize", "compare")
                     for event in (StageStarted(stage), StageFinished(stage))))
        await settle(app, pilot)
        for stage in ("capture", "finalize", "compare"):
            lines = static_text(app, f"#stage-{stage}").splitlines()
            assert lines[0].startswith("●") and lines[1] == "fine-hidden", lines
        assert any("▌ fine-hidden" in line for line in screen_lines(app)), screen_lines(app)
        await pilot.resize_terminal(200, 50)
        await settle(app, pilot)
        for stage in ("capture", "finalize", "compare"):
            assert static_text(app, f"#stage-{stage}").splitlines()[1] == "done · fine-hidden (1 of 2)"


@sync
async def test_a_finished_campaign_opened_again_ranks_with_its_noise_model(tmp_path: Path) -> None:
    """Opening a finished campaign's work folder shows its board from the folder (not final, no live
    run): the ranking under it and d must use the campaign's measured noise model, as at the run's end
    (they said "noise model: none" beside a board that used the measured one)."""
    from kldtui.events import LeaderboardUpdated

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        model = str(tmp_path / "noise-model.json")
        app.main.model.apply(LeaderboardUpdated("campaign", rows=(), windows=8, noise_model="measured",
                                                path=str(tmp_path / "leaderboard.json"), noise_path=model))
        app.main.refresh_now()
        await settle(app, pilot)
        assert app.main.noise_path == model
        # nothing was written by this dashboard: the file is the last finished run's ("written to" said
        # it had just been written)
        notes = static_text(app, "#campaign-notes")
        assert f"the last finished run's ranking: {tmp_path / 'leaderboard.json'}" in notes, notes
        assert "written to" not in notes
        await pilot.press("q")


@sync
async def test_two_candidates_finished_in_one_batch_both_join_the_ranking(tmp_path: Path) -> None:
    """The model keeps the latest result only: when two candidates' results reached the dashboard in
    one batch (its app slowed down by a loaded machine), the first never joined the ranking below
    the campaign board, and it showed 2 of a campaign's 3 reports. The campaign's standings name every
    report it ranked: the ranking follows them."""
    from kldtui.events import ResultReady
    from kldtui.formats.report import load_report
    from tests.fixtures_tui import make_report as tui_report
    from tests.fixtures_tui import write_report as tui_write

    paths = {name: tui_write(tmp_path / f"comparison-{name}.json", tui_report(name, level, seed=seed))
             for name, level, seed in (("q8", 0.01, 1), ("q4", 0.02, 2), ("q3", 0.04, 3))}
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        standings = tuple(Standing(name, "compared", rank=i + 1, mean=level, report_path=str(paths[name]))
                          for i, (name, level) in enumerate((("q8", 0.01), ("q4", 0.02), ("q3", 0.04))))
        # q8 alone, then q4 and q3 in one batch (q4's result is overtaken by q3's before a redraw)
        await feed(app, pilot, ResultReady("compare", path=str(paths["q8"]), report=load_report(paths["q8"])),
                   LeaderboardUpdated("campaign", rows=standings[:1]))
        await feed(app, pilot, ResultReady("compare", path=str(paths["q4"]), report=load_report(paths["q4"])),
                   ResultReady("compare", path=str(paths["q3"]), report=load_report(paths["q3"])),
                   LeaderboardUpdated("campaign", rows=standings))
        table = app.query_one("#board", DataTable)
        await until(pilot, lambda: table.row_count == 3, "the three reports on the ranking")
        await settle(app, pilot)
        assert [str(table.get_row_at(i)[1]) for i in range(3)] == ["q8", "q4", "q3"]
        assert static_text(app, "#board-note").startswith("3 reports by mean KL")
        # the same file again, written another way, is still one row
        written_otherwise = str(tmp_path / "." / "comparison-q3.json")
        again = Standing("q3 again", "compared", rank=4, report_path=written_otherwise)
        await feed(app, pilot, LeaderboardUpdated("campaign", rows=(*standings, again)))
        await settle(app, pilot)
        assert table.row_count == 3


@sync
async def test_a_campaign_report_that_cannot_be_read_is_said_once_until_it_changes(tmp_path: Path) -> None:
    """A campaign names a report that cannot be read (half-written, or damaged on a shared disk): the
    dashboard says so once, in one line naming the file, not again at each campaign update; once the
    file changes it is read again and joins the ranking."""
    import os

    from tests.fixtures_tui import make_report as tui_report
    from tests.fixtures_tui import write_report as tui_write

    good = tui_write(tmp_path / "comparison-q8.json", tui_report("q8", 0.01, seed=1))
    broken = tmp_path / "comparison-q4.json"
    broken.write_text('{"schema": ')
    app, _ = dashboard(tmp_path)
    said: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        shown = app.notify

        def notify(message: str, **kwargs: object) -> None:
            said.append(message)
            shown(message, **kwargs)  # type: ignore[arg-type]

        app.notify = notify  # type: ignore[method-assign]
        rows = (Standing("q8", "compared", rank=1, mean=0.01, report_path=str(good)),
                Standing("q4", "compared", rank=2, mean=0.02, report_path=str(broken)))
        table = app.query_one("#board", DataTable)
        for _ in range(3):
            await feed(app, pilot, LeaderboardUpdated("campaign", rows=rows))
            await until(pilot, lambda: table.row_count == 1, "q8 on the ranking")
            await settle(app, pilot)
        about = [m for m in said if "comparison-q4.json" in m]
        assert len(about) == 1 and "\n" not in about[0], said
        assert about[0].endswith("joins the ranking once the file changes (compare q4 again to rewrite it)")
        assert "kldtui compare or kldtui run wrote" not in about[0]  # one remedy: the campaign's
        tui_write(broken, tui_report("q4", 0.02, seed=2))
        os.utime(broken, ns=(1, 1))  # a changed file, whatever the clock's resolution
        await feed(app, pilot, LeaderboardUpdated("campaign", rows=rows))
        await until(pilot, lambda: table.row_count == 2, "q4 joins once its file is whole")
        assert [m for m in said if "comparison-q4.json" in m] == about


def _table_lines(table: DataTable) -> list[str]:
    return [table.render_line(y).text for y in range(table.size.height)]


@sync
async def test_at_80x24_a_verdict_is_read_whole_not_cut_at_the_panes_edge(tmp_path: Path) -> None:
    """At 80x24 the campaign board's pane is narrower than its table: the verdict column ran past the
    edge, and "worse than the best (provisional)" read "worse than the best (provis". The verdict wraps
    inside the pane instead, the figures after it whole; at 200 columns it stays on one line."""
    rows = (Standing("q8_0", "compared", rank=1, mean=0.0123, ci_low=0.011, ci_high=0.0135, mark="best",
                     size_bytes=3 << 30, bits_per_weight=8.5),
            Standing("q4_k_m", "compared", rank=2, mean=0.0456, ci_low=0.04, ci_high=0.05, mark="worse",
                     outcome="a_closer", provisional=True, size_bytes=2 << 30, bits_per_weight=4.8))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, LeaderboardUpdated("campaign", rows=rows))
        app.main.action_show_tab("leaderboard")
        await settle(app, pilot)
        board = app.query_one(CampaignBoard)
        table = app.query_one("#campaign-table", DataTable)
        assert board.has_class("-shown")
        lines = _table_lines(table)
        text = "\n".join(lines)
        assert "worse than the best" in text and "(provisional)" in text, text
        assert "(provis\n" not in text + "\n" and all(len(line) <= board.size.width for line in lines)
        for figure in ("[0.011, 0.0135]", "[0.04, 0.05]", "3.00 GiB", "2.00 GiB", "8.50", "4.80"):
            assert figure in text, text
        await pilot.resize_terminal(200, 50)
        await settle(app, pilot)
        assert any("worse than the best (provisional)" in line for line in _table_lines(table))
    # the rule itself: the verdicts wrap to the room the other columns leave, never below their header
    from kldtui.tui.widgets.campaign_board import BoardFit, fit_board

    every = tuple(range(7))
    line = ["2", "q4_k_m", "0.0456", "worse than the best (provisional)", "[0.04, 0.05]", "2.0 GiB", "4.80"]
    assert fit_board([line], 200) == BoardFit(every) and fit_board([line], 0) == BoardFit(every)
    # the columns' widths are their headers' ("candidate", "mean KL") where those are wider than the cells
    assert fit_board([line], 75) == BoardFit(every, verdict=75 - (1 + 9 + 7 + 12 + 7 + 4) - 2 * 7)
    assert fit_board([line], 50) == BoardFit(every, verdict=len("verdict vs best"))
    # size and bpw that no row knows give their room; a long name wraps before a figure is cut
    unknown = [*line[:5], "-", "-"]
    assert fit_board([unknown], 60) == BoardFit((0, 1, 2, 3, 4), verdict=60 - (1 + 9 + 7 + 12) - 2 * 5)
    named = [line[0], "llama-3.1-8b-q4_k_m", *line[2:]]
    assert fit_board([named], 70) == BoardFit(every, verdict=15, name=70 - (1 + 7 + 12 + 7 + 4) - 2 * 7 - 15)
    # a repeat's verdict names its first capture: that word wraps too (the name column says it whole)
    repeat = [*named[:3], "tied with llama-3.1-8b-q4_k_m (its first capture)", *named[4:]]
    assert fit_board([named, repeat], 70).verdict == 15


@sync
async def test_at_80x24_b_brings_the_ranking_below_the_campaign_board_into_sight(tmp_path: Path) -> None:
    """At 80x24 a finished campaign's board filled the Leaderboard tab and the ranking below it (the
    table Enter, space and d work on) was drawn below the tab's bottom edge, behind the progress panel:
    nothing scrolled to it, and after b the keys its note names did nothing (the focus stayed on the
    window grid). The tab scrolls; b puts the ranking in sight with the focus on it."""
    from kldtui.events import ResultReady
    from kldtui.formats.report import load_report
    from kldtui.tui.screens.result import ResultScreen
    from tests.fixtures_tui import make_report as tui_report
    from tests.fixtures_tui import write_report as tui_write

    levels = (("q8_0", 0.01, 1), ("q4_k_m", 0.02, 2), ("q3_k_s", 0.04, 3))
    paths = {name: tui_write(tmp_path / f"comparison-{name}.json", tui_report(name, level, seed=seed))
             for name, level, seed in levels}
    standings = tuple(Standing(name, "compared", rank=i + 1, mean=level, ci_low=level * 0.9,
                               ci_high=level * 1.1, mark="best" if i == 0 else "worse", outcome=None if i == 0
                               else "a_closer", provisional=i > 0, report_path=str(paths[name]))
                      for i, (name, level, _) in enumerate(levels))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        results = [ResultReady("compare", path=str(p), report=load_report(p)) for p in paths.values()]
        await feed(app, pilot, *results,
                   LeaderboardUpdated("campaign", rows=standings, windows=8, final=True,
                                      noise_model="none: window-to-window variation only",
                                      notes=("ties: sign-flip test against the best",),
                                      path=str(tmp_path / "leaderboard.json")))
        table = app.query_one("#board", DataTable)
        await until(pilot, lambda: table.row_count == 3, "the three reports on the ranking")
        await settle(app, pilot)
        await pilot.press("b")
        await settle(app, pilot)
        body = app.query_one("#body").region
        assert app.focused is table
        seen = table.region.intersection(body)
        assert seen.height >= 4 and table.region.bottom <= body.bottom, (table.region, body)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ResultScreen) and app.screen.result.name == "q4_k_m"


@sync
async def test_a_campaigns_live_result_names_the_candidate_it_is_of(tmp_path: Path) -> None:
    """While a campaign's second candidate is compared, the Result tab shows its windows so far; it was
    titled "compared so far" alone, right after the first candidate's report (and at 80x24 the cards
    have no room for the name): it names the candidate."""
    from kldtui.events import CandidateStarted, StageStarted, WindowState

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await feed(app, pilot, CandidateStarted("campaign", name="q4_k_m", number=2, total=3),
                   StageStarted("compare"),
                   *(WindowState("compare", window_index=w, state="compared", domain="prose",
                                 figures={"kl": 0.01 * (w + 1)}) for w in range(3)))
        await settle(app, pilot)
        summary = static_text(app, "#result-summary")
        assert summary.startswith("q4_k_m  (live: windows compared so far)"), summary
        await feed(app, pilot,
                   CandidateStarted("campaign", name="q8_0.repeat", number=4, total=4, repeat=True),
                   StageStarted("compare"),
                   WindowState("compare", window_index=0, state="compared", domain="prose",
                               figures={"kl": 0.01}))
        await settle(app, pilot)
        assert static_text(app, "#result-summary").startswith("q8_0.repeat  (live: ")


@sync
async def test_a_single_runs_live_result_names_the_served_model_once(tmp_path: Path) -> None:
    """Outside a campaign the live result read "compared so far  (live: windows compared so far)": the
    same words twice and no name. It names the served model."""
    from kldtui.events import ServerReady, StageStarted, WindowState

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await feed(app, pilot, ServerReady("server", url="http://127.0.0.1:1", served_model_name="q4_k_m"),
                   StageStarted("compare"),
                   *(WindowState("compare", window_index=w, state="compared", domain="prose",
                                 figures={"kl": 0.01 * (w + 1)}) for w in range(3)))
        await settle(app, pilot)
        summary = static_text(app, "#result-summary")
        assert summary.startswith("q4_k_m  (live: windows compared so far)"), summary
        assert summary.count("compared so far") == 1, summary


@sync
async def test_a_campaign_of_a_hidden_state_suite_counts_contexts_on_the_board(tmp_path: Path) -> None:
    """The board's title said "6 windows" of a hidden-state suite's contexts, and its interval cells
    showed a 95 % interval from too few of them (the batch lines said "too few windows (6)")."""
    rows = (Standing("q4", "compared", rank=1, mean=0.0123, ci_low=0.011, ci_high=0.0137, mark="best"),
            Standing("q2", "waiting"))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await feed(app, pilot, LeaderboardUpdated("campaign", rows=rows, windows=6, unit="context"))
        assert static_text(app, "#campaign-title") == "Campaign leaderboard so far, 6 contexts"
        assert _rows(app)[0][:5] == ["1", "q4", "0.0123", "best", "too few contexts (6)"]
        await pilot.press("q")
