"""A work folder of two suites' reports (kldtui demo and kldtui demo --hidden share kldtui-demo):
`kldtui view DIR`, `leaderboard DIR` and `plot DIR` say so in one line, naming each suite's reports
and the command that ranks one suite's, without first naming a noise model for a ranking that does
not happen (they said "noise model: ... the campaign's", then that two of its files "come from
different suites ...; compare candidates against one reference", which a folder given does not let
the user do). Files named one by one keep the leaderboard's refusal, which says which belong
together."""

from __future__ import annotations

import shlex

import pytest

from kldtui.cli.main import main
from tests.fixtures_decide import two_suite_folder


def _words(folder, command: str) -> str:
    return (f"kldtui: error: {folder} holds reports of 2 suites, which no leaderboard ranks together "
            "(suite 555555555555: comparison-a.json, comparison-b.json; suite 666666666666: "
            f"comparison-c.json, comparison-d.json); rank one suite's: {command} {folder}/comparison-a.json "
            f"{folder}/comparison-b.json\n")


@pytest.mark.parametrize("command", ["view", "leaderboard", "plot"])
def test_a_folder_of_two_suites_names_each_suites_reports_and_the_command_for_one(tmp_path, capsys, command):
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    chart = tmp_path / "chart.svg"
    extra = ["-o", str(chart)] if command == "plot" else []
    assert main([command, str(folder), *extra]) == 2
    captured = capsys.readouterr()
    shown = f"kldtui {command}" + (f" -o {chart}" if command == "plot" else "")
    assert captured.err == _words(folder, shown)  # one line, no "noise model: ..." before it
    assert captured.out == ""
    if command == "plot":
        return  # the chart needs matplotlib; the command it names is checked with the other two
    # the command it names ranks that suite's reports
    assert main(shlex.split(captured.err.split("rank one suite's: ")[1])[1:]) == 0
    assert "b" in capsys.readouterr().out


def test_folders_of_one_suite_each_are_named_with_their_reports_paths(tmp_path, capsys):
    """Two campaigns' folders, one suite each: the reports are named by path (the folders differ)."""
    both = two_suite_folder(tmp_path / "both")
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    for name, folder in (("a", one), ("b", one), ("c", other), ("d", other)):
        (folder / f"comparison-{name}.json").write_text((both / f"comparison-{name}.json").read_text())
    assert main(["leaderboard", str(one), str(other)]) == 2
    assert capsys.readouterr().err == (
        f"kldtui: error: {one}, {other} hold reports of 2 suites, which no leaderboard ranks together "
        f"(suite 555555555555: {one}/comparison-a.json, {one}/comparison-b.json; suite 666666666666: "
        f"{other}/comparison-c.json, {other}/comparison-d.json); rank one suite's: kldtui leaderboard "
        f"{one}/comparison-a.json {one}/comparison-b.json\n")


def test_report_files_of_two_suites_are_refused_saying_which_belong_together(tmp_path, capsys):
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    a, b, c = (str(folder / f"comparison-{n}.json") for n in "abc")
    assert main(["leaderboard", a, c, b]) == 2
    assert capsys.readouterr().err == (
        f"kldtui: error: {a} and {c} come from different suites (suite_token_hash_sha256 555555555555... "
        "vs 666666666666...); compare candidates against one reference: give the reports of one suite "
        "together (suite 555555555555: comparison-a.json, comparison-b.json; suite 666666666666: "
        "comparison-c.json)\n")



def _unrecorded(folder, name: str = "old"):  # type: ignore[no-untyped-def]
    """A report of the folder's first suite's reference and windows that records no suite (as the
    original comparator's records none)."""
    import json

    doc = json.loads((folder / "comparison-a.json").read_text())
    del doc["suite_token_hash_sha256"]
    doc["candidate_dir"] = f"/runs/{name}"
    (folder / f"comparison-{name}.json").write_text(json.dumps(doc))
    return folder / f"comparison-{name}.json"


@pytest.mark.parametrize("command", ["view", "leaderboard"])
def test_a_report_that_records_no_suite_ranks_beside_the_one_suite_of_its_folder(tmp_path, capsys, command):
    """Unknown is not another suite: it ranks beside the folder's one suite, the pairing checks
    (reference, windows) deciding that it can."""
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    for name in "cd":
        (folder / f"comparison-{name}.json").unlink()
    next(folder.glob("noise-model-*.json")).unlink()  # the fixture's stands for a name only
    _unrecorded(folder)
    assert main([command, str(folder)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("old", "a", "b")), out


@pytest.mark.parametrize("command", ["view", "leaderboard"])
def test_a_folder_of_two_suites_names_the_reports_that_record_none_apart(tmp_path, capsys, command):
    """Beside two suites a report that records none cannot be placed: the line names it apart, so that
    every report of the folder is named, and the command to copy leaves it out."""
    folder = two_suite_folder(tmp_path / "kldtui-demo")
    _unrecorded(folder)
    assert main([command, str(folder)]) == 2
    assert capsys.readouterr().err == _words(folder, f"kldtui {command}").replace(
        "comparison-d.json);", "comparison-d.json; suite not recorded: comparison-old.json);")
