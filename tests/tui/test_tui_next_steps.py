"""What to do after a run says the same true commands in every view (kldtui.workflow.next_steps): the
lines ``--batch`` prints under the summary are the dashboard's, whole in its footer at 80 columns (a
wider line wrapped, its later rows indented two more) and in its Log, also when the dashboard is
opened on the finished work folder; paths inside the current folder are relative to it (the profile's
too); a campaign's lines name its reports and noise model, and each of its diff and leaderboard
commands runs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.events import LeaderboardUpdated, Standing
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.widgets.progress import note_rows
from kldtui.workflow.next_steps import OTHER_REPORT, campaign_next_steps, shown_path
from kldtui.workflow.profile import load_profile
from tests.fixtures_campaign import build_suite, single_profile
from tests.fixtures_tui import screen_lines, settle, sync, until

pytestmark = pytest.mark.slow  # a whole demo campaign and a single run, each also in the dashboard


def _batch_next_lines(out: str, first: str) -> list[str]:
    """The lines after a --batch run's summary: from the one that starts with ``first`` to the end."""
    lines = out.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith(first))
    return lines[start:]


async def _reopened(profile: Path, config: Path) -> tuple[list[str], list[str], list[str]]:
    """The dashboard opened on ``profile``'s finished work folder at 80x24: what to do next (its
    model's lines), its Log's lines and the footer's rows of the screen, as the user reads them."""
    app: KldApp = create_app(profile=load_profile(profile), config_dir=config)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.main.model.next_lines), "what to do next", limit=60)
        await settle(app, pilot)
        lines = list(app.main.model.next_lines)
        log = [text for _, text in app.main.model.log]
        region = app.main.query_one("#progress").region
        footer = screen_lines(app)[region.y:region.bottom]
        await pilot.press("q")
    return lines, log, footer


def _footer_lines(footer: list[str]) -> list[str]:
    """The footer's rows read back as the lines they show: a row indented two more than the line it
    follows goes on with that line (after the space it was broken at)."""
    lines: list[str] = []
    indents: list[int] = []
    for row in footer:
        text = row[1:]  # the panel's padding
        body = text.lstrip(" ")
        indent = len(text) - len(body)
        if lines and indent == indents[-1] + 2:
            lines[-1] += " " + body
        else:
            lines.append(text)
            indents.append(indent)
    return lines


def _check_footer(footer: list[str], lines: list[str]) -> None:
    """The footer shows each line whole at 80 columns: wrapped where it is wider, never cut."""
    assert footer == [f.rstrip() for f in footer] and all(len(f) <= 80 for f in footer), footer
    assert not [f for f in footer if "…" in f], footer
    assert _footer_lines(footer) == lines, (footer, lines)


@sync
async def test_a_campaign_says_the_same_runnable_commands_in_batch_and_in_the_dashboard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--batch", "--workdir", "D"]) == 0  # two candidates, fine and coarse
    batch = _batch_next_lines(capsys.readouterr().out, "leaderboard: ")
    noise = sorted(Path("D").glob("noise-model-*.json"))
    assert len(noise) == 1, noise
    reports = "D/comparison-fine.json D/comparison-coarse.json"
    another = ("      another candidate: add a [[candidates]] table to D/kldtui.toml and run again (the "
               "others are not captured again)")
    assert batch == ["leaderboard: D/leaderboard.json",
                     f"next: kldtui leaderboard {reports} --noise {noise[0]}",
                     f"      kldtui diff {reports} --noise {noise[0]}",
                     "      kldtui view D/comparison-fine.json",
                     another], batch

    lines, log, footer = await _reopened(Path("D/kldtui.toml"), tmp_path / "cfg")
    assert lines == batch  # the same commands, not the single run's OTHER/comparison.json
    assert not [line for line in log if OTHER_REPORT in line], log
    for line in batch:  # the Log has each whole, once
        assert log.count(f"[run] {line}") == 1, (line, log)
    _check_footer(footer, batch)
    # the line wider than 80 columns is read whole on the screen: its profile's path and "run again"
    assert footer[-2:] == ["       another candidate: add a [[candidates]] table to D/kldtui.toml and run",
                           "         again (the others are not captured again)"], footer

    # opened from another folder: whole absolute paths; where their rows are more than the footer
    # holds (10), the rows it shows are the lines' first, and its last says how many more and where
    # they are whole
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    lines, log, footer = await _reopened(tmp_path / "D" / "kldtui.toml", tmp_path / "cfg")
    assert f"table to {tmp_path / 'D' / 'kldtui.toml'} and run again" in lines[-1], lines
    rows = note_rows(lines, 78)
    if len(rows) <= 10:  # a short temporary folder
        _check_footer(footer, lines)
    else:
        assert len(footer) == 10 and all(len(f) <= 80 for f in footer), (footer, rows)
        assert footer[:-1] == [" " + row for row in rows[:9]], (footer, rows)
        assert footer[-1] == f" … {len(rows) - 9} more rows: the Log (l) has these lines whole"
    for line in lines:
        assert f"[run] {line}" in log, (line, log)
    monkeypatch.chdir(tmp_path)  # where the batch run's commands name their files

    ran = 0
    for line in batch:  # each printed diff and leaderboard command runs
        argv = shlex.split(line.removeprefix("next:"))
        if argv[:1] == ["kldtui"] and argv[1] in ("diff", "leaderboard"):
            capsys.readouterr()
            assert main(argv[1:]) == 0, (line, capsys.readouterr())
            ran += 1
    assert ran == 2


@sync
async def test_a_single_run_with_no_other_report_names_the_placeholder_in_every_view(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    build_suite(tmp_path / "suite", windows=4)
    profile = single_profile(tmp_path / "kldtui.toml", tmp_path / "suite", tmp_path / "w")
    assert main(["run", "--batch", "--profile", str(profile)]) == 0
    batch = _batch_next_lines(capsys.readouterr().out, "report: ")
    assert batch == ["report: w/comparison.json", "next: kldtui view w/comparison.json",
                     f"      kldtui diff w/comparison.json {OTHER_REPORT}"], batch

    lines, log, footer = await _reopened(profile, tmp_path / "cfg")
    assert lines == batch
    for line in batch:
        assert log.count(f"[run] {line}") == 1, (line, log)
    _check_footer(footer, batch)


def test_a_campaigns_commands_name_its_ranked_reports_and_its_noise_model_only_where_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    noise = tmp_path / "noise-model-ab.json"
    rows = (Standing("q8", "compared", rank=1, report_path=str(tmp_path / "comparison-q8.json")),
            Standing("q4", "compared", rank=2, report_path=str(tmp_path / "comparison-q4.json")),
            # the leader's repeat capture is the noise model, not a report to rank or diff
            Standing("q8.repeat", "compared", repeat_of="q8",
                     report_path=str(tmp_path / "repeat" / "comparison-q8.json")),
            Standing("q3", "failed", note="its server died"))
    standings = LeaderboardUpdated("campaign", rows=rows, path=str(tmp_path / "leaderboard.json"),
                                   noise_path=str(noise), final=True)
    without = campaign_next_steps(standings, "kldtui.toml")  # its file is not there (yet): no --noise
    assert without == ["leaderboard: leaderboard.json",
                       "next: kldtui leaderboard comparison-q8.json comparison-q4.json",
                       "      kldtui diff comparison-q8.json comparison-q4.json",
                       "      kldtui view comparison-q8.json",
                       "      another candidate: add a [[candidates]] table to kldtui.toml and run again "
                       "(the others are not captured again)"]
    noise.write_text("{}")
    assert campaign_next_steps(standings, "kldtui.toml")[1:3] == [
        "next: kldtui leaderboard comparison-q8.json comparison-q4.json --noise noise-model-ab.json",
        "      kldtui diff comparison-q8.json comparison-q4.json --noise noise-model-ab.json"]
    one = LeaderboardUpdated("campaign", rows=rows[:1] + rows[3:])
    assert campaign_next_steps(one)[:2] == ["next: kldtui leaderboard comparison-q8.json",
                                            "      kldtui view comparison-q8.json"]
    assert campaign_next_steps(LeaderboardUpdated("campaign", rows=(Standing("q8", "running"),))) == []


def test_a_line_wider_than_the_footer_is_wrapped_at_spaces_with_its_later_rows_indented() -> None:
    lines = ["leaderboard: L.json", "next: kldtui leaderboard a.json b.json c.json",
             "      kldtui view a.json", "      another candidate: add a table to p.toml and run again"]
    assert note_rows(lines, 30) == ["leaderboard: L.json",
                                    "next: kldtui leaderboard",
                                    "  a.json b.json c.json",
                                    "      kldtui view a.json",
                                    "      another candidate: add a",
                                    "        table to p.toml and",
                                    "        run again"]
    assert note_rows(lines, 80) == lines  # each fits: as it is
    assert note_rows(lines, 0) == lines  # not laid out yet


def test_a_path_is_shown_relative_to_the_current_folder_inside_it_else_as_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one rule for the next-step lines and the dashboard's and viewer's paths (what a user types next)
    (tmp_path / "here" / "D").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "here")
    assert shown_path(tmp_path / "here" / "D" / "kldtui.toml") == "D/kldtui.toml"
    assert shown_path("./D//kldtui.toml") == "D/kldtui.toml"
    assert shown_path(tmp_path / "here") == "."
    # outside it: as the user gave it, not normalized (a shell reads it the same)
    assert shown_path("../other/./r.json") == "../other/./r.json"
    assert shown_path(tmp_path / "other" / "r.json") == str(tmp_path / "other" / "r.json")
