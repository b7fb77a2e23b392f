"""Capture chunks: the one chunk writer (every producer of chunks, the vLLM plugin, the source
patch and the embedded server, calls :func:`write_chunk`) and the chunk-folder model its readers
share (:func:`check_chunk_dir`, :func:`check_chunk_values`; the capture client and finalize).

Layout (docs/FORMATS.md, "Capture chunks written by the server-side hook")::

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel
from kldtui.formats.atomic import atomic_open
from kldtui.formats.names import safe_name
from kldtui.formats.safe_io import open_private_text, read_text
from kldtui.formats.safetensors_io import RowReader, encode_header, read_header
from kldtui.formats.scores import SCORE_CHUNK_NAME, SCORE_DTYPE, SCORE_KEY
from kldtui.formats.suite import WindowSpec

SKIPPED_REQUEST_PREFIXES = ("_warmup_", "_dummy_req_")
ERROR_MARKER = "capture-error.txt"
CHUNK_NAME = re.compile(r"^logits\.rows-(\d{6})-(\d{6})\.safetensors$")
VALUE_CHECK_BLOCK_BYTES = 32 * 1024 * 1024


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


WRITERS_DIR = ".kldtui-writers"  # <host>-<pid>.json per writer rank in a server's capture folder


def writers_dir(capture_dir: str | os.PathLike[str]) -> Path:
    """Where each writer rank of a server records itself (host, pid, folder, vLLM version)."""
    return Path(capture_dir) / WRITERS_DIR


def writer_record_path(capture_dir: str | os.PathLike[str], host: str, pid: int) -> Path:
    """One writer rank's record in :func:`writers_dir`."""
    return writers_dir(capture_dir) / f"{host}-{pid}.json"


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
        handle.write(data.data.cast("B"))
    return final


def abandoned_by_client(capture_dir: str | os.PathLike[str], request_id: str, exc: BaseException) -> bool:
    """Whether a failed chunk write failed because the capture client removed the request's folder
    (it gave up on the request: interrupted or timed out), so nobody waits for these rows and the
    failure is not an error of the server."""
    if not isinstance(exc, FileNotFoundError):
        return False
    return not (Path(capture_dir) / sanitize_request_id(request_id)).exists()


def write_error_marker(capture_dir: str | os.PathLike[str], request_id: str, message: str) -> None:
    """Leave a marker the capture client turns into a failed window (the engine keeps going)."""
    folder = Path(capture_dir) / sanitize_request_id(request_id)
    folder.mkdir(parents=True, exist_ok=True)
    with open_private_text(folder / ERROR_MARKER) as handle:  # never through a planted link
        handle.write(" ".join(message.split()) + f" [writer {writer_where(capture_dir)}]\n")


# -- reading chunk folders (the capture client and finalize) -----------------------------------
@dataclass(frozen=True)
class ChunkInfo:
    path: Path
    row_start: int
    row_end: int
    vocab_size: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


@dataclass(frozen=True)
class ChunkSet:
    """A checked chunk folder: chunks in row order covering ``0 .. rows``."""

    folder: Path
    chunks: tuple[ChunkInfo, ...]
    vocab_size: int
    rows: int

    @property
    def names(self) -> list[str]:
        return [c.path.name for c in self.chunks]


def chunk_rows_landed(folder: Path) -> int:
    """Rows in the (possibly still growing) folder, from chunk file names only; cheap."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    total = 0
    for name in names:
        m = CHUNK_NAME.match(name) or SCORE_CHUNK_NAME.match(name)
        if m:
            total += max(0, int(m.group(2)) - int(m.group(1)))
    return total


def check_chunk_dir(folder: str | os.PathLike[str], window: WindowSpec, *,
                    expected_vocab: int | None = None, check_values: bool = False,
                    cancel: Cancel | None = None, request_folder: str | None = None,
                    mode: str = "logits") -> ChunkSet:
    """Check a window's chunk folder by metadata (and values); raise BadInput naming the problem.

    Rows must cover ``0 .. window.num_tokens - 1`` contiguously whatever the chunk edges; every
    chunk holds one F32 ``logits`` tensor ``[row_end - row_start, vocab]`` whose metadata agrees
    with its name; all chunks share one vocabulary (``expected_vocab`` when given). With
    ``check_values`` every value is read (a block at a time) and must be finite. With
    ``request_folder`` (the hook's folder name for the request) every chunk's metadata
    ``request_id`` must name that request: the chunks are the ones the record says.

    ``mode="score"``: the folder holds score chunks (``scores.rows-*``, one U8 tensor ``records``
    of one record width; the vocabulary is their metadata ``vocab_size``); values are not checked
    here (finalize reads every record).
    """
    scores = mode == "score"
    pattern = SCORE_CHUNK_NAME if scores else CHUNK_NAME
    key, dtype = (SCORE_KEY, SCORE_DTYPE) if scores else ("logits", "F32")
    folder = Path(folder)
    where = f"{folder}: {window.label}"
    if not folder.is_dir():
        raise BadInput(f"{where}: chunk folder not found; capture the window first")
    marker = folder / ERROR_MARKER
    if marker.exists():
        try:
            text = " ".join(read_text(marker, errors="replace", limit=64 * 1024).split())
        except OSError as exc:
            text = f"(the marker {marker.name} cannot be read: {exc.strerror or exc})"
        raise BadInput(f"{where}: the capture hook reported an error: {text[:800]}; "
                       "fix the cause (often a full disk) and capture the window again")
    chunks: list[ChunkInfo] = []
    names = sorted(os.listdir(folder))
    other = SCORE_CHUNK_NAME if not scores else CHUNK_NAME
    if not any(pattern.match(n) for n in names) and any(other.match(n) for n in names):
        found, wanted = ("logits", "score") if scores else ("score", "logits")
        raise BadInput(f"{where}: the folder holds {found} chunks, this run captures in {wanted} mode; "
                       "set [capture] mode to the mode the window was captured in, or capture it again")
    width: int | None = None
    for name in names:
        m = pattern.match(name)
        if not m:
            continue
        start, end = int(m.group(1)), int(m.group(2))
        path = folder / name
        header = read_header(path)
        info = header.tensor(key)
        if info.dtype != dtype:
            raise BadInput(f"{path}: {window.label}: tensor {key!r} is {info.dtype}, expected {dtype}; "
                           "the chunk was not written by the kldtui capture hook")
        if len(info.shape) != 2 or info.shape[0] != end - start or end <= start:
            raise BadInput(f"{path}: {window.label}: shape {list(info.shape)} does not match rows "
                           f"{start}..{end} of its name; the chunk is corrupt, capture again")
        meta = header.metadata
        cols = info.shape[1] if len(info.shape) == 2 else 0
        if scores:
            try:
                chunk_vocab = int(meta["vocab_size"])
                if int(meta["window_index"]) != window.index:
                    raise BadInput(f"{path}: {window.label}: scored as window {meta['window_index']}; "
                                   "the request folder belongs to another window, capture again")
            except (KeyError, ValueError):
                raise BadInput(f"{path}: {window.label}: score chunk without window_index/vocab_size "
                               "metadata; it was not written by the kldtui capture hook") from None
            if meta.get("token_ids_json_sha256") != window.token_ids_json_sha256:
                raise BadInput(f"{path}: {window.label}: scored tokens differ from the suite's "
                               "(token hash); capture the window again")
            if width is not None and cols != width:
                raise BadInput(f"{path}: {window.label}: records of {cols} bytes, other chunks "
                               f"have {width}; capture the window again")
            width = cols
        else:
            chunk_vocab = int(cols)
        for mkey, want in (("row_start", start), ("row_end", end), ("vocab_size", chunk_vocab)):
            if mkey in meta and meta[mkey] != str(want):
                raise BadInput(f"{path}: {window.label}: metadata {mkey}={meta[mkey]} disagrees with "
                               f"{want}; the chunk is corrupt or was renamed, capture again")
        if (request_folder and "request_id" in meta
                and sanitize_request_id(meta["request_id"]) != request_folder):
            owner = meta["request_id"][:80]
            raise BadInput(f"{path}: {window.label}: the chunk belongs to request {owner!r}, "
                           f"not to {request_folder!r} the capture recorded; capture the window again")
        chunks.append(ChunkInfo(path, start, end, chunk_vocab))
    if not chunks:
        pattern_name = "scores" if scores else "logits"
        raise BadInput(f"{where}: no chunk files ({pattern_name}.rows-SSSSSS-EEEEEE.safetensors); "
                       "capture the window again")
    chunks.sort(key=lambda c: c.row_start)
    vocab = expected_vocab if expected_vocab is not None else chunks[0].vocab_size
    want_rows = window.num_tokens - 1
    position = 0
    for c in chunks:
        if c.vocab_size != vocab:
            raise BadInput(f"{c.path}: {window.label}: vocabulary {c.vocab_size}, expected {vocab}"
                           f"{' (--expected-vocab)' if expected_vocab is not None else ''}; "
                           "wrong model or wrong --expected-vocab")
        if c.row_start > position:
            raise BadInput(f"{where}: rows {position}..{c.row_start} are missing; the capture is "
                           "incomplete, capture the window again")
        if c.row_start < position:
            raise BadInput(f"{where}: chunks overlap at row {c.row_start}; the folder mixes two "
                           "requests (prefix caching on, or a reused folder), capture again")
        position = c.row_end
    if position != want_rows:
        raise BadInput(f"{where}: chunks cover rows 0..{position}, expected 0..{want_rows} for "
                       f"{window.num_tokens} tokens; capture the window again (prefix caching "
                       "must be off)")
    if check_values and not scores:
        for c in chunks:
            check_chunk_values(c, window, cancel)
    return ChunkSet(folder, tuple(chunks), vocab, want_rows)


def check_finite_rows(block: np.ndarray, path: Path, window: WindowSpec, first_row: int) -> None:
    """BadInput at the first NaN/inf of ``block`` (rows ``first_row..`` of ``path``). The sum of
    finite logits is finite (unless they are near float32's limit; then the exact check runs),
    and costs half of ``isfinite``."""
    if np.isfinite(np.add.reduce(block, axis=None)):
        return
    bad = np.argwhere(~np.isfinite(block))
    if len(bad):
        raise BadInput(f"{path}: {window.label}: non-finite logits (nan or inf) at row "
                       f"{int(bad[0][0]) + first_row}; the server computed garbage: check the model "
                       "and capture the window again")


def check_chunk_values(chunk: ChunkInfo, window: WindowSpec, cancel: Cancel | None) -> None:
    """Read a chunk a block at a time; BadInput at the first non-finite value."""
    block_rows = max(1, VALUE_CHECK_BLOCK_BYTES // (4 * chunk.vocab_size))
    with RowReader(chunk.path) as reader:
        buf = np.empty((min(block_rows, reader.rows), reader.cols), dtype=np.float32)
        for start in range(0, reader.rows, block_rows):
            if cancel is not None:
                cancel.check()
            block = reader.read(start, start + block_rows, out=buf)
            check_finite_rows(block, chunk.path, window, start + chunk.row_start)
