from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.safetensors_io import RowReader, read_header
from kldtui.formats.suite import (
    check_manifest_matches_suite,
    load_logits_manifest,
    load_suite,
    suite_token_hash,
    token_ids_hash,
)
from kldtui.formats.suite_writer import write_suite
from tests import published_fixture


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, dict]:
    docs = published_fixture.build(tmp_path / "suite")
    return tmp_path / "suite", docs


def test_published_layout_loads_as_is(published: tuple[Path, dict]) -> None:
    root, docs = published
    suite = load_suite(root)
    assert suite.window_count == 3 and suite.context_length == published_fixture.CONTEXT
    assert [w.domain for w in suite.windows] == published_fixture.DOMAINS
    assert suite.check_suite_hash() == docs["suite"]["suite_token_hash_sha256"]
    for w, ids in zip(suite.windows, docs["tokens"], strict=True):
        assert suite.load_tokens(w) == ids
    ref = load_logits_manifest(root / "ref")
    check_manifest_matches_suite(ref, suite, suite.windows)
    assert ref.runtime["vllm_commit"].startswith("55e46aeb")
    header = read_header(ref.file_path(1))
    assert header.metadata["format"] == "kimi-k3-kld-reference-v1"
    with RowReader(ref.file_path(1)) as reader:
        assert reader.read(0, 7).shape == (7, published_fixture.VOCAB)


def test_hash_conventions_match_formats_md() -> None:
    ids = [1, 22, 333]
    assert token_ids_hash(ids) == __import__("hashlib").sha256(b"[1,22,333]").hexdigest()
    assert suite_token_hash(["a", "b"]) == __import__("hashlib").sha256(b"a\nb").hexdigest()


def test_writers_reproduce_published_fields(tmp_path: Path, published: tuple[Path, dict]) -> None:
    root, docs = published
    suite = write_suite(tmp_path / "mine", [("prose", docs["tokens"][0]), ("code", docs["tokens"][1])])
    ours = json.loads(suite.path.read_text())
    assert set(ours) == set(docs["suite"])
    assert set(ours["windows"][0]) == set(docs["suite"]["windows"][0])
    written = [write_logits_array(tmp_path / "mine" / "ref", w, np.zeros((7, 32), np.float32),
                                  suite.context_length) for w in suite.windows]
    write_logits_manifest(tmp_path / "mine" / "ref", suite, written, kind="test")
    ref = json.loads((tmp_path / "mine" / "ref" / "manifest.json").read_text())
    assert set(ref) == set(docs["ref"])
    assert set(ref["windows"][0]) == set(docs["ref"]["windows"][0])
    a = read_header(tmp_path / "mine" / "ref" / "logits_000.safetensors").metadata
    b = read_header(root / "ref" / "logits_000.safetensors").metadata
    assert set(a) == set(b)


def test_token_file_escaping_suite_is_refused(published: tuple[Path, dict]) -> None:
    root, _ = published
    doc = json.loads((root / "suite-manifest.json").read_text())
    doc["windows"][1]["token_file"] = "../../etc/passwd"
    (root / "suite-manifest.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="token_file"):  # refused where it is loaded
        load_suite(root)


def test_token_hash_mismatch_names_window(published: tuple[Path, dict]) -> None:
    root, _ = published
    path = root / "tokens" / "window-002-instruction.json"
    ids = json.loads(path.read_text())
    ids[0] = (ids[0] + 1) % 32
    path.write_text(json.dumps(ids, separators=(",", ":")) + "\n")
    suite = load_suite(root)
    with pytest.raises(BadInput, match=r"window 002 \(instruction\) token hash"):
        suite.load_tokens(suite.windows[2])


def test_suite_hash_mismatch(published: tuple[Path, dict]) -> None:
    root, _ = published
    doc = json.loads((root / "suite-manifest.json").read_text())
    doc["suite_token_hash_sha256"] = "0" * 64
    (root / "suite-manifest.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="suite_token_hash_sha256"):
        load_suite(root).check_suite_hash()


@pytest.mark.parametrize("cut", [4, 20, -10])
def test_truncated_safetensors_is_bad_input(published: tuple[Path, dict], cut: int) -> None:
    root, _ = published
    path = root / "ref" / "logits_000.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut > 0 else data[:cut])
    with pytest.raises(BadInput, match="logits_000.safetensors"):
        RowReader(path)


def test_missing_window_in_manifest(published: tuple[Path, dict]) -> None:
    root, _ = published
    ref = load_logits_manifest(root / "ref")
    with pytest.raises(BadInput, match="window 7 is missing"):
        ref.entry(7)


def test_logits_writer_never_leaves_partial_file(tmp_path: Path, published: tuple[Path, dict]) -> None:
    root, _ = published
    suite = load_suite(root)
    from kldtui.formats.logits_writer import LogitsFileWriter

    writer = LogitsFileWriter(tmp_path / "out", suite.windows[0], 32, suite.context_length)
    writer.write_rows(np.zeros((3, 32), np.float32))
    with pytest.raises(Exception, match="rows written"):
        writer.commit()
    assert list((tmp_path / "out").iterdir()) == []
    write_logits_array(tmp_path / "out", suite.windows[0], np.zeros((7, 32), np.float32), 8)
    with pytest.raises(BadInput, match="already finalized"):
        write_logits_array(tmp_path / "out", suite.windows[0], np.zeros((7, 32), np.float32), 8)
