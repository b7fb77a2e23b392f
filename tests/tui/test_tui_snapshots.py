"""Deterministic snapshots (pytest-textual-snapshot): the dashboard mid-capture and finished, the
viewer of one report and of several. Events come from the scripted pipeline, so every run draws
the same screen. Update after an intended change with ``pytest --snapshot-update``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kldtui.tui.app import KldApp, create_app
from tests.fixtures_tui import DOMAINS, ScriptedPipeline, busy_workers, make_report, until, write_report

THEME = "kldtui-dark"
WINDOWS = [(w, DOMAINS[w % len(DOMAINS)]) for w in range(32)]


def dashboard(tmp_path: Path, pause_after_window: int | None,
              report_path: Path | None = None) -> tuple[KldApp, dict[str, Any]]:
    holder: dict[str, Any] = {}

    def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        holder["p"] = ScriptedPipeline(emit, cancel, windows=32, pause_after_window=pause_after_window,
                                       report_path=report_path)
        return holder["p"]

    app = create_app(pipeline_factory=factory, config_dir=tmp_path, theme=THEME, windows=WINDOWS,
                     remember_theme=False)
    return app, holder


SIZES = [(80, 24), (200, 60)]


async def _log_at_its_end(pilot: Any) -> None:
    """The log follows its last line: its scroll to the end (scheduled after the lines are laid out)
    has landed, and stayed, before the picture is taken."""
    from textual.widgets import RichLog

    log = pilot.app.query_one("#log-lines", RichLog)
    settled = 0
    for _ in range(500):
        await pilot.pause(0.02)
        settled = settled + 1 if log.scroll_y == log.max_scroll_y else 0
        if settled >= 3:
            return
    raise AssertionError(f"the log did not settle at its end: {log.scroll_y} of {log.max_scroll_y}; "
                         f"{len(log.lines)} lines, virtual {log.virtual_size}, size {log.size}, "
                         f"region {log.scrollable_content_region}, target {log.scroll_target_y}")


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: Any) -> None:
    """Every screen names the report file it shows, relative to here: the same text on every run."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x60"])
def test_dashboard_mid_capture(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    app, holder = dashboard(tmp_path, pause_after_window=12)

    async def run_before(pilot: Any) -> None:
        await pilot.press("r")
        await until(pilot, lambda: "p" in holder and holder["p"].paused.is_set(), "the pause mid-capture")
        await pilot.pause(0.05)
        app.main.refresh_now()
        await pilot.pause()
        await _log_at_its_end(pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x60"])
def test_dashboard_finished(snap_compare: Any, tmp_path: Path, size: tuple[int, int],
                            monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # the report path is shown relative to here
    app, holder = dashboard(tmp_path, pause_after_window=None, report_path=Path("comparison.json"))

    async def run_before(pilot: Any) -> None:
        await pilot.press("r")
        await until(pilot, lambda: app.main.model.stages["compare"].state == "done"
                    and not busy_workers(app),
                    "the run to finish")
        await pilot.pause(0.05)
        app.main.refresh_now()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x60"])
def test_dashboard_reopened(snap_compare: Any, tmp_path: Path, size: tuple[int, int],
                            monkeypatch: Any) -> None:
    """A finished work folder opened again: the state on disk, as if it had just run (issue 15 item 1)."""
    from kldtui.workflow.state import DiskWindow, RunState

    monkeypatch.chdir(tmp_path)
    report = make_report("tiny-candidate", 0.01, seed=3, domains=[d for _, d in WINDOWS])
    write_report(tmp_path / "comparison.json", report)
    kl = report["per_window_arrays"]["kl_mean"]
    state = RunState(suite_windows=32, reference_ready=True,
                     windows={i: DiskWindow(i, d, "compared", kl[i]) for i, d in WINDOWS},
                     report_path=Path("comparison.json"),
                     headline={"kl_mean": report["kl_window_cluster_bootstrap"]["estimate"],
                               "top1_agreement": report["top1_agreement"]},
                     window_range=(0, 32))
    app, _ = dashboard(tmp_path, pause_after_window=None)

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        app.main.apply_disk_state(state)
        await until(pilot, lambda: not busy_workers(app),
                    "the report to load")
        await pilot.pause(0.05)
        app.main.refresh_now()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x60"])
def test_viewer_no_color(snap_compare: Any, tmp_path: Path, size: tuple[int, int], monkeypatch: Any) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = _viewer(tmp_path, [("q4-candidate", 0.01, 3, False)])
    assert snap_compare(app, terminal_size=size, run_before=_loaded)


def _viewer(tmp_path: Path, specs: list[tuple[str, float, int, bool]]) -> KldApp:
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s, original=o))
             for n, lvl, s, o in specs]
    return create_app(reports=paths, config_dir=tmp_path, theme=THEME, remember_theme=False)


async def _loaded(pilot: Any) -> None:
    app = pilot.app
    await until(pilot, lambda: not busy_workers(app),
                "the report to load")
    # the leaderboard's columns are sized from its rows when the app is next idle: let that land
    from textual.widgets import DataTable

    for table in app.screen.query("#board").results(DataTable):
        await until(pilot, lambda t=table: t.virtual_size.height >= t.row_count + 1, "the rows laid out")
    await pilot.wait_for_scheduled_animations()
    for _ in range(3):
        await pilot.pause()


def test_viewer_one_report(snap_compare: Any, tmp_path: Path) -> None:
    app = _viewer(tmp_path, [("q4-candidate", 0.01, 3, False)])
    assert snap_compare(app, terminal_size=(100, 30), run_before=_loaded)


def test_viewer_leaderboard_light(snap_compare: Any, tmp_path: Path) -> None:
    app = _viewer(tmp_path, [("int4-awq", 0.05, 1, False), ("fp8", 0.010, 2, False),
                             ("mxfp4", 0.0102, 4, False)])
    app.requested_theme = "kldtui-light"
    assert snap_compare(app, terminal_size=(100, 24), run_before=_loaded)


def test_viewer_original_report_80x24(snap_compare: Any, tmp_path: Path) -> None:
    app = _viewer(tmp_path, [("published-run", 0.003, 5, True)])
    assert snap_compare(app, terminal_size=(80, 24), run_before=_loaded)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_viewer_help(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """The leaderboard viewer's help (?): at 80x24 a column of screen each side, the keys' words wrapped
    beside their keys, the keys scrolling above the line that says how to close it."""
    app = _viewer(tmp_path, [("int4-awq", 0.05, 1, False), ("fp8", 0.010, 2, False)])

    async def run_before(pilot: Any) -> None:
        await _loaded(pilot)
        await pilot.press("question_mark")
        for _ in range(3):
            await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
