"""Every command checks its own arguments (an output's suffix and folder, flags that conflict, files
that must exist) before it reads anything or prints a line: ``kldtui plot DIR -o x.txt`` said the
campaign's noise model, then refused the suffix. Each refusal is one line naming the file and what to
do, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kldtui.cli.main import main


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line ``kldtui ARGV`` printed, refusing with exit 2 and nothing on stdout."""
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, (out, err)
    assert lines[0].startswith("kldtui: error: "), lines
    return lines[0].removeprefix("kldtui: error: ")


def test_decision_commands_check_their_outputs_before_a_folders_noise_model(
        uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = str(uninterrupted)  # a campaign's work folder: it brings a noise model, said on stderr
    x = tmp_path / "x"
    assert _refused(capsys, "plot", folder, "-o", str(tmp_path / "x.txt")) == (
        f"{tmp_path / 'x.txt'}: the plot's file name must end in .svg or .png")
    assert _refused(capsys, "plot", folder, "-o", str(x / "p.svg")) == (
        f"{x / 'p.svg'}: folder {x} does not exist; create it first")
    assert _refused(capsys, "leaderboard", folder, "-o", str(tmp_path / "b.txt")) == (
        f"{tmp_path / 'b.txt'}: the name does not say which export to write (.md or .markdown: markdown; "
        ".csv: csv); give --format markdown, csv or llama-cpp")
    assert _refused(capsys, "leaderboard", folder, "--format", "markdown", "-o", str(tmp_path / "b.csv")) == (
        f"{tmp_path / 'b.csv'}: a .csv file is csv, not --format markdown; give --format csv, or -o a name "
        "ending in .md or .markdown")
    assert _refused(capsys, "leaderboard", folder, "--json", str(x / "b.json")) == (
        f"{x / 'b.json'}: folder {x} does not exist; create it first")
    assert _refused(capsys, "leaderboard", folder, "--format", "csv", "-o", str(tmp_path)) == (
        f"{tmp_path}: is a folder; give a file name")
    same = str(tmp_path / "b.json")
    for flag in ("-o", "--output"):  # named as typed
        assert _refused(capsys, "leaderboard", folder, "--json", same, "--format", "csv", flag, same) == (
            f"{flag} {same}: is --json's file too; give each its own file")  # was "is an input"
    reports = sorted(str(p) for p in uninterrupted.glob("comparison-*.json"))
    assert _refused(capsys, "noise", *reports, "--allow-different-models", "--output", same,
                    "--report", same) == f"--report {same}: is --output's file too; give each its own file"
    assert not list(tmp_path.iterdir())
    # and with good arguments the folder's noise model is still said
    assert main(["plot", folder, "-o", str(tmp_path / "p.svg")]) == 0
    assert "noise model:" in capsys.readouterr().err


def test_noise_refuses_an_output_not_named_json_before_reading_a_report(
        uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the noise model is JSON whatever its name: n.txt was written as JSON without a word
    reports = sorted(str(p) for p in uninterrupted.glob("comparison-*.json"))
    text = tmp_path / "n.txt"
    for given in (reports, [str(tmp_path / "missing-a.json"), str(tmp_path / "missing-b.json")]):
        assert _refused(capsys, "noise", *given, "--allow-different-models", "--output", str(text)) == (
            f"{text}: the noise model's file name must end in .json")  # before a report is read
    assert not list(tmp_path.iterdir())
    upper = tmp_path / "N.JSON"  # the suffix in any case
    assert main(["noise", *reports, "--allow-different-models", "--output", str(upper)]) == 0
    assert f"wrote {upper}" in capsys.readouterr().out


def test_every_json_output_refuses_a_name_not_ending_in_json_before_any_work(
        uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # each is written as JSON whatever its name: r.txt was a JSON report without a word
    reports = sorted(str(p) for p in uninterrupted.glob("comparison-*.json"))
    missing = [str(tmp_path / "missing-a.json"), str(tmp_path / "missing-b.json")]
    text = str(tmp_path / "r.txt")
    suite = str(uninterrupted / "suite")
    for given in (reports, missing):  # the name is refused first: a missing input is not said
        a, b = given
        said = {  # command line -> what the line calls the file
            ("compare", "--suite-manifest", suite, "--reference-dir", a, "--candidate-dir", b,
             "--output", text): "comparison report",
            ("noise", a, b, "--allow-different-models", "--output", str(tmp_path / "n.json"),
             "--report", text): "comparison report",
            ("diff", a, b, "--no-noise-floor", "--json", text): "JSON result",
            ("leaderboard", a, b, "--no-noise-floor", "--json", text): "JSON leaderboard",
        }
        for argv, what in said.items():
            assert _refused(capsys, *argv) == f"{text}: the {what}'s file name must end in .json", argv
    assert not list(tmp_path.iterdir())  # nothing written
    for argv in (["diff", *reports, "--no-noise-floor", "--json"],  # the suffix in any case
                 ["leaderboard", *reports, "--no-noise-floor", "--plain", "--json"]):
        upper = tmp_path / f"{argv[0]}.JSON"
        assert main([*argv, str(upper)]) == 0
        assert upper.is_file() and f"wrote {upper}" in capsys.readouterr().out


def test_convert_refuses_another_targets_flags_and_a_missing_folder(
        uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = str(uninterrupted / "suite")
    base = tmp_path / "base.bin"
    # a missing folder for the base file was an internal error (exit 1) after reading the suite
    assert _refused(capsys, "convert", suite, "--to", "llama-cpp", str(tmp_path / "no" / "b.bin")) == (
        f"{tmp_path / 'no' / 'b.bin'}: folder {tmp_path / 'no'} does not exist; create it first")
    assert _refused(capsys, "convert", suite, "--to", "llama-cpp", str(tmp_path), "--force") == (
        f"{tmp_path}: is a folder; give a file name")
    # the output is checked before the source is read: a source that is not there is not said first
    missing = str(tmp_path / "no-suite")
    assert _refused(capsys, "convert", missing, "--to", "llama-cpp", str(tmp_path / "no" / "b.bin")) == (
        f"{tmp_path / 'no' / 'b.bin'}: folder {tmp_path / 'no'} does not exist; create it first")
    kept = tmp_path.parent / f"{tmp_path.name}-kept.bin"  # beside tmp_path, which stays empty
    kept.write_bytes(b"keep me")
    assert _refused(capsys, "convert", missing, "--to", "llama-cpp", str(kept)) == (
        f"{kept}: already exists; pass --force to replace it")
    assert _refused(capsys, "convert", missing, "--to", "suite", str(kept), "--model", missing) == (
        f"{kept}: is not a folder; give a new folder")  # before the GGUF or the base file is read
    assert kept.read_bytes() == b"keep me"
    kept.unlink()
    assert _refused(capsys, "convert", suite, "--to", "llama-cpp", str(base), "--bos", "1") == (
        "--bos: for --to suite, not --to llama-cpp; leave it out")
    # --start-window with --to suite was ignored without a word: every window was converted
    assert _refused(capsys, "convert", str(base), "--to", "suite", str(tmp_path / "s"), "--no-bos",
                    "--start-window", "3", "--reference-dir", "x") == (
        "--reference-dir, --start-window: for --to llama-cpp, not --to suite; leave them out")
    assert not list(tmp_path.iterdir())


def test_verify_and_publish_check_their_flags_before_hashing(
        uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = str(uninterrupted / "suite")
    # the token files were hashed (and said) before the empty range was refused
    assert _refused(capsys, "verify", suite, "--start-window", "5", "--stop-window", "2") == (
        "--start-window 5 --stop-window 2: the range [5, 2) is empty; give a stop after the start")
    # 0 was taken as the default and -3 as 1, without a word
    assert _refused(capsys, "verify", suite, "--workers", "0") == (
        "--workers 0: give 1 or more files hashed at once (default: up to 4)")
    assert _refused(capsys, "publish", suite, "--repo-id", "o/n", "--dry-run", "--workers", "-3") == (
        "--workers -3: give 1 or more files hashed at once (default: up to 4)")
    missing = str(tmp_path / "suite-manifest.json")
    assert _refused(capsys, "verify", suite, "--suite-manifest", missing) == (
        f"{missing}: suite manifest not found; give --suite-manifest the suite-manifest.json (or folder) "
        "the logits folder was captured from")


def test_export_head_names_a_fifo_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    assert main(["export-head", "--checkpoint", str(fifo), "--output", str(tmp_path / "head")]) == 2
    out, err = capsys.readouterr()
    assert f"{fifo}: is a FIFO (named pipe), not a file or folder; give the checkpoint folder" in out + err
    assert "not found" not in out + err
