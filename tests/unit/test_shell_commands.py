"""Every command kldtui prints for the user to copy writes each path for a POSIX shell, by one rule
(kldtui.text.shell_arg): a path with a space or a shell metacharacter comes back whole from
``shlex.split``, a relative name that starts with ``-`` is ``./-x.json`` (no command reads it as an
option), an ordinary path is printed as it is, unquoted, and a path holding a control character (a
line break, a tab, ESC) or bytes that are not text is written in bash's ``$'...'`` quoting: one line,
which bash runs as copied, giving back the exact name. The "next:" lines of a single run and of a
campaign, a verdict's "confirm:" command, the command that ranks one suite's reports and the way
kldtui names itself all follow it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kldtui
from kldtui.cli.main import main
from kldtui.decide.paired import confirm_command
from kldtui.events import LeaderboardUpdated, Standing
from kldtui.formats.report_names import beside_board_line, mixed_suites_line, other_suites_note, rank_command
from kldtui.stages.verify import unfinished_download
from kldtui.text import kldtui_command, shell_arg
from kldtui.workflow.next_steps import OTHER_REPORT, campaign_next_steps, report_next_steps
from tests.fixtures_commands import started_from_a_venv
from tests.fixtures_decide import OTHER_SUITE_HASH, SUITE_HASH, two_suite_folder

# a folder name the shell would split (a space) or expand ($HOME, *, a subshell), and one with quotes
AWKWARD = ["my runs", "$HOME runs", "q4 (it's; & *)", 'say "hi"']


# names a folder may have that a printed line cannot hold as they are: a line break, a tab, ESC and a C1
# character beside quotes, a $ and a backslash, and a file name's byte that is not UTF-8
CONTROL = ["my\nruns", "q4\tfinal", "it's\n\t$HOME \\ (1)\x1b[2J\x85", os.fsdecode(b"q4 \xff")]


def _bash_argv(command: str) -> list[bytes]:
    """The words bash makes of a printed ``command`` (a "next:" line's, as copied), as bytes."""
    bash = shutil.which("bash")
    assert bash is not None
    ran = subprocess.run([bash, "-c", f"set -- {command}; printf '%s\\0' \"$@\""], capture_output=True,
                         timeout=30, check=True)
    return ran.stdout.split(b"\0")[:-1]


def _argv(line: str) -> list[str]:
    """A printed command line as the shell splits it (its "next:" or indent taken off)."""
    return shlex.split(line.removeprefix("next:"))


@pytest.mark.parametrize("name", AWKWARD)
def test_a_path_the_shell_would_split_or_expand_comes_back_whole(name: str) -> None:
    path = f"{name}/comparison.json"
    assert shlex.split(shell_arg(path)) == [path]
    assert shlex.split(shell_arg(Path(path))) == [path]


@pytest.mark.parametrize("name", CONTROL)
def test_a_path_with_a_control_character_prints_on_one_line_and_runs_in_bash_as_copied(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{name}/comparison.json"
    shown = shell_arg(path)
    assert shown.isprintable() and shown.startswith("$'"), shown  # one line, every character shown
    assert _bash_argv(shown) == [os.fsencode(path)]
    assert _bash_argv(shell_arg(f"-{name}")) == [os.fsencode(f"./-{name}")]  # still never an option
    # the commands printed with such a path: a single run's next: lines, the one ranking a suite's reports
    monkeypatch.chdir(tmp_path)
    lines = report_next_steps(tmp_path / path)
    assert all(line.isprintable() for line in lines[1:]), lines
    assert _bash_argv(lines[1].removeprefix("next:")) == [b"kldtui", b"view", os.fsencode(path)]
    ranked = rank_command("view", [Path(path), Path("-b.json")])
    assert ranked.isprintable(), ranked
    assert _bash_argv(ranked) == [b"kldtui", b"view", os.fsencode(path), b"./-b.json"]


def test_an_ordinary_path_is_printed_as_it_is_and_a_dash_is_never_an_option() -> None:
    for plain in ("runs/q4/comparison.json", "/srv/kld/noise-model-ab.json", "comparison-fine.json",
                  "a-b_c.d/e+f@g=h:i,j%k"):
        assert shell_arg(plain) == plain
    assert shell_arg("-x.json") == "./-x.json"
    assert shell_arg(Path("-x.json")) == "./-x.json"
    assert shell_arg("-my report.json") == "'./-my report.json'"
    assert shell_arg("runs/-x.json") == "runs/-x.json"  # not at the start: no option
    assert shell_arg("--output", path=False) == "--output"  # a command line's own option stays one


@pytest.mark.parametrize("name", AWKWARD)
def test_a_single_runs_next_steps_name_a_work_folder_with_any_name(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = tmp_path / name / "comparison.json"
    lines = report_next_steps(report)
    assert lines[0] == f"report: {name}/comparison.json"
    assert _argv(lines[1]) == ["kldtui", "view", f"{name}/comparison.json"], lines
    assert _argv(lines[2]) == ["kldtui", "diff", f"{name}/comparison.json", OTHER_REPORT], lines
    # outside the current folder: the whole path, as given
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert _argv(report_next_steps(report)[1])[2] == str(report)


def test_a_report_named_with_a_leading_dash_is_shown_as_a_path(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = report_next_steps(tmp_path / "-x.json")
    assert lines[1:] == ["next: kldtui view ./-x.json", f"      kldtui diff ./-x.json {OTHER_REPORT}"]


@pytest.mark.parametrize("name", AWKWARD)
def test_a_campaigns_next_steps_name_its_reports_and_noise_model_in_a_folder_with_any_name(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / name
    folder.mkdir()
    noise = folder / "noise-model-ab.json"
    noise.write_text("{}")
    rows = (Standing("q8", "compared", rank=1, report_path=str(folder / "comparison-q8.json")),
            Standing("-q4", "compared", rank=2, report_path=str(folder / "-q4.json")))
    standings = LeaderboardUpdated("campaign", rows=rows, path=str(folder / "leaderboard.json"),
                                   noise_path=str(noise), final=True)
    lines = campaign_next_steps(standings)
    a, b, model = (f"{name}/comparison-q8.json", f"{name}/-q4.json", f"{name}/noise-model-ab.json")
    assert _argv(lines[1]) == ["kldtui", "leaderboard", a, b, "--noise", model], lines
    assert _argv(lines[2]) == ["kldtui", "diff", a, b, "--noise", model], lines
    assert _argv(lines[3]) == ["kldtui", "view", a], lines
    # in the folder itself: the candidate's report named -q4.json is ./-q4.json
    monkeypatch.chdir(folder)
    lines = campaign_next_steps(LeaderboardUpdated("campaign", rows=rows, noise_path=str(noise)))
    assert lines[0] == "next: kldtui leaderboard comparison-q8.json ./-q4.json --noise noise-model-ab.json"


@pytest.mark.parametrize("name", AWKWARD)
def test_a_verdicts_confirm_command_names_the_better_report_whole(name: str) -> None:
    better = f"{name}/comparison-q8.json"
    said = confirm_command("q8", better)
    command = said.split("`")[1]
    assert shlex.split(command) == ["kldtui", "noise", better, "AGAIN.json", "--output", "noise.json"], said
    assert shlex.split(confirm_command("q8", "-q8.json").split("`")[1])[2] == "./-q8.json"


@pytest.mark.parametrize("name", AWKWARD)
def test_the_command_that_ranks_one_suites_reports_names_them_whole(name: str) -> None:
    paths = [Path(name) / "comparison-a.json", Path("-b.json")]
    assert shlex.split(rank_command("view", paths)) == ["kldtui", "view", str(paths[0]), "./-b.json"]


def test_every_command_that_ranks_one_suites_reports_names_kldtui_as_it_was_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Started as ``.venv/bin/kldtui`` (not on PATH), the commands that rank one suite's reports name
    that program, as the next: lines do, never a ``kldtui`` the shell may not find: the refusal of a
    folder of two suites (view, leaderboard, plot; the viewer's o), of reports beside a board of
    another suite (o) and the dashboard's note on the reports it leaves out."""
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    a, b, c = (folder / f"comparison-{n}.json" for n in "abc")
    assert rank_command("view", [a]) == f"{kldtui} view {a}"
    mixed = mixed_suites_line([folder], [a, b, c], [SUITE_HASH, SUITE_HASH, OTHER_SUITE_HASH], "view")
    assert mixed is not None and mixed.endswith(f"rank one suite's: {kldtui} view {a} {b}"), mixed
    beside = beside_board_line(c, [c], [OTHER_SUITE_HASH], [a, b], [SUITE_HASH, SUITE_HASH], "view")
    assert beside is not None and beside.endswith(f"rank one suite's: {kldtui} view {c}"), beside
    note = other_suites_note([(OTHER_SUITE_HASH, [c])], "view")
    assert note is not None and note[0].endswith(f"rank them: {kldtui} view {c}"), note
    chart = tmp_path / "chart.svg"
    for command, extra in (("view", []), ("leaderboard", []), ("plot", ["-o", str(chart)])):
        assert main([command, str(folder), *extra]) == 2
        said = capsys.readouterr().err
        assert said.count("\n") == 1, said
        assert _argv(said.split("rank one suite's: ")[1]) == [shlex.split(kldtui)[0], command, *extra,
                                                             str(a), str(b)], said


@pytest.mark.parametrize("name", AWKWARD)
def test_the_command_that_resumes_a_download_names_its_folder_whole(name: str, tmp_path: Path) -> None:
    root = tmp_path / name
    line = unfinished_download(root, {"state": "downloading", "repo_id": "org/suite"})
    assert line is not None
    assert shlex.split(line.split("resume it: ")[1]) == ["kldtui", "download", "org/suite", "--local-dir",
                                                        str(root)]


def test_kldtui_names_itself_by_a_path_the_shell_keeps_whole(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    program = tmp_path / "my venv $1" / "bin" / "kldtui"
    monkeypatch.setattr(sys, "argv", [str(program), "run"])
    assert shlex.split(kldtui_command()) == [str(program)]
    monkeypatch.chdir(tmp_path / "..")  # inside the current folder: relative to it, still whole
    assert shlex.split(kldtui_command()) == [str(program.relative_to(tmp_path.parent))]
    main = Path(kldtui.__file__).parent / "__main__.py"  # python -m kldtui: the interpreter, then -m
    monkeypatch.setattr(sys, "argv", [str(main)])
    assert shlex.split(kldtui_command())[1:] == ["-m", "kldtui"]
