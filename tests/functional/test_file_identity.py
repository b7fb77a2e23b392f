"""Which window a logits file holds is checked from its own header before a row is read, on both
sides, by compare as by verify (issue 11 item 2); any header ``format`` tag is accepted and
noted, while what matters is still checked ("Files that are not the published format")."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.formats.identity import check_logits_file
from kldtui.formats.suite import load_logits_manifest, load_suite
from kldtui.stages.verify import verify_path
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".kldtui-*"))
    return root


def _edit_manifest(folder: Path, change: Any) -> None:
    path = folder / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def _entry_for(folder: Path, index: int, file_name: str) -> None:
    """Point the manifest's entry of ``index`` at ``file_name``, size and sha256 made consistent."""
    data = (folder / file_name).read_bytes()

    def change(doc: dict[str, Any]) -> None:
        entry = doc["windows"][index]
        entry["file"] = file_name
        entry["size_bytes"] = len(data)
        entry["sha256"] = hashlib.sha256(data).hexdigest()
        doc["total_size_bytes"] = sum(w["size_bytes"] for w in doc["windows"])

    _edit_manifest(folder, change)


def _compare(root: Path, out: Path) -> int:
    return main(["compare", "--suite-manifest", str(root / "suite-manifest.json"),
                 "--reference-dir", str(root / "ref"), "--candidate-dir", str(root / "candidate"),
                 "--output", str(out), "--verify-sha256", "--bootstrap-samples", "100"])


@pytest.mark.parametrize("side", ["candidate", "ref"])
def test_compare_refuses_a_manifest_entry_naming_another_windows_file(
        suite: Path, tmp_path: Path, side: str, capsys: pytest.CaptureFixture[str]) -> None:
    _entry_for(suite / side, 0, "logits_001.safetensors")
    out = tmp_path / "report.json"
    code = _compare(suite, out)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "window_index='1'" in err and "window 0" in err and "logits_001.safetensors" in err
    assert not out.exists()


def test_compare_refuses_a_window_copied_over_another(suite: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copyfile(suite / "candidate" / "logits_001.safetensors",
                    suite / "candidate" / "logits_000.safetensors")
    _entry_for(suite / "candidate", 0, "logits_000.safetensors")
    out = tmp_path / "report.json"
    code = _compare(suite, out)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "logits_000.safetensors" in err and "window_index='1'" in err
    assert str(suite / "candidate" / "manifest.json") in err  # where the expectation came from
    assert not out.exists()


def _retag(path: Path, tag: str) -> None:
    """Rewrite a file's header metadata ``format`` (same header length: padded with spaces)."""
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["format"] = tag
    raw = json.dumps(header, separators=(",", ":")).encode()
    assert len(raw) <= n
    data[8:8 + n] = raw + b" " * (n - len(raw))
    path.write_bytes(bytes(data))


def test_any_format_tag_is_accepted_and_noted(suite: Path, tmp_path: Path) -> None:
    for name in ("logits_000.safetensors", "logits_001.safetensors"):
        _retag(suite / "ref" / name, "other-tool-v3")
    for i in (0, 1):
        _entry_for(suite / "ref", i, f"logits_{i:03d}.safetensors")
    result = verify_path(suite)
    assert result.ok, result.failures
    notes = [n for n in result.notes if "other-tool-v3" in n]
    assert notes and "accepted" in notes[0]
    out = tmp_path / "report.json"
    assert _compare(suite, out) == 0


def test_other_tag_still_checks_what_matters_and_says_where_expectations_come_from(
        suite: Path) -> None:
    _retag(suite / "ref" / "logits_001.safetensors", "other-tool-v3")
    shutil.copyfile(suite / "ref" / "logits_001.safetensors", suite / "ref" / "logits_000.safetensors")
    _entry_for(suite / "ref", 0, "logits_000.safetensors")
    result = verify_path(suite)
    text = "\n".join(result.failures)
    assert "window_index='1'" in text and "lists it as window 0" in text
    assert "token_ids_json_sha256" in text and "the suite" in text
    assert "format" not in text  # the tag is never a failure
    assert "the manifest says 'kimi" not in text


def test_one_check_for_both_commands(suite: Path) -> None:
    _entry_for(suite / "candidate", 2, "logits_003.safetensors")
    manifest = load_logits_manifest(suite / "candidate")
    identity = check_logits_file(manifest, 2, suite=load_suite(suite), side="candidate")
    assert not identity.ok and any("window_index='3'" in p for p in identity.problems)
    assert any("(candidate)" in p for p in identity.problems)


def test_string_metadata_is_a_clear_error(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite / "candidate" / "logits_002.safetensors"
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"] = "oops"
    raw = json.dumps(header, separators=(",", ":")).encode()
    data[8:8 + n] = raw + b" " * (n - len(raw))
    path.write_bytes(bytes(data))
    code = main(["verify", str(suite / "candidate"), "--suite-manifest", str(suite)])
    err = capsys.readouterr()
    assert code != 0 and "internal error" not in err.err + err.out
    assert "__metadata__" in err.err + err.out
