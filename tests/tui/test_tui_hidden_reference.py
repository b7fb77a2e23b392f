"""The viewer shows what a hidden-state reference was and its size on disk against the same
contexts as F32 logits, and a hidden-state suite's clustered interval and partition; the batch
summary prints the same lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kldtui.formats import fidelity as fid
from kldtui.formats.report import clustered_line, summary_text, write_report
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from kldtui.text import human_bytes, interval_ends, table_figure
from kldtui.tui.app import create_app
from tests import fidelity_fixture as fx
from tests.fixtures_tui import drawn_lines, screen_lines, settle, static_text, sync, until

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

pytest.importorskip("torch")


@sync
async def test_viewer_shows_the_reference_kind_and_size(tmp_path: Path) -> None:
    f = fx.build(tmp_path / "suite", contexts=24)
    # the analysis partition (18 contexts of 12 source clusters), the reference against itself
    report = compare(f.root, f.root / fid.HIDDEN_DIR, f.root / fid.HIDDEN_DIR,
                     CompareOptions(context_filter="analysis", backend=NUMPY, bootstrap_samples=100,
                                    candidate_lm_head=str(f.root / fid.LM_HEAD_DIR)))
    ref = report.reference
    assert ref is not None and ref.bytes_on_disk and ref.full_logits_bytes
    analysis = [i for i, p in enumerate(f.partitions) if p == "analysis"]
    hidden = sum((f.root / fid.HIDDEN_DIR / f"hidden_{i:04d}.safetensors").stat().st_size for i in analysis)
    head = (f.root / fid.LM_HEAD_DIR / fid.HEAD_FILE).stat().st_size
    assert ref.bytes_on_disk == hidden + head
    assert ref.full_logits_bytes == len(analysis) * (fx.CONTEXT - 1) * fx.VOCAB * 4
    ratio = ref.full_logits_bytes / ref.bytes_on_disk
    times = f"{ratio:.1f}x more" if ratio >= 1 else f"{1 / ratio:.1f}x less"
    expected = (f"reference: hidden (BF16) + LM head, {human_bytes(ref.bytes_on_disk)} on disk; as F32 "
                f"logits {human_bytes(ref.full_logits_bytes)} ({times})")
    assert expected in summary_text(report)
    assert report.suite_statistics is not None
    itself = report.suite_statistics.kl_stratified_source_cluster_bootstrap.micro
    assert (f"{len(analysis)} contexts (analysis partition); mean KL {table_figure(itself.estimate)} "
            f"{interval_ends(itself.ci95_low, itself.ci95_high, table_figure)} (95%, "
            "source clusters resampled within strata)") in summary_text(report)
    # a q8's mean KL in a table's digits: five fixed decimals read 0.000184 as 0.00018
    stats = report.suite_statistics
    small = replace(itself, estimate=0.000184, ci95_low=0.0001234, ci95_high=0.000249)
    near = replace(report, suite_statistics=replace(stats, kl_stratified_source_cluster_bootstrap=replace(
        stats.kl_stratified_source_cluster_bootstrap, micro=small)))
    assert "; mean KL 0.000184 [0.000123, 0.000249] (95%, source clusters" in (clustered_line(near) or "")
    # the sentinels fall in fewer source clusters than an interval needs: no interval, and why
    few = compare(f.root, f.root / fid.HIDDEN_DIR, f.root / "sentinel-live-logits" / "repeat-00",
                  CompareOptions(context_filter="sentinel", backend=NUMPY, bootstrap_samples=100))
    clusters = few.suite_statistics.kl_source_cluster_bootstrap.cluster_count
    assert clusters is not None and clusters < 8
    mean = few.suite_statistics.kl_stratified_source_cluster_bootstrap.micro.estimate
    assert (f"{few.suite_statistics.contexts} contexts (analysis partition); mean KL {table_figure(mean)} "
            f"({clusters} source clusters: too few for a 95 % interval, which needs 8)") in summary_text(few)
    path = write_report(tmp_path / "r.json", report)
    app = create_app(reports=[path], config_dir=tmp_path)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(app, pilot)
        text = " ".join(static_text(app, "#result-summary").split())
        assert " ".join(expected.split()) in text
        assert "source clusters resampled within strata" in text


@sync
async def test_the_viewers_help_counts_a_hidden_state_suites_contexts(tmp_path: Path) -> None:
    """The viewer's help said "per-window chart", "per-window difference of the two marked reports" and
    charts "per window" of a hidden-state suite's reports, whose units every other line calls contexts
    (the tie column's help among them, which counts their source clusters, as its verdicts do), and the
    charts' headings said "KL per window" and "B − A per window"; a logits suite's help and charts still
    say windows."""
    from kldtui.tui.screens.dialogs import HelpScreen
    from tests.fixtures_hidden import noisy_candidates
    from tests.fixtures_tui import help_text, make_report
    from tests.fixtures_tui import write_report as write_doc

    f = fx.build(tmp_path / "suite", contexts=12)
    paths = [write_report(tmp_path / f"{name}.json",
                          compare(f.root, f.root / fid.HIDDEN_DIR, folder,
                                  CompareOptions(backend=NUMPY, bootstrap_samples=100)))
             for name, folder in noisy_candidates(f, tmp_path, {"small": 0.03, "large": 0.09}).items()]
    logits = [write_doc(tmp_path / f"{n}-logits.json", make_report(n, lvl, seed=s))
              for n, lvl, s in [("a", 0.02, 1), ("b", 0.01, 2)]]
    for reports, unit, ties in ((paths, "context", "source cluster"), (logits, "window", "window")):
        other = "window" if unit == "context" else "context"
        for shown, said in ((reports, (f"per-{unit} difference of the two marked reports",
                                       f"per {unit}, per domain",
                                       f"too few {ties}s, or no calibrated verdict")),
                            (reports[:1], (f"per-{unit} chart",))):
            app = create_app(reports=shown, config_dir=tmp_path / "cfg", remember_theme=False)
            async with app.run_test(size=(200, 50)) as pilot:
                await settle(app, pilot)
                await pilot.press("question_mark")
                await pilot.pause()
                assert isinstance(app.screen, HelpScreen)
                text = " ".join(help_text(app).split())
                assert all(words in text for words in said), text
                assert other not in text, text
                await pilot.press("escape")
                await pilot.pause()
                if len(shown) == 2:  # the difference's chart counts them too ("B − A per window" said)
                    await pilot.press("space", "down", "space", "d")
                    await settle(app, pilot)
                    chart = app.screen.query_one("#diff-chart")
                    await until(pilot, lambda chart=chart: chart.display and chart.bars, "the difference")
                    head = drawn_lines(app, "#diff-chart")[0]
                else:
                    head = drawn_lines(app, "#result-chart")[0]
                assert head.startswith(("B − A" if len(shown) == 2 else "KL") + f" per {unit}"), head


def _hidden_reports(tmp_path: Path, contexts: int = 12) -> list[Path]:
    """Two reports of a hidden-state suite's candidates (small and large noise) against its reference."""
    from tests.fixtures_hidden import noisy_candidates

    f = fx.build(tmp_path / "suite", contexts=contexts)
    return [write_report(tmp_path / f"{name}.json",
                         compare(f.root, f.root / fid.HIDDEN_DIR, folder,
                                 CompareOptions(backend=NUMPY, bootstrap_samples=100)))
            for name, folder in noisy_candidates(f, tmp_path, {"small": 0.03, "large": 0.09}).items()]


@sync
async def test_the_result_pane_counts_a_hidden_state_reports_contexts(tmp_path: Path) -> None:
    """The result pane of a hidden-state suite's report said "windows 0-11" (or "12 windows", a report
    without its range) under the summary and "mean over the windows' positions in each band, 95%
    window-clustered interval" over KL by position, of the units its summary, table and chart call
    contexts; now nothing on the screen says window. (A logits report's: tests/tui/test_tui_words.py,
    test_tui_app.py.)"""
    import json

    path = _hidden_reports(tmp_path)[0]
    doc = json.loads(path.read_text())
    del doc["window_range"]
    unranged = tmp_path / "unranged.json"
    unranged.write_text(json.dumps(doc))
    for shown, count in ((path, "180 positions · contexts 0-11"), (unranged, "180 positions · 12 contexts")):
        app = create_app(reports=[shown], config_dir=tmp_path / "cfg", remember_theme=False)
        async with app.run_test(size=(200, 90)) as pilot:
            await settle(app, pilot)
            await until(pilot, lambda app=app: any(line.startswith(" KL by position")
                                                   for line in screen_lines(app)), "KL by position")
            lines = screen_lines(app)
            text = "\n".join(lines)
            assert count in [line.strip() for line in lines], text
            assert "KL by position  (mean per band, 95% context-clustered interval)" in text, text
            assert "window" not in text.lower(), text


@sync
async def test_the_diff_panes_placeholder_counts_a_hidden_state_boards_contexts(tmp_path: Path) -> None:
    """The dashboard's Diff tab said "d shows the difference of two reports in the leaderboard, window by
    window" of a board of a hidden-state suite's reports (one, as d shows it with one, or two), whose
    units the board calls contexts; a logits suite's board still says window by window."""
    from tests.fixtures_tui import DOMAINS, ScriptedPipeline, make_report
    from tests.fixtures_tui import write_report as write_doc

    hidden = _hidden_reports(tmp_path)
    logits = [write_doc(tmp_path / f"{n}-logits.json", make_report(n, lvl, seed=s))
              for n, lvl, s in [("a", 0.02, 1), ("b", 0.01, 2)]]
    for reports, unit in ((hidden, "context"), (logits, "window")):
        for shown in (reports[:1], reports):
            def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
                return ScriptedPipeline(emit, cancel, windows=6, report_path=tmp_path / "run" / "r.json")

            app = create_app(pipeline_factory=factory, reports=shown, config_dir=tmp_path / "cfg",
                             remember_theme=False, windows=[(w, DOMAINS[w % len(DOMAINS)]) for w in range(6)])
            async with app.run_test(size=(160, 40)) as pilot:
                await settle(app, pilot)
                table, rows = app.screen.query_one("#board"), len(shown)
                await until(pilot, lambda table=table, rows=rows: table.row_count == rows, "the board")
                await settle(app, pilot)
                if len(shown) == 1:  # d with one report: the Diff tab, saying what d does
                    await pilot.press("d")
                else:
                    app.screen.action_show_tab("diff")
                await settle(app, pilot)
                text = " ".join(" ".join(screen_lines(app)).split())
                said = f"d shows the difference of two reports in the leaderboard, {unit} by {unit} (o opens"
                assert said in text, text
