"""The GGUF header reader (kldtui/formats/gguf.py): the facts it derives (vocabulary, BOS,
tensor types, bits per weight) and one clear line for files that are not GGUF or are damaged."""

from __future__ import annotations

import os
import struct

import pytest

from kldtui.errors import BadInput
from kldtui.formats.gguf import read_gguf
from tests.fixtures_gguf import F32, Q4_0, Q8_0, write_gguf


def test_facts_of_a_q8_0_file(tmp_path) -> None:
    info = read_gguf(write_gguf(tmp_path / "m.gguf", vocab=64, hidden=32, weight_type=Q8_0, add_bos=True))
    assert info.version == 3 and info.architecture == "llama" and info.name == "test"
    assert info.vocab_size == 64 and info.bos_token_id == 1 and info.add_bos_token is True
    assert info.file_type == "Q8_0" and info.context_length == 256
    assert info.parameters == 32 + 2 * 32 * 64
    # two Q8_0 matrices of 2,048 weights (64 blocks of 34 bytes) and an F32 norm of 32
    assert info.tensor_bytes == 2 * 64 * 34 + 32 * 4
    assert info.bits_per_weight == pytest.approx(8 * info.tensor_bytes / info.parameters)
    shares = {s.type_name: s for s in info.type_shares()}
    assert shares["Q8_0"].tensors == 2 and shares["F32"].nbytes == 128
    summary = info.summary()
    assert summary["file_type"] == "Q8_0" and summary["tensor_types"]["Q8_0"]["parameters"] == 4096


def test_q4_0_and_bits_per_weight(tmp_path) -> None:
    info = read_gguf(write_gguf(tmp_path / "m.gguf", weight_type=Q4_0, file_type=2))
    assert info.file_type == "Q4_0" and info.add_bos_token is None
    q4 = [t for t in info.tensors if t.type_name == "Q4_0"]
    assert all(t.nbytes == t.elements // 32 * 18 for t in q4)
    assert 4.5 < info.bits_per_weight < 5.0  # 4.5 bits for Q4_0 plus the F32 norm


def test_the_vocabulary_is_the_token_list(tmp_path) -> None:
    # a padded list (the converter pads to the model's rows) wins over <arch>.vocab_size
    info = read_gguf(write_gguf(tmp_path / "m.gguf", vocab=64, extra={"llama.vocab_size": 60}))
    assert info.vocab_size == 64


def test_alignment_is_honoured(tmp_path) -> None:
    info = read_gguf(write_gguf(tmp_path / "m.gguf", weight_type=F32, alignment=64))
    assert info.alignment == 64 and info.data_offset % 64 == 0


@pytest.mark.parametrize("damage, message", [
    (lambda raw: b"GGML" + raw[4:], "not a GGUF file"),
    (lambda raw: raw[:4] + struct.pack("<I", 9) + raw[8:], "version 9 is not supported"),
    (lambda raw: raw[:-100], "truncated or damaged"),
    (lambda raw: raw[:60], "not a readable GGUF file"),
    (lambda raw: raw[:8] + struct.pack("<QQ", 10**12, 10**12) + raw[24:], "cannot fit"),
])
def test_damaged_files_are_one_line(tmp_path, damage, message) -> None:
    path = write_gguf(tmp_path / "m.gguf")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(BadInput, match=message) as err:
        read_gguf(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_not_a_file(tmp_path) -> None:
    with pytest.raises(BadInput, match="not found"):
        read_gguf(tmp_path / "missing.gguf")
    with pytest.raises(BadInput, match="is a folder"):
        read_gguf(tmp_path)
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(BadInput):
        read_gguf(fifo)  # refused at once, never blocks


def test_model_size_of_a_gguf_and_of_its_split_files(tmp_path) -> None:
    """``kldtui.formats.model_size`` measures GGUF candidates (the leaderboard's size and bits per
    weight) from these headers; split files (``-0000i-of-0000n.gguf``) count together."""
    from kldtui.formats.model_size import measure

    one = write_gguf(tmp_path / "m.gguf", vocab=64, hidden=32, weight_type=Q4_0, file_type=2)
    size = measure(one)
    assert (size.source, size.parameters, size.tensor_bytes) == ("gguf", 32 + 2 * 2048, 2 * 64 * 18 + 128)
    assert size.file_bytes == os.path.getsize(one) and size.files == 1 and size.quantization == "Q4_0"
    assert size.bits_per_weight == pytest.approx(8 * size.tensor_bytes / size.parameters)
    assert "bits per weight (Q4_0, gguf)" in size.describe()
    split = tmp_path / "split"
    split.mkdir()
    a = write_gguf(split / "m-00001-of-00002.gguf", weight_type=Q8_0)
    b = write_gguf(split / "m-00002-of-00002.gguf", weight_type=Q8_0)
    both = measure(split)
    assert both.files == 2 and both.parameters == 2 * (32 + 2 * 2048)
    assert both.file_bytes == os.path.getsize(a) + os.path.getsize(b) and both.quantization == "Q8_0"
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\x00" * 3)
    with pytest.raises(BadInput) as info:
        measure(tmp_path / "bad.gguf")
    assert str(tmp_path / "bad.gguf") in str(info.value) and "\n" not in str(info.value)
