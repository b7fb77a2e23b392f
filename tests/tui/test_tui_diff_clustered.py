"""The difference pane (d) of two hidden-state reports whose contexts share sources draws the interval its
verdict rests on: the clustered verdict's over source clusters, not the per-context one that counts the
contexts as independent. It drew the per-context interval, labelled "95% CI", beside a verdict over 17
source clusters: here that band excluded zero while the sentence said its interval includes zero."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kldtui.decide.paired import PairedDiff, paired_diff_files
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.widgets import KLChart
from tests.fixtures_tui import dashboard, drawn_lines, open_with_o, settle, static_text, sync, until

pytest.importorskip("torch")

LEGEND = "┃ mean ┊ 95 % interval over 17 source clusters"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, PairedDiff]:
    """``best`` and ``close`` of a 32-context suite in 17 source clusters, and kldtui diff's result."""
    from tests.fixtures_hidden import clustered_candidates

    boards = clustered_candidates(tmp_path_factory.mktemp("diff-clustered"))
    return boards["best"], boards["close"], paired_diff_files(boards["best"], boards["close"])


async def _shown(app: KldApp, pilot: Any) -> KLChart:
    chart = app.screen.query_one("#diff-chart", KLChart)
    await until(pilot, lambda: bool(chart.bars), "the difference")
    await settle(app, pilot)
    return chart


def _band_ends(app: KldApp, chart: KLChart) -> tuple[int, int]:
    """The columns of the drawn interval's ends (``┊``, over every row), in the chart's bar area."""
    legend = len(chart.legend_lines(chart.size.width))
    shape = chart.chart_layout(chart.size.width)
    start = shape.digits + 1 + shape.label_w + 1
    rows = [row[start:start + shape.area] for row in drawn_lines(app, "#diff-chart")[legend:] if row]
    assert len(rows) == 32, rows
    columns = [i for row in rows for i, ch in enumerate(row) if ch == "┊"]
    return min(columns), max(columns)


def _column(chart: KLChart, value: float) -> int:
    shape = chart.chart_layout(chart.size.width)
    return shape.zero + round(value * shape.cells_per_unit)


def _check(app: KldApp, chart: KLChart, diff: PairedDiff) -> None:
    clustered, contexts = diff.clustered.interval, diff.overall.interval  # type: ignore[union-attr]
    assert (clustered.windows, contexts.windows) == (17, 32)
    # the two disagree: the contexts' interval excludes zero, the verdict's holds it
    assert contexts.ci95_low > 0 > clustered.ci95_low  # type: ignore[operator]
    band = chart.band
    assert band is not None and (band.estimate, band.low, band.high, band.windows, band.unit) == (
        clustered.estimate, clustered.ci95_low, clustered.ci95_high, 17, "source cluster")
    ends = _band_ends(app, chart)
    assert ends == (_column(chart, clustered.ci95_low), _column(chart, clustered.ci95_high))  # type: ignore[arg-type]
    assert ends[0] < _column(chart, 0.0) < _column(chart, contexts.ci95_low)  # type: ignore[arg-type]
    legend = chart.legend_lines(chart.size.width)
    assert all(len(line) <= chart.size.width for line in legend), legend  # fits: nothing cut off
    drawn = drawn_lines(app, "#diff-chart")[:len(legend)]
    assert [line.rstrip() for line in legend] == drawn, (legend, drawn)
    assert legend[0].startswith("B − A per context  │ 0"), legend  # the bars are contexts
    assert LEGEND in " ".join(legend), legend
    verdict = static_text(app, "#diff-verdict")
    assert "includes zero, over 17 source clusters" in verdict, verdict  # the sentence and legend agree
    # above the chart, in short: the same verdict, over the same source clusters
    headline = " ".join(static_text(app, "#diff-headline").split())
    assert headline.startswith("A = ") and ": tied with " in headline, headline
    assert headline.endswith("over 17 source clusters (in full below the chart)"), headline


@sync
@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_the_viewer_draws_the_clustered_verdicts_interval_and_says_so(
        tmp_path: Path, pair: tuple[Path, Path, PairedDiff], size: tuple[int, int]) -> None:
    best, close, diff = pair
    app = create_app(reports=[best, close], config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        await pilot.press("d")  # two reports: d diffs them without marks
        _check(app, await _shown(app, pilot), diff)


@sync
@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_the_dashboards_diff_tab_draws_the_clustered_verdicts_interval(
        tmp_path: Path, pair: tuple[Path, Path, PairedDiff], size: tuple[int, int]) -> None:
    best, close, diff = pair
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        for path in (best, close):
            await open_with_o(app, pilot, path)
        await pilot.press("d")
        _check(app, await _shown(app, pilot), diff)
