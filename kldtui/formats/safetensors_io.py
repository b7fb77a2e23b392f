"""Streaming access to safetensors files without loading a tensor whole.

The format: 8 bytes little-endian header length N, N bytes of JSON header (tensor name ->
``dtype``, ``shape``, ``data_offsets`` relative to the data section, plus ``__metadata__``
string map), then the data. We read headers ourselves so a 1.3 GB window can be read a row
block at a time and so finalize can stream rows into a file whose header is written first.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kldtui.errors import BadInput
from kldtui.formats.safe_io import open_regular, open_regular_raw

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
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


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse and validate a safetensors header; a truncated or corrupt file raises BadInput."""
    p = Path(path)
    try:
        with open_regular(p) as handle:
            size = os.fstat(handle.fileno()).st_size
            raw_len = handle.read(8)
            if len(raw_len) < 8:
                raise BadInput(f"{p}: truncated safetensors file ({size} bytes); "
                               "delete it and download or capture it again")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise BadInput(f"{p}: corrupt or truncated safetensors header "
                               f"(header length {header_len}, file {size} bytes); "
                               "delete it and download or capture it again")
            raw = handle.read(header_len)
    except FileNotFoundError:
        raise BadInput(f"{p}: file not found") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a folder, expected a safetensors file") from None
    except OSError as exc:  # a symlink loop, no permission, an I/O error
        raise BadInput(f"{p}: cannot be read ({exc.strerror or exc})") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("header is not an object")
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"{p}: corrupt safetensors header ({exc}); "
                       "delete it and download or capture it again") from None
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise BadInput(f"{p}: corrupt safetensors header (__metadata__ is a "
                       f"{type(metadata).__name__}, not a string map); delete it and fetch it again")
    data_start = 8 + header_len
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        try:
            dtype = str(entry["dtype"])
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(v) for v in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{p}: corrupt safetensors entry for tensor {name!r}") from None
        info = TensorInfo(name, dtype, shape, data_start + begin, data_start + end)
        if dtype in DTYPES:
            expected = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
            if info.nbytes != expected:
                raise BadInput(f"{p}: tensor {name!r} has {info.nbytes} bytes of data but "
                               f"shape {list(shape)} {dtype} needs {expected}")
        if info.end > size:
            raise BadInput(f"{p}: truncated: tensor {name!r} needs {info.end} bytes, file has "
                           f"{size}; delete it and download or capture it again")
        tensors[name] = info
    return SafetensorsHeader(p, header_len, tensors, {str(k): str(v) for k, v in metadata.items()},
                             size)


def expect_tensor(header: SafetensorsHeader, key: str, dtype: str,
                  shape: tuple[int, ...] | None = None, what: str = "") -> TensorInfo:
    """Check key, dtype and (optionally) shape; raise BadInput naming the file otherwise."""
    info = header.tensor(key)
    prefix = f"{header.path}{' (' + what + ')' if what else ''}"
    if info.dtype != dtype:
        raise BadInput(f"{prefix}: tensor {key!r} is {info.dtype}, expected {dtype}")
    if shape is not None and info.shape != tuple(shape):
        raise BadInput(f"{prefix}: tensor {key!r} has shape {list(info.shape)}, "
                       f"expected {list(shape)}")
    return info


class RowReader:
    """Reads row blocks ``[start, stop)`` of a 2-D tensor straight from the file.

    Uses ``readinto`` on a reusable buffer, so memory stays at one block whatever the file size.
    """

    def __init__(self, path: str | os.PathLike[str], key: str = "logits",
                 dtype: str = "F32") -> None:
        self.header = read_header(path)
        self.info = expect_tensor(self.header, key, dtype)
        if len(self.info.shape) != 2:
            raise BadInput(f"{path}: tensor {key!r} has shape {list(self.info.shape)}, "
                           "expected 2 dimensions [rows, vocab]")
        self.rows, self.cols = self.info.shape
        self.np_dtype = DTYPES[dtype]
        self.path = Path(path)
        self._file = open_regular_raw(self.path)

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
                raise BadInput(f"{self.path}: truncated while reading rows {start}..{stop}")
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
                raise BadInput(f"{self.path}: truncated while reading rows {start}..{stop}")
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
        nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
