"""Pilot tests of the dashboard and the viewer: keys, workers, what the widgets show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

from kldtui.errors import BadInput
from kldtui.text import interval_ends, table_figure
from kldtui.tui.app import create_app
from kldtui.tui.screens.dialogs import ConfirmScreen, HelpScreen
from kldtui.tui.screens.result import ResultScreen
from kldtui.tui.widgets import KLChart, LeaderboardTable, LogView, ProgressPanel, ResultPane, WindowGrid
from tests.fixtures_tui import (
    ScriptedPipeline,
    dashboard,
    headline_of,
    help_text,
    make_report,
    open_with_o,
    settle,
    static_text,
    sync,
    until,
    write_report,
)


@sync
async def test_run_all_to_the_end_fills_every_widget(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        p = holder["p"]
        assert p.calls == ["reference", "serve", "capture", "finalize", "compare"]
        assert {s.state for s in app.main.model.stages.values()} == {"done"}
        # stage rail
        rail = {s: str(app.query_one(f"#stage-{s}", Static).render()) for s in app.main.model.stages}
        assert "● Capture" in rail["capture"] and "windows 8" in rail["capture"]
        assert "127.0.0.1:8123" in rail["server"]
        # window grid: every window compared, each cell coloured by its KL level
        grid = app.query_one(WindowGrid)
        assert [w.state for w in app.main.model.windows.values()] == ["compared"] * 8
        rendered = grid.render()
        assert all(f"{i:03d}" in rendered.plain for i in range(8))
        kl = report_kl = p.report_path and __import__("json").loads(p.report_path.read_text())
        kl = report_kl["per_window_arrays"]["kl_mean"]
        assert [w.kl for w in app.main.model.windows.values()] == kl
        styles = {span.style for span in rendered.spans}
        assert grid.get_component_rich_style("grid--kl2") in styles  # 0.01-ish windows
        # result pane: summary with interval, per-domain table, chart with one bar per window
        assert app.query_one("#tabs").active == "result"
        summary = static_text(app, "#result-summary")
        boot = headline_of(report_kl)  # the headline interval (docs/STATISTICS.md)
        shown = [table_figure(boot[k]) for k in ("estimate", "ci95_low", "ci95_high")]
        assert f"{shown[0]} [{shown[1]}, {shown[2]}]" in summary
        assert "top-1" in summary and "PPL ratio" in summary and "Δp" in summary
        table = app.query_one("#result-domains", DataTable)
        domains = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert domains == ["prose", "code", "instruction"]
        chart = app.query_one("#result-chart", KLChart)
        assert [b.index for b in chart.bars] == list(range(8))
        assert chart.render().plain.count("\n") == 8  # header + 8 bars
        # leaderboard tab holds this run's report
        board = app.query_one("#board", LeaderboardTable)
        assert [r.name for r in board.results] == ["tiny-candidate"]
        # log: the server's lines
        log = app.query_one(LogView).shown_lines()
        assert any("Uvicorn running" in line for line in log)
        # finished stages leave the progress panel
        # the end says where the report is and what to do next (issue 15 item 2)
        note = app.query_one(ProgressPanel).render().plain
        assert f"report: {p.report_path}" in note and "kldtui view" in note and "kldtui diff" in note


@sync
async def test_the_end_of_a_run_reads_the_state_the_pipeline_returned(tmp_path: Path) -> None:
    """After "run all" the next steps come from the RunState run_all returned (a run of 8 of a
    suite's 32 windows suggests the whole suite), not from the work folder read back."""
    app, holder = dashboard(tmp_path, suite_windows=32)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.main.suite_windows == 0  # no work folder to read: nothing known before the run
        await pilot.press("r")
        await settle(app, pilot)
        assert app.main.suite_windows == 32
        lines = app.main.model.next_lines
        assert lines[0] == f"report: {holder['p'].report_path}"
        assert "all 32 windows: [run] start_window = 0, stop_window = 32" in lines[-1]
        logged = [text for _, text in app.main.model.log if "[run] report:" in text]
        assert len(logged) == 1  # said once, though the report's event came first


@sync
async def test_live_results_fill_during_capture_and_stop_key_cancels(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path, pause_after_window=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")  # capture alone
        while "p" not in holder or not holder["p"].paused.is_set():
            await pilot.pause(0.02)
        await pilot.pause(0.05)
        app.main.refresh_now()
        await pilot.pause()
        assert app.main.model.stages["capture"].state == "running"
        assert app.main.model.windows[3].state == "capturing"
        await pilot.press("2")  # another stage while one runs: refused, nothing started
        await pilot.pause()
        assert holder["p"].calls == ["capture"]
        assert any("is running; wait for it or stop it first" in n.message for n in app._notifications)
        assert [w.kl is not None for w in app.main.model.windows.values()][:4] == [True, True, True, False]
        # the result pane shows the windows compared so far
        assert app.main.current_result is not None and len(app.main.current_result.windows) == 3
        progress = app.query_one(ProgressPanel).render().plain
        assert "cap rows" in progress and "1024/2047 " in progress and "cap windows" in progress
        assert "3/8 windows" not in progress  # the task names the unit: said once
        await pilot.press("s")
        await settle(app, pilot)
        assert app.main.model.stages["capture"].state == "stopped"
        assert holder["p"].calls == ["capture"]
        # a stage starts again after a stop (the cancel flag is reset)
        holder["p"].resume.set()
        await pilot.press("3")
        await settle(app, pilot)
        assert app.main.model.stages["capture"].state == "done"


@sync
async def test_single_stage_keys_and_quit_asks_then_stops_server(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("1")
        await settle(app, pilot)
        await pilot.press("2")
        await settle(app, pilot)
        assert holder["p"].calls == ["reference", "serve"]
        assert app.main.server_up()
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await settle(app, pilot)
    assert holder["p"].stopped_server and holder["p"].calls[-1] == "stop_server"
    assert app.return_code == 0


@sync
async def test_quit_without_server_exits_at_once(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert "p" not in holder and app.return_code == 0


class FailingPipeline(ScriptedPipeline):
    def compare(self) -> None:
        raise BadInput("/w/candidate: no finalized windows to compare; run capture and finalize first")

    def finalize(self) -> None:
        raise ZeroDivisionError("boom")


@sync
async def test_worker_failures_are_shown_in_one_place(tmp_path: Path) -> None:
    app = create_app(pipeline_factory=lambda e, c: FailingPipeline(e, c), config_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("5")
        await settle(app, pilot)
        assert app.main.model.stages["compare"].state == "failed"
        assert "no finalized windows" in app.main.model.stages["compare"].detail
        await pilot.press("4")
        await settle(app, pilot)
        assert app.main.model.stages["finalize"].state == "failed"
        assert app.main.model.stages["finalize"].detail == "internal error: ZeroDivisionError: boom"
        messages = [n.message for n in app._notifications]
        assert any("no finalized windows" in m for m in messages)
        assert app.is_running  # a failing worker never takes the app down


@sync
async def test_log_search_and_help_and_palette(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        log = app.query_one(LogView)
        assert len(log.shown_lines()) > 3
        await pilot.press("slash", *"prefix")
        await pilot.pause()
        assert log.shown_lines() == ["[server] WARNING prefix caching is off (required for capture)"]
        await pilot.press("escape")  # leaves the search box
        await pilot.press("escape")  # clears the search
        await pilot.pause()
        assert len(log.shown_lines()) > 3
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Run all", "Start reference", "Start capture", "Start compare", "Stop",
                      "Stop server", "Open result", "Theme", "Help"):
            assert title in titles


@sync
async def test_the_palettes_quit_says_what_q_does(tmp_path: Path) -> None:
    """The command palette's Quit said Textual's "Quit the application as soon as possible", while in
    the dashboard it asks first when a server or stage runs (as q does, and the help says)."""
    viewer = create_app(reports=[write_report(tmp_path / "r.json", make_report("r", 0.02, seed=1))],
                        config_dir=tmp_path / "cfg")
    app, _ = dashboard(tmp_path)
    for one, asks in ((app, True), (viewer, False)):
        async with one.run_test(size=(100, 30)) as pilot:
            await settle(one, pilot)
            said = {c.title: c.help for c in one.get_system_commands(one.screen)}
            assert "as soon as possible" not in said["Quit"], said["Quit"]
            assert ("asks first while a server or stage runs" in said["Quit"]) is asks, said["Quit"]


@sync
async def test_open_result_key_loads_a_report(tmp_path: Path) -> None:
    path = write_report(tmp_path / "old.json", make_report("old-run", 0.02, seed=9, original=True))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_with_o(app, pilot, path)
        assert app.main.current_result is not None and app.main.current_result.name == "old-run"
        assert "original comparator report" in static_text(app, "#result-summary")


@sync
async def test_at_80x24_the_open_dialog_says_its_whole_question(tmp_path: Path) -> None:
    """The open dialog's question is longer than 80 columns: it was one line, cut at the dialog's edge
    ("... a work folder holding c"); it wraps inside the dialog."""
    from kldtui.tui.screens.dialogs import PathScreen
    from kldtui.tui.widgets.plain import PlainLabel

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, PathScreen)
        dialog, prompt = app.screen.query_one("#dialog"), app.screen.query_one(PlainLabel)
        assert dialog.content_region.contains_region(prompt.region), (prompt.region, dialog.content_region)
        lines = [strip.text.rstrip() for strip in prompt.render_lines(prompt.region.reset_offset)]
        assert " ".join(" ".join(lines).split()).endswith("a campaign's folder opens all its candidates):")


@sync
async def test_the_viewer_of_one_report_opens_a_campaigns_folder_as_its_leaderboard(tmp_path: Path) -> None:
    """o in the viewer of one report, given a campaign's folder (the dialog says it opens all its
    candidates): the viewer showed its first candidate alone. It becomes the folder's leaderboard,
    with the leaderboard's keys and help."""
    one = write_report(tmp_path / "one.json", make_report("one", 0.01, seed=1))
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    for name, level, seed in (("q8", 0.01, 2), ("q4", 0.03, 3)):
        write_report(campaign / f"comparison-{name}.json", make_report(name, level, seed=seed))
    app = create_app(reports=[one], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await open_with_o(app, pilot, campaign)
        board = app.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: board.row_count == 2, "the campaign's two reports on the ranking")
        assert [r.name for r in board.results] == ["q8", "q4"] and app.focused is board
        assert static_text(app, "#board-note").startswith("2 reports by mean KL")
        await pilot.press("d")
        await settle(app, pilot)
        assert "A = q8, B = q4" in static_text(app, "#diff-verdict")
        await pilot.press("question_mark")
        await pilot.pause()
        assert "Viewer (leaderboard)" in help_text(app)


@sync
async def test_viewer_single_reports_of_both_kinds(tmp_path: Path) -> None:
    for original in (False, True):
        report = make_report("q4-model", 0.004, seed=2, original=original)
        path = write_report(tmp_path / f"r{original}.json", report)
        app = create_app(reports=[path], config_dir=tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            text = static_text(app, "#result-summary")
            assert "q4-model" in text
            boot = headline_of(report)
            assert f"[{table_figure(boot['ci95_low'])}, {table_figure(boot['ci95_high'])}]" in text
            assert ("original comparator report" in text) is original
            assert len(app.query_one(KLChart).bars) == 8


@sync
async def test_viewer_leaderboard_sorted_ties_enter_and_diff(tmp_path: Path) -> None:
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)) for n, lvl, s in
             [("worst", 0.05, 1), ("best", 0.010, 2), ("close", 0.0102, 4)]]
    app = create_app(reports=paths, config_dir=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        board = app.query_one("#board", LeaderboardTable)
        assert [r.name for r in board.results] == ["best", "close", "worst"]
        ties = [board.get_row_at(i)[board.column("tie")] for i in range(3)]
        assert ties == ["best", "tied", "worse (p)"]
        bars = [board.get_row_at(i)[board.column("interval")] for i in range(3)]
        assert all("●" in b for b in bars) and "├" in bars[2] and "┤" in bars[2]
        assert bars[0].index("●") < bars[2].index("●")  # one axis for all rows
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ResultScreen) and app.screen.result.name == "close"
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("up", "space", "down", "down", "space", "d")
        await settle(app, pilot)
        verdict = str(app.query_one("#diff-verdict", Static).render())
        assert "A = best, B = worst" in verdict and "worst is worse than best by" in verdict
        chart = app.query_one("#diff-chart", KLChart)
        assert chart.signed and len(chart.bars) == 8 and all(b.kl > 0 for b in chart.bars)


@sync
async def test_viewer_bad_report_is_one_notification(tmp_path: Path) -> None:
    good = write_report(tmp_path / "good.json", make_report("good", 0.01, seed=1))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    app = create_app(reports=[good, bad], config_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        assert [r.name for r in app.query_one("#board", LeaderboardTable).results] == ["good"]
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert len(errors) == 1 and "bad.json" in errors[0] and "\n" not in errors[0]


def test_create_app_needs_something_to_show() -> None:
    import pytest

    with pytest.raises(BadInput):
        create_app()
    assert isinstance(create_app(reports=["x.json"]).query, object)
    assert ResultPane  # the viewer and the dashboard share the result pane


def test_view_command_refuses_a_missing_report_in_one_line(tmp_path: Path, capsys: Any) -> None:
    from kldtui.cli.main import main

    assert main(["view", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.json" in err and "not found" in err


def test_profile_abort_threshold_is_on_the_rail(tmp_path: Path) -> None:
    import dataclasses

    from kldtui.workflow.demo import prepare_demo

    profile = prepare_demo(tmp_path / "demo")
    profile = dataclasses.replace(profile, compare=dataclasses.replace(profile.compare, abort_kl_above=0.5))
    app = create_app(profile=profile, config_dir=tmp_path)
    assert app.main.model.stages["compare"].detail == "aborts if a window's KL > 0.5"
    assert [i for i, _ in app.main.model.windows.items()] == list(range(12))  # the suite's windows, at once


@sync
async def test_dashboard_leaderboard_and_diff_tabs(tmp_path: Path) -> None:
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s))
             for n, lvl, s in [("run-a", 0.02, 1), ("run-b", 0.01, 2)]]
    holder: dict[str, ScriptedPipeline] = {}
    app = create_app(pipeline_factory=lambda e, c: holder.setdefault("p", ScriptedPipeline(e, c)),
                     reports=paths, config_dir=tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(app, pilot)
        await pilot.press("b")
        await pilot.pause()
        assert app.query_one("#tabs").active == "leaderboard"
        board = app.query_one("#board", LeaderboardTable)
        assert [r.name for r in board.results] == ["run-b", "run-a"]
        assert "2 reports by mean KL" in static_text(app, "#board-note")
        await pilot.press("d")  # two reports: d compares them without marking
        await settle(app, pilot)
        assert app.query_one("#tabs").active == "diff"
        assert "A = run-b, B = run-a" in static_text(app, "#diff-verdict")
        await pilot.press("t")  # the theme picker (Textual's command palette of themes)
        await pilot.pause()
        assert type(app.screen).__name__ == "CommandPalette"
        assert "p" not in holder  # looking at results never starts the engine


@sync
async def test_leaderboard_bars_of_candidates_far_apart_are_on_a_log_axis(tmp_path: Path) -> None:
    # a q8 at 0.001 and a q2 at 0.1: on a linear axis the close candidates all sat in the first columns
    levels = [("q8", 0.001, 1), ("q6", 0.003, 2), ("q4", 0.01, 3), ("q2", 0.1, 4)]
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)) for n, lvl, s in levels]
    app = create_app(reports=paths, config_dir=tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(app, pilot)
        await pilot.press("b")
        await pilot.pause()
        board = app.query_one("#board", LeaderboardTable)
        assert [r.name for r in board.results] == ["q8", "q6", "q4", "q2"]
        bar = board.column("interval")
        assert [str(c.label) for c in board.columns.values()][bar] == "interval (log)"
        cells = [str(board.get_row_at(i)[bar]) for i in range(4)]
        width = len(cells[0])
        dots = [cell.index("●") for cell in cells]
        assert dots == sorted(dots) and len(set(dots)) == 4, dots
        assert dots[0] <= width // 8 and dots[-1] >= width - width // 6, (dots, width)
        # the log axis keeps the close ones apart: q8 to q4 is a tenth of the span, yet a third of the
        # width (on a linear one, a tenth)
        assert dots[2] - dots[0] >= width * 3 // 10, (dots, width)


@sync
async def test_viewer_shows_the_ranking_figures_and_the_repeat_floor(tmp_path: Path) -> None:
    """A real compare report (the examples suite): the figures users rank by, each with its interval,
    llama.cpp's own "±" beside Same top p and RMS Δp; and, with a repeat KL above its mean KL, the
    repeat-floor note (docs/STATISTICS.md)."""
    import json

    from kldtui.cli.main import main
    from kldtui.decide.verdict import plain_number

    root = Path(__file__).resolve().parents[2] / "examples" / "suite"
    out = tmp_path / "example.json"
    assert main(["compare", "--suite-manifest", str(root / "suite-manifest.json"), "--reference-dir",
                 str(root / "ref"), "--candidate-dir", str(root / "candidate"), "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    mean = doc["kl_mean_interval"]["estimate"]
    doc["noise_floor"] = {"source": "a repeat capture", "kl_mean": 10 * mean}
    # as if the top confidence bucket and the first band of positions had the windows an interval needs
    top, depth = doc["kl_by_reference_confidence"][-1], doc["kl_by_position"][0]
    top["windows"] = depth["windows"] = 8
    out.write_text(json.dumps(doc))
    app = create_app(reports=[out], config_dir=tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        text = " ".join(static_text(app, "#result-summary").split())
        for name in ("confident_flip_rate", "same_top_p", "rms_delta_p", "entropy_shift"):
            fig = doc["figures"][name]
            assert f"{fig['label']} " in text, name
        assert text.count("per position as llama.cpp counts it ±") == 2  # Same top p, RMS Δp
        assert f"inside the repeat floor: suite ({plain_number(mean)}) has a mean KL" in text
        assert "KLD stops predicting task accuracy" in text
        # KL by reference confidence and by depth, a bucket's window-clustered interval where it has the
        # windows one needs (the examples suite's 4 are too few: the mean alone)
        first = doc["kl_by_reference_confidence"][0]
        assert (f"KL by reference confidence: [0,0.25) {table_figure(first['kl_mean'])} "
                f"(n={first['positions']})") in text
        ends = interval_ends(top['ci95_low'], top['ci95_high'], table_figure)
        assert f"[0.95,1] {table_figure(top['kl_mean'])} {ends} (n={top['positions']})" in text
        bands = " ".join(static_text(app, "#result-positions").split())
        assert "95% window-clustered interval" in bands
        assert (f"{depth['start']}-{depth['stop'] - 1} ") in bands
        assert (f"{table_figure(depth['kl_mean'])} "
                f"{interval_ends(depth['ci95_low'], depth['ci95_high'], table_figure)}") in bands
