"""The ranking's figures at a q8's KL: five fixed decimals read 0.00018 for 0.000184 (two significant
digits, where a candidate 3 % closer reads the same), while the campaign's board on the same tab and
``kldtui leaderboard`` gave three or four. The table and the result pane now give the campaign board's
figures (:func:`~kldtui.text.table_figure`)."""

from __future__ import annotations

from pathlib import Path

from kldtui.text import table_figure
from kldtui.tui.app import create_app
from tests.fixtures_tui import make_report, ranking, screen_lines, settle, sync, write_report


def test_a_small_kl_keeps_three_significant_digits() -> None:
    assert table_figure(0.00012345) == "0.000123"
    assert table_figure(0.0077934) == "0.007793"
    assert table_figure(0.029581) == "0.02958"
    assert table_figure(None) == "-"


@sync
async def test_q8_means_keep_their_digits_on_the_ranking_and_the_result_pane(tmp_path: Path) -> None:
    levels = [("q8-a", 0.000120), ("q8-b", 0.000130)]
    reports = {name: make_report(name, level, seed=3) for name, level in levels}
    paths = [write_report(tmp_path / f"{name}.json", report) for name, report in reports.items()]
    app = create_app(reports=paths, config_dir=tmp_path / "cfg", remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await ranking(app, pilot, 2)
        mean = table.column("mean KL")
        interval = table.column("95% interval")
        shown = [str(table.get_row_at(i)[mean]) for i in range(2)]
        assert shown[0] != shown[1], shown
        for result in table.results:
            assert result.kl is not None and result.kl.interval is not None
            low, high = result.kl.interval
            row = [str(c) for c in table.get_row_at(table.results.index(result))]
            assert row[mean] == table_figure(result.kl.estimate), row
            assert row[interval] == f"[{table_figure(low)}, {table_figure(high)}]", row
            assert len(row[mean].replace("0.", "").lstrip("0")) == 3, row  # three digits, not "12"
        lines = "\n".join(screen_lines(app))
        assert all(table_figure(r.kl.estimate) in lines for r in table.results if r.kl), lines
        await pilot.press("enter")  # the result pane says the same figures
        await settle(app, pilot)
        first = table.results[0]
        assert first.kl is not None
        said = "\n".join(screen_lines(app))
        assert f"mean KL  {table_figure(first.kl.estimate)} [" in said
        assert first.js_mean is not None and f"JS {table_figure(first.js_mean)} " in said, said
