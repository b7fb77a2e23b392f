"""Which noise model campaign folders bring to a leaderboard (kldtui.formats.report_names.FolderNoise):
the one rule of kldtui view/leaderboard/plot DIR and of the dashboard's and viewer's o. A folder's
model is its reports' suite's (noise-model-HASH.json, or an earlier version's noise-model.json that
records that suite); one of another suite is never used, and that is said."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kldtui.cli.commands.view import use_folder_noise_model
from kldtui.formats.report_names import FolderNoise, folder_noise, noise_model_file_name

SUITE, OTHER = "a" * 64, "b" * 64  # the reports' suite token hash, and another suite's
MODEL = noise_model_file_name(SUITE)


def _campaign(folder: Path, model: bool = True) -> Path:
    folder.mkdir()
    (folder / "comparison-q4.json").write_text("{}")
    if model:
        _model(folder / MODEL, SUITE)
    return folder


def _model(path: Path, suite: str) -> Path:
    path.write_text(json.dumps({"format": "kldtui-noise-floor-v1", "suite_token_hash_sha256": suite}))
    return path


def test_one_folders_model_is_used_and_named(tmp_path: Path) -> None:
    camp = _campaign(tmp_path / "camp")
    loose = tmp_path / "loose.json"
    loose.write_text("{}")
    found = folder_noise([loose, camp, _campaign(tmp_path / "bare", model=False)], SUITE)
    assert MODEL == f"noise-model-{SUITE[:16]}.json"
    assert found.model == camp / MODEL
    assert found.words() == f"noise model: {camp / MODEL}, the campaign's"


def test_the_same_model_written_two_ways_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    camp = _campaign(tmp_path / "camp")
    found = FolderNoise().adding([Path("camp") / MODEL]).adding([camp / MODEL])
    assert found.model == Path("camp") / MODEL


def test_folders_with_different_models_use_none_and_say_which(tmp_path: Path) -> None:
    one, two = _campaign(tmp_path / "one"), _campaign(tmp_path / "two")
    found = folder_noise([one, two], SUITE)
    assert found.model is None
    assert found.words(lambda p: p.relative_to(tmp_path)) == (
        f"noise model: none; the folders hold 2 (one/{MODEL}, two/{MODEL})")
    assert FolderNoise().words() is None  # no folder brought one: nothing to say


def test_the_command_line_says_the_rule_in_its_words(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    one, two = _campaign(tmp_path / "one"), _campaign(tmp_path / "two")
    model_one, model_two = one / MODEL, two / MODEL
    args = argparse.Namespace(reports=[str(one), str(two)], noise=None, no_noise_floor=False)
    assert use_folder_noise_model(args, SUITE).models == (model_one, model_two)
    assert args.noise is None
    assert capsys.readouterr().err == (f"kldtui: noise model: none; the folders hold 2 ({model_one}, "
                                       f"{model_two}): give --noise FILE to use one\n")
    args = argparse.Namespace(reports=[str(one)], noise=None, no_noise_floor=False)
    use_folder_noise_model(args, SUITE)
    assert args.noise == str(model_one)
    assert capsys.readouterr().err == (f"kldtui: noise model: {model_one}, the campaign's (give "
                                       "--noise FILE or --no-noise-floor for another)\n")
    chosen = argparse.Namespace(reports=[str(one)], noise=None, no_noise_floor=True)
    assert use_folder_noise_model(chosen, SUITE) == FolderNoise() and chosen.noise is None


def test_a_folder_of_two_suites_brings_the_model_of_the_reports_suite(tmp_path: Path) -> None:
    """Two profiles of other suites in one work folder (kldtui demo and kldtui demo --hidden) keep a
    model each: the reports' suite chooses (the folder's one noise-model.json was the last run's)."""
    camp = _campaign(tmp_path / "camp")
    theirs = _model(camp / noise_model_file_name(OTHER), OTHER)
    assert folder_noise([camp], SUITE).model == camp / MODEL
    assert folder_noise([camp], OTHER).model == theirs


def test_an_earlier_versions_model_is_used_only_for_its_own_suite(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of earlier versions holds one noise-model.json: still used for reports of the suite it
    records; for another suite's it is refused in one line (it was used, or the comparison failed on
    it), and the suite's own file, once measured, comes first."""
    camp = _campaign(tmp_path / "camp", model=False)
    earlier = _model(camp / "noise-model.json", SUITE)
    assert folder_noise([camp], SUITE) == FolderNoise((earlier,))
    refused = folder_noise([camp], OTHER)
    assert refused.model is None and refused.other_suites == (earlier,)
    args = argparse.Namespace(reports=[str(camp)], noise=None, no_noise_floor=False)
    use_folder_noise_model(args, OTHER)
    assert args.noise is None
    assert capsys.readouterr().err == (f"kldtui: noise model: none; {earlier} measured on another suite "
                                       "than the reports', not used: give --noise FILE to use one\n")
    own = _model(camp / noise_model_file_name(OTHER), OTHER)
    assert folder_noise([camp], OTHER) == FolderNoise((own,))
    # a file under the suite's own name that records another suite is not used either
    _model(own, SUITE)
    assert folder_noise([camp], OTHER) == FolderNoise(other_suites=(own, earlier))


def test_two_profiles_models_of_one_suite_in_one_folder_are_two_models(tmp_path: Path) -> None:
    """Profiles sharing a work folder (kldtui demo and kldtui demo --score, on one suite) each write their
    own model (noise-model-PROFILE-HASH.json beside kldtui.toml's noise-model-HASH.json): a folder of
    both brings the two, and which of them ranks its reports would be a guess."""
    camp = _campaign(tmp_path / "camp")
    score = _model(camp / noise_model_file_name(SUITE, "kldtui-score"), SUITE)
    _model(camp / noise_model_file_name(OTHER, "kldtui-hidden"), OTHER)
    _model(camp / "noise-model.json", SUITE)  # an earlier version's: the newer names stand for the suite
    assert score.name == f"noise-model-kldtui-score-{SUITE[:16]}.json"
    found = folder_noise([camp], SUITE)
    assert found.models == (camp / MODEL, score) and found.model is None
    assert found.words(lambda p: p.relative_to(camp)) == (
        f"noise model: none; the folders hold 2 ({MODEL}, {score.name})")
    score.unlink()
    assert folder_noise([camp], SUITE).model == camp / MODEL
    (camp / MODEL).unlink()
    assert folder_noise([camp], SUITE).model == camp / "noise-model.json"
