"""Issue 27 item 5: a safetensors header is validated for impossible values on load, as the
safetensors library does: data offsets that are negative, reversed, overlap another tensor or the
header, shapes with negative or non-integer sizes, metadata that is not a string map, duplicate keys.
Each is one BadInput naming the file; the library refuses the same files."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.formats.safetensors_io import (
    MAX_HEADER_BYTES,
    RowReader,
    encode_header,
    read_header,
    read_header_document,
)


def _write(path: Path, header: dict[str, Any] | str, data: bytes) -> Path:
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _library_refuses(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "np") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                f.get_tensor(key)
    except Exception:  # noqa: BLE001 - any refusal counts
        return True
    return False


ROWS = np.arange(8, dtype=np.float32).reshape(2, 4).tobytes()  # 32 bytes
CASES: dict[str, tuple[dict[str, Any] | str, str]] = {
    "negative offset": ({"logits": {"dtype": "F32", "shape": [2, 4], "data_offsets": [-32, 0]}},
                        "data_offsets"),
    "reversed offsets": ({"logits": {"dtype": "F32", "shape": [0, 4], "data_offsets": [32, 0]}},
                         "data_offsets"),
    "overlapping tensors": ({"a": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
                             "b": {"dtype": "F32", "shape": [1, 4], "data_offsets": [16, 32]}}, "overlap"),
    "negative dimension": ({"logits": {"dtype": "F32", "shape": [-2, -4], "data_offsets": [0, 32]}}, "shape"),
    "float dimension": ({"logits": {"dtype": "F32", "shape": [2.0, 4], "data_offsets": [0, 32]}}, "shape"),
    "boolean offset": ({"logits": {"dtype": "F32", "shape": [2, 4], "data_offsets": [False, 32]}},
                       "data_offsets"),
    "three offsets": ({"logits": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 16, 32]}},
                      "data_offsets"),
    "metadata not strings": ({"__metadata__": {"window_index": 0},
                              "logits": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}},
                             "metadata"),
    "entry not an object": ({"logits": [1, 2, 3]}, "logits"),
    "duplicate key": ('{"logits": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]}, '
                      '"logits": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}}', "twice"),
    # sizes past 64 bits: their product wrapped to 0 in int64 (2^32 x 2^32 BF16 "needs" no bytes, so an
    # empty tensor passed as an LM head of 2^32 rows) or overflowed (a traceback, not one line)
    "shape wraps to no bytes": ({"head": {"dtype": "BF16", "shape": [2**32, 2**32], "data_offsets": [0, 0]}},
                                "shape"),
    "shape past 64 bits": ({"head": {"dtype": "BF16", "shape": [10**30, 1], "data_offsets": [0, 32]}},
                           "shape"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_impossible_headers_are_refused_like_the_library_does(tmp_path: Path, case: str) -> None:
    header, needle = CASES[case]
    path = _write(tmp_path / "x.safetensors", header, ROWS)
    with pytest.raises(BadInput) as info:
        read_header(path)
    message = str(info.value)
    assert str(path) in message and needle in message and "\n" not in message, message
    if case not in ("duplicate key", "float dimension"):  # the library's own parser is lenient there
        assert _library_refuses(path), case


def test_a_good_header_still_reads(tmp_path: Path) -> None:
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    path = tmp_path / "ok.safetensors"
    path.write_bytes(encode_header({"logits": ("F32", (2, 4))}, {"window_index": "0"}) + data.tobytes())
    header = read_header(path)
    assert header.metadata == {"window_index": "0"}
    with RowReader(path) as reader:
        np.testing.assert_array_equal(reader.read(0, 2), data)
    assert not _library_refuses(path)


def test_a_header_over_its_limit_says_so_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 8) + b"{}")
    with pytest.raises(BadInput) as info:
        read_header(path)
    message = str(info.value)
    assert message.startswith(f"{path}: corrupt or forged safetensors header (header length "
                              f"{MAX_HEADER_BYTES + 8}, more than the 100 MiB a header may have)"), message


def test_the_document_is_the_header_whole(tmp_path: Path) -> None:
    """Fields kldtui does not use (another tool's, in a tensor's entry) are kept, for publish's search."""
    entry = {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32], "note": "theirs"}
    doc = {"__metadata__": {"window_index": "0"}, "logits": entry}
    path = _write(tmp_path / "x.safetensors", doc, ROWS)
    with path.open("rb") as handle:
        header, document = read_header_document(path, fd=handle.fileno())
    assert document == doc and header.metadata == {"window_index": "0"} and list(header.tensors) == ["logits"]
