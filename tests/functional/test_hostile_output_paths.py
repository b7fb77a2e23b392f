"""An output flag's path (``leaderboard --json/--output``, ``plot -o``, ``noise --output``), checked
first by kldtui.folder_lock.check_output_file and distinct_outputs, that a shared folder holds as a
link to elsewhere, a dangling link, a FIFO or a link to a folder: nothing is written through the link
(the output replaces the name, the file it pointed to is left as it was, a dangling link's target is
never created), a FIFO never blocks, and what cannot be an output file is one line, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from tests.fixtures_decide import make_report, suite_domains, write_report
from tests.fixtures_hostile import returns_at_once

VICTIM_TEXT = "precious\n"


def _reports(folder: Path) -> list[str]:
    folder.mkdir()
    base = np.random.default_rng(5).gamma(4.0, 0.0025, 16)
    return [str(write_report(folder / f"comparison-{name}.json",
                             make_report(base + shift, suite_domains(16), candidate_dir=f"/runs/{name}")))
            for name, shift in (("a", 0.0), ("b", 0.002))]


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "victim.json"
    victim.parent.mkdir()
    victim.write_text(VICTIM_TEXT)
    return victim


def _leaderboard(reports: list[str], *flags: str) -> int:
    return main(["leaderboard", *reports, "--bootstrap-samples", "200", *flags])


def test_an_output_that_is_a_link_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    reports = _reports(tmp_path / "r")
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "board.json").symlink_to(victim)
    (out / "board.csv").symlink_to(victim)
    assert _leaderboard(reports, "--json", str(out / "board.json")) == 0
    assert _leaderboard(reports, "--format", "csv", "-o", str(out / "board.csv")) == 0
    assert victim.read_text() == VICTIM_TEXT
    for written in (out / "board.json", out / "board.csv"):
        assert not written.is_symlink() and written.is_file() and written.read_text() != VICTIM_TEXT


def test_a_dangling_link_output_never_creates_its_target(tmp_path: Path) -> None:
    reports = _reports(tmp_path / "r")
    target = tmp_path / "elsewhere" / "new.json"
    target.parent.mkdir()
    (tmp_path / "board.json").symlink_to(target)
    assert _leaderboard(reports, "--json", str(tmp_path / "board.json")) == 0
    assert not target.exists() and not (tmp_path / "board.json").is_symlink()


def test_a_fifo_output_never_blocks(tmp_path: Path) -> None:
    reports = _reports(tmp_path / "r")
    fifo = tmp_path / "board.json"
    os.mkfifo(fifo)
    (code,) = returns_at_once(lambda: _leaderboard(reports, "--json", str(fifo)))
    assert code == 0 and fifo.is_file()


def test_two_outputs_that_are_one_file_through_a_link_are_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    reports = _reports(tmp_path / "r")
    (tmp_path / "board.json").write_text(VICTIM_TEXT)
    (tmp_path / "alias.json").symlink_to(tmp_path / "board.json")
    (tmp_path / "dangling-1").symlink_to(tmp_path / "nowhere.txt")
    (tmp_path / "dangling-2").symlink_to(tmp_path / "nowhere.txt")
    for first, second in (("board.json", "alias.json"), ("dangling-1", "dangling-2")):
        code = _leaderboard(reports, "--json", str(tmp_path / first), "--format", "csv", "-o",
                            str(tmp_path / second))
        err = capsys.readouterr().err
        assert code == 2 and "is --json's file too" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "board.json").read_text() == VICTIM_TEXT and not (tmp_path / "nowhere.txt").exists()


def test_an_output_that_is_a_link_to_a_folder_is_one_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    reports = _reports(tmp_path / "r")
    (tmp_path / "folder").mkdir()
    (tmp_path / "board.json").symlink_to(tmp_path / "folder")
    assert _leaderboard(reports, "--json", str(tmp_path / "board.json")) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'board.json'}: is a folder; give a file name" in err
    assert len(err.strip().splitlines()) == 1 and not os.listdir(tmp_path / "folder")
