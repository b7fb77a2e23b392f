"""Issue 27 item 5: a logits or scores manifest is validated for impossible values on load: a
window_index given as text ("0") or negative or listed twice, a domain that is not a name ("../x"),
negative sizes or rows, hashes that are not 64 hex digits. One BadInput naming the file and entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kldtui.errors import BadInput
from kldtui.formats.scores import SCORES_MANIFEST, load_scores_manifest
from kldtui.formats.suite import load_logits_manifest
from tests.hub_server import make_dataset

HEX = "ab" * 32


def _scores_manifest(folder: Path) -> dict[str, Any]:
    return {"format_version": 1, "format": "kldtui-scores-v1", "vocab_size": 16, "record_dtype": "[]",
            "suite_token_hash_sha256": HEX, "windows": [
                {"window_index": i, "domain": "prose", "file": f"scores_{i:03d}.safetensors", "rows": 8,
                 "size_bytes": 100, "sha256": HEX, "token_ids_json_sha256": HEX, "reference_sha256": HEX}
                for i in range(2)]}


def _entry(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][1][key] = value
    return change


CASES = {"window_index text": (_entry("window_index", "0"), "window_index"),
         "window_index negative": (_entry("window_index", -1), "window_index"),
         "window listed twice": (_entry("window_index", 0), "twice"),
         "domain ../x": (_entry("domain", "../x"), "domain"),
         "negative size": (_entry("size_bytes", -5), "size_bytes"),
         "sha256 not hex": (_entry("sha256", "zz"), "sha256"),
         "token hash short": (_entry("token_ids_json_sha256", "ab"), "token_ids_json_sha256")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_manifest(tmp_path: Path, case: str) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=16)
    path = root / "ref" / "manifest.json"
    doc = json.loads(path.read_text())
    load_logits_manifest(path)
    change, needle = CASES[case]
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=needle) as info:
        load_logits_manifest(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("vocab", [0, -1, 2**30, 10**400, "160", True],
                         ids=["0", "negative", "2^30", "401 digits", "text", "true"])
def test_a_logits_manifest_without_windows_yet_has_a_possible_vocabulary(tmp_path: Path, vocab: Any) -> None:
    """With no windows yet to hold it to (a reference being captured), vocab_size alone was taken: 0 or
    negative planned no disk, 2^30 planned exabytes, 401 digits crashed the plan's arithmetic."""
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=16)
    path = root / "ref" / "manifest.json"
    doc = json.loads(path.read_text())
    doc.update(windows=[], window_count=0, vocab_size=vocab)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="vocab_size") as info:
        load_logits_manifest(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


SCORE_CASES = {**CASES, "negative rows": (_entry("rows", -1), "rows"),
               "reference hash": (_entry("reference_sha256", 7), "reference_sha256"),
               "vocab_size 0": (lambda doc: doc.update(vocab_size=0), "vocab_size")}


@pytest.mark.parametrize("case", sorted(SCORE_CASES))
def test_scores_manifest(tmp_path: Path, case: str) -> None:
    doc = _scores_manifest(tmp_path)
    path = tmp_path / SCORES_MANIFEST
    path.write_text(json.dumps(doc))
    load_scores_manifest(path)
    change, needle = SCORE_CASES[case]
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=needle) as info:
        load_scores_manifest(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
