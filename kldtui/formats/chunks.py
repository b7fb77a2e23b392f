"""Capture chunks: the one chunk writer (every producer of logits chunks, the vLLM plugin, the
source patch and the embedded server, calls :func:`write_chunk`) and the chunk-folder model its
readers share (:func:`check_chunk_dir`, :func:`check_chunk_values`; the capture client and
finalize). A :class:`ChunkKind` describes one kind of chunk file (logits here: :data:`LOGITS_CHUNKS`;
score records: :data:`kldtui.formats.scores.SCORE_CHUNKS`); each capture mode names its kind.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel
from kldtui.formats import finite
from kldtui.formats.atomic import atomic_open
from kldtui.formats.names import safe_name
from kldtui.formats.safe_io import open_private_text, read_text
from kldtui.formats.safetensors_io import RowReader, encode_header, read_header
from kldtui.formats.suite import WindowSpec

SKIPPED_REQUEST_PREFIXES = ("_warmup_", "_dummy_req_")
KLDTUI_REQUEST_PREFIX = "kldtui-"  # every X-Request-Id kldtui sends starts so (is_kldtui_request)
ERROR_MARKER = "capture-error.txt"
# bytes of the hook's error marker read (a line per error it met; the message quotes 800 characters)
ERROR_MARKER_LIMIT = 64 * 1024
CHUNK_NAME = re.compile(r"^logits\.rows-(\d{6})-(\d{6})\.safetensors$")
ANY_CHUNK_NAME = re.compile(r"^([a-z]+)\.rows-(\d{6})-(\d{6})\.safetensors$")  # a chunk of any kind
_REQUEST_WINDOW = re.compile(r"kldtui-.+?-w(\d{3,})-[0-9a-f]{8}(?![0-9a-f])")
_REQUEST_LIVE = re.compile(r"kldtui-.+?-w\d{3,}-[0-9a-f]{8}(-live)?(?![0-9a-f])")
LIVE_MARK = "live"  # a request whose live logits the server saves too (hidden mode's replay check)
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


def request_tag(run: str, window_index: int, token: str, *, live: bool = False) -> str:
    """The capture client's ``X-Request-Id`` for a window (the server's request id contains it):
    ``kldtui-<run>-wNNN-<8 hex>``, and ``-live`` after it when the server is to save the
    request's live logits too (hidden mode's replay check: :func:`wants_live_logits`)."""
    live_mark = f"-{LIVE_MARK}" if live else ""
    return f"{KLDTUI_REQUEST_PREFIX}{safe_name(run)}-w{window_index:03d}-{token}{live_mark}"


def wants_live_logits(request_id: str) -> bool:
    """Whether the last capture tag in a server's request id asks for the live logits too."""
    found = _REQUEST_LIVE.findall(request_id)
    return bool(found) and found[-1] == f"-{LIVE_MARK}"


def window_of_request(request_id: str) -> int | None:
    """The window index named in a request id made from :func:`request_tag` (the last one)."""
    found = _REQUEST_WINDOW.findall(request_id)
    return int(found[-1]) if found else None


def chunk_file_name(row_start: int, row_end: int) -> str:
    return f"logits.rows-{row_start:06d}-{row_end:06d}.safetensors"


def is_skipped_request(request_id: str) -> bool:
    """Warm-up and dummy batches are never captured."""
    return request_id.startswith(SKIPPED_REQUEST_PREFIXES)


def is_kldtui_request(request_id: str) -> bool:
    """Whether a server's request id carries one of kldtui's own ``X-Request-Id`` values
    (:func:`request_tag`, ``kldtui-smoke-...``): vLLM names it ``cmpl-<that>-0-<8 hex>``."""
    return request_id.startswith(KLDTUI_REQUEST_PREFIX) or f"-{KLDTUI_REQUEST_PREFIX}" in request_id


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
WRITER_RECORD_LIMIT = 64 * 1024  # bytes of a writer record read (host, pid, folder, vLLM version)


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
    return write_kind_chunk(capture_dir, request_id, row_start, LOGITS_CHUNKS, data,
                            {"vocab_size": str(vocab_size)})


def write_kind_chunk(capture_dir: str | os.PathLike[str], request_id: str, row_start: int,
                     kind: ChunkKind, data: np.ndarray, metadata: Mapping[str, str]) -> Path | None:
    """Publish one chunk of ``kind``: ``data`` (host rows ``[rows, columns]`` in the kind's dtype:
    float32 for F32, BF16 bit patterns ``uint16`` for BF16) from prompt row ``row_start``, with
    ``metadata`` plus what every chunk carries (``request_id``, ``row_start``, ``row_end``,
    ``writer_host``, ``writer_dir``). None for zero rows; FileExistsError if the chunk exists."""
    rows = int(data.shape[0])
    if rows == 0:
        return None
    expected = np.dtype("<u2") if kind.dtype == "BF16" else np.dtype("<f4") if kind.dtype == "F32" else None
    if data.ndim != 2 or (expected is not None and data.dtype != expected):
        raise ValueError(f"{kind.prefix} chunk rows are {data.dtype} {list(data.shape)}; expected 2-D "
                         f"{kind.dtype}")
    row_end = row_start + rows
    folder = Path(capture_dir) / sanitize_request_id(request_id)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / kind.file_name(row_start, row_end)
    if final.exists():
        raise FileExistsError(f"capture chunk {final} already exists; refusing to overwrite")
    meta = {**dict(metadata), "request_id": request_id, "row_start": str(row_start), "row_end": str(row_end),
            "writer_host": writer_host(), "writer_dir": os.path.abspath(capture_dir)}
    header = encode_header({kind.key: (kind.dtype, (rows, int(data.shape[1])))}, meta)
    payload = np.ascontiguousarray(data)
    with atomic_open(final, "wb", replace=False, fsync=False) as handle:
        handle.write(header)
        handle.write(payload.data.cast("B"))
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


class ChunkKind:
    """One kind of chunk file a server writes per prefill chunk, and how a reader checks one.

    Files are ``<prefix>.rows-SSSSSS-EEEEEE.safetensors`` holding one tensor ``key`` of ``dtype``,
    shape ``[EEEEEE - SSSSSS, columns]``. This base describes logits chunks
    (:data:`LOGITS_CHUNKS`); another kind overrides :meth:`chunk_vocab` (and
    :meth:`check_values` when its values are checked before finalize).
    """

    prefix = "logits"
    key = "logits"
    dtype = "F32"
    checks_values = True  # whether :meth:`check_values` reads the values (the capture client does
    # it while the next chunks are computed)

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"^{re.escape(self.prefix)}\.rows-(\d{{6}})-(\d{{6}})\.safetensors$")

    def file_name(self, row_start: int, row_end: int) -> str:
        return f"{self.prefix}.rows-{row_start:06d}-{row_end:06d}.safetensors"

    def chunk_vocab(self, path: Path, meta: Mapping[str, str], window: WindowSpec, cols: int,
                    first_cols: int | None) -> int:
        """The vocabulary a chunk of ``cols`` columns was computed with (``first_cols``: the first
        chunk's columns in the folder, None for the first); BadInput when its metadata says it is
        not the window's."""
        return cols

    def check_values(self, chunk: ChunkInfo, window: WindowSpec, cancel: Cancel | None) -> None:
        """BadInput at the first value a chunk must not hold (logits: NaN or inf)."""
        check_chunk_values(chunk, window, cancel)

    def rows_wanted(self, window: WindowSpec) -> int:
        """Rows a complete capture of ``window`` holds in this kind's chunks: logits chunks hold
        every prompt position but the last (``captured_rows``), whatever the window scores."""
        return window.captured_rows

    def rows_landed(self, folder: Path) -> int:
        """Rows in the (possibly still growing) folder, from this kind's file names only; cheap."""
        try:
            names = os.listdir(folder)
        except OSError:
            return 0
        pattern = self.pattern
        total = 0
        for name in names:
            m = pattern.match(name)
            if m:
                total += max(0, int(m.group(2)) - int(m.group(1)))
        return total


LOGITS_CHUNKS = ChunkKind()


def check_chunk_dir(folder: str | os.PathLike[str], window: WindowSpec, *,
                    expected_vocab: int | None = None, check_values: bool = False,
                    cancel: Cancel | None = None, request_folder: str | None = None,
                    kind: ChunkKind = LOGITS_CHUNKS) -> ChunkSet:
    """Check a window's chunk folder by metadata (and values); raise BadInput naming the problem.

    Rows must cover ``0 .. window.num_tokens - 1`` contiguously whatever the chunk edges; every
    chunk of ``kind`` holds one tensor of its key and dtype, ``[row_end - row_start, columns]``,
    whose metadata agrees with its name; all chunks share one vocabulary (``expected_vocab`` when
    given). With ``check_values`` every value is read (a block at a time) and checked by the kind
    (logits: finite). With ``request_folder`` (the hook's folder name for the request) every
    chunk's metadata ``request_id`` must name that request: the chunks are the ones the record
    says.
    """
    pattern = kind.pattern
    key, dtype = kind.key, kind.dtype
    folder = Path(folder)
    where = f"{folder}: {window.label}"
    if not folder.is_dir():
        raise BadInput(f"{where}: chunk folder not found; capture the window first")
    marker = folder / ERROR_MARKER
    if marker.exists():
        try:
            text = " ".join(read_text(marker, errors="replace", limit=ERROR_MARKER_LIMIT).split())
        except OSError as exc:
            text = f"(the marker {marker.name} cannot be read: {exc.strerror or exc})"
        raise BadInput(f"{where}: the capture hook reported an error: {text[:800]}; "
                       "fix the cause (often a full disk) and capture the window again")
    chunks: list[ChunkInfo] = []
    names = sorted(os.listdir(folder))
    if not any(pattern.match(n) for n in names):
        others = sorted({m.group(1) for m in map(ANY_CHUNK_NAME.match, names) if m})
        if others:
            raise BadInput(f"{where}: the folder holds {others[0]}.rows-* chunks, not the "
                           f"{kind.prefix}.rows-* chunks of this run's capture mode; set [capture] "
                           "mode to the mode the window was captured in, or capture it again")
    first_cols: int | None = None
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
        cols = int(info.shape[1])
        chunk_vocab = kind.chunk_vocab(path, meta, window, cols, first_cols)
        if first_cols is None:
            first_cols = cols
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
        raise BadInput(f"{where}: no chunk files ({kind.prefix}.rows-SSSSSS-EEEEEE.safetensors); "
                       "capture the window again")
    chunks.sort(key=lambda c: c.row_start)
    vocab = expected_vocab if expected_vocab is not None else chunks[0].vocab_size
    want_rows = kind.rows_wanted(window)
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
    if check_values:
        for c in chunks:
            kind.check_values(c, window, cancel)
    return ChunkSet(folder, tuple(chunks), vocab, want_rows)


def check_logit_rows(block: np.ndarray, path: Path, window: WindowSpec, first_row: int) -> None:
    """BadInput for the rows of ``block`` (rows ``first_row..`` of ``path``) that compare would
    refuse (:data:`kldtui.formats.finite.LOGITS_RULE`: a NaN, +Inf or no finite logit in a row), in
    its words; a -inf entry is a masked token and passes. One maximum per row (NaN propagates), no
    temporary as large as the block."""
    problem = finite.logits_block_problem(block, path, window.label, finite.CAPTURED, first_row)
    if problem is not None:
        raise BadInput(problem)


def check_chunk_values(chunk: ChunkInfo, window: WindowSpec, cancel: Cancel | None) -> None:
    """Read a chunk a block at a time; BadInput at the first block with rows that cannot be scored."""
    block_rows = max(1, VALUE_CHECK_BLOCK_BYTES // (4 * chunk.vocab_size))
    with RowReader(chunk.path) as reader:
        buf = np.empty((min(block_rows, reader.rows), reader.cols), dtype=np.float32)
        for start in range(0, reader.rows, block_rows):
            if cancel is not None:
                cancel.check()
            block = reader.read(start, start + block_rows, out=buf)
            check_logit_rows(block, chunk.path, window, start + chunk.row_start)
