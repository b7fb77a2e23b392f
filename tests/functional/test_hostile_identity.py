"""Issue 27 item 5: where a file's window identity cannot be checked (its header carries no
window_index or token hash, as files of other tools may), kldtui says so: the compare report names
the files (provenance.verified.window_identity_unchecked), a warning is shown at once, the summary
says it, and verify notes it. Swapped windows without metadata are not silently believed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.formats.report import load_report, summary_text
from kldtui.formats.safetensors_io import RowReader, encode_header
from tests.paths import EXAMPLE_SUITE


def _strip_metadata(folder: Path, swap: tuple[int, int] | None = None) -> None:
    """Rewrite every logits file of ``folder`` without header metadata (manifest sizes and hashes
    fixed, as another tool would write them); ``swap``: two windows' data exchanged too."""
    manifest = json.loads((folder / "manifest.json").read_text())
    data = {}
    for entry in manifest["windows"]:
        with RowReader(folder / entry["file"]) as reader:
            data[entry["window_index"]] = reader.read(0, reader.rows)
    if swap is not None:
        a, b = swap
        data[a], data[b] = data[b], data[a]
    for entry in manifest["windows"]:
        rows = data[entry["window_index"]]
        body = encode_header({"logits": ("F32", rows.shape)}) + rows.tobytes()
        (folder / entry["file"]).write_bytes(body)
        entry["sha256"], entry["size_bytes"] = hashlib.sha256(body).hexdigest(), len(body)
    manifest["total_size_bytes"] = sum(e["size_bytes"] for e in manifest["windows"])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLE_SUITE, root)
    return root


def _compare(suite: Path, out: Path) -> list[str]:
    return ["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
            "--candidate-dir", str(suite / "candidate"), "--output", str(out), "--bootstrap-samples", "50"]


def test_files_without_window_metadata_are_named_in_the_report(suite: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _strip_metadata(suite / "candidate", swap=(1, 2))
    out = tmp_path / "r.json"
    assert main(_compare(suite, out)) == 0
    shown = capsys.readouterr()
    said = shown.out + shown.err
    assert "window identity NOT checked" in said and "logits_001.safetensors" in said
    report = load_report(out)
    assert report.provenance is not None
    unchecked = report.provenance.verified.window_identity_unchecked
    assert unchecked == [f"candidate logits_{i:03d}.safetensors (window {i:03d})" for i in range(4)]
    assert "window identity NOT checked for 4 file(s)" in summary_text(report)
    assert main(["verify", str(suite / "candidate"), "--suite-manifest", str(suite)]) == 0
    shown = capsys.readouterr()
    assert "which window it holds is NOT checked" in shown.out + shown.err


def test_files_with_metadata_leave_the_report_as_it_was(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(_compare(suite, out)) == 0
    doc = json.loads(out.read_text())
    assert "window_identity_unchecked" not in doc["provenance"]["verified"]
