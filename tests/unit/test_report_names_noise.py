"""Which noise model campaign folders bring to a leaderboard (kldtui.formats.report_names.FolderNoise):
the one rule of kldtui view/leaderboard/plot DIR and of the dashboard's and viewer's o."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kldtui.cli.commands.view import use_folder_noise_model
from kldtui.formats.report_names import FolderNoise, folder_noise


def _campaign(folder: Path, model: bool = True) -> Path:
    folder.mkdir()
    (folder / "comparison-q4.json").write_text("{}")
    if model:
        (folder / "noise-model.json").write_text("{}")
    return folder


def test_one_folders_model_is_used_and_named(tmp_path: Path) -> None:
    camp = _campaign(tmp_path / "camp")
    loose = tmp_path / "loose.json"
    loose.write_text("{}")
    found = folder_noise([loose, camp, _campaign(tmp_path / "bare", model=False)])
    assert found.model == camp / "noise-model.json"
    assert found.words() == f"noise model: {camp / 'noise-model.json'}, the campaign's"


def test_the_same_model_written_two_ways_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    camp = _campaign(tmp_path / "camp")
    found = FolderNoise().adding([Path("camp/noise-model.json")]).adding([camp / "noise-model.json"])
    assert found.model == Path("camp/noise-model.json")


def test_folders_with_different_models_use_none_and_say_which(tmp_path: Path) -> None:
    one, two = _campaign(tmp_path / "one"), _campaign(tmp_path / "two")
    found = folder_noise([one, two])
    assert found.model is None
    assert found.words(lambda p: p.relative_to(tmp_path)) == (
        "noise model: none; the folders hold 2 (one/noise-model.json, two/noise-model.json)")
    assert FolderNoise().words() is None  # no folder brought one: nothing to say


def test_the_command_line_says_the_rule_in_its_words(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    one, two = _campaign(tmp_path / "one"), _campaign(tmp_path / "two")
    model_one, model_two = one / "noise-model.json", two / "noise-model.json"
    args = argparse.Namespace(reports=[str(one), str(two)], noise=None, no_noise_floor=False)
    assert use_folder_noise_model(args).models == (model_one, model_two)
    assert args.noise is None
    assert capsys.readouterr().err == (f"kldtui: noise model: none; the folders hold 2 ({model_one}, "
                                       f"{model_two}): give --noise FILE to use one\n")
    args = argparse.Namespace(reports=[str(one)], noise=None, no_noise_floor=False)
    use_folder_noise_model(args)
    assert args.noise == str(model_one)
    assert capsys.readouterr().err == (f"kldtui: noise model: {model_one}, the campaign's (give "
                                       "--noise FILE or --no-noise-floor for another)\n")
    chosen = argparse.Namespace(reports=[str(one)], noise=None, no_noise_floor=True)
    assert use_folder_noise_model(chosen) == FolderNoise() and chosen.noise is None
