"""The one chunk writer: every producer of capture chunks (the vLLM plugin, the source patch,
the embedded server) calls :func:`write_chunk`.

Layout (FORMATS.md, "Capture chunks written by the server-side hook")::

    $VLLM_KLD_CAPTURE_DIR/<sanitized request id>/logits.rows-SSSSSS-EEEEEE.safetensors

One F32 tensor ``logits`` of shape ``[end - start, vocab_size]``, metadata ``request_id``,
``row_start``, ``row_end``, ``vocab_size``, and ``writer_host`` / ``writer_dir`` (the host name
of the process that wrote it and its capture folder, so a chunk found on a shared file system
says which node wrote it). A chunk is written under a temporary name and published with a hard
link, or an exclusive rename where the file system has no hard links; either fails if the name
exists: a chunk is never overwritten.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.formats.atomic import atomic_open
from kldtui.formats.names import safe_name
from kldtui.formats.safetensors_io import encode_header

CAPTURE_DIR_ENV = "VLLM_KLD_CAPTURE_DIR"
SKIPPED_REQUEST_PREFIXES = ("_warmup_", "_dummy_req_")
ERROR_MARKER = "capture-error.txt"
CHUNK_NAME = re.compile(r"^logits\.rows-(\d{6})-(\d{6})\.safetensors$")


def writer_host() -> str:
    """This process's host name (recorded in chunks and error markers)."""
    return socket.gethostname() or "unknown-host"


def writer_where(capture_dir: str | os.PathLike[str]) -> str:
    """``host:folder`` of a writer, for messages that must say which node wrote where."""
    return f"{writer_host()}:{os.path.abspath(capture_dir)}"


def sanitize_request_id(request_id: str) -> str:
    """The request folder name: every character not alphanumeric or ``-_.`` becomes ``_``, and so
    does every ``..`` (``".."`` would name the capture folder's parent); see
    :func:`kldtui.formats.names.safe_name`."""
    return safe_name(request_id)


def chunk_file_name(row_start: int, row_end: int) -> str:
    return f"logits.rows-{row_start:06d}-{row_end:06d}.safetensors"


def is_skipped_request(request_id: str) -> bool:
    """Warm-up and dummy batches are never captured."""
    return request_id.startswith(SKIPPED_REQUEST_PREFIXES)


def _to_f32_numpy(logits: Any, vocab_size: int) -> np.ndarray:
    """Copy to the CPU in the source dtype, drop padded vocab columns, then widen to F32."""
    if hasattr(logits, "detach"):  # a torch tensor, without importing torch
        t = logits.detach()[..., :vocab_size]
        t = t.to("cpu")  # in the model's own dtype
        arr = t.float().numpy()
    else:
        arr = np.asarray(logits)[..., :vocab_size].astype(np.float32, copy=False)
    if arr.ndim != 2 or arr.shape[1] != vocab_size:
        raise ValueError(f"chunk logits have shape {list(arr.shape)}; expected "
                         f"[rows, >= {vocab_size}]")
    return np.ascontiguousarray(arr, dtype="<f4")


def write_chunk(capture_dir: str | os.PathLike[str], request_id: str, row_start: int,
                logits: Any, vocab_size: int) -> Path | None:
    """Write one prefill chunk's prompt logits; returns the chunk path (None if skipped).

    ``logits`` is a 2-D torch tensor or array ``[rows, >= vocab_size]`` for prompt rows
    ``row_start .. row_start + rows``. Raises :class:`FileExistsError` if that chunk exists.
    """
    if is_skipped_request(request_id):
        return None
    data = _to_f32_numpy(logits, vocab_size)
    rows = int(data.shape[0])
    if rows == 0:
        return None
    row_end = row_start + rows
    folder = Path(capture_dir) / sanitize_request_id(request_id)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / chunk_file_name(row_start, row_end)
    if final.exists():
        raise FileExistsError(f"capture chunk {final} already exists; refusing to overwrite")
    metadata = {"request_id": request_id, "row_start": str(row_start), "row_end": str(row_end),
                "vocab_size": str(vocab_size), "writer_host": writer_host(),
                "writer_dir": os.path.abspath(capture_dir)}
    header = encode_header({"logits": ("F32", (rows, vocab_size))}, metadata)
    with atomic_open(final, "wb", replace=False, fsync=False) as handle:
        handle.write(header)
        handle.write(memoryview(data).cast("B"))
    return final


def write_error_marker(capture_dir: str | os.PathLike[str], request_id: str, message: str) -> None:
    """Leave a marker the capture client turns into a failed window (the engine keeps going)."""
    folder = Path(capture_dir) / sanitize_request_id(request_id)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ERROR_MARKER, "a", encoding="utf-8") as handle:
        handle.write(" ".join(message.split()) + f" [writer {writer_where(capture_dir)}]\n")
