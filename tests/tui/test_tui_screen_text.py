"""What the screen says is true and readable (state, words, rendering, help, viewer CLI)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kldtui.tui import themes
from kldtui.tui.app import create_app
from kldtui.tui.screens.dialogs import HelpScreen
from kldtui.tui.widgets import LogView
from tests.fixtures_tui import (
    dashboard,
    drawn_lines,
    help_text,
    make_report,
    open_pane,
    screen_lines,
    settle,
    sync,
    until,
    write_report,
)
from tests.paths import REPO

ROOT = REPO


def kldtui(*args: str, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kldtui", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=120, stdin=subprocess.DEVNULL)


# -- 5: the log keeps its width for lines written while its tab was hidden -------------------------
@sync
async def test_log_lines_written_while_hidden_use_the_full_width(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("e")  # the Result tab: the log is hidden
        await pilot.pause()
        await pilot.press("2")  # the server writes lines meanwhile
        await settle(app, pilot)
        await pilot.press("l")
        wanted = "[server] WARNING prefix caching is off (required for capture)"
        log = app.query_one(LogView)
        await until(pilot, lambda: any(wanted in line for line in log.shown_lines()), "the log to show it")
        assert wanted in [line.rstrip() for line in log.shown_lines()]  # whole, not wrapped


# -- 14: a search without matches says so ---------------------------------------------------------
@sync
async def test_log_search_without_matches_says_0_matches(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        await pilot.press("slash", *"nosuchword")
        await pilot.pause()
        shown = " ".join(app.query_one(LogView).shown_lines())
        assert "0 matches" in shown and "nosuchword" in shown


# -- 11: each mode shows its own keys, and how to close the help ----------------------------------
def _two_reports(folder: Path) -> list[Path]:
    """Two saved reports, a closer to the reference than b: a viewer of them is a leaderboard."""
    return [write_report(folder / f"{n}.json", make_report(n, lvl, seed=s))
            for n, lvl, s in [("a", 0.02, 1), ("b", 0.01, 2)]]


@sync
async def test_viewer_help_lists_only_viewer_keys_and_says_how_to_close(tmp_path: Path) -> None:
    paths = _two_reports(tmp_path)
    app = create_app(reports=paths, config_dir=tmp_path, remember_theme=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = help_text(app) + " ".join(drawn_lines(app, "#help-close"))
        assert "run all" not in text and "stop the server" not in text and "search the log" not in text
        assert "mark a row" in text and "Esc" in text and "closes this help" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


def _continued_beside_their_keys(lines: list[str]) -> list[str]:
    """The help's wrapped lines that do not start in the column of their key's words: a row is
    ``  KEYS  WORDS``, a line that goes on with a row's words starts under its WORDS."""
    wrong, column = [], 0
    for line in lines:
        if not line.startswith(" "):  # a heading
            continue
        if not line.startswith("   "):  # a row: its words start after the keys' blank run
            column = re.search(r"\S(\s{2,})\S", line[2:]).end() + 1  # type: ignore[union-attr]
        elif len(line) - len(line.lstrip()) != column:
            wrong.append(line)
    return wrong


async def _open_help(app: Any, pilot: Any) -> None:
    await settle(app, pilot)
    await pilot.press("question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)


@sync
async def test_at_80x24_the_help_fits_and_its_words_wrap_beside_their_keys(tmp_path: Path) -> None:
    """The help was 78 columns wide (cut to 76) with its keys' words in one string wrapped by hand:
    at 80x24 a key's words broke at the dialog's edge and went on under the keys ("verdict" under
    "↑ ↓"), and how to close it lay below the screen's bottom. Now the dialog leaves a column each
    side, a key's words wrap in their own column, the keys and notes scroll, and the line that says
    how to close it stays in sight."""
    paths = _two_reports(tmp_path)
    viewer = create_app(reports=paths, config_dir=tmp_path / "v", remember_theme=False)
    board, _ = dashboard(tmp_path)
    for app in (viewer, board):
        async with app.run_test(size=(80, 24)) as pilot:
            await _open_help(app, pilot)
            screen = app.screen
            dialog, close = screen.query_one("#dialog"), screen.query_one("#help-close")
            assert dialog.region.x >= 1 and dialog.region.right <= 79, dialog.region
            assert dialog.region.y >= 1 and dialog.region.bottom <= 23, dialog.region
            lines = drawn_lines(app, "#help-text")
            assert any(line.startswith("   ") for line in lines), lines  # some words do wrap at 80
            assert _continued_beside_their_keys(lines) == [], "\n".join(lines)
            said = " ".join(" ".join(lines).split())
            for section in screen.sections:  # every key's words are there, whole, nothing cut
                assert section.title in said
                for keys, words in section.rows:
                    assert keys in said and " ".join(words.split()) in said, (keys, words)
            assert dialog.content_region.contains_region(close.region), (close.region, dialog.region)
            assert "closes this help" in " ".join(drawn_lines(app, "#help-close"))
            body = screen.query_one("#help-body")
            assert body.max_scroll_y > 0  # taller than the screen: it scrolls, the close line stays
            await pilot.press("end")
            await pilot.pause()
            assert body.scroll_y == body.max_scroll_y
            last = screen.query_one("#help-notes" if app is viewer else "#help-text")
            assert last.region.bottom <= body.region.bottom, (last.region, body.region)
            assert dialog.content_region.contains_region(close.region)


@sync
async def test_at_200x50_each_key_of_the_help_is_one_line(tmp_path: Path) -> None:
    """At 200x50 the help is wider than at 80 columns: no key's words wrap and nothing scrolls."""
    paths = _two_reports(tmp_path)
    app = create_app(reports=paths, config_dir=tmp_path, remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await _open_help(app, pilot)
        lines = drawn_lines(app, "#help-text")
        assert not any(line.startswith("   ") for line in lines), "\n".join(lines)
        assert app.screen.query_one("#help-body").max_scroll_y == 0


@sync
async def test_at_200x50_the_tie_column_over_source_clusters_is_one_line(tmp_path: Path) -> None:
    """The longest key's words, "no verdict" over a hidden-state suite's source clusters (136 cells with
    its key): the dialog was 112 columns wide and they wrapped, over windows too."""
    from kldtui.tui.screens.board import tie_column_help

    app = create_app(reports=_two_reports(tmp_path), config_dir=tmp_path, remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        await app.push_screen(HelpScreen((tie_column_help("source cluster"),)))
        await pilot.pause()
        lines = drawn_lines(app, "#help-text")
        said = [line for line in lines if "no verdict" in line]
        assert said and said[0].rstrip().endswith("on these source clusters"), lines
        assert not any(line.startswith("   ") for line in lines), "\n".join(lines)


@sync
async def test_the_difference_of_the_best_and_a_row_says_its_verdict_once(tmp_path: Path) -> None:
    """At 200x50, two reports marked and d pressed, the line under the table (the selected row's
    verdict against the best) and the difference pane just below it said the same long sentence word
    for word. The pane says it; the line points to it, and says it again once the pane is closed."""
    paths = _two_reports(tmp_path)
    app = create_app(reports=paths, config_dir=tmp_path, remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        await pilot.press("space", "down", "space")
        await open_pane(app, pilot, "d", "#diffpane", "#diff-verdict", "A = ")
        verdict = app.screen.verdicts["a"]  # type: ignore[attr-defined]
        assert verdict.startswith("a is worse than b by ")
        screen = " ".join(" ".join(screen_lines(app)).split())
        assert screen.count(" ".join(verdict.split())) == 1, screen
        assert screen.count(" ".join(verdict.split()[:8])) == 1, screen  # not even its start twice
        assert "a: its verdict against the best is the difference's, below" in screen, screen
        await pilot.press("escape")
        await pilot.pause()
        screen = " ".join(" ".join(screen_lines(app)).split())
        assert screen.count(" ".join(verdict.split())) == 1 and "difference's, below" not in screen, screen


@sync
async def test_dashboard_help_lists_dashboard_keys(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = help_text(app) + " ".join(drawn_lines(app, "#help-close"))
        assert "run all stages" in text and "closes this help" in text


# -- 12: an unknown --theme never rewrites the remembered one --------------------------------------
@sync
async def test_unknown_theme_does_not_change_settings(tmp_path: Path) -> None:
    report = write_report(tmp_path / "r.json", make_report("r", 0.01, seed=1))
    themes.save_settings({"theme": "kldtui-light"}, tmp_path)
    app = create_app(reports=[report], theme="nosuch", config_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.pause(0.1)
        assert app.theme == themes.DEFAULT_THEME
    assert themes.load_settings(tmp_path) == {"theme": "kldtui-light"}


# -- 8 and 10: kldtui view without a terminal, and files that are not reports ----------------------
def test_view_to_a_file_prints_the_summary_and_exits(tmp_path: Path) -> None:
    report = write_report(tmp_path / "r.json", make_report("q4", 0.01, seed=1))
    done = kldtui("view", str(report))
    assert done.returncode == 0, done.stderr
    assert "KL" in done.stdout and "\x1b[" not in done.stdout  # text, not the screen's escapes


def test_view_of_a_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"some": "thing"}))
    for path in (bad, wrong):
        done = kldtui("view", str(path))
        assert done.returncode == 2, (path, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and path.name in done.stderr and done.stdout == ""
        assert "run the compare stage" not in done.stderr


def test_view_of_a_work_folder_opens_its_report_and_an_empty_folder_is_one_line(tmp_path: Path) -> None:
    """A run's work folder stands for its comparison.json (not a terminal: its summary); a folder
    without a report is one line naming it, exit 2."""
    (tmp_path / "run").mkdir()
    write_report(tmp_path / "run" / "comparison.json", make_report("q4", 0.01, seed=1))
    done = kldtui("view", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    direct = kldtui("view", str(tmp_path / "run" / "comparison.json"))
    assert done.stdout == direct.stdout and "q4" in done.stdout
    (tmp_path / "empty").mkdir()
    empty = kldtui("view", str(tmp_path / "empty"))
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1
    assert f"{tmp_path / 'empty'}: is a folder without a comparison.json" in empty.stderr




# -- 6: without colour every compared tile still reads, and the legend matches ----------------------
@sync
async def test_window_tiles_carry_a_glyph_per_kl_band_and_the_legend_shows_them(
        tmp_path: Path, monkeypatch: Any) -> None:
    from kldtui.events import WindowState
    from kldtui.tui.widgets import WindowGrid

    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = dashboard(tmp_path)
    app.main.model.set_windows([(i, "prose") for i in range(4)])
    async with app.run_test(size=(120, 30)) as pilot:
        for i, kl in enumerate((0.001, 0.01, 0.05, 0.5)):
            app.main.model.apply(WindowState("compare", i, "compared", figures={"kl": kl}))
        app.main.refresh_now()
        await pilot.pause()
        grid = app.query_one(WindowGrid)
        plain = grid.render().plain
        glyphs = [m[1] for m in re.findall(r"(\d{3})(.)", plain.splitlines()[0])]
        assert len(set(glyphs)) == 4 and all(glyphs), plain  # four bands, four different glyphs
        legend = plain.splitlines()[-1]
        for glyph in glyphs:
            assert glyph in legend


# -- 7: at 80x24 every stage card's lines fit the card ---------------------------------------------
@sync
async def test_stage_cards_fit_at_80x24(tmp_path: Path) -> None:
    from kldtui.events import ServerReady, StageFailed, StageFinished, StageStarted
    from kldtui.tui.widgets import StageBox

    app, _ = dashboard(tmp_path)
    model = app.main.model
    async with app.run_test(size=(80, 24)) as pilot:
        model.apply(StageFinished("reference", summary="reference ready (local): 6 windows verified "
                                  "(sha256, 12.0 MiB) in /tmp/demo/reference",
                                  figures={"offline": True, "windows": [0, 6]}))
        model.apply(ServerReady("server", url="http://127.0.0.1:39123", served_model_name="tiny"))
        model.apply(StageFinished("capture", summary="6 captured, 0 skipped",
                                  figures={"captured": 6, "skipped": 0, "seconds": 3.2,
                                           "tokens_per_s": 980.4}))
        model.apply(StageStarted("finalize", detail="/tmp/demo/a/very/long/candidate/folder"))
        model.apply(StageFailed("compare", message="/tmp/demo/candidate: no finalized windows to compare; "
                                "run capture and finalize first"))
        app.main.refresh_now()
        await pilot.pause()
        for box in app.query(StageBox):
            width = box.content_size.width
            lines = box.render().plain.splitlines()  # type: ignore[union-attr]
            assert width >= 10
            for line in lines:
                assert len(line) <= width, (box.stage, line, width)
            assert lines[1].strip(), box.stage  # the state reads
        texts = {box.stage: box.render().plain for box in app.query(StageBox)}  # type: ignore[union-attr]
        assert "see" in texts["compare"] and "failed" in texts["compare"]
        assert "port 39123" in texts["server"] or "127.0.0.1:39123" in texts["server"]


# -- 4: texts derived from one state model ----------------------------------------------------------
def test_finished_window_leaves_no_bar_and_an_empty_diff_does_not_say_no_windows() -> None:
    from kldtui.events import Progress, WindowState
    from kldtui.tui.model import DashboardModel
    from kldtui.tui.widgets.diff_pane import DiffPane
    from kldtui.tui.widgets.kl_chart import KLChart

    model = DashboardModel()
    model.apply(Progress("capture", "window 004 rows", 0, 511, "rows"))
    model.apply(Progress("capture", "windows", 4, 6, "windows"))
    model.apply(WindowState("capture", 4, "captured"))
    assert list(model.progress) == [("capture", "windows")]  # no bar at 0 % for a finished window
    chart = next(w for w in DiffPane().compose() if isinstance(w, KLChart))
    assert chart.empty != "no windows compared yet"


def test_idle_note_follows_the_stages() -> None:
    from kldtui.events import StageFailed, StageStarted
    from kldtui.tui.model import DashboardModel

    model = DashboardModel()
    assert "press r" in model.idle_note()[0]
    model.apply(StageStarted("capture"))
    assert model.idle_note() == ["waiting for progress…"]
    model.apply(StageFailed("capture", message="server died"))
    assert "capture failed" in model.idle_note()[0]


def test_next_steps_suggest_the_full_run_after_a_partial_one() -> None:
    from kldtui.workflow.next_steps import report_next_steps

    lines = report_next_steps(Path("w/comparison.json"), (0, 8), 32, "kldtui.toml")
    assert lines[0] == "report: w/comparison.json"
    assert any("kldtui view w/comparison.json" in line for line in lines)
    assert any("kldtui diff w/comparison.json" in line for line in lines)
    assert "stop_window = 32 in kldtui.toml" in lines[-1]
    assert len(report_next_steps(Path("w/comparison.json"), (0, 32), 32)) == 3  # already the whole suite


# -- 4: the quit dialog asks about what is really running ------------------------------------------
@sync
async def test_quit_dialog_names_a_running_server_and_not_one_that_exited(tmp_path: Path) -> None:
    from textual.widgets import Label

    from kldtui.tui.screens.dialogs import ConfirmScreen

    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")  # start the server
        await settle(app, pilot)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        question = str(app.screen.query_one("#question", Label).render())
        assert question == "A server is running. Stop it and quit?"
        await pilot.press("n")  # stay
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.is_running
        holder["p"].server = None  # the server exited on its own
        holder["p"].base_url = None
        app.main.refresh_now()
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)  # nothing to stop: quits at once
    assert app.return_code == 0
    assert "stop_server" not in holder["p"].calls


@sync
async def test_stopping_the_server_turns_its_card_to_stopped(tmp_path: Path) -> None:
    from kldtui.tui.widgets import StageBox

    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        card = app.query_one("#stage-server", StageBox)
        assert "8123" in card.render().plain  # type: ignore[union-attr]
        await pilot.press("x")
        await settle(app, pilot)
        text = card.render().plain  # type: ignore[union-attr]
        assert "stopped" in text and "8123" not in text, text
        assert holder["p"].stopped_server
