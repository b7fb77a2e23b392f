"""Issue 27 item 3: an output is never one of the command's inputs: ``compare --output`` over the
candidate's or the reference's manifest, a logits file, the suite manifest or a token file (by name,
through a link, or as a hard link), ``diff/leaderboard --json`` over a report they read, ``noise
--output`` over a report or a folder's file it reads. One line, exit 2, nothing replaced."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kldtui.cli.main import main
from tests.paths import EXAMPLE_SUITE


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLE_SUITE, root)
    return root


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _compare(suite: Path, output: Path) -> list[str]:
    return ["compare", "--suite-manifest", str(suite / "suite-manifest.json"), "--reference-dir",
            str(suite / "ref"), "--candidate-dir", str(suite / "candidate"), "--output", str(output),
            "--bootstrap-samples", "50"]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], named: Path, why: str = "input") -> None:
    code = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert why in err[0] and str(named) in err[0], err[0]


OUTPUTS: dict[str, Callable[[Path], Path]] = {
    "candidate manifest": lambda s: s / "candidate" / "manifest.json",
    "reference manifest": lambda s: s / "ref" / "manifest.json",
    "suite manifest": lambda s: s / "suite-manifest.json",
    "candidate logits": lambda s: s / "candidate" / "logits_001.safetensors",
    "token file": lambda s: s / "tokens" / "window-002-code.json",
    "through ..": lambda s: s / "tokens" / ".." / "candidate" / "manifest.json",
}


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_compare_output_over_an_input_is_refused(suite: Path, capsys: pytest.CaptureFixture[str],
                                                 case: str) -> None:
    before = _digest(suite)
    target = OUTPUTS[case](suite)
    # a report is JSON: a name that is not (a logits file's) is refused for that first
    _refused(_compare(suite, target), capsys, target,
             "input" if target.suffix == ".json" else "the comparison report's file name must end in .json")
    assert _digest(suite) == before


def test_compare_output_linked_to_an_input_is_refused(suite: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(suite)
    link = tmp_path / "report-link.json"
    link.symlink_to(suite / "candidate" / "manifest.json")
    _refused(_compare(suite, link), capsys, link)
    logits = tmp_path / "report-logits.json"  # a report's name, a logits file behind it
    logits.symlink_to(suite / "candidate" / "logits_001.safetensors")
    _refused(_compare(suite, logits), capsys, logits)
    hard = tmp_path / "report-hard.json"
    os.link(suite / "ref" / "manifest.json", hard)
    _refused(_compare(suite, hard), capsys, hard)
    assert _digest(suite) == before
    assert main(_compare(suite, tmp_path / "fine.json")) == 0  # an output of its own is written


def test_decide_outputs_over_their_inputs_are_refused(suite: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(_compare(suite, a)) == 0 and main(_compare(suite, b)) == 0
    capsys.readouterr()
    kept = a.read_bytes()
    _refused(["diff", str(a), str(b), "--json", str(a), "--bootstrap-samples", "50"], capsys, a)
    _refused(["leaderboard", str(a), str(b), "--json", str(b), "--bootstrap-samples", "50"], capsys, b)
    _refused(["noise", str(a), str(b), "--output", str(a)], capsys, a)
    _refused(["noise", str(a), str(b), "--output", str(tmp_path / "n.json"), "--report", str(b)], capsys, b)
    assert a.read_bytes() == kept
