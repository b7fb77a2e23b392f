"""Whose runs a ranking's reports are: a campaign's ``comparison-NAME.json`` is recorded under ``runs``
in its folder's ``profiles.json``, but ``kldtui leaderboard`` (text, --json, exports) and ``kldtui view``
did not say whose they are where a folder holds the runs of more than one profile. They (and ``kldtui
plot``'s title) say it from the record only: a broken, linked or FIFO record is said and names no
profile, and nothing is written."""

from __future__ import annotations

import csv
import io
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.workflow.owners import Whose, whose_notes
from tests.fixtures_tui import shared_campaign_folder

NOTE = "whose runs these are, as the profiles.json of each report's folder records it: "


def _files(work: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_size, p.lstat().st_mtime_ns) for p in work.iterdir()}


def _whose(tmp_path: Path) -> str:
    """The note naming each candidate's profile, as the folder of shared_campaign_folder records them."""
    return (f"{NOTE}a, b: profile {tmp_path / 'one.toml'}; c: profile {tmp_path / 'two.toml'}")


def test_kldtui_leaderboard_says_whose_run_each_report_is(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    work = shared_campaign_folder(tmp_path)
    out_json = tmp_path / "board.json"
    before = _files(work)
    assert main(["leaderboard", str(work), "--plain", "--no-noise-floor", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert f"note: {_whose(tmp_path)}\n" in out
    doc = json.loads(out_json.read_text())
    assert {r["name"]: r["profile"] for r in doc["rows"]} == {
        "a": str(tmp_path / "one.toml"), "b": str(tmp_path / "one.toml"), "c": str(tmp_path / "two.toml")}
    assert _whose(tmp_path) in doc["notes"]
    assert _files(work) == before  # read only


def test_the_exports_say_whose_run_each_report_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = shared_campaign_folder(tmp_path)
    exported: dict[str, str] = {}
    for fmt in ("markdown", "csv", "llama-cpp"):
        assert main(["leaderboard", str(work), "--no-noise-floor", "--format", fmt]) == 0
        exported[fmt] = capsys.readouterr().out
    assert f"<sub>note: {_whose(tmp_path)}</sub>" in exported["markdown"]
    rows = list(csv.DictReader(io.StringIO(exported["csv"])))
    assert {Path(r["report"]).name: r["profile"] for r in rows} == {
        "comparison-a.json": str(tmp_path / "one.toml"), "comparison-b.json": str(tmp_path / "one.toml"),
        "comparison-c.json": str(tmp_path / "two.toml")}
    heads = [line for line in exported["llama-cpp"].splitlines() if line.startswith("# kldtui: ")]
    assert len(heads) == 3
    for head in heads:
        name = head.removeprefix("# kldtui: ").split(" ", 1)[0]
        profile = "two.toml" if name == "c" else "one.toml"
        assert head.endswith(f"; the run of profile {tmp_path / profile}"), head


def test_the_runs_of_one_profile_are_not_said_apart(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """One profile's reports: no note (the rows' profile is still in --json and the CSV: it is recorded)."""
    work = shared_campaign_folder(tmp_path, {"a": "one.toml", "b": "one.toml"})
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", str(work), "--plain", "--no-noise-floor", "--json", str(out_json)]) == 0
    assert "whose runs" not in capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert [r["profile"] for r in doc["rows"]] == [str(tmp_path / "one.toml")] * 2
    assert not any("whose runs" in n for n in doc["notes"])
    assert main(["leaderboard", str(work), "--no-noise-floor", "--format", "llama-cpp"]) == 0
    assert "the run of profile" not in capsys.readouterr().out


def test_reports_without_a_record_carry_no_profile(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    work = shared_campaign_folder(tmp_path)
    (work / "profiles.json").unlink()
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", str(work), "--plain", "--no-noise-floor", "--json", str(out_json)]) == 0
    assert "whose runs" not in capsys.readouterr().out
    assert all("profile" not in r for r in json.loads(out_json.read_text())["rows"])  # optional: absent
    assert main(["leaderboard", str(work), "--no-noise-floor", "--format", "csv"]) == 0
    assert "profile" not in next(csv.reader(io.StringIO(capsys.readouterr().out)))


def _untrusted_record(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A shared campaign folder whose profiles.json kldtui did not write (``case``: broken JSON, a link to
    a record naming the profiles, which is not followed, or a FIFO), and what the note says of it."""
    work = shared_campaign_folder(tmp_path)
    record = work / "profiles.json"
    planted = tmp_path / "planted.json"
    planted.write_text(record.read_text())
    record.unlink()
    if case == "broken":
        record.write_text("{")
        return work, f"{record}: profiles record is not valid JSON"
    if case == "link":
        record.symlink_to(planted)
        return work, f"{record}: a link holds the profiles record's name"
    os.mkfifo(record)  # never waited on
    return work, f"{record}: is a FIFO (named pipe), not a regular file"


@pytest.mark.parametrize("case", ["broken", "link", "fifo"])
def test_a_record_kldtui_did_not_write_is_said_and_names_no_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    work, said = _untrusted_record(tmp_path, case)
    before = _files(work)
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", str(work), "--plain", "--no-noise-floor", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert f"note: whose runs these are is not known: {said}" in out
    assert "profile /" not in out and NOTE not in out
    doc = json.loads(out_json.read_text())
    assert all("profile" not in r for r in doc["rows"])
    assert _files(work) == before


def _svg_text(svg: Path) -> str:
    """The text an SVG shows, its lines joined by spaces (a long note is broken into lines at spaces)."""
    return " ".join(t for el in ET.parse(svg).getroot().iter() for t in [el.text] if t and t.strip())


def test_kldtui_plot_says_whose_run_each_report_is_in_its_title(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    work = shared_campaign_folder(tmp_path)
    before = _files(work)
    svg = tmp_path / "board.svg"
    assert main(["plot", str(work), "--no-noise-floor", "-o", str(svg)]) == 0
    text = _svg_text(svg)
    title = "KL(reference || candidate): 3 candidates, 8 windows; lower is closer"
    assert f"{title} {_whose(tmp_path)}" in text, text  # the leaderboard's note, under the title
    assert _files(work) == before  # read only
    one = shared_campaign_folder(tmp_path / "one", {"a": "one.toml", "b": "one.toml"})
    assert main(["plot", str(one), "--no-noise-floor", "-o", str(svg)]) == 0
    assert "whose runs" not in _svg_text(svg)  # one profile's: not said apart, as in a ranking


@pytest.mark.parametrize("case", ["broken", "link", "fifo"])
def test_a_plot_takes_no_profile_from_a_record_kldtui_did_not_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    work, said = _untrusted_record(tmp_path, case)
    before = _files(work)
    svg = tmp_path / "board.svg"
    assert main(["plot", str(work), "--no-noise-floor", "-o", str(svg)]) == 0
    text = _svg_text(svg)
    assert f"whose runs these are is not known: {said}" in text, text
    assert "profile /" not in text and NOTE not in text
    assert _files(work) == before


def test_kldtui_view_without_a_terminal_says_whose_run_each_report_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = shared_campaign_folder(tmp_path)
    assert main(["view", str(work), "--no-noise-floor"]) == 0
    out, err = capsys.readouterr()
    assert f"note: {_whose(tmp_path)}\n" in out
    for name, profile in (("a", "one.toml"), ("b", "one.toml"), ("c", "two.toml")):
        assert (f"kldtui: {work / f'comparison-{name}.json'}: the run of profile {tmp_path / profile}, as "
                "profiles.json records it\n") in err


def test_the_short_note_names_each_rows_profile_and_fits_one_line() -> None:
    """The short line above a ranking (80 columns): the profiles by file name, by path where two share
    one; where that is longer than a line, how many and where to read whose each is."""
    one, two = Whose("/p/one.toml"), Whose("/p/two.toml", gone=True)
    notes = whose_notes([("a", one), ("b", one), ("c", two), ("old", Whose())])
    assert notes == [(f"{NOTE}a, b: profile /p/one.toml; c: profile /p/two.toml (whose file is gone); "
                      "old: none recorded",
                      "of 2 profiles: a, b: one.toml; c: two.toml; old: none recorded")]
    same_name = whose_notes([("a", Whose("/p/x/kldtui.toml")), ("b", Whose("/p/y/kldtui.toml"))])
    assert same_name[0][1] == "of 2 profiles: a: /p/x/kldtui.toml; b: /p/y/kldtui.toml"
    long = [(f"Kimi-K3-Instruct-Q{i}_K_M", Whose(f"/p/{'one' if i % 2 else 'two'}.toml")) for i in range(6)]
    assert whose_notes(long)[0][1] == "reports of 2 profiles (two.toml, one.toml): ? says whose"
    assert all(len(brief) <= 78 for _, brief in [*notes, *same_name, *whose_notes(long)])
    assert whose_notes([("a", one), ("b", one), ("c", Whose())]) == []  # one profile's, or none recorded
