"""GGUF files (llama.cpp's model format): the header read without the ``gguf`` package, for the
facts kldtui reports and checks about a GGUF candidate: its vocabulary, its BOS handling, its
tensors' types, its size and its bits per weight (docs/FORMATS.md, "GGUF models").

:func:`read_gguf` is the one reader (the llama-cpp server kind's checks, ``kldtui convert`` and
the leaderboard's size columns call it). Only the header is read: the metadata and the tensor
table; tensor data is never touched, so a 400 GB model costs a few megabytes of reading (its
vocabulary strings are skipped, not kept). The file is untrusted: every count and length is
checked against the bytes left before anything is allocated, and a damaged file is one line
naming it.

Layout (GGUF version 2 and 3, little-endian): ``b"GGUF"``, ``u32`` version, ``u64`` tensor
count, ``u64`` metadata count; each metadata entry a string key, a ``u32`` value type and the
value; each tensor a string name, ``u32`` dimension count, ``u64`` per dimension (innermost
first), ``u32`` ggml type and ``u64`` offset into the data section, which starts at the next
multiple of ``general.alignment`` (default 32) after the header. Strings are a ``u64`` length
and UTF-8 bytes; arrays a ``u32`` item type, a ``u64`` count and the items.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from kldtui.errors import BadInput
from kldtui.formats.safe_io import open_regular_raw, read_failure

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
_MAX_STRING = 1 << 24        # a key, a tensor name or a kept string value (16 MiB is generous)
_MAX_DIMS = 8
_READ = 1 << 20

# ggml tensor types: id -> (name, elements per block, bytes per block) (llama.cpp's ggml.h).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}

# general.file_type (llama.cpp's llama_ftype): what a quantization run called the file.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4",
    40: "Q1_0", 41: "Q2_0",
}

# metadata value types: id -> struct format of a scalar (8: string, 9: array)
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgufTensor:
    """One tensor of the table: ``shape`` innermost dimension first (ggml's ``ne``)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        _, block, size = GGML_TYPES[self.ggml_type]
        return self.elements // block * size


@dataclass(frozen=True)
class GgufArray:
    """A metadata array: its item type and length (items kept only for short numeric arrays)."""

    item_type: int
    length: int
    items: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class TypeShare:
    """The tensors of one ggml type: how many, their weights and their bytes."""

    type_name: str
    tensors: int
    elements: int
    nbytes: int


@dataclass(frozen=True)
class GgufInfo:
    """A GGUF file's header: metadata (scalars and strings as values, arrays as
    :class:`GgufArray`), the tensor table, and the figures derived from them."""

    path: Path
    version: int
    file_size: int
    alignment: int
    data_offset: int
    metadata: dict[str, Any] = field(repr=False)
    tensors: tuple[GgufTensor, ...] = field(repr=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def name(self) -> str | None:
        name = self.metadata.get("general.name")
        return name if isinstance(name, str) else None

    @property
    def file_type(self) -> str | None:
        """``general.file_type`` by name (``Q8_0``, ``Q4_K_M``...), or None when not recorded."""
        code = self.metadata.get("general.file_type")
        if isinstance(code, int) and not isinstance(code, bool):
            return FILE_TYPES.get(code, f"file type {code}")
        return None

    @property
    def vocab_size(self) -> int | None:
        """The logits' width: llama.cpp's vocabulary is the tokenizer's token list (what
        ``llama_vocab_n_tokens`` returns); ``<arch>.vocab_size`` when there is none."""
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        if isinstance(tokens, GgufArray):
            return tokens.length
        arch = self.architecture
        size = self.metadata.get(f"{arch}.vocab_size") if arch else None
        return size if isinstance(size, int) and not isinstance(size, bool) else None

    @property
    def bos_token_id(self) -> int | None:
        bos = self.metadata.get("tokenizer.ggml.bos_token_id")
        return bos if isinstance(bos, int) and not isinstance(bos, bool) else None

    @property
    def add_bos_token(self) -> bool | None:
        """Whether llama.cpp puts BOS in front when it tokenizes (and in front of each
        ``llama-perplexity`` chunk); None when the file does not say."""
        add = self.metadata.get("tokenizer.ggml.add_bos_token")
        return add if isinstance(add, bool) else None

    @property
    def context_length(self) -> int | None:
        arch = self.architecture
        n = self.metadata.get(f"{arch}.context_length") if arch else None
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    def _arch_int(self, key: str) -> int | None:
        arch = self.architecture
        n = self.metadata.get(f"{arch}.{key}") if arch else None
        if isinstance(n, GgufArray) and n.items:  # per-layer values (some architectures): the largest
            n = max((v for v in n.items if isinstance(v, int) and not isinstance(v, bool)), default=None)
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    def kv_values_per_token(self) -> int | None:
        """Keys and values llama.cpp caches per token over all layers (``2 x layers x heads_kv x
        head size`` from ``<arch>.block_count``, ``.attention.head_count(_kv)``,
        ``.attention.key_length``/``value_length`` or ``.embedding_length / head_count``); None
        when the header does not say."""
        layers, embd = self._arch_int("block_count"), self._arch_int("embedding_length")
        heads = self._arch_int("attention.head_count")
        if layers is None or embd is None or heads is None:
            return None
        heads_kv = self._arch_int("attention.head_count_kv") or heads
        k = self._arch_int("attention.key_length") or embd // heads
        v = self._arch_int("attention.value_length") or embd // heads
        return layers * heads_kv * (k + v)

    @property
    def parameters(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        """Tensor bytes x 8 / weights, over every tensor (norms and embeddings included), the
        figure ``llama-quantize`` and model cards quote; the header is left out."""
        n = self.parameters
        return 8.0 * self.tensor_bytes / n if n else 0.0

    def type_shares(self) -> list[TypeShare]:
        """Per tensor type, largest share of bytes first."""
        shares: dict[str, list[int]] = {}
        for t in self.tensors:
            s = shares.setdefault(t.type_name, [0, 0, 0])
            s[0] += 1
            s[1] += t.elements
            s[2] += t.nbytes
        return sorted((TypeShare(k, *v) for k, v in shares.items()), key=lambda s: (-s.nbytes, s.type_name))

    def summary(self) -> dict[str, Any]:
        """The facts a report or a leaderboard shows (JSON-ready)."""
        return {"file": str(self.path), "file_size_bytes": self.file_size, "gguf_version": self.version,
                "architecture": self.architecture, "name": self.name, "file_type": self.file_type,
                "vocab_size": self.vocab_size, "parameters": self.parameters,
                "tensor_bytes": self.tensor_bytes, "bits_per_weight": round(self.bits_per_weight, 4),
                "tensor_types": {s.type_name: {"tensors": s.tensors, "parameters": s.elements,
                                               "bytes": s.nbytes} for s in self.type_shares()}}


class _Reader:
    """Sequential little-endian reads from a buffered file with bounds checks."""

    def __init__(self, fh: BinaryIO, size: int, path: Path) -> None:
        self.fh = fh
        self.size = size
        self.path = path
        self.pos = 0
        self.buf = b""
        self.buf_pos = 0

    def fail(self, what: str) -> BadInput:
        return BadInput(f"{self.path}: not a readable GGUF file ({what} at byte {self.pos}); it is "
                        f"damaged, truncated or not a GGUF model; {GGUF_AGAIN}")

    def left(self) -> int:
        return self.size - self.pos

    def read(self, n: int) -> bytes:
        if n > self.left():
            raise self.fail(f"{n} bytes wanted, {self.left()} left")
        out = bytearray()
        while len(out) < n:
            if self.buf_pos >= len(self.buf):
                self.buf = self.fh.read(max(_READ, n - len(out)))
                self.buf_pos = 0
                if not self.buf:
                    raise self.fail("the file ended early")
            take = min(n - len(out), len(self.buf) - self.buf_pos)
            out += self.buf[self.buf_pos:self.buf_pos + take]
            self.buf_pos += take
        self.pos += n
        return bytes(out)

    def skip(self, n: int) -> None:
        if n > self.left():
            raise self.fail(f"{n} bytes to skip, {self.left()} left")
        in_buf = len(self.buf) - self.buf_pos
        if n <= in_buf:
            self.buf_pos += n
        else:
            self.fh.seek(self.pos + n)
            self.buf, self.buf_pos = b"", 0
        self.pos += n

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return int(self.unpack("<I"))

    def u64(self) -> int:
        return int(self.unpack("<Q"))

    def string(self, what: str, *, keep: bool = True) -> str:
        n = self.u64()
        if n > self.left():
            raise self.fail(f"{what} of {n} bytes")
        if not keep:
            self.skip(n)
            return ""
        if n > _MAX_STRING:
            raise self.fail(f"{what} of {n} bytes")
        raw = self.read(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None


def _value(r: _Reader, vtype: int, key: str) -> Any:
    if vtype in _SCALARS:
        return r.unpack(_SCALARS[vtype])
    if vtype == _STRING:
        return r.string(f"the value of {key}")
    if vtype == _ARRAY:
        item = r.u32()
        n = r.u64()
        if item in _SCALARS:
            width = struct.calcsize(_SCALARS[item])
            if n * width > r.left():
                raise r.fail(f"array {key} of {n} items")
            if n <= 64:
                return GgufArray(item, n, tuple(r.unpack(_SCALARS[item]) for _ in range(n)))
            r.skip(n * width)
            return GgufArray(item, n)
        if item == _STRING:
            if n * 8 > r.left():
                raise r.fail(f"array {key} of {n} strings")
            for _ in range(n):
                r.string(f"an item of {key}", keep=False)
            return GgufArray(item, n)
        raise r.fail(f"array {key} has item type {item}")
    raise r.fail(f"metadata {key} has value type {vtype}")


GGUF_REMEDY = "give a .gguf model file"
GGUF_AGAIN = "download or convert the model again"


def read_gguf(path: str | os.PathLike[str]) -> GgufInfo:
    """The header of the GGUF file at ``path`` (BadInput, one line naming it, when it is not one)."""
    p = Path(path)
    try:
        fh = open_regular_raw(p)  # never blocks on a FIFO, refuses devices
    except OSError as exc:
        raise read_failure(p, exc, "GGUF file", GGUF_REMEDY) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, size, p)
        if size < 24 or r.read(4) != MAGIC:
            raise BadInput(f"{p}: not a GGUF file (no GGUF magic); {GGUF_REMEDY}")
        version = r.u32()
        if version not in (2, 3):
            raise BadInput(f"{p}: GGUF version {version} is not supported (2 and 3 are); convert the model "
                           "again with a current llama.cpp")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_tensors > r.left() // 24 or n_kv > r.left() // 12:
            raise r.fail(f"{n_tensors} tensors and {n_kv} metadata entries cannot fit")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string("a metadata key")
            vtype = r.u32()
            if key in metadata:
                raise r.fail(f"metadata key {key!r} appears twice")
            metadata[key] = _value(r, vtype, key)
        tensors: list[GgufTensor] = []
        names: set[str] = set()
        for _ in range(n_tensors):
            name = r.string("a tensor name")
            dims = r.u32()
            if not 1 <= dims <= _MAX_DIMS:
                raise r.fail(f"tensor {name!r} has {dims} dimensions")
            shape = tuple(r.u64() for _ in range(dims))
            ggml_type = r.u32()
            offset = r.u64()
            if ggml_type not in GGML_TYPES:
                raise BadInput(f"{p}: tensor {name!r} has ggml type {ggml_type}, unknown to this "
                               "kldtui; a newer llama.cpp format? update kldtui")
            tensor = GgufTensor(name, shape, ggml_type, offset)
            if name in names:
                raise r.fail(f"tensor {name!r} appears twice")
            if shape[0] % GGML_TYPES[ggml_type][1]:
                raise r.fail(f"tensor {name!r}: {shape[0]} is not a whole number of "
                             f"{tensor.type_name} blocks")
            names.add(name)
            tensors.append(tensor)
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 \
                or alignment & (alignment - 1):
            raise r.fail(f"general.alignment {alignment!r} is not a power of two")
        data_offset = -(-r.pos // alignment) * alignment
        for t in tensors:
            if t.offset % alignment or data_offset + t.offset + t.nbytes > size:
                raise BadInput(f"{p}: tensor {t.name!r} lies outside the file ({size} bytes; "
                               f"offset {t.offset}, {t.nbytes} bytes); the file is truncated or damaged: "
                               f"{GGUF_AGAIN}")
    return GgufInfo(p, version, size, alignment, data_offset, metadata, tuple(tensors))
