"""What to do after a run says the same true commands in every view (kldtui.workflow.next_steps): the
lines ``--batch`` prints under the summary are the dashboard's, in its footer (cut with an ellipsis
at 80 columns) and whole in its Log, also when the dashboard is opened on the finished work folder;
a campaign's lines name its reports and noise model, and each of its diff and leaderboard commands runs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.events import LeaderboardUpdated, Standing
from kldtui.tui.app import KldApp, create_app
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


def _check_footer(footer: list[str], lines: list[str]) -> None:
    """The footer shows each line at 80 columns: whole where it fits, else its start and an ellipsis."""
    assert footer == [f.rstrip() for f in footer] and all(len(f) <= 80 for f in footer), footer
    shown = [f.strip() for f in footer]
    assert len(shown) == len(lines), (shown, lines)
    for drawn, line in zip(shown, lines, strict=True):
        assert drawn == line.strip() or (drawn.endswith("…") and line.strip().startswith(drawn[:-1])), \
            (drawn, line)


@sync
async def test_a_campaign_says_the_same_runnable_commands_in_batch_and_in_the_dashboard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--batch", "--workdir", "D"]) == 0  # two candidates, fine and coarse
    batch = _batch_next_lines(capsys.readouterr().out, "leaderboard: ")
    noise = sorted(Path("D").glob("noise-model-*.json"))
    assert len(noise) == 1, noise
    reports = "D/comparison-fine.json D/comparison-coarse.json"
    assert batch[:4] == ["leaderboard: D/leaderboard.json",
                         f"next: kldtui leaderboard {reports} --noise {noise[0]}",
                         f"      kldtui diff {reports} --noise {noise[0]}",
                         "      kldtui view D/comparison-fine.json"], batch

    lines, log, footer = await _reopened(Path("D/kldtui.toml"), tmp_path / "cfg")
    assert lines == batch  # the same commands, not the single run's OTHER/comparison.json
    assert not [line for line in log if OTHER_REPORT in line], log
    for line in batch:  # the Log has each whole, once
        assert log.count(f"[run] {line}") == 1, (line, log)
    _check_footer(footer, batch)

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
