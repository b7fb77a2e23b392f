"""A campaign's work folder is shared, and each profile now keeps its own ``leaderboard-PROFILE.json``
and ``noise-model-PROFILE-HASH.json`` there; ``kldtui view/leaderboard/plot DIR`` take the folder's
candidates from every ``leaderboard*.json`` and its noise models from every ``noise-model*-HASH.json``.
Whatever another tool or person leaves under those names (a link, a FIFO, a huge or malformed file,
rows of the wrong types, names that climb out of the folder or name no report) never blocks, never
stops a command with a traceback and never ranks a report the campaign did not; a file name that
would drive a terminal is printed escaped; a profile's own file names are plain whatever its name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.report_names import folder_reports, leaderboard_file_name, noise_model_file_name
from kldtui.workflow.campaign import leaderboard_on_disk, shown_candidate
from kldtui.workflow.profile import load_profile
from kldtui.workspace import profile_key
from tests.fixtures_campaign import write_profile
from tests.fixtures_decide import SUITE_HASH, make_report, suite_domains, write_report
from tests.fixtures_hostile import returns_at_once

ESC = "\x1b"


def _campaign_folder(folder: Path) -> Path:
    """comparison-a.json and comparison-b.json of one suite, ranked by the campaign's leaderboard.json,
    and comparison-stray.json another tool left there."""
    folder.mkdir()
    base = np.random.default_rng(3).gamma(4.0, 0.0025, 16)
    for name, shift in (("a", 0.0), ("b", 0.002), ("stray", 0.001)):
        write_report(folder / f"comparison-{name}.json",
                     make_report(base + shift, suite_domains(16), candidate_dir=f"/runs/{name}"))
    (folder / "leaderboard.json").write_text(json.dumps({"rows": [{"name": "a"}, {"name": "b"}]}))
    return folder


def _plant_hostile_leaderboards(folder: Path, elsewhere: Path) -> None:
    """Every kind of leaderboard*.json that must not make comparison-stray.json a candidate."""
    elsewhere.write_text(json.dumps({"rows": [{"name": "stray"}]}))
    (folder / "leaderboard-link.json").symlink_to(elsewhere)  # a link: not the campaign's file
    os.mkfifo(folder / "leaderboard-fifo.json")
    with open(folder / "leaderboard-huge.json", "wb") as f:  # sparse: larger than the limit
        f.truncate(17 * 1024 * 1024)
    (folder / "leaderboard-bad.json").write_text('{"rows": [{"name": "stray"')  # cut short
    (folder / "leaderboard-deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "leaderboard-types.json").write_text(json.dumps(
        {"rows": [{"name": 3}, "stray", None, {"name": ["stray"]}, {"name": {"stray": 1}}]}))
    (folder / "leaderboard-rows.json").write_text(json.dumps({"rows": {"name": "stray"}}))
    (folder / "leaderboard-list.json").write_text(json.dumps([{"name": "stray"}]))
    (folder / "leaderboard-esc.json").write_text(json.dumps({"rows": [{"name": f"x{ESC}]0;t\a"}]}))
    (folder / "leaderboard-dir.json").mkdir()
    # names that climb out of the folder, or name no report: nothing to rank, nothing opened
    (folder / "leaderboard-climb.json").write_text(json.dumps(
        {"rows": [{"name": "../stray"}, {"name": "../../etc/passwd"}, {"name": "/abs"}, {"name": "ghost"}]}))


def test_hostile_leaderboards_never_make_a_stray_report_a_candidate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _campaign_folder(tmp_path / "work")
    _plant_hostile_leaderboards(folder, tmp_path / "elsewhere.json")
    (found,) = returns_at_once(lambda: folder_reports(folder))
    assert not isinstance(found, BaseException), found
    assert [p.name for p in found.reports] == ["comparison-a.json", "comparison-b.json"]
    assert [p.name for p in found.left_out] == ["comparison-stray.json"]
    (code,) = returns_at_once(lambda: main(["leaderboard", str(folder), "--bootstrap-samples", "200"]))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "comparison-stray.json: not a candidate" in err and len(err.strip().splitlines()) == 1
    assert ESC not in out + err and "passwd" not in out + err


def test_only_hostile_leaderboards_leave_a_plain_folder_of_reports(tmp_path: Path) -> None:
    """Without a leaderboard the campaign wrote (and without candidates/), no file vouches for any
    report: the folder is a plain folder of reports, every one of them ranked, as before."""
    folder = _campaign_folder(tmp_path / "work")
    (folder / "leaderboard.json").unlink()
    _plant_hostile_leaderboards(folder, tmp_path / "elsewhere.json")
    (folder / "leaderboard-climb.json").unlink()  # names no report: ranks nothing, but is a campaign's
    (found,) = returns_at_once(lambda: folder_reports(folder))
    assert [p.name for p in found.reports] == ["comparison-a.json", "comparison-b.json",
                                               "comparison-stray.json"]


def test_a_leaderboard_that_names_no_report_there_is_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A ranking whose names climb out of the folder or name no report there: no report is the
    campaign's, said in one line naming the folder (exit 2); nothing outside the folder is opened."""
    folder = _campaign_folder(tmp_path / "work")
    names = ["../comparison-a", "../../etc/passwd", "/abs", "ghost"]
    (folder / "leaderboard.json").write_text(json.dumps({"rows": [{"name": n} for n in names]}))
    assert main(["leaderboard", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{folder}: no report of the campaign's candidates is there" in err
    assert len(err.strip().splitlines()) == 1


def test_a_noise_model_whose_name_holds_an_escape_sequence_is_named_escaped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Any noise-model-*-HASH.json counts as a profile's model of the suite; its name comes from the
    folder and is printed (two models: none chosen, both named): escaped, on one line."""
    folder = _campaign_folder(tmp_path / "work")
    model = json.dumps({"suite_token_hash_sha256": SUITE_HASH})
    (folder / noise_model_file_name(SUITE_HASH)).write_text(model)
    (folder / f"noise-model-x{ESC}]0;owned\a{ESC}[2J-{SUITE_HASH[:16]}.json").write_text(model)
    code = main(["leaderboard", str(folder), "--bootstrap-samples", "200"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert ESC not in out + err and "\a" not in out + err
    assert "noise model: none; the folders hold 2" in err and "\\x1b]0;owned\\x07\\x1b[2J" in err


def test_hostile_leaderboards_of_the_profile_itself_are_not_read(tmp_path: Path) -> None:
    """The campaign's own leaderboard-PROFILE.json (the reopened dashboard's choice) that is a link,
    a FIFO, a folder or deep JSON: no ranking on disk, the first candidate shown, at once."""
    path = write_profile(tmp_path / "work", {"q8": 0.04, "q4": 0.12}, file_name="mine.toml")
    profile = load_profile(path)
    board = tmp_path / "work" / leaderboard_file_name(profile_key(path))
    assert board.name == "leaderboard-mine.json"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"rows": [{"name": "q4"}]}))
    for plant in (lambda: board.symlink_to(elsewhere), lambda: os.mkfifo(board), board.mkdir,
                  lambda: board.write_text("[" * 100_000)):
        plant()
        (shown,) = returns_at_once(lambda: (leaderboard_on_disk(profile), shown_candidate(profile)))
        assert shown == (None, ("q8", False))
        board.rmdir() if board.is_dir() and not board.is_symlink() else board.unlink()


@pytest.mark.parametrize("name", ["my profile.toml", "x\x1b]0;t\a.toml", "ü.toml", "a..b.toml", ".toml",
                                  "p" * 300 + ".toml", "q\nr.toml"])
def test_a_profile_name_that_is_not_a_plain_name_gives_plain_file_names(name: str) -> None:
    key = profile_key(name)
    assert key is not None  # never kldtui.toml's files (".toml" shared leaderboard.json)
    for file in (leaderboard_file_name(key), noise_model_file_name(SUITE_HASH, key)):
        assert file.isascii() and file.isprintable() and " " not in file and ".." not in file
        assert len(file) < 255


def test_profiles_of_names_alike_keep_files_of_their_own() -> None:
    assert profile_key("kldtui.toml") is None and profile_key("kldtui-score.toml") == "kldtui-score"
    keys = {profile_key(n) for n in ("ü.toml", "é.toml", "a b.toml", "a_b.toml", "a\tb.toml")}
    assert len(keys) == 5
    assert leaderboard_file_name(profile_key("my profile.toml")) == "leaderboard-my_profile-b82d5479.json"
