"""Every view of one report shows the same mean KL and interval: the dashboard's compare card (from the
compare stage's StageFinished figures, or from the work folder on disk) reads the report's headline
interval (docs/STATISTICS.md), as the Result tab beside it, never the original comparator's bootstrap;
the Result tab's Δp figures keep their digits, signed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kldtui.events import Event
from kldtui.formats.report import headline
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.report_names import kl_headline_interval
from kldtui.stages.compare.driver import Comparer
from kldtui.text import interval_ends, signed_table_figure, table_figure
from tests.fixtures_tui import dashboard, feed, make_report, settle, static_text, sync

WINDOWS = [f"d{i % 3}" for i in range(12)]  # enough windows for a headline interval


def report_with_another_bootstrap() -> ComparisonReport:
    """A report whose original comparator's bootstrap (edited) says another mean and interval than its
    headline interval does."""
    doc: dict[str, Any] = make_report("q4", 0.01, seed=5, domains=WINDOWS)
    doc["kl_window_cluster_bootstrap"].update(estimate=0.5, ci95_low=0.4, ci95_high=0.6)
    return as_report(doc)


def published(report: ComparisonReport, path: Path | None = None) -> list[Event]:
    """The events the compare stage emits when it publishes ``report`` (written to ``path``)."""
    events: list[Event] = []
    comparer = Comparer.__new__(Comparer)  # publish() reads only the workspace's report path
    comparer.workspace = SimpleNamespace(report_path=path)  # type: ignore[assignment]
    comparer.emit = events.append
    comparer.publish(report)
    return events


def test_the_compare_stage_reports_the_headline_interval_and_the_bootstrap_beside_it() -> None:
    report = report_with_another_bootstrap()
    head = kl_headline_interval(report)
    assert head.estimate is not None and head.ci95_low is not None and head.ci95_high is not None
    assert head.ci95_high < 0.4 and not head.rests_on_too_few_windows  # the two differ
    figures = headline(report)
    assert (figures["kl_mean"], figures["ci95_low"], figures["ci95_high"]) == \
        (head.estimate, head.ci95_low, head.ci95_high)
    assert figures["rests_on_too_few_windows"] is False
    assert (figures["percentile_ci95_low"], figures["percentile_ci95_high"]) == (0.4, 0.6)


def test_the_card_of_a_work_folder_on_disk_shows_the_headline_mean() -> None:
    from kldtui.tui.model import DashboardModel, stage_figures
    from kldtui.workflow.state import RunState

    report = report_with_another_bootstrap()
    model = DashboardModel()
    model.apply_disk_state(RunState(suite_windows=len(WINDOWS), reference_ready=True,
                                    report_path=Path("comparison.json"), headline=headline(report)))
    shown = stage_figures(model.card_figures("compare"))
    assert shown[0] == f"KL {table_figure(kl_headline_interval(report).estimate)}", shown
    assert "KL 0.5" not in shown


@sync
async def test_the_compare_card_and_the_result_tab_show_one_mean_kl(tmp_path: Path) -> None:
    report = report_with_another_bootstrap()
    head = kl_headline_interval(report)
    assert head.estimate is not None and head.ci95_low is not None and head.ci95_high is not None
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, *published(report, tmp_path / "comparison.json"))
        await settle(app, pilot)
        card = static_text(app, "#stage-compare").splitlines()
        mean = table_figure(head.estimate)
        assert card[2].split(" · ")[0] == f"KL {mean}", card
        summary = static_text(app, "#result-summary")
        assert f"mean KL  {mean} {interval_ends(head.ci95_low, head.ci95_high, table_figure)}" in summary
        assert "0.5" not in card[2] and "[0.4, 0.6]" not in summary
        await pilot.press("q")


def test_delta_p_reads_in_significant_digits_with_its_sign() -> None:
    from kldtui.tui.resultdata import result_from_report
    from kldtui.tui.widgets.result_pane import ResultPane

    doc: dict[str, Any] = make_report("q8", 0.01, seed=5, domains=WINDOWS)
    doc["next_token"]["delta_p"].update(mean=-0.0000123, rms=0.0000456)
    text = ResultPane().summary_text(result_from_report(doc)).plain
    assert "Δp mean -1.23e-05  Δp rms 4.56e-05" in text, text
    assert signed_table_figure(0.0001234) == "+0.000123" and signed_table_figure(-0.1) == "-0.1"
    assert signed_table_figure(0.0) == "+0" and signed_table_figure(None) == "-"
    assert signed_table_figure(7e38) == "+7e+38" and table_figure(7e38) == "7e+38"
