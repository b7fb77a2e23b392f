"""The viewer's leaderboard of three hidden-state suite reports, one with a long name, and the difference
of two of them, as a user reads them at 200x50 and at 80x24: whole names where there is room, the
domains' names in the per-context chart, and a tie column that counts each source cluster once, as the
difference's clustered verdict does (so no line under the verdict says which of the two to trust)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kldtui.formats import fidelity as fid
from kldtui.formats.report import write_report
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from kldtui.tui.app import KldApp, create_app
from tests import fidelity_fixture as fx
from tests.fixtures_tui import drawn_lines, screen_lines, settle, sync, until

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

pytest.importorskip("torch")

LONG = "small-quant-with-a-long-name"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three candidates of a 12-context suite (6 source clusters): ``LONG`` best, then mid, large."""
    from tests.fixtures_hidden import noisy_candidates

    root = tmp_path_factory.mktemp("hidden-board")
    f = fx.build(root / "suite", contexts=12)
    return [write_report(root / f"{name}.json",
                         compare(f.root, f.root / fid.HIDDEN_DIR, folder,
                                 CompareOptions(backend=NUMPY, bootstrap_samples=100)))
            for name, folder in noisy_candidates(f, root, {LONG: 0.03, "large": 0.09, "mid": 0.05}).items()]


async def _diff_best_and_second(app: KldApp, pilot: object) -> None:
    """Rows 1 and 2 marked, d: the difference pane with its chart drawn."""
    await pilot.press("down", "space", "up", "space", "d")  # type: ignore[attr-defined]
    await settle(app, pilot)
    chart = app.screen.query_one("#diff-chart")
    await until(pilot, lambda: chart.display and bool(chart.bars), "the difference")  # type: ignore[attr-defined]


def _table_row(lines: list[str], rank: int) -> str:
    """The ranking's row ``rank`` as drawn (a mark ``*`` may lead its rank)."""
    rows = [line for line in lines if re.match(rf"^ \s?\*?{rank}  ", line)]
    assert len(rows) == 1, "\n".join(lines)
    return rows[0]


@sync
async def test_the_ranking_names_a_candidate_whole_where_the_terminal_has_room(tmp_path: Path,
                                                                             reports: list[Path]) -> None:
    """At 200 columns the candidate column cut "small-quant-with-a-long-name" to 18 characters
    ("small-quant-with-a") beside half a screen of empty room. It takes the room the terminal gives; at
    80x24 the name is cut, visibly, and the rest of the row (mean KL, tie mark, interval, bar) stays."""
    app = create_app(reports=reports, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        table = app.screen.query_one("#board")
        await until(pilot, lambda: table.row_count == 3, "the ranking")
        await settle(app, pilot)
        row = _table_row(screen_lines(app), 1)  # 6 source clusters: too few to name a best
        assert re.search(rf"  {LONG}  +0\.\d{{5}}  no verdict  +\[0\.\d{{5}}, 0\.\d{{5}}\] +.*●", row), row
        await pilot.resize_terminal(80, 24)
        await settle(app, pilot)
        await until(pilot, lambda: "…" in _table_row(screen_lines(app), 1), "the name cut at 80 columns")
        lines = screen_lines(app)
        row = _table_row(lines, 1)
        assert re.search(r"  small\S*…\S*-long-name  +0\.\d{5}  no verdict  +\[0\.\d{5}, 0\.\d{5}\] +.*●",
                         row), row
        assert all(len(line) <= 80 for line in lines), "\n".join(lines)
        assert table.virtual_size.width <= table.region.width, (table.virtual_size, table.region)
        assert "no verdict" in _table_row(lines, 2) and "no verdict" in _table_row(lines, 3), "\n".join(lines)


@sync
async def test_the_difference_chart_names_each_contexts_domain_as_the_width_allows(
        tmp_path: Path, reports: list[Path]) -> None:
    """The per-context chart of the difference cut every domain to 5 characters ("004 code_",
    "008 chine") before a wide empty gap at 200 columns. Whole names at 200 columns; at 80x24 as much
    as a quarter of the chart allows, cut with "…", every row with its bar and figure."""
    app = create_app(reports=reports, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        await _diff_best_and_second(app, pilot)
        text = "\n".join(screen_lines(app))
        for label in ("000 encyclopedic_factual ", "004 code_tests_documentation_issues ", "008 chinese "):
            assert label in text, text
        await pilot.resize_terminal(80, 24)
        await settle(app, pilot)
        chart = app.screen.query_one("#diff-chart")
        await until(pilot, lambda: chart.size.width < 80, "the chart at 80 columns")
        legend = len(chart.legend_lines(chart.size.width))  # type: ignore[attr-defined]
        rows = [row for row in drawn_lines(app, "#diff-chart")[legend:] if row]
        assert len(rows) == 12, rows
        drawn = r"│.*█.* [+-]0\.\d+$"  # the zero line, a bar, the figure
        assert all(len(row) <= chart.size.width and re.search(drawn, row) for row in rows), rows
        assert rows[0].startswith("000 encyclopedic_") and "…" in rows[0], rows
        assert rows[8].startswith("008 chinese "), rows
        assert any(line.startswith(" 000 encyclopedic_") for line in screen_lines(app)), screen_lines(app)


@sync
async def test_the_tie_column_counts_source_clusters_as_the_difference_does(
        tmp_path: Path, reports: list[Path]) -> None:
    """Row 2's tie column said "worse" (the 12 contexts as independent units) and the difference of rows
    1 and 2 just below it "too few source clusters (6) for a verdict" (each source once), with a line
    saying which to trust. The tie column now counts the 6 source clusters too: "no verdict" beside the
    same verdict, the ranking's note says why in the same words, and no line under the verdict claims
    the tie column counts contexts as independent. kldtui diff still says so of its own per-context
    rows, which do."""
    from kldtui.decide.paired import paired_diff_files

    app = create_app(reports=reports, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(app, pilot)
        lines = screen_lines(app)
        note = ("too few source clusters (6) for a verdict: the 12 contexts come from 6 sources, each "
                "counted once; the rows are in order of mean KL only")  # in full at 200x50
        assert note in " ".join(" ".join(lines).split()), lines
        await _diff_best_and_second(app, pilot)
        lines = screen_lines(app)
        assert "no verdict" in _table_row(lines, 2), "\n".join(lines)
        said_first = " too few source clusters (6, mixed partition) for a"
        verdict = [i for i, line in enumerate(lines) if line.startswith(said_first)]
        assert verdict and lines[verdict[0] + 1].startswith(" noise model: "), "\n".join(lines)
        text = "\n".join(lines)
        assert "tie column" not in text and "as independent" not in text, text
        cli = paired_diff_files(reports[0], reports[2]).notes
        said = ("contexts share sources: each row above counts the 12 contexts as independent; the verdict "
                "counts each of the 6 source clusters once and is the one to trust where they disagree")
        assert said in cli, cli
