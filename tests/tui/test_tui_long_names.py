"""Two candidates whose long names share their start ("Kimi-K3-Instruct-Q4_K_M", "...-Q4_K_S"): at
80x24 the campaign board wrapped a name mid-word and the ranking cut both to 18 characters and a "…"
at their end, so the two rows read alike. Names are cut in their middle (kldtui.text.short_names) and
wrap after a separator (kldtui.text.wrap_name)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable

from kldtui.events import LeaderboardUpdated, ResultReady, Standing
from kldtui.formats.report import load_report
from kldtui.tui.widgets import LeaderboardTable
from tests.fixtures_tui import dashboard, feed, make_report, settle, sync, until, write_report

NAMES = ("Moonshot-Kimi-K3-Instruct-Q4_K_M", "Moonshot-Kimi-K3-Instruct-Q4_K_S")


def _drawn(table: DataTable) -> list[str]:  # type: ignore[type-arg]
    return [table.render_line(y).text for y in range(table.size.height)]


@sync
async def test_at_80x24_two_long_names_sharing_their_start_read_differently(tmp_path: Path) -> None:
    paths = {name: write_report(tmp_path / f"comparison-{name}.json", make_report(name, level, seed=i))
             for i, (name, level) in enumerate(zip(NAMES, (0.01, 0.02), strict=True))}
    standings = tuple(Standing(name, "compared", rank=i + 1, mean=level, ci_low=level * 0.9,
                               ci_high=level * 1.1, mark="best" if i == 0 else "worse",
                               outcome=None if i == 0 else "a_closer", provisional=i > 0,
                               report_path=str(paths[name]), size_bytes=(3 - i) << 30, bits_per_weight=4.8)
                      for i, (name, level) in enumerate(zip(NAMES, (0.01, 0.02), strict=True)))
    app, _ = dashboard(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await feed(app, pilot, *(ResultReady("compare", path=str(p), report=load_report(p))
                                 for p in paths.values()),
                   LeaderboardUpdated("campaign", rows=standings, windows=8, final=True))
        ranking = app.query_one("#board", LeaderboardTable)
        await until(pilot, lambda: ranking.row_count == 2, "the two reports on the ranking")
        app.main.action_show_tab("leaderboard")
        await settle(app, pilot)
        # the board: each name over lines broken after a separator, the quant's part whole
        assert _names_on_board(_drawn(app.query_one("#campaign-table", DataTable))) == list(NAMES)
        await pilot.press("b")
        await settle(app, pilot)
        drawn = "\n".join(_drawn(ranking))
        shown = [str(ranking.get_row_at(i)[LeaderboardTable.column("candidate")]) for i in range(2)]
    # the ranking: cut in the middle for room, each row's name its own, and as drawn
    assert shown[0] != shown[1] and all("…" in name for name in shown), shown
    assert shown[0].endswith("Q4_K_M") and shown[1].endswith("Q4_K_S"), shown
    assert all(name in drawn for name in shown), drawn


def _names_on_board(lines: list[str]) -> list[str]:
    """The candidate column's text, each row's lines joined; asserts each line but a name's last ends
    after a separator (a name wrapped mid-word read "Moonshot-Kim" / "i-K3-...")."""
    start = lines[0].index("candidate")
    end = lines[0].index("mean KL")
    names: list[list[str]] = []
    for line in lines[1:]:
        if line[:start].strip():  # a row's first line holds its rank
            names.append([])
        part = line[start:end].strip()
        if part:
            names[-1].append(part)
    for parts in names:
        assert all(part.endswith(("-", ".", "_")) for part in parts[:-1]), parts
    return ["".join(parts) for parts in names]


def test_the_charts_tell_two_long_names_apart_in_every_chart() -> None:
    """The viewer's charts (c) cut a name to 24 characters with no mark at all: "Moonshot-Kimi-K3-Instruc"
    for both quants, in all three charts."""
    from kldtui.decide.plots import ChartData, DomainBar, SizePoint, WindowSeries, candidate_styles
    from kldtui.tui.widgets.board_charts import render_charts

    data = ChartData(
        sizes=[SizePoint(name, (3 - i) << 30, 4.8, 0.01 * (i + 1), 0.009, 0.011 * (i + 1), i == 0, 32)
               for i, name in enumerate(NAMES)],
        unsized=[],
        windows=[WindowSeries(name, list(range(32)), [0.01 * (i + 1)] * 32, 0.01 * (i + 1), 0.009,
                              0.011 * (i + 1)) for i, name in enumerate(NAMES)],
        domains=[DomainBar(name, "prose", 0.01 * (i + 1), 0.009, 0.011 * (i + 1), 32)
                 for i, name in enumerate(NAMES)],
        domain_names=["prose"], styles=candidate_styles(list(NAMES)))
    lines = render_charts(data, 100).plain.splitlines()
    for quant in ("Q4_K_M", "Q4_K_S"):
        rows = [line for line in lines if f"…-Instruct-{quant} " in line]
        assert len(rows) == 3, "\n".join(lines)  # its size, its windows and its domain bar
