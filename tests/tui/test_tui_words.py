"""Issue 26: every word on the dashboard true. Each test reads what the user reads (the cards, the
grid, the progress panel, the log, the dialogs), through Textual's pilot."""

from __future__ import annotations

import json
import shlex
import threading
from itertools import takewhile
from pathlib import Path
from typing import Any

from textual.widgets import Button, DataTable, Input, Label, Static

from kldtui.events import (
    BackendChosen,
    LogLine,
    Progress,
    ServerReady,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.report import load_report, summary_text
from kldtui.formats.report_model import as_report
from kldtui.text import kldtui_command, table_figure
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.model import DashboardModel
from kldtui.tui.screens.dialogs import ConfirmScreen
from kldtui.tui.widgets import (
    KLChart,
    LeaderboardTable,
    LogView,
    ProgressPanel,
    StageBox,
    WindowGrid,
)
from kldtui.workflow.state import DiskWindow, RunState
from tests.fixtures_tui import (
    DOMAINS,
    ScriptedPipeline,
    drawn_lines,
    feed,
    help_text,
    make_report,
    open_with_o,
    result_text,
    settle,
    static_text,
    sync,
    until,
    write_report,
)


def dashboard(tmp_path: Path, windows: int = 6, **kwargs: Any) -> tuple[KldApp, dict[str, ScriptedPipeline]]:
    holder: dict[str, ScriptedPipeline] = {}

    def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        holder["p"] = ScriptedPipeline(emit, cancel, windows=windows,
                                       report_path=tmp_path / "comparison.json", **kwargs)
        return holder["p"]

    app = create_app(pipeline_factory=factory, config_dir=tmp_path / "cfg", theme="kldtui-dark",
                     windows=[(w, DOMAINS[w % len(DOMAINS)]) for w in range(windows)])
    return app, holder


def card(app: KldApp, stage: str) -> str:
    return app.query_one(f"#stage-{stage}", StageBox).render().plain  # type: ignore[union-attr]


def panel(app: KldApp) -> str:
    return app.query_one(ProgressPanel).render().plain


def pending(n: int, done: dict[int, str] | None = None) -> dict[int, DiskWindow]:
    done = done or {}
    return {i: DiskWindow(i, DOMAINS[i % len(DOMAINS)], done.get(i, "pending")) for i in range(n)}  # type: ignore[arg-type]


# -- the cards say what is so -------------------------------------------------------------------------
@sync
async def test_capture_card_percent_follows_its_progress(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await feed(app, pilot, StageStarted("capture", detail="6 windows"),
                   Progress("capture", "windows", 0, 6, "windows"))
        assert "running 0%" in card(app, "capture")
        await feed(app, pilot, Progress("capture", "windows", 3, 6, "windows"))
        text = card(app, "capture")
        assert "running 50%" in text, text  # it said "running 0%" while its own bar showed 50 %
        assert "50%" in panel(app)


@sync
async def test_server_card_says_serving_while_the_server_runs(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        text = card(app, "server")
        assert "serving" in text and "done" not in text, text
        assert "127.0.0.1:8123" in text
        await pilot.press("x")
        await settle(app, pilot)
        text = card(app, "server")
        assert "stopped" in text and "serving" not in text, text
        await feed(app, pilot, StageStarted("server", detail="python -m vllm ..."))
        text = card(app, "server")
        assert "starting" in text and "running" not in text, text  # loading, not serving yet


@sync
async def test_reopened_folder_with_only_the_reference_shows_it(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.main.apply_disk_state(RunState(suite_windows=6, reference_ready=True, windows=pending(6)))
        await pilot.pause()
        app.main.refresh_now()
        await pilot.pause()
        ref = card(app, "reference")
        assert "● Reference" in ref and "done" in ref and "windows 0-5" in ref, ref
        for stage in ("server", "capture", "finalize", "compare"):
            assert "idle" in card(app, stage), stage
        assert "r runs the rest" in panel(app)
        # what was found, not "opened an earlier run": nothing of a candidate ran in this folder
        lines = [text for _, text in app.main.model.log]
        assert "[run] found the reference ready (6 windows); no candidate captured yet" in lines, lines
        assert not any("earlier run" in text for text in lines), lines


@sync
async def test_card_counts_are_what_is_on_disk_after_a_resume(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        earlier = {0: "finalized", 1: "finalized", 2: "captured"}
        app.main.apply_disk_state(RunState(suite_windows=6, reference_ready=True,
                                           windows=pending(6, earlier)))  # type: ignore[arg-type]
        await pilot.pause()
        app.main.refresh_now()
        await pilot.pause()
        assert "windows 3/6" in card(app, "capture") and "windows 2/6" in card(app, "finalize")
        # the resumed capture announces the earlier windows again, then captures the rest
        events: list[Any] = [StageStarted("capture", detail="6 windows")]
        events += [WindowState("capture", i, "captured", DOMAINS[i], figures={"skipped": True})
                   for i in range(3)]
        events += [WindowState("capture", i, "captured", DOMAINS[i]) for i in range(3, 6)]
        events += [StageFinished("capture", summary="3 captured, 3 skipped",
                                 figures={"captured": 3, "skipped": 3, "tokens_per_s": 980.0})]
        events += [WindowState("finalize", 2, "finalized", DOMAINS[2])]
        await feed(app, pilot, *events)
        text = card(app, "capture")
        assert "windows 6/6" in text and "captured 3" not in text, text
        assert "windows 3/6" in card(app, "finalize")  # two from the earlier run, one now


@sync
async def test_stop_clears_in_progress_marks_and_bars(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path, windows=8, pause_after_window=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("3")
        while "p" not in holder or not holder["p"].paused.is_set():
            await pilot.pause(0.02)
        await pilot.pause(0.05)
        app.main.refresh_now()
        await pilot.pause()
        grid = app.query_one(WindowGrid)
        assert "003›" in grid.render().plain and "cap rows" in panel(app)
        await pilot.press("s")
        await settle(app, pilot)
        assert "›" not in grid.render().plain  # window 3 was not captured: it is pending again
        assert app.main.model.windows[3].state == "pending"
        text = panel(app)
        assert "━" not in text and "r runs the rest" in text, text  # no bar of a stopped stage
        assert "stopped" in card(app, "capture")


def test_helper_run_windows_end_their_bars_and_leave_the_grid_alone() -> None:
    model = DashboardModel()
    model.set_windows([(0, "prose"), (1, "prose")])
    model.apply(Progress("reference", "window 001 rows", 0, 511, "rows"))
    model.apply(Progress("reference", "captured", 1, 2, "windows"))
    model.apply(WindowState("reference", 1, "captured", "prose"))
    assert ("reference", "window 001 rows") not in model.progress  # it stayed at 0/511 before
    assert model.windows[1].state == "pending"  # the reference's window is not the candidate's
    model.apply(StageFinished("reference", summary="ready"))
    assert not [k for k in model.progress if k[0] == "reference"]  # a finished stage leaves no bar


@sync
async def test_progress_labels_and_amounts_read_whole(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(200, 30)) as pilot:
        await feed(app, pilot, StageStarted("reference", detail="capturing the reference"),
                   Progress("reference", "captured", 4, 6, "windows"),
                   Progress("reference", "finalized", 3, 6, "windows"),
                   StageStarted("finalize"),
                   Progress("finalize", "window 000", 2 * 2**20, 4186112, "bytes", rate=2**20))
        text = panel(app)
        assert "ref captured" in text and "ref finalized" in text, text
        assert "ref reference wind" not in text
        assert "2.00/3.99 MiB" in text and "4186112" not in text, text
        assert "1.00 MiB/s" in text
        assert "4/6 windows" in text
        assert "finalize 50%" in card(app, "reference")  # the reference's own capture, in its phases
        assert "50%" not in card(app, "finalize")  # one window's file is not the stage's progress


@sync
async def test_quit_dialog_follows_what_runs(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        dialog = app.screen
        assert str(dialog.query_one("#question", Label).render()) == "A server is running. Stop it and quit?"
        holder["p"].server = None  # the run ended while the dialog is open
        holder["p"].base_url = None
        await pilot.pause(ConfirmScreen.RECHECK_S + 0.3)
        assert str(dialog.query_one("#question", Label).render()) == "Nothing is running any more. Quit?"
        assert str(dialog.query_one("#yes", Button).label) == "Quit (y)"
        await pilot.press("y")
        await settle(app, pilot)
    assert app.return_code == 0


@sync
async def test_autostart_says_it_is_starting_not_press_r(tmp_path: Path) -> None:
    gate = threading.Event()
    holder: dict[str, ScriptedPipeline] = {}

    def slow_factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        gate.wait(10)  # building the pipeline takes a while (imports, the suite)
        holder["p"] = ScriptedPipeline(emit, cancel, windows=4, report_path=tmp_path / "comparison.json")
        return holder["p"]

    app = create_app(pipeline_factory=slow_factory, config_dir=tmp_path / "cfg", autostart=True,
                     windows=[(w, "prose") for w in range(4)])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        text = panel(app)
        assert "press r" not in text and "starting the whole run" in text, text
        gate.set()
        await settle(app, pilot)
        assert "press r" not in panel(app)


@sync
async def test_x_without_a_server_says_so(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("1")  # the reference alone: a pipeline, no server
        await settle(app, pilot)
        await pilot.press("x")
        await settle(app, pilot)
        messages = [n.message for n in app._notifications]
        assert any("no server is running" in m for m in messages), messages
        assert "stop_server" not in holder["p"].calls


# -- the log -------------------------------------------------------------------------------------------
@sync
async def test_log_has_window_results_one_prefix_each_and_no_access_lines(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await feed(app, pilot,
                   LogLine("server", 'INFO:     127.0.0.1:49928 - "POST /v1/completions HTTP/1.1" 200 OK',
                           level="debug"),
                   LogLine("server", "INFO 12-01 [kldtui.embedded] model loaded"),
                   ServerReady("server", url="http://127.0.0.1:8123", served_model_name="tiny"),
                   BackendChosen("compare", "c-kernel", "c-kernel, 1 thread", "no GPU seen: the CPU kernel"),
                   LogLine("server", "[reference server] INFO model loaded"),
                   WindowState("compare", 2, "compared", "code", figures={"kl": 0.0273169, "top1": 0.9022}),
                   WindowState("capture", 3, "failed", "code", figures={"error": "the server stopped"}))
        lines = [line.rstrip() for line in app.query_one(LogView).shown_lines()]
        assert not any("POST /v1/completions" in line for line in lines), lines
        assert "[server] INFO 12-01 [kldtui.embedded] model loaded" in lines
        assert "[server] ready at http://127.0.0.1:8123 as tiny" in lines
        assert "[compare] compare backend: c-kernel, 1 thread (no GPU seen: the CPU kernel)" in lines
        assert "[reference server] INFO model loaded" in lines
        assert "[compare] window 002 (code) compared, mean KL 0.0273169, top-1 90.22 %" in lines
        assert "[capture] window 003 (code) failed: the server stopped" in lines


@sync
async def test_a_server_ready_is_said_once_and_never_done(tmp_path: Path) -> None:
    """The serve stage ends when its server is ready: the ready line says it; 'finished ready at'
    (dashboard), 'done - ready at' (--batch), 'server done: ready at' (the reference's server) did
    again, and called a serving server done."""
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.stages.reference_capture import as_reference_stage

    url = "http://127.0.0.1:8123"
    events = [StageStarted("server", detail="python -m kldtui.embedded"),
              ServerReady("server", url=url, served_model_name="tiny"),
              StageFinished("server", summary=f"ready at {url}", figures={"url": url})]
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await feed(app, pilot, *events)
        lines = [line.rstrip() for line in app.query_one(LogView).shown_lines()]
    assert [line for line in lines if url in line] == [f"[server] ready at {url} as tiny"], lines
    out = io.StringIO()
    with BatchReporter(out) as rep:
        for event in events:
            rep(event)
    said = [line for line in out.getvalue().splitlines() if url in line]
    assert len(said) == 1 and said[0].endswith(f"server: ready at {url}, serving tiny"), said
    relabelled: list[Any] = []
    emit = as_reference_stage(relabelled.append, 6)
    for event in events:
        emit(event)
    assert [e.line for e in relabelled if isinstance(e, LogLine) and url in e.line] == [
        f"reference server ready at {url}"]


def test_server_lines_per_request_are_debug() -> None:
    from kldtui.stages.serve import server_line_level

    assert server_line_level('INFO:     127.0.0.1:49928 - "POST /v1/completions HTTP/1.1" 200 OK') == "debug"
    assert server_line_level('INFO:     127.0.0.1:49928 - "POST /v1/completions HTTP/1.1" 500 Internal '
                             'Server Error') == "warning"
    assert server_line_level("INFO 12-01 15:16:54 [kldtui.embedded] Finished request cmpl-x-0: 512 prompt "
                             "tokens, 1 generated, 0.022 s") == "debug"
    assert server_line_level("INFO 12-01 [loader.py:12] Loading weights took 3.1 s") == "info"
    assert server_line_level("ERROR 12-01 CUDA out of memory") == "error"
    assert server_line_level("WARNING 12-01 prefix caching is off") == "warning"


def test_reference_capture_events_name_their_bars_once() -> None:
    from kldtui.stages.reference_capture import as_reference_stage

    seen: list[Any] = []
    emit = as_reference_stage(seen.append, 6)
    emit(Progress("capture", "windows", 2, 6, "windows"))
    emit(Progress("finalize", "windows", 1, 6, "windows"))
    emit(WindowState("capture", 1, "captured", "prose"))
    emit(WindowState("finalize", 1, "finalized", "prose"))
    tasks = [(e.stage, e.task) for e in seen if isinstance(e, Progress)]
    assert tasks == [("reference", "captured"), ("reference", "finalized")]  # not "windows" twice
    assert [(e.stage, e.state) for e in seen if isinstance(e, WindowState)] == [
        ("reference", "captured"), ("reference", "finalized")]


def test_batch_prints_no_line_for_the_reference_windows_and_ends_their_bars() -> None:
    import io

    from kldtui.cli.batch_reporter import BatchReporter

    out = io.StringIO()
    rep = BatchReporter(out, live=True)
    with rep:
        rep(Progress("reference", "window 000 rows", 256, 511, "rows"))
        rep(Progress("finalize", "window 001", 2 * 2**20, 4186112, "bytes"))
        bars = {t.description: t.fields["amount"] for t in rep._progress.tasks}
        assert bars["finalize window 001"] == "2.00/3.99 MiB"  # it read 2097152/4186112
        assert bars["reference window 000 rows"] == "256/511 rows"
        rep(WindowState("reference", 0, "captured", "prose"))
        assert [t.description for t in rep._progress.tasks] == ["finalize window 001"]
    assert "window 000 (prose) captured" not in out.getvalue()


# -- the viewer and `o`: which file, every figure the report holds, intervals with their caveat --------
def _run_report(folder: Path, name: str, level: float, seed: int, domains: list[str] | None = None) -> Path:
    """A report as `kldtui run` leaves it: FOLDER/comparison.json for the candidate FOLDER/candidate."""
    folder.mkdir(parents=True, exist_ok=True)
    report = make_report(name, level, seed=seed, domains=domains)
    report["candidate_dir"] = str(folder / "candidate")
    report["topk_agreement"] = {"definition": "reference top-1 among the candidate's top k", "k": [1, 5, 10],
                                "1": 0.8943, "5": 0.99967, "10": 1.0}
    kl = report["kl_reference_to_candidate"]  # quantiles in order, as a real report's are
    kl.update({"p90": round((kl["median"] + kl["p95"]) / 2, 6),
               "p99_9": round((kl["p99"] + kl["max"]) / 2, 6)})
    report["kl_by_position"] = [{"start": 0, "stop": 256, "positions": 1536, "kl_mean": 0.0278},
                                {"start": 256, "stop": 511, "positions": 1530, "kl_mean": 0.0286}]
    report["provenance"] = {"kldtui_version": "0.1.0", "backend": "c-kernel", "elapsed_seconds": 0.18,
                            "bytes_compared": 50233344, "created_utc": "2026-12-01T15:28:10Z",
                            "verified": {"token_hashes": True, "suite_hash": True,
                                         "logits_sha256": "skipped"},
                            "threads": 2, "command": "kldtui run --profile kldtui.toml"}
    return write_report(folder / "comparison.json", report)


@sync
async def test_o_names_the_file_shown_and_finds_a_folders_report(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    app, holder = dashboard(tmp_path / "run")
    (tmp_path / "run").mkdir()
    _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        assert "file run/comparison.json" in result_text(app)  # this run's report, named
        await pilot.press("o")
        await pilot.pause()
        box = app.screen.query_one("#path", Input)
        box.value = "q4-run"  # the work folder: its comparison.json is found
        await pilot.press("enter")
        await settle(app, pilot)
        text = result_text(app)
        assert text.startswith("q4-run  (kldtui report)"), text  # named by its run folder, not "candidate"
        assert "file q4-run/comparison.json" in text
        assert "opened with o; this run's report is run/comparison.json" in text
        assert "Result shows q4-run/comparison.json (opened with o)" in panel(app)
        assert "report: run/comparison.json" in panel(app)  # the run's own next steps stay, named as its own
        (tmp_path / "empty").mkdir()
        await open_with_o(app, pilot, tmp_path / "empty")
        messages = [n.message for n in app._notifications]
        assert any("is a folder without a comparison.json" in m for m in messages), messages


@sync
async def test_o_on_a_campaigns_folder_puts_every_candidate_on_the_board(tmp_path: Path,
                                                                         monkeypatch: Any) -> None:
    """A campaign's work folder holds comparison-NAME.json per candidate (no comparison.json): `o`
    on it loads them all, named by their candidates' folders; a link among them is not followed."""
    monkeypatch.chdir(tmp_path)
    app, holder = dashboard(tmp_path / "run")
    (tmp_path / "run").mkdir()
    camp = tmp_path / "camp"
    for name, level, seed in (("q4", 0.02, 5), ("q8", 0.01, 6)):
        made = _run_report(tmp_path / "tmp" / name, name, level, seed=seed)
        report = json.loads(made.read_text())
        report["candidate_dir"] = str(camp / "candidates" / name)
        (camp / "candidates" / name).mkdir(parents=True)
        (camp / f"comparison-{name}.json").write_text(json.dumps(report))
    (camp / "comparison-planted.json").symlink_to(camp / "comparison-q4.json")
    stray = json.loads((camp / "comparison-q4.json").read_text())  # dropped in by another tool
    (camp / "comparison-stray.json").write_text(json.dumps(dict(stray, candidate_dir="/elsewhere/stray")))
    async with app.run_test(size=(160, 40)) as pilot:
        await open_with_o(app, pilot, "camp")
        names = sorted(r.name for r in app.main.results)
        assert names == ["q4", "q8"], names  # the planted link is not a third row, nor the stray report
        # ... and the stray is named, as kldtui view and leaderboard name it (it was left out silently)
        said = [n.message for n in app._notifications if "left out" in n.message]
        assert said == ["camp: left out comparison-stray.json: not a candidate of the campaign there "
                        "(neither ranked in a camp/leaderboard*.json nor with a camp/candidates/NAME folder) "
                        "(give a report's file by name to rank it anyway)"], said


@sync
async def test_viewer_shows_quantiles_topk_positions_and_provenance(tmp_path: Path) -> None:
    path = _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    kl = json.loads(path.read_text())["kl_reference_to_candidate"]
    app = create_app(reports=[path], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(app, pilot)
        text = result_text(app)
        for needle in ("per-token KL", f"p90 {table_figure(kl['p90'])}", f"p99.9 {table_figure(kl['p99_9'])}",
                       f"max {table_figure(kl['max'])}",
                       "top-1 89.43 %", "top-5 99.97 %", "top-10 100.00 %",
                       "KL by position", "0-255", "256-510", "0.0278",
                       f"candidate {tmp_path / 'q4-run' / 'candidate'}", "reference /data/reference/ref",
                       "c-kernel backend, 2 threads", "kldtui 0.1.0", "logits SHA-256 skipped",
                       "command   kldtui run --profile kldtui.toml"):
            assert needle in text, (needle, text)


REASON = ("the candidate server is running on this host: the CPU kernel with 1 of 2 threads so capture "
          "is not starved")


@sync
async def test_the_backend_is_shown_with_why_it_was_chosen_in_its_column_at_80_cols(tmp_path: Path) -> None:
    path = _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    report = json.loads(path.read_text())
    report["provenance"]["backend_reason"] = REASON
    write_report(path, report)
    app = create_app(reports=[path], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        lines = drawn_lines(app, "#result-provenance")
        width = app.screen.query_one("#result-provenance").size.width
        start = next(n for n, line in enumerate(lines) if line.startswith("compared  "))
        rows = [lines[start]] + list(takewhile(lambda line: line.startswith(" " * 10), lines[start + 1:]))
        # the reason as the compare said it, beside the backend, wrapped under its own column
        assert len(rows) > 1 and all(len(line) <= width <= 80 for line in lines), lines
        said = " ".join(line[10:] for line in rows)
        assert said.startswith(f"c-kernel backend, 2 threads ({REASON}), 0.18 s, kldtui 0.1.0"), said
        assert lines[start + len(rows)].startswith("verified  "), lines
    # kldtui view's text summary says it beside the backend too
    assert f"  c-kernel backend ({REASON}), 0.18 s" in summary_text(load_report(path))
    # a report that does not know why (written before reports kept it) shows the backend alone
    del report["provenance"]["backend_reason"]
    assert "  c-kernel backend, 0.18 s" in summary_text(as_report(report))


HOSTILE = {"command": "kldtui run --profile a.toml\nMean KLD:   0.000001\tbest",
           "candidate_dir": "/data/q4\nverified  all checked",
           "reference_dir": "/data/ref\r\nsuite     token hash 0000",
           "created_utc": "2026-12-01\t\nforged", "kldtui_version": "0.1.0\nmade up"}


@sync
async def test_a_reports_free_text_with_line_breaks_and_tabs_is_shown_on_one_line(tmp_path: Path) -> None:
    """A report's provenance.command and candidate_dir (and the other free text the provenance rows
    show) may hold line breaks and tabs, which the JSON loader allows: the viewer printed them as they
    are, so a command could add a made-up row ("Mean KLD: 0.000001") under the real ones. Each is
    shown on one line by the rule for untrusted names (printable_name: "\\x0a"), in the viewer and in
    kldtui view's text summary."""
    from kldtui.formats.untrusted_json import printable_name

    path = _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    report = json.loads(path.read_text())
    report.update(candidate_dir=HOSTILE["candidate_dir"], reference_dir=HOSTILE["reference_dir"])
    report["provenance"].update(command=HOSTILE["command"], created_utc=HOSTILE["created_utc"],
                                kldtui_version=HOSTILE["kldtui_version"])
    write_report(path, report)
    loaded = load_report(path)  # the loader keeps them as they are: the views make them one line
    assert loaded.provenance is not None and loaded.provenance.command == HOSTILE["command"]
    app = create_app(reports=[path], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        lines = drawn_lines(app, "#result-provenance")
        labels = [line.split()[0] for line in lines if line[:1] != " "]
        # one row per label, as a report without line breaks has, each value on its row
        assert labels == ["reference", "candidate", "compared", "verified", "suite", "command"], lines
        rows = {line.split()[0]: line[10:] for line in lines}
        assert rows["command"] == printable_name(HOSTILE["command"]), lines
        assert rows["command"] == "kldtui run --profile a.toml\\x0aMean KLD:   0.000001\\x09best"
        assert rows["candidate"] == printable_name(HOSTILE["candidate_dir"]), lines
        assert rows["reference"] == "/data/ref\\x0d\\x0asuite     token hash 0000", lines
        assert "2026-12-01\\x09\\x0aforged" in rows["compared"], lines
        assert "kldtui 0.1.0\\x0amade up" in rows["compared"], lines
        assert not [line for line in lines if "Mean KLD" in line and not line.startswith("command ")], lines
        await pilot.resize_terminal(80, 24)  # wrapped at 80 columns: in the value's column, never a label's
        await settle(app, pilot)
        narrow = drawn_lines(app, "#result-provenance")
        assert [line.split()[0] for line in narrow if line[:1] != " "] == labels, narrow
    said = summary_text(loaded).splitlines()  # kldtui view's
    assert f"  candidate {printable_name(HOSTILE['candidate_dir'])}  vs reference " \
           f"{printable_name(HOSTILE['reference_dir'])}" in said, said
    assert said[-1].endswith("; kldtui 0.1.0\\x0amade up"), said
    assert not [line for line in said if line.startswith(("verified", "suite", "made up"))], said


@sync
async def test_a_reports_name_and_file_with_a_line_break_are_shown_on_one_line(tmp_path: Path) -> None:
    """The Result summary's first lines (the candidate's name, from its folder, and the report's file)
    printed a line break in a folder's name as it is: a made-up line under the real one."""
    path = _run_report(tmp_path / "q4\nmean KL  0.000001", "q4", 0.02, seed=5)
    app = create_app(reports=[path], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        lines = drawn_lines(app, "#result-summary")
        assert not [line for line in lines if line.startswith("mean KL  0.000001")], lines
        assert [line for line in lines if "\\x0amean KL  0.000001" in line], lines


@sync
async def test_kl_by_position_is_drawn_again_at_the_new_width_on_resize(tmp_path: Path) -> None:
    """The Result pane's KL by position was sized to the pane's width when the result was shown and
    not drawn again on resize (the provenance rows are): shown at 200 columns, then at 56, each band's
    line ran past the pane and wrapped its interval onto a line of its own. The bars are sized to the
    widget's width again on resize, each band's line whole within it."""
    path = _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    report = json.loads(path.read_text())
    for band in report["kl_by_position"]:  # the windows an interval needs, so each line has one
        band.update(windows=8, ci95_low=band["kl_mean"] * 0.9, ci95_high=band["kl_mean"] * 1.1)
    write_report(path, report)
    app = create_app(reports=[path], config_dir=tmp_path / "cfg")

    def bands() -> tuple[int, list[str]]:
        """The widget's width and its band lines as drawn (each line starts with its band's range)."""
        width = app.screen.query_one("#result-positions").size.width
        lines = drawn_lines(app, "#result-positions")
        assert all(len(line) <= width for line in lines), (width, lines)
        return width, [line for line in lines if line.lstrip().startswith(("0-255 ", "256-510 "))]

    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        width, wide = bands()
        # the top band's bar fills its 40 cells, the other's in proportion
        assert width > 100 and len(wide) == 2 and wide[1].count("█") == 40, wide
        assert all(line.endswith("]") for line in wide), wide
        await pilot.resize_terminal(60, 24)
        await settle(app, pilot)
        width, narrow = bands()
        assert width < 60 and len(narrow) == 2, narrow
        for line in narrow:  # the figure and its interval on the bar's line, the bar shorter to fit
            assert line.endswith("]") and len(line) <= width, (width, narrow)
        assert 8 <= narrow[1].count("█") < 40, narrow
        assert narrow[0].startswith("  0-255 ") and "0.0278 [" in narrow[0], narrow
        await pilot.resize_terminal(200, 50)
        await settle(app, pilot)
        assert bands()[1] == wide


@sync
async def test_kl_by_positions_heading_is_one_line_at_80_columns(tmp_path: Path) -> None:
    """The heading "KL by position  (mean over the windows' positions in each band, 95% window-clustered
    interval)" wrapped onto two lines below about 95 columns. At 80x24 it is one line: with its note in
    the viewer's pane, and in the dashboard's Result tab beside the grid, where the line holds the
    heading only, with the note on the line under it; then the bands."""
    path = _run_report(tmp_path / "q4-run", "q4", 0.02, seed=5)
    report = json.loads(path.read_text())
    for band in report["kl_by_position"]:
        band.update(windows=8, ci95_low=band["kl_mean"] * 0.9, ci95_high=band["kl_mean"] * 1.1)
    write_report(path, report)
    note = "mean per band, 95% window-clustered interval"
    viewer = create_app(reports=[path], config_dir=tmp_path / "cfg", remember_theme=False)
    holder: dict[str, ScriptedPipeline] = {}
    board = create_app(pipeline_factory=lambda e, c: holder.setdefault("p", ScriptedPipeline(e, c)),
                       config_dir=tmp_path / "cfg", remember_theme=False)
    for app, heading in ((viewer, [f"KL by position  ({note})"]), (board, ["KL by position", note])):
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            if app is board:
                await open_with_o(app, pilot, path)
                await settle(app, pilot)
            width = app.screen.query_one("#result-positions").size.width
            lines = drawn_lines(app, "#result-positions")
            assert [line.rstrip() for line in lines[:len(heading)]] == heading, (width, lines)
            assert lines[len(heading)].lstrip().startswith("0-255 "), lines  # the first band next
            assert all(len(line) <= width for line in lines), (width, lines)


@sync
async def test_intervals_from_too_few_windows_are_not_shown_as_95_percent(tmp_path: Path) -> None:
    few = write_report(tmp_path / "few.json", make_report("few", 0.01, seed=2,
                                                          domains=["prose", "prose", "code", "dialog"]))
    app = create_app(reports=[few], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(app, pilot)
        text = result_text(app)
        assert "4 windows: too few for a 95 % interval, which needs 8" in text, text
        assert "(95%)" not in text
        table = app.query_one("#result-domains", DataTable)
        cells = {str(table.get_row_at(i)[0]): table.get_row_at(i)[3] for i in range(table.row_count)}
        assert cells == {"prose": "too few windows (2)", "code": "too few windows (1)",
                         "dialog": "too few windows (1)"}  # a one-window domain: no zero-width interval
        chart = app.query_one("#result-chart", KLChart).render().plain
        assert "┊" not in chart and "│ mean over 4 windows: too few for a 95 % interval" in chart, chart
    enough = write_report(tmp_path / "enough.json", make_report("enough", 0.01, seed=2))
    app = create_app(reports=[enough], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(app, pilot)
        assert "(95%)" in result_text(app)  # the headline interval (docs/STATISTICS.md)
        chart = app.query_one("#result-chart", KLChart).render().plain
        assert "│ mean ┊ 95 % interval over 8 windows" in chart, chart


def _decide_reports(tmp_path: Path) -> tuple[Path, Path, Path]:
    """a, b = a + 0.002 on 32 windows, and a noise model whose repeat variation is far larger."""
    import numpy as np

    from kldtui.cli.main import main
    from tests.fixtures_decide import make_report as decide_report
    from tests.fixtures_decide import suite_domains
    from tests.fixtures_decide import write_report as decide_write

    domains = suite_domains(32)
    base = np.random.default_rng(4).gamma(4.0, 0.0025, 32)
    a = decide_write(tmp_path / "a.json", decide_report(base, domains, candidate_dir="/runs/a"))
    b = decide_write(tmp_path / "b.json", decide_report(base + 0.002, domains, candidate_dir="/runs/b"))
    rep = decide_write(tmp_path / "repeat.json", decide_report(
        np.full(32, 0.003), domains, reference_dir="/r/run1", candidate_dir="/r/run2"))
    noisy = np.exp(np.random.default_rng(20).normal(0, 1.0, 32))  # a capture again: KL stays >= 0
    again = decide_write(tmp_path / "a2.json", decide_report(base * noisy, domains, candidate_dir="/runs/a2"))
    model = tmp_path / "noise.json"
    # made-up capture folders: the same-model check cannot read them (kldtui noise refuses that unless told)
    assert main(["noise", str(a), str(again), "--repeat-report", str(rep), "--output", str(model),
                 "--allow-different-models"]) == 0
    return a, b, model


@sync
async def test_diff_chart_legend_names_the_zero_line_and_draws_the_mean(tmp_path: Path) -> None:
    a, b, _ = _decide_reports(tmp_path)
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 60)) as pilot:
        await settle(app, pilot)
        await pilot.press("d")
        await settle(app, pilot)
        text = app.query_one("#diff-chart", KLChart).render().plain
        head = text.splitlines()[0]
        assert "│ 0" in head and "┃ mean" in head and "│ mean" not in head, head
        assert "┃ mean ┊ 95 % interval over 32 windows" in head, head  # the verdict's, over the windows
        assert all("┃" in line for line in text.splitlines()[1:])  # the mean difference on every row


@sync
async def test_viewer_leaderboard_explains_every_mark_and_takes_a_noise_model(tmp_path: Path) -> None:
    a, b, model = _decide_reports(tmp_path)
    # without a noise model a named difference is provisional (kldtui leaderboard: "(provisional)"):
    # the tie column says so in its 10 cells, and the line under the table what that means
    for noise, marks in ((None, ["best", "worse (p)"]), (str(model), ["best", "tied"])):
        app = create_app(reports=[a, b], config_dir=tmp_path / "cfg", noise_path=noise)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            table = app.query_one("#board", DataTable)
            tie = LeaderboardTable.column("tie")
            assert [table.get_row_at(i)[tie] for i in range(table.row_count)] == marks
            under = static_text(app, "#board-verdict").splitlines()
            legend = "(p) provisional: not fully backed by a noise model; move to the row for why"
            assert (under[0] == legend) is (noise is None), under
            assert under[-1].startswith("a: lowest mean KL of the 2 reports"), under  # the best, selected
            note = str(app.query_one("#board-note", Static).render())
            assert "? help" in note and "noise model:" in note
            await pilot.press("question_mark")
            await pilot.pause()
            keys = help_text(app)
            assert "worse       shown worse than the best" in keys
            assert ("worse (p)   shown worse than the best, provisionally: no noise model fully backs it "
                    "(the row's verdict, under the table, says why)") in keys, keys
            assert "no verdict  too few windows, or no calibrated verdict" in keys
            # the notes above the ranking are short; the help has them in full
            in_full = str(app.screen.query_one("#help-notes", Static).render())
            said = ("noise model: measured repeat variation" if noise else
                    "noise model: none: window-to-window variation only; how much this metric moves")
            assert said in in_full.replace("\n", " "), in_full
            await pilot.press("escape")
            await pilot.press("down")
            await pilot.pause()
            under = str(app.query_one("#board-verdict", Static).render()).splitlines()
            assert (under[0] == legend) is (noise is None), under  # whichever row is selected
            verdict = under[-1]
            expected = "b: b is worse than a by 0.002 KL" if noise is None else "b: b - a = 0.002 KL"
            assert verdict.startswith(expected), verdict
            # the row's verdict says why it is provisional, in words
            assert ("; provisional: the variation between two captures was not measured" in verdict) is \
                (noise is None), verdict
            # the diff of the two says what the leaderboard says: the same noise model decides both
            await pilot.press("d")
            await settle(app, pilot)
            said = str(app.query_one("#diff-verdict", Static).render())
            assert said.splitlines()[1].startswith(expected.removeprefix("b: ")), said
            assert ("noise model: measured" in said) == (noise is not None), said


@sync
async def test_viewer_at_80x24_keeps_each_note_above_the_ranking_to_one_line(tmp_path: Path) -> None:
    """With a noise model of three captures the notes above the ranking took 9 of 24 lines (the noise
    model's description alone 5): each now takes one, and says what a difference must clear."""
    import numpy as np

    from kldtui.cli.main import main
    from kldtui.decide import load_floor
    from kldtui.decide.verdict import plain_number
    from tests.fixtures_decide import make_report as decide_report
    from tests.fixtures_decide import suite_domains
    from tests.fixtures_decide import write_report as decide_write

    domains = suite_domains(32)
    rng = np.random.default_rng(1)
    base = 0.01 * rng.lognormal(0, 0.3, 32)
    paths = [decide_write(tmp_path / f"{name}.json", decide_report(base * scale + rng.normal(0, 1e-4, 32),
                                                                   domains, candidate_dir=f"/runs/{name}"))
             for name, scale in (("q4", 1.0), ("q3", 1.2), ("q5", 0.8), ("q4-again", 1.0), ("q4-third", 1.0))]
    model = tmp_path / "noise.json"
    assert main(["noise", str(paths[0]), str(paths[3]), str(paths[4]), "--output", str(model),
                 "--allow-different-models"]) == 0
    app = create_app(reports=paths[:3], config_dir=tmp_path / "cfg", noise_path=str(model))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        lines = str(app.query_one("#board-note", Static).render()).splitlines()
        assert lines[0] == "3 reports by mean KL; Enter opens one, space marks two, d diffs, ? help"
        assert lines[1] == "ties: sign-flip test against the best, Holm over all 3 pairs (family-wise 5 %)"
        clear = plain_number(load_floor(model).repeat_variation_for([]) or 0.0)
        assert lines[2] == f"noise model: 3 captures of one candidate; B - A must clear {clear}"
        assert len(lines) == 3 and all(len(line) <= 78 for line in lines), lines  # 80 less the padding
        assert app.query_one("#board", DataTable).row_count == 3
    # a model of one repeat: its line says so, and fits too
    assert main(["noise", str(paths[0]), str(paths[3]), "--output", str(model),
                 "--allow-different-models"]) == 0
    app = create_app(reports=paths[:3], config_dir=tmp_path / "cfg", noise_path=str(model))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        lines = str(app.query_one("#board-note", Static).render()).splitlines()
        clear = plain_number(load_floor(model).repeat_variation_for([]) or 0.0)
        assert lines[2] == f"noise model: 2 captures (one repeat); B - A must clear {clear}"
        assert len(lines) == 3 and all(len(line) <= 78 for line in lines), lines


@sync
async def test_viewer_leaderboard_of_few_windows_marks_no_best(tmp_path: Path) -> None:
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s, domains=["prose"] * 4))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.02, 2))]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one("#board", DataTable)
        tie, interval = LeaderboardTable.column("tie"), LeaderboardTable.column("95% interval")
        assert [table.get_row_at(i)[tie] for i in range(table.row_count)] == ["no verdict", "no verdict"]
        assert [table.get_row_at(i)[interval] for i in range(table.row_count)] == ["too few windows (4)"] * 2
        note = str(app.query_one("#board-note", Static).render())
        assert "too few windows (4) for a verdict" in note
        assert "too few to say it is best" in str(app.query_one("#board-verdict", Static).render())


@sync
async def test_log_keeps_its_last_line_in_view_when_the_panel_below_grows(tmp_path: Path) -> None:
    from textual.widgets import RichLog

    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, StageStarted("capture"), *[LogLine("capture", f"line {n}") for n in range(60)])
        log = app.query_one("#log-lines", RichLog)
        for _ in range(5):
            await pilot.pause(0.02)
        assert log.scroll_y == log.max_scroll_y > 0
        # three bars now: the progress panel takes two more lines from the log above it
        await feed(app, pilot, Progress("capture", "windows", 1, 6, "windows"),
                   Progress("capture", "tokens", 512, 3072, "tokens"),
                   Progress("capture", "window 001 rows", 100, 511, "rows"))
        for _ in range(5):
            await pilot.pause(0.02)
        assert log.scroll_y == log.max_scroll_y, (log.scroll_y, log.max_scroll_y)  # the last line still shows


@sync
async def test_a_stop_is_said_once(tmp_path: Path) -> None:
    app, holder = dashboard(tmp_path, windows=8, pause_after_window=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("3")
        while "p" not in holder or not holder["p"].paused.is_set():
            await pilot.pause(0.02)
        await pilot.press("s")
        await settle(app, pilot)
        stopped = [text for _, text in app.main.model.log if "stopped:" in text]
        assert len(stopped) == 1, stopped  # the worker's end was handled twice (two handlers ran)
        assert [n.message for n in app._notifications].count("capture: stopped") == 1


@sync
async def test_an_older_ranking_never_replaces_a_newer_one(tmp_path: Path, monkeypatch: Any) -> None:
    """Ranking runs in a thread; a newer ranking cancels an older one, whose thread still ends
    later: its result is stale and must not replace the board (nor wait on the app's loop)."""
    import kldtui.decide.leaderboard as leaderboard

    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.02, 2), ("z", 0.03, 3))]
    started, release, first_ranked = threading.Event(), threading.Event(), threading.Event()
    real = leaderboard.build_leaderboard

    def first_one_slow(reports: Any, **kwargs: Any) -> Any:
        if started.is_set():
            return real(reports, **kwargs)
        started.set()
        assert release.wait(30)
        try:
            return real(reports, **kwargs)
        finally:
            first_ranked.set()

    monkeypatch.setattr(leaderboard, "build_leaderboard", first_one_slow)
    app = create_app(reports=paths[:2], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        screen = app.main
        shown: list[int] = []
        show_board = screen.show_board
        screen.show_board = lambda results, *rest: (shown.append(len(results)),  # type: ignore[method-assign]
                                                    show_board(results, *rest))
        await until(pilot, started.is_set, "the first ranking to start")
        screen.load_result_file(str(paths[2]))  # o: the third report joins while the first ranks
        table = app.query_one("#board", DataTable)
        await until(pilot, lambda: table.row_count == 3, "the newer ranking's board")
        release.set()
        await until(pilot, first_ranked.is_set, "the older ranking to end")
        await settle(app, pilot)
        for _ in range(10):  # the older ranking's thread hands its result over after it ends
            await pilot.pause(0.05)
        assert table.row_count == 3 and shown == [3], shown


@sync
async def test_d_with_one_report_says_a_difference_needs_two(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        summary = str(app.query_one("#result-summary", Static).render())
        assert "· windows 0-5" in summary and "[0, 6)" not in summary, summary  # as the cards count
        await pilot.press("d")
        await settle(app, pilot)
        messages = [n.message for n in app._notifications]
        assert messages[-1] == "a difference needs two reports; the leaderboard has 1: open another with o"
        pane = str(app.query_one("#diff-verdict", Static).render())
        assert pane.startswith("d shows the difference of two reports in the leaderboard"), pane


def test_campaign_standings_show_no_interval_from_too_few_windows() -> None:
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.events import LeaderboardUpdated, Standing

    rows = (Standing("q4", "compared", rank=1, mean=0.0123, ci_low=0.011, ci_high=0.0137, mark="best",
                     size_bytes=4186112),
            Standing("q2", "waiting"))
    for windows, shown in ((6, "too few windows (6)"), (12, "[0.011, 0.0137]")):
        out = io.StringIO()
        with BatchReporter(out) as rep:
            rep(LeaderboardUpdated("campaign", rows=rows, windows=windows))
        text = out.getvalue()
        assert shown in text and "3.99 MiB" in text, text
        assert windows >= 8 or "[0.011" not in text, text


@sync
async def test_dashboard_help_says_what_d_does(tmp_path: Path) -> None:
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = help_text(app)
        assert "l e b  show the log / result / leaderboard tab" in text
        assert "d      the Diff tab: the difference of two reports on the leaderboard" in text


@sync
async def test_a_campaign_ends_with_its_own_next_steps(tmp_path: Path, monkeypatch: Any) -> None:
    """After a campaign the dashboard says what its --batch run says (kldtui.workflow.next_steps: its
    ranked reports together, not its leader's repeat capture), not the last candidate's single-report
    hints."""
    from tests.fixtures_campaign import scripted_campaign_factory

    monkeypatch.chdir(tmp_path)
    app = create_app(pipeline_factory=scripted_campaign_factory(tmp_path, {}, repeat=True),
                     config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        lines = ["leaderboard: leaderboard.json",
                 "next: kldtui leaderboard comparison-q8.json comparison-q4.json",
                 "      kldtui diff comparison-q8.json comparison-q4.json",
                 "      kldtui view comparison-q8.json",
                 "      another candidate: add a [[candidates]] table to the profile and run again (the "
                 "others are not captured again)"]
        assert app.main.model.next_lines == lines
        shown = panel(app)
        assert "leaderboard: leaderboard.json" in shown, shown
        assert "kldtui view comparison-q8.json" in shown, shown
        assert "OTHER/comparison.json" not in shown and "repeat/" not in shown


@sync
async def test_names_and_paths_from_a_shared_folder_are_shown_as_they_are(tmp_path: Path) -> None:
    # Reports and folders come from whoever shares them: markup in a name or a path is text
    # ("[imatrix]" stays; a path through a folder named "x[" read as "x[/]y" stopped the viewer with a
    # MarkupError), and ESC in a message shows as \x1b.
    folder = tmp_path / "shared["
    folder.mkdir()
    a = write_report(folder / "]a.json", make_report("q4 [imatrix]", 0.01, seed=1))
    b = write_report(folder / "b.json", make_report("[bold red]q8", 0.02, seed=2))
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        table = app.query_one("#board", DataTable)
        names = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert names == ["q4 [imatrix]", "[bold red]q8"], names
        await pilot.press("d")
        await settle(app, pilot)
        said = str(app.query_one("#diff-verdict", Static).render())
        assert "q4 [imatrix]" in said and "[bold red]q8 is worse than q4 [imatrix]" in said, said
        await pilot.press("enter")
        await settle(app, pilot)
        summary = str(app.screen.query_one("#result-summary", Static).render())
        assert "q4 [imatrix]" in summary, summary
        app.notify(f"cannot read {folder}/]x.json \x1b[2J", title="report [x]")
        await pilot.pause()
        shown = list(app._notifications)[-1]  # what the toast shows: no markup read, ESC escaped
        assert shown is not None and not shown.markup
        assert shown.message.endswith("shared[/]x.json \\x1b[2J") and shown.title == "report [x]"


@sync
async def test_a_ranking_of_the_board_as_it_was_does_not_drop_a_report_added_since(tmp_path: Path) -> None:
    # The race a campaign's end met: the ranking of two reports arrives after a third was added, then
    # another ranking starts (the campaign's noise model). Taking the stale one dropped the third report.
    from kldtui.formats.report import load_report
    from kldtui.tui.resultdata import result_from_report

    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.02, 2), ("z", 0.03, 3))]
    app = create_app(reports=paths[:2], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        screen = app.screen
        stale_results, stale_reports = list(screen.results), list(screen.reports)
        third = load_report(paths[2])
        screen.add_to_board(result_from_report(third, str(paths[2])), third)
        screen.show_board(stale_results, stale_reports, {}, "")  # the earlier ranking, delivered late
        screen.rebuild_board()  # the next ranking starts from what the board holds now
        await settle(app, pilot)
        table = app.query_one("#board", DataTable)
        assert sorted(str(table.get_row_at(i)[1]) for i in range(table.row_count)) == ["x", "y", "z"]
        assert str(app.query_one("#board-note", Static).render()).startswith("3 reports by mean KL")


@sync
async def test_at_80x24_the_difference_and_the_charts_open_in_sight(tmp_path: Path) -> None:
    # a dozen candidates over 8 windows: the ranking's notes and rows filled the screen, and d and c
    # opened their pane below it, out of sight (nothing seemed to happen)
    from kldtui.tui.widgets import BoardCharts, DiffPane

    levels = [0.001 * 1.5 ** k for k in range(12)]
    paths = [write_report(tmp_path / f"q{k:02d}.json",
                          make_report(f"q{k:02d}", lvl, seed=k + 1, domains=["prose", "code"] * 4))
             for k, lvl in enumerate(levels)]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        note = app.query_one("#board-note", Static)
        assert note.region.height >= 3  # the notes: ties, too few windows, noise model
        assert "too few to say it is best among 12 (a verdict needs 12)" in \
            str(app.query_one("#board-verdict", Static).render())
        await pilot.press("c")
        await settle(app, pilot)
        charts = app.query_one("#charts", BoardCharts)
        await until(pilot, lambda: charts.display and charts.region.height >= 8, "the charts in sight")
        assert note.region.height == 0  # stepped aside while the pane is open
        assert app.query_one("#board", DataTable).region.height >= 5  # the table, smaller, still there
        await pilot.press("escape")
        await pilot.pause()
        assert not charts.display and note.region.height >= 3
        await pilot.press("space", "down", "space", "d")
        await settle(app, pilot)
        diff = app.query_one("#diffpane", DiffPane)
        await until(pilot, lambda: diff.display and diff.region.height >= 8, "the difference in sight")
        assert "A = q00, B = q01" in str(app.query_one("#diff-verdict", Static).render())


@sync
async def test_at_80_columns_the_ranking_shows_every_rows_tie_mark_and_interval_whole(tmp_path: Path) -> None:
    """The ranking's columns were 91 characters wide, the bar before the tie mark: at 80 columns the
    viewer cut the interval's figures ("[0.00754,"), and in the dashboard's pane (54 columns at 80x24)
    the tie marks were out of sight (its Leaderboard tab now takes the window grid's room there). Each
    column is as wide as its cells and the bar comes last, in the room left; at 200 columns it is as wide
    as ever."""
    paths = [write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)) for n, lvl, s in
             [("worst", 0.05, 1), ("best", 0.010, 2), ("close", 0.0102, 4)]]

    def shown(table: DataTable) -> str:  # what is on screen of the table (scrolled to its left edge)
        return "\n".join(table.render_line(y).text[:table.region.width] for y in range(table.size.height))

    app = create_app(reports=paths, config_dir=tmp_path / "cfg")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        table = app.query_one("#board", LeaderboardTable)
        text = shown(table)
        intervals = [str(table.get_row_at(i)[table.column("95% interval")]) for i in range(3)]
        assert all(iv.startswith("[") and iv in text for iv in intervals), text
        assert all(f" {mark} " in text for mark in ("best", "tied", "worse")), text
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)
        bar = table.column("interval")
        assert all("●" in str(table.get_row_at(i)[bar]) for i in range(3))
        await pilot.resize_terminal(200, 50)
        await settle(app, pilot)
        await until(pilot, lambda: len(str(table.get_row_at(0)[bar])) == LeaderboardTable.BAR_WIDTH,
                    "the bar at its full width")
    app, _ = dashboard(tmp_path)
    app.main.report_paths = paths
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("b")
        await settle(app, pilot)
        table = app.query_one("#board", LeaderboardTable)
        assert table.row_count == 3  # the tab has the grid's room at 80 columns: the ranking, all 80
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)
        text = shown(table)
        assert all(f" {mark} " in text for mark in ("best", "tied", "worse")), text
        intervals = [str(table.get_row_at(i)[table.column("95% interval")]) for i in range(3)]
        assert all(iv.startswith("[") and iv in text for iv in intervals), text


@sync
async def test_a_campaigns_folder_opened_in_the_viewer_of_one_report_ties_with_its_noise_model(
        tmp_path: Path) -> None:
    """o on a campaign's folder in the viewer of one report ranks its candidates as `kldtui view FOLDER`
    does: with the folder's noise-model.json (a and b are tied against it, and only against it)."""
    import shutil

    a, b, model = _decide_reports(tmp_path)
    folder = tmp_path / "campaign"
    folder.mkdir()
    shutil.copy(a, folder / "comparison-a.json")
    shutil.copy(b, folder / "comparison-b.json")
    shutil.copy(model, folder / "noise-model.json")
    for noise_floor, marks in ((True, ["best", "tied"]), (False, ["best", "worse (p)"])):
        app = create_app(reports=[a], config_dir=tmp_path / "cfg", use_noise_floor=noise_floor)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await open_with_o(app, pilot, folder)
            table = app.query_one("#board", LeaderboardTable)
            await until(pilot, lambda t=table: t.row_count == 2, "the folder's two reports")
            await settle(app, pilot)
            tie = table.column("tie")
            assert [table.get_row_at(i)[tie] for i in range(2)] == marks
            note = str(app.query_one("#board-note", Static).render())  # in full at 160x40
            assert ("noise model of campaign: measured repeat variation" in note) is noise_floor, note


def _campaign_folder(folder: Path, reports: dict[str, Path], model: Path) -> Path:
    """A campaign's work folder: each report as comparison-NAME.json (its candidate_dir NAME's), and
    ``model`` as its noise-model.json."""
    folder.mkdir()
    for name, path in reports.items():
        report = json.loads(path.read_text())
        report["candidate_dir"] = f"/runs/{name}"
        (folder / f"comparison-{name}.json").write_text(json.dumps(report))
    (folder / "noise-model.json").write_text(model.read_text())
    return folder


@sync
async def test_o_on_an_open_leaderboard_ranks_a_campaigns_folder_with_its_noise_model(
        tmp_path: Path, monkeypatch: Any) -> None:
    """o in a leaderboard already open (the viewer of several reports) added a campaign's reports
    without the folder's noise-model.json, which the viewer of one report, kldtui view FOLDER and the
    dashboard's campaign use: a and b, tied against that model, stayed "worse". One rule now: the
    folder's model ranks the board (the screen names it), unless the user chose one (--noise,
    --no-noise-floor), and none when the board's folders hold different ones."""
    monkeypatch.chdir(tmp_path)  # the screen names the model relative to here
    a, b, model = _decide_reports(tmp_path)
    camp = _campaign_folder(tmp_path / "camp", {"c": b, "e": b}, model)
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one("#board", LeaderboardTable)
        tie = table.column("tie")

        def marks() -> dict[str, str]:
            return {str(table.get_row_at(i)[table.column("candidate")]): str(table.get_row_at(i)[tie])
                    for i in range(table.row_count)}

        assert marks() == {"a": "best", "b": "worse (p)"}  # provisional: no noise model
        await open_with_o(app, pilot, camp)
        await until(pilot, lambda: table.row_count == 4, "the folder's reports on the ranking")
        await settle(app, pilot)
        assert marks() == {"a": "best", "b": "tied", "c": "tied", "e": "tied"}
        note = static_text(app, "#board-note").replace("\n", " ")
        assert "noise model of camp: 2 captures (one repeat); B - A must clear" in note, note
        assert "noise model: camp/noise-model.json, the campaign's" in [n.message for n in app._notifications]
        # a second campaign (of one candidate) with a model of its own: which of the two would be a
        # guess, so none, as kldtui view camp other does
        other = _campaign_folder(tmp_path / "other", {"d": a}, model)
        await open_with_o(app, pilot, other)
        await until(pilot, lambda: table.row_count == 5, "the second folder's report on the ranking")
        await settle(app, pilot)
        assert marks()["b"] == "worse (p)"
        note = static_text(app, "#board-note").replace("\n", " ")
        assert "noise model: none: window-to-window variation only" in note, note
        said = [n.message for n in app._notifications][-1]
        assert said == ("noise model: none; the folders hold 2 (camp/noise-model.json, "
                        "other/noise-model.json): kldtui view --noise FILE chooses one"), said


async def _rank_with_campaign_folder(app: Any, pilot: Any, camp: Path) -> LeaderboardTable:
    """Open the campaign folder ``camp`` with o on a two-report ranking; its board once it ranks three."""
    await settle(app, pilot)
    await open_with_o(app, pilot, camp)
    table = app.query_one("#board", LeaderboardTable)
    await until(pilot, lambda: table.row_count == 3, "the folder's report on the ranking")
    await settle(app, pilot)
    return table


@sync
async def test_o_on_a_campaigns_folder_never_ranks_with_a_noise_model_of_another_suite(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A campaign folder's noise-model.json measured on another suite than its reports' (one folder
    held two demos, and the last one run had written it): not used for the ranking, and the screen says
    so in one line (it was taken, and the ranking failed on it), with the command that chooses one
    naming kldtui as it was started (here as .venv/bin/kldtui, not on PATH)."""
    from tests.fixtures_commands import started_from_a_venv

    started_from_a_venv(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)  # the screen names the model relative to here
    kldtui = kldtui_command()  # relative to here, as the screen names it
    assert shlex.split(kldtui)[0].endswith("my venv/bin/kldtui"), kldtui
    a, b, model = _decide_reports(tmp_path)
    camp = _campaign_folder(tmp_path / "camp", {"c": b}, model)
    doc = json.loads((camp / "noise-model.json").read_text())
    (camp / "noise-model.json").write_text(json.dumps(dict(doc, suite_token_hash_sha256="0" * 64)))
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg")
    async with app.run_test(size=(160, 40)) as pilot:
        table = await _rank_with_campaign_folder(app, pilot, camp)
        assert app.main.noise_path is None
        tie = table.column("tie")
        assert [table.get_row_at(i)[tie] for i in range(3)] == ["best", "worse (p)", "worse (p)"]
        assert [n.message for n in app._notifications][-1] == (
            "noise model: none; camp/noise-model.json measured on another suite than the reports', not "
            f"used: {kldtui} view --noise FILE chooses one")


@sync
async def test_o_on_a_folder_of_two_suites_names_each_suites_reports_and_opens_none(
        tmp_path: Path, monkeypatch: Any) -> None:
    """o on a work folder of two suites' reports (kldtui demo and kldtui demo --hidden share one) put
    them all on one ranking, untied ("these reports cannot be paired"), with the noise model of the
    first report's suite named as the campaign's. It is refused as kldtui view DIR refuses it: one
    line naming each suite's reports and the command that ranks one suite's; the screen is left as it
    was, in the viewer of one report and in an open leaderboard. The command names kldtui as it was
    started (here as .venv/bin/kldtui, not on PATH), as the next: lines do."""
    from tests.fixtures_commands import started_from_a_venv
    from tests.fixtures_decide import two_suite_folder

    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    said = (f"{folder} holds reports of 2 suites, which no leaderboard ranks together (suite 555555555555: "
            "comparison-a.json, comparison-b.json; suite 666666666666: comparison-c.json, "
            f"comparison-d.json); rank one suite's: {kldtui} view {folder}/comparison-a.json "
            f"{folder}/comparison-b.json")
    a, b = folder / "comparison-a.json", folder / "comparison-b.json"
    for reports in ([a], [a, b]):
        app = create_app(reports=reports, config_dir=tmp_path / "cfg")
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await open_with_o(app, pilot, folder)
            await settle(app, pilot)
            told = list(app._notifications)
            assert told and told[-1].message == said and told[-1].severity == "error", told
            assert not any(n.message.startswith("noise model") for n in told), told
            if len(reports) == 1:
                assert app.main.single  # still the one report's viewer, not a board of four
            else:
                assert app.query_one("#board", LeaderboardTable).row_count == 2


@sync
async def test_o_on_a_campaigns_folder_keeps_the_noise_model_the_user_chose(tmp_path: Path) -> None:
    """kldtui view --no-noise-floor: a campaign folder opened with o later does not bring its model."""
    a, b, model = _decide_reports(tmp_path)
    camp = _campaign_folder(tmp_path / "camp", {"c": b}, model)
    app = create_app(reports=[a, b], config_dir=tmp_path / "cfg", use_noise_floor=False)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await _rank_with_campaign_folder(app, pilot, camp)
        assert app.main.noise_path is None
        assert "noise model: none" in static_text(app, "#board-note")
        tie = table.column("tie")
        assert [table.get_row_at(i)[tie] for i in range(3)] == ["best", "worse (p)", "worse (p)"]


@sync
async def test_a_stage_refused_before_it_starts_leaves_its_card_as_it_was(tmp_path: Path) -> None:
    """A done stage's key that the pipeline refuses before the stage starts (a campaign runs its stages
    candidate by candidate) ran nothing: the card still says done, and the log and a notification say
    why it was not run. A stage not done yet that is refused still says failed, with the reason
    (tests/tui/test_tui_app.py)."""
    from kldtui.errors import BadInput

    app, holder = dashboard(tmp_path, windows=4)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("r")
        await settle(app, pilot)
        assert "done" in card(app, "capture")
        refusal = "kldtui.toml: a campaign runs its stages candidate by candidate; run everything"

        def refuse(stage: object) -> object:
            raise BadInput(refusal)

        holder["p"].run_stage = refuse  # type: ignore[method-assign]
        await pilot.press("3")
        await settle(app, pilot)
        assert "done" in card(app, "capture") and "failed" not in card(app, "capture")
        assert app.main.model.stages["capture"].state == "done"
        assert f"[capture] not run: {refusal}" in [text for _, text in app.main.model.log]
        assert [n.title for n in app._notifications if refusal in n.message] == ["capture not run"]
        await pilot.press("q")
