"""Streaming access to safetensors files without loading a tensor whole.

The format: 8 bytes little-endian header length N, N bytes of JSON header (tensor name ->
``dtype``, ``shape``, ``data_offsets`` relative to the data section, plus ``__metadata__``
string map), then the data. We read headers ourselves so a 1.3 GB window can be read a row
block at a time and so finalize can stream rows into a file whose header is written first.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kldtui.errors import BadInput
from kldtui.formats.safe_io import open_regular, open_regular_raw, read_failure
from kldtui.text import human_bytes

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    # NumPy has no bfloat16: BF16 tensors are read as their raw 16-bit patterns (the upper half of
    # the float32 with the same value); kldtui.metrics.replay.bf16_to_f32 widens them exactly
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute file offset of the first byte
    end: int  # absolute file offset one past the last byte

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    header_len: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    file_size: int

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    def tensor(self, key: str) -> TensorInfo:
        if key not in self.tensors:
            found = ", ".join(sorted(self.tensors)) or "none"
            raise BadInput(f"{self.path}: no tensor {key!r} (found: {found}); "
                           "the file is not a kldtui/vLLM logits file")
        return self.tensors[key]


# What to do about a safetensors file that cannot be used as it is (missing, damaged, not what its
# manifest says): the logits, hidden-state and head files kldtui reads are downloaded or captured
REFETCH = "download or capture it again"
REPLACE = f"delete it and {REFETCH}"


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(p: Path, name: str, entry: object, data_bytes: int) -> tuple[str, tuple[int, ...], int, int]:
    """One tensor entry, checked as the safetensors library checks it: an object with a dtype
    string, a shape of whole numbers >= 0 and two data offsets ``0 <= begin <= end`` inside the
    data section (a negative offset would read the header as tensor data)."""
    where = f"{p}: corrupt safetensors entry for tensor {name!r}"
    advice = "; the file is corrupt or forged, delete it and fetch it again"
    if not isinstance(entry, dict):
        raise BadInput(f"{where} (not an object){advice}")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise BadInput(f"{where} (dtype {dtype!r} is not a name){advice}")
    if not isinstance(shape, list) or not all(_whole(d) for d in shape):
        raise BadInput(f"{where} (shape {shape!r} is not a list of whole numbers >= 0){advice}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(v) for v in offsets):
        raise BadInput(f"{where} (data_offsets {offsets!r} are not two whole numbers >= 0){advice}")
    begin, end = offsets
    if begin > end:
        raise BadInput(f"{where} (data_offsets {offsets!r} end before they begin){advice}")
    if end > data_bytes:
        raise BadInput(f"{p}: truncated: tensor {name!r} needs data up to byte {end} of the data "
                       f"section, the file has {data_bytes}; {REPLACE}")
    return dtype, tuple(shape), begin, end


def _bad_open(p: Path, exc: OSError) -> BadInput:
    """A missing file, a folder or a FIFO in its place, no permission: one line and what to do."""
    what_to_do = REFETCH if isinstance(exc, FileNotFoundError) else REPLACE
    return read_failure(p, exc, "safetensors file", what_to_do)


def _pread_exactly(fd: int, n: int, offset: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.pread(fd, n - len(data), offset + len(data))
        if not chunk:
            break
        data += chunk
    return data


def read_header(path: str | os.PathLike[str], *, fd: int | None = None) -> SafetensorsHeader:
    """Parse and validate a safetensors header; a truncated or corrupt file raises BadInput.
    ``fd``: read it from this open descriptor of ``path`` (the header and the rows a reader then
    reads come from one file, even if the name is replaced meanwhile)."""
    p = Path(path)
    if fd is None:
        try:
            with open_regular(p) as handle:
                return read_header(p, fd=handle.fileno())
        except OSError as exc:
            raise _bad_open(p, exc) from None
    return read_header_document(p, fd=fd)[0]


def read_header_document(path: str | os.PathLike[str], *,
                         fd: int) -> tuple[SafetensorsHeader, dict[str, Any]]:
    """:func:`read_header` of the file open on ``fd``, and the header's JSON document whole: every
    field, those kldtui does not use included (publish searches all of its text for secrets)."""
    p = Path(path)
    try:
        size = os.fstat(fd).st_size
        raw_len = _pread_exactly(fd, 8, 0)
        if len(raw_len) < 8:
            raise BadInput(f"{p}: truncated safetensors file ({size} bytes); "
                           f"{REPLACE}")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > MAX_HEADER_BYTES:
            raise BadInput(f"{p}: corrupt or forged safetensors header (header length {header_len}, "
                           f"more than the {human_bytes(MAX_HEADER_BYTES)} a header may have); {REPLACE}")
        if 8 + header_len > size:
            raise BadInput(f"{p}: corrupt or truncated safetensors header "
                           f"(header length {header_len}, file {size} bytes); "
                           f"{REPLACE}")
        raw = _pread_exactly(fd, header_len, 8)
    except OSError as exc:
        raise _bad_open(p, exc) from None
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
        if not isinstance(doc, dict):
            raise ValueError("header is not an object")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(f"{p}: corrupt safetensors header ({exc}); "
                       f"{REPLACE}") from None
    metadata = doc.get("__metadata__") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        kind = (type(metadata).__name__ if not isinstance(metadata, dict) else
                "a map with " + ", ".join(f"{k}={type(v).__name__}" for k, v in metadata.items()
                                          if not isinstance(v, str))[:200])
        raise BadInput(f"{p}: corrupt safetensors header (__metadata__ is {kind}, not a string map of "
                       "metadata); delete it and fetch it again")
    data_start = 8 + header_len
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        dtype, shape, begin, end = _entry(p, name, entry, size - data_start)
        info = TensorInfo(name, dtype, shape, data_start + begin, data_start + end)
        if dtype in DTYPES:
            # Python ints: a forged shape's product would wrap (or overflow) in int64
            expected = math.prod(shape) * DTYPES[dtype].itemsize
            if info.nbytes != expected:
                raise BadInput(f"{p}: tensor {name!r} has {info.nbytes} bytes of data but shape "
                               f"{list(shape)} {dtype} needs {expected}; the file is corrupt, {REPLACE}")
        if info.end > size:
            raise BadInput(f"{p}: truncated: tensor {name!r} needs {info.end} bytes, file has "
                           f"{size}; {REPLACE}")
        tensors[name] = info
    previous: TensorInfo | None = None
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if previous is not None and info.begin < previous.end:
            raise BadInput(f"{p}: tensors {previous.name!r} and {info.name!r} overlap in the data "
                           f"(data_offsets); the file is corrupt or forged, delete it and fetch it again")
        previous = info
    header = SafetensorsHeader(p, header_len, tensors, {str(k): str(v) for k, v in metadata.items()}, size)
    return header, doc


def expect_tensor(header: SafetensorsHeader, key: str, dtype: str,
                  shape: tuple[int, ...] | None = None, what: str = "") -> TensorInfo:
    """Check key, dtype and (optionally) shape; raise BadInput naming the file otherwise."""
    info = header.tensor(key)
    prefix = f"{header.path}{' (' + what + ')' if what else ''}"
    if info.dtype != dtype:
        raise BadInput(f"{prefix}: tensor {key!r} is {info.dtype}, expected {dtype}; {REPLACE}")
    if shape is not None and info.shape != tuple(shape):
        raise BadInput(f"{prefix}: tensor {key!r} has shape {list(info.shape)}, "
                       f"expected {list(shape)}; {REPLACE}")
    return info


def map_tensor(path: str | os.PathLike[str], key: str, dtype: str, shape: tuple[int, ...] | None = None,
               *, mode: Literal["r", "c"] = "r") -> np.memmap:
    """The tensor ``key`` of the safetensors file at ``path``, mapped rather than read (``mode``: ``"r"``,
    or ``"c"``: copy-on-write), from one open of the file: its header is checked (:func:`expect_tensor`)
    on the descriptor that is then mapped, so the mapped file is the checked one (``np.memmap`` of the
    name would open it again: a FIFO put there meanwhile would block, another file would be mapped by
    this one's offsets). BadInput naming the file, as :func:`read_header` words it."""
    p = Path(path)
    try:
        handle = open_regular(p)
    except OSError as exc:
        raise _bad_open(p, exc) from None
    with handle:  # the mapping holds its own reference to the file
        info = expect_tensor(read_header(p, fd=handle.fileno()), key, dtype, shape)
        return np.memmap(handle, dtype=DTYPES[dtype], mode=mode, offset=info.begin, shape=info.shape)


class RowReader:
    """Reads row blocks ``[start, stop)`` of a 2-D tensor straight from the file.

    Uses ``readinto`` on a reusable buffer, so memory stays at one block whatever the file size.
    """

    def __init__(self, path: str | os.PathLike[str], key: str = "logits",
                 dtype: str = "F32") -> None:
        self.path = Path(path)
        try:  # one open: the header checked and the rows read are of the same file
            self._file = open_regular_raw(self.path)
        except OSError as exc:
            raise _bad_open(self.path, exc) from None
        try:
            self.header = read_header(path, fd=self._file.fileno())
            self.info = expect_tensor(self.header, key, dtype)
            if len(self.info.shape) != 2:
                raise BadInput(f"{path}: tensor {key!r} has shape {list(self.info.shape)}, "
                               f"expected 2 dimensions [rows, vocab]; {REPLACE}")
        except BaseException:
            self._file.close()
            raise
        self.rows, self.cols = self.info.shape
        self.np_dtype = DTYPES[dtype]

    def fileno(self) -> int:
        """The open file's descriptor (a mapping of the rows uses the file the header came from)."""
        return self._file.fileno()

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        stop = min(stop, self.rows)
        n = stop - start
        if out is None:
            out = np.empty((n, self.cols), dtype=self.np_dtype)
        else:
            out = out[:n]
        row_bytes = self.cols * self.np_dtype.itemsize
        self._file.seek(self.info.begin + start * row_bytes)
        view = out.reshape(-1).view(np.uint8).data
        got = 0
        while got < len(view):
            k = self._file.readinto(view[got:])
            if not k:
                raise BadInput(f"{self.path}: truncated while reading rows {start}..{stop}; {REPLACE}")
            got += k
        return out

    def pread(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Like :meth:`read` but with positioned reads (``os.preadv``): safe to call from several
        threads at once on one reader, which keeps no file position."""
        stop = min(stop, self.rows)
        n = stop - start
        if out is None:
            out = np.empty((n, self.cols), dtype=self.np_dtype)
        else:
            out = out[:n]
        row_bytes = self.cols * self.np_dtype.itemsize
        offset = self.info.begin + start * row_bytes
        view = out.reshape(-1).view(np.uint8).data
        got = 0
        while got < len(view):
            k = os.preadv(self._file.fileno(), [view[got:]], offset + got)
            if not k:
                raise BadInput(f"{self.path}: truncated while reading rows {start}..{stop}; {REPLACE}")
            got += k
        return out

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode_header(tensors: dict[str, tuple[str, tuple[int, ...]]],
                  metadata: dict[str, str] | None = None) -> bytes:
    """Bytes of a safetensors header (length prefix included) for tensors laid out in order.

    ``tensors`` maps name -> (dtype, shape); data offsets follow the dict's order. The JSON is
    padded with spaces to a multiple of 8 bytes, as the reference implementation does.
    """
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
