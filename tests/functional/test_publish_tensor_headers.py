"""``kldtui publish`` reads the header of every tensor file it uploads for secrets (docs/SAFETY.md,
"Secrets"): a safetensors header's ``__metadata__`` is free text (paths, URLs, notes), and a token
there, or a metadata key named like a secret, stops the publish of a logits suite and of a
hidden-state suite (whose LM head is a safetensors file) in one line naming the file, exit 2. A
tensor file cannot be redacted, so it is refused, never rewritten; a header that does not parse is
refused too. Before, tensor files went up unread."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from tests import fidelity_fixture as fx
from tests.hub_server import make_dataset

pytestmark = pytest.mark.timeout(180)
HF = "hf_" + "Kd8sLq2Wm4Xz7Pv1Rt9Yb3Nc6Gh5Jf0Ua"
OPAQUE = "opensesame-4711"  # no secret's shape: only its key's name tells


def _publish(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status of a dry run and its error lines."""
    capsys.readouterr()
    status = main(["publish", str(root), "--repo-id", "me/x", "--dry-run"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    return status, "\n".join(err)


def _refused(root: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    status, err = _publish(root, capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    assert HF not in err and OPAQUE not in err, err
    return err


def _rewrite_header(path: Path, *, metadata: dict[str, str] | None = None,
                    entry: dict[str, Any] | None = None) -> None:
    """``path``'s header with more ``__metadata__`` fields and more fields in its tensor's entry,
    written with json and struct as another tool would; the data is kept."""
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    doc = json.loads(blob[8:8 + length])
    doc["__metadata__"] = {**doc.get("__metadata__", {}), **(metadata or {})}
    (key,) = (k for k in doc if k != "__metadata__")
    doc[key] = {**doc[key], **(entry or {})}
    raw = json.dumps(doc).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + blob[8 + length:])


def _logits_suite(root: Path, **change: Any) -> Path:
    """A logits suite whose first reference file has its header changed (``_rewrite_header``), the
    manifest updated to match, so it verifies: only the header is in question."""
    make_dataset(root, windows=2, context_length=9, vocab=40)
    path = root / "ref" / "logits_000.safetensors"
    _rewrite_header(path, **change)
    manifest = root / "ref" / "manifest.json"
    doc = json.loads(manifest.read_text())
    window = next(w for w in doc["windows"] if w["file"] == path.name)
    doc["total_size_bytes"] += path.stat().st_size - window["size_bytes"]
    window.update(size_bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    manifest.write_text(json.dumps(doc, indent=2))
    return path


# -- a logits suite ------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [
    {"metadata": {"notes": f"pulled with HF_TOKEN={HF} on node-7"}},
    {"metadata": {"source": f"https://user:{HF}@huggingface.co/datasets/x"}},
    {"entry": {"comment": HF}},  # a field of the tensor's entry kldtui does not use
], ids=["metadata value", "password in a URL", "tensor entry"])
def test_a_token_in_a_logits_file_s_header_stops_the_publish(tmp_path: Path, where: dict[str, Any],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = _logits_suite(tmp_path / "ds", **where)
    _refused(tmp_path / "ds", capsys,
             f"{path}: its safetensors header holds a value shaped like a secret",
             "cannot redact it: write the file again without it")
    assert HF.encode() in path.read_bytes()  # refused, not rewritten


def test_a_metadata_key_named_like_a_secret_stops_the_publish(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _logits_suite(tmp_path / "ds", metadata={"HF_AUTH": OPAQUE})
    _refused(tmp_path / "ds", capsys, f"{path}: its safetensors header holds a metadata field named like a "
                                      "secret ('HF_AUTH')")


def test_a_clean_header_publishes_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another tool's metadata, and kldtui's own keys that hold a secret's word
    (token_ids_json_sha256): nothing to refuse. An emptied or redacted secret key is no secret, nor is
    a number under such a name (another tool's token_count)."""
    root = tmp_path / "ds"
    _logits_suite(root, metadata={"notes": "pulled on node-7 from https://huggingface.co/datasets/x",
                                  "HF_TOKEN": "<redacted>", "api_key": "", "token_count": "16375",
                                  "max_tokens": " 2.5e3 "},
                  entry={"comment": "rows are raw logits"})
    assert _publish(root, capsys) == (0, "")


def test_an_unlisted_tensor_file_is_read_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    extra = root / "adapter.safetensors"
    extra.write_bytes((root / "ref" / "logits_001.safetensors").read_bytes())
    assert _publish(root, capsys) == (0, "")
    _rewrite_header(extra, metadata={"wandb_api_key": OPAQUE})
    _refused(root, capsys, f"{extra}: its safetensors header holds a metadata field named like a secret")


@pytest.mark.parametrize("header", [b"{not json", None], ids=["does not parse", "over its limit"])
def test_a_header_that_cannot_be_read_stops_the_publish(tmp_path: Path, header: bytes | None,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    bad = root / "adapter.safetensors"
    if header is None:  # a length of 1 TiB: never read, refused by its length
        bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}" + b" " * 64)
        expected = "more than the 100 MiB a header may have"
    else:
        bad.write_bytes(struct.pack("<Q", len(header)) + header)
        expected = "corrupt safetensors header"
    _refused(root, capsys, f"{bad}: ", expected)


# -- a hidden-state suite: the LM head is a safetensors file ---------------------------------------------
@pytest.mark.parametrize("metadata", [{"exported_from": f"https://hf.co/x?token {HF}"},
                                      {"HF_TOKEN": OPAQUE}], ids=["by value", "by name"])
def test_a_secret_in_the_lm_head_s_header_stops_a_hidden_suite_s_publish(
        tmp_path: Path, metadata: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    f = fx.build(tmp_path / "suite", contexts=4, head_metadata=metadata)
    found = "a value shaped like a secret" if HF in str(metadata) else "a metadata field named like a secret"
    head = f.root / "lm-head" / "weight.safetensors"
    _refused(f.root, capsys, f"{head}: its safetensors header holds {found}",
             "its SHA-256 is part of the suite", "kldtui finalize --mode hidden")


def test_a_hidden_suite_with_a_clean_head_header_publishes_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    f = fx.build(tmp_path / "suite", contexts=4, head_metadata={"exported_by": "another tool 1.2"})
    assert _publish(f.root, capsys) == (0, "")
