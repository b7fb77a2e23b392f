"""Bad input to ``kldtui compare``: exit code 2, one line naming file and window, --output untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.safetensors_io import encode_header
from tests.fixtures_compare import make_suite

KEEP = "previous report\n"


def _rewrite_logits(path: Path, key: str = "logits", dtype: str = "F32", shape=None,
                     data: np.ndarray | None = None) -> None:
    """Replace a logits file with one tensor of the given key/dtype/shape."""
    from kldtui.formats.safetensors_io import read_header

    header = read_header(path)
    info = next(iter(header.tensors.values()))
    shape = tuple(shape or info.shape)
    if data is None:
        itemsize = {"F32": 4, "F16": 2, "F64": 8}[dtype]
        payload = bytes(int(np.prod(shape)) * itemsize)
    else:
        payload = np.ascontiguousarray(data, dtype="<f4").tobytes()
    path.write_bytes(encode_header({key: (dtype, shape)}, header.metadata) + payload)


def _edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))


def _set_logits(folder: Path, window: int, row: int, col: int, value: float) -> None:
    from kldtui.formats.safetensors_io import RowReader

    path = folder / f"logits_{window:03d}.safetensors"
    with RowReader(path) as r:
        data = r.read(0, r.rows)
    data[row, col] = value
    _rewrite_logits(path, data=data)


def truncated(root: Path) -> None:
    p = root / "candidate" / "logits_001.safetensors"
    p.write_bytes(p.read_bytes()[:-1000])


def wrong_key(root: Path) -> None:
    _rewrite_logits(root / "candidate" / "logits_001.safetensors", key="scores")


def wrong_dtype(root: Path) -> None:
    _rewrite_logits(root / "ref" / "logits_001.safetensors", dtype="F16")


def wrong_shape(root: Path) -> None:
    _rewrite_logits(root / "candidate" / "logits_001.safetensors", shape=(18, 64))


def vocab_mismatch(root: Path) -> None:
    def edit(doc: dict) -> None:
        doc["vocab_size"] = 65
        for w in doc["windows"]:
            w["shape"] = [w["shape"][0], 65]
    _edit_json(root / "candidate" / "manifest.json", edit)


def missing_in_candidate(root: Path) -> None:
    _edit_json(root / "candidate" / "manifest.json", lambda d: d["windows"].pop(1))


def missing_in_reference(root: Path) -> None:
    _edit_json(root / "ref" / "manifest.json", lambda d: d["windows"].pop(0))


def token_hash(root: Path) -> None:
    p = root / "tokens" / "window-001-code.json"
    ids = json.loads(p.read_text())
    ids[3] = (ids[3] + 1) % 64
    p.write_text(json.dumps(ids, separators=(",", ":")) + "\n")


def suite_hash(root: Path) -> None:
    _edit_json(root / "suite-manifest.json", lambda d: d.update(suite_token_hash_sha256="0" * 64))


def nan_in_reference(root: Path) -> None:
    _set_logits(root / "ref", 1, 4, 7, float("nan"))


def inf_in_candidate(root: Path) -> None:
    _set_logits(root / "candidate", 1, 11, 0, float("inf"))
    _set_logits(root / "candidate", 1, 12, 3, float("-inf"))  # a masked token: valid, not reported


def token_file_outside(root: Path) -> None:
    outside = root.parent / f"{root.name}-outside.json"
    outside.write_text((root / "tokens" / "window-001-code.json").read_text())

    # a plain relative name (a '../' one is refused when the suite is loaded) that is a symlink
    # leading out of the suite folder
    (root / "tokens" / "link.json").symlink_to(outside)

    def edit(doc: dict) -> None:
        doc["windows"][1]["token_file"] = "tokens/link.json"
    _edit_json(root / "suite-manifest.json", edit)


CASES = {
    "truncated": (truncated, ["logits_001", "window 001", "truncated"]),
    "wrong_key": (wrong_key, ["logits_001", "window 001", "'logits'"]),
    "wrong_dtype": (wrong_dtype, ["logits_001", "window 001", "F16"]),
    "wrong_shape": (wrong_shape, ["logits_001", "window 001", "shape"]),
    "vocab_mismatch": (vocab_mismatch, ["candidate/manifest.json", "vocabulary 65"]),
    "missing_in_candidate": (missing_in_candidate, ["candidate/manifest.json", "window 1 is missing"]),
    "missing_in_reference": (missing_in_reference, ["ref/manifest.json", "window 0 is missing"]),
    "token_hash": (token_hash, ["window-001-code.json", "window 001", "token hash"]),
    "suite_hash": (suite_hash, ["suite-manifest.json", "suite_token_hash_sha256"]),
    "nan_in_reference": (nan_in_reference, ["ref/logits_001", "window 001", "NaN or Inf",
                                            "reference", "rows 4"]),
    "inf_in_candidate": (inf_in_candidate, ["candidate/logits_001", "window 001", "at rows 11 ("]),
    "token_file_outside": (token_file_outside, ["window 001", "outside the suite folder"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line(case: str, tmp_path: Path, capsys) -> None:
    root = tmp_path / "suite"
    make_suite(root, windows=3, context=20, vocab=64, seed=3)
    mutate, expected = CASES[case]
    mutate(root)
    out = tmp_path / "report.json"
    out.write_text(KEEP)
    code = main(["compare", "--suite-manifest", str(root / "suite-manifest.json"),
                 "--reference-dir", str(root / "ref"), "--candidate-dir", str(root / "candidate"),
                 "--output", str(out), "--bootstrap-samples", "100"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("kldtui: error: ") and "Traceback" not in err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert out.read_text() == KEEP
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["suite", "report.json"] + (
        [f"{root.name}-outside.json"] if case == "token_file_outside" else []))


def test_output_folder_must_exist(tmp_path: Path, capsys) -> None:
    root = tmp_path / "suite"
    make_suite(root, windows=1, context=10, vocab=32)
    code = main(["compare", "--suite-manifest", str(root), "--reference-dir", str(root / "ref"),
                 "--candidate-dir", str(root / "candidate"), "--output", str(tmp_path / "no" / "r.json")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_sha256_mismatch_with_verify(tmp_path: Path, capsys) -> None:
    root = tmp_path / "suite"
    make_suite(root, windows=2, context=20, vocab=64, seed=3)
    p = root / "candidate" / "logits_001.safetensors"
    data = bytearray(p.read_bytes())
    data[-5] ^= 0x01  # same size, valid header, different bytes
    p.write_bytes(bytes(data))
    out = tmp_path / "report.json"
    args = ["compare", "--suite-manifest", str(root), "--reference-dir", str(root / "ref"),
            "--candidate-dir", str(root / "candidate"), "--output", str(out)]
    assert main(args + ["--verify-sha256"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "logits_001" in err and "window 001" in err and "SHA-256" in err
    assert not out.exists()
    assert main(args) == 0  # without --verify-sha256 the (valid) logits are compared
