"""What the viewer's leaderboard shows first: the chart, the notes in full where there is room.

Found at 80x24: after d the verdict and the noise model's full description took 16 lines and the
difference chart began below the fold; after c the selected row's verdict (9 lines for a clearly worse
candidate) pushed the charts down. At 200x50 the notes above the ranking stayed in their one-line short
form beside an empty half of the screen. Each test reads the screen as the user sees it.
"""

from __future__ import annotations

from pathlib import Path

from kldtui.tui.app import KldApp, create_app
from kldtui.tui.screens.board import PROVISIONAL_LEGEND
from tests.fixtures_tui import open_pane, screen_lines, settle, static_text, sync


def _pair_and_one_repeat(tmp_path: Path) -> tuple[list[Path], Path]:
    """fine, and coarse clearly worse, on 32 windows, with a noise model of one repeat capture: the
    difference is named and provisional, its verdict long (why, and the command that confirms it)."""
    import numpy as np

    from kldtui.cli.main import main
    from tests.fixtures_decide import make_report, suite_domains, write_report

    domains = suite_domains(32)
    base = np.random.default_rng(4).gamma(4.0, 0.0025, 32)
    fine = write_report(tmp_path / "fine.json", make_report(base, domains, candidate_dir="/runs/fine"))
    worse = base * 3 * np.exp(np.random.default_rng(5).normal(0, 0.2, 32))
    coarse = write_report(tmp_path / "coarse.json", make_report(worse, domains, candidate_dir="/runs/coarse"))
    again = base * np.exp(np.random.default_rng(20).normal(0, 0.01, 32))
    repeat = write_report(tmp_path / "again.json", make_report(again, domains, candidate_dir="/runs/again"))
    model = tmp_path / "noise.json"
    assert main(["noise", str(fine), str(repeat), "--output", str(model), "--allow-different-models"]) == 0
    return [fine, coarse], model


def _viewer(tmp_path: Path, reports: list[Path], noise: Path) -> KldApp:
    return create_app(reports=reports, config_dir=tmp_path / "cfg", noise_path=str(noise),
                      remember_theme=False)


def _words(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


@sync
async def test_at_80x24_the_difference_chart_shows_before_its_verdict_in_full(tmp_path: Path) -> None:
    app = _viewer(tmp_path, *_pair_and_one_repeat(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await open_pane(app, pilot, "d", "#diffpane", "#diff-verdict", "A = ")  # two reports: no marks
        shown = screen_lines(app)[:-1]  # the footer's line left out
        bars = [n for n, line in enumerate(shown) if line.lstrip().startswith(("000 ", "001 ", "002 "))]
        assert len(bars) == 3, "\n".join(shown)  # the first bars in sight, without scrolling
        above = _words(shown[:bars[0]])
        # above the chart: the pair, the outcome and its interval, and where the rest is
        assert "A = fine, B = coarse: worse than fine (provisional); coarse - fine = " in above, above
        assert "95 % interval" in above and "over 32 windows (in full below the chart)" in above, above
        # below it, nothing dropped: the verdict and the noise model in full
        full = static_text(app, "#diff-verdict")
        verdict = app.screen.diff_verdict  # type: ignore[attr-defined]
        assert "provisional: " in verdict and "confirm: " in verdict and verdict in full, full
        assert "noise model: measured repeat variation" in full, full
        chart = app.screen.query_one("#diff-chart")
        assert app.screen.query_one("#diff-verdict").virtual_region.y > chart.virtual_region.y
        assert "esc close" in shown[-1] or "esc close" in screen_lines(app)[-1]  # the footer names Esc


@sync
async def test_at_80x24_the_charts_show_under_the_selected_rows_verdict_in_short(tmp_path: Path) -> None:
    app = _viewer(tmp_path, *_pair_and_one_repeat(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("down")  # coarse: clearly worse, its verdict many lines long
        await pilot.pause()
        verdict = app.screen.verdicts["coarse"]  # type: ignore[attr-defined]
        assert verdict.startswith("coarse is worse than fine by") and "confirm: " in verdict
        await open_pane(app, pilot, "c", "#charts", "#charts-text", "per window")
        shown = screen_lines(app)[:-1]
        table = app.screen.query_one("#board").region
        first = [n for n, line in enumerate(shown) if line.strip() == "mean KL against size"]
        # the first chart right under the table and a one-line verdict, the next one whole in sight too
        assert first == [table.bottom + 1], "\n".join(shown)
        assert any(line.startswith((" fine ", " coarse ")) and "▁" in line for line in shown[first[0]:])
        said = _words([static_text(app, "#board-verdict")])
        assert said == "coarse: worse than the best (provisional); Esc shows its verdict in full", said
        await pilot.press("escape")  # the pane closed: the verdict in full, as Esc said
        await pilot.pause()
        # ... under what the table's "worse (p)" means, which steps aside while a pane is open
        assert static_text(app, "#board-verdict") == f"{PROVISIONAL_LEGEND}\ncoarse: {verdict}"


@sync
async def test_at_200x50_the_notes_above_the_ranking_are_in_full(tmp_path: Path) -> None:
    paths, model = _pair_and_one_repeat(tmp_path)
    for size, in_full in (((200, 50), True), ((80, 24), False)):
        app = _viewer(tmp_path, paths, model)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            notes = app.screen.board_notes  # type: ignore[attr-defined]
            noise = next(full for full, _ in notes if full.startswith("noise model: "))
            assert len(noise) > size[0]  # a note that does not fit in one line
            shown = _words(screen_lines(app))
            assert all((" ".join(full.split()) in shown) == in_full for full, _ in notes), shown
            assert all((brief in shown) != in_full for full, brief in notes if brief != full), shown
