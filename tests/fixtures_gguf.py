"""Small GGUF files written byte by byte for tests that need no llama.cpp: a header with the
metadata llama.cpp's converter writes (architecture, vocabulary, BOS), a tensor table and zeroed
tensor data, laid out as docs/FORMATS.md ("GGUF models") says."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

# tensor types used here: id, elements per block, bytes per block
F32, Q8_0, Q4_0 = (0, 1, 4), (8, 32, 34), (2, 32, 18)


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value: Any) -> bytes:
    out = _string(key)
    if isinstance(value, bool):
        return out + struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return out + struct.pack("<II", 4, value)
    if isinstance(value, float):
        return out + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return out + struct.pack("<I", 8) + _string(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return out + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_string(v) for v in value)
    raise TypeError(value)


def write_gguf(path: Path, *, vocab: int = 64, hidden: int = 32, weight_type: tuple[int, int, int] = Q8_0,
               add_bos: bool | None = None, bos: int = 1, file_type: int = 7,
               extra: dict[str, Any] | None = None, alignment: int = 32) -> Path:
    """A GGUF v3 file: llama metadata, ``vocab`` tokens, an F32 norm, ``token_embd`` and ``output``
    of ``weight_type`` ``[hidden, vocab]``, tensor data zero."""
    meta: dict[str, Any] = {"general.architecture": "llama", "general.name": "test",
                            "general.file_type": file_type,
                            "llama.context_length": 256, "llama.vocab_size": vocab,
                            "tokenizer.ggml.model": "gpt2",
                            "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
                            "tokenizer.ggml.bos_token_id": bos}
    if add_bos is not None:
        meta["tokenizer.ggml.add_bos_token"] = add_bos
    if alignment != 32:
        meta["general.alignment"] = alignment
    meta.update(extra or {})
    tensors = [("output_norm.weight", (hidden,), F32), ("token_embd.weight", (hidden, vocab), weight_type),
               ("output.weight", (hidden, vocab), weight_type)]
    table = b""
    offset = 0
    sizes = []
    for name, shape, (tid, block, size) in tensors:
        n = 1
        for d in shape:
            n *= d
        nbytes = n // block * size
        table += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        table += struct.pack("<IQ", tid, offset)
        sizes.append(nbytes)
        offset += -(-nbytes // alignment) * alignment
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items()) + table
    head += b"\0" * (-len(head) % alignment)
    path.write_bytes(head + b"\0" * offset)
    return path
