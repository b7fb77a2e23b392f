"""Score mode's files and the server side's per-request scoring session (issue 16).

In score mode the server does not save a candidate's logits: for each prefill chunk it reads the
matching rows of the reference window file, computes every per-row figure the compare stage needs
on the device the logits are on, and saves only those records (a few dozen bytes per position).
This module owns what is on disk and the per-request bookkeeping; the arithmetic is the caller's
(``score_rows``: :func:`kldtui.metrics.score.score_block` in the vLLM hook and the embedded
server), so the files do not depend on how the rows were scored.

Files (docs/FORMATS.md, "Score mode")::

    <capture dir>/<request id>/scores.rows-SSSSSS-EEEEEE.safetensors   one per scored chunk
    <finalized folder>/scores_NNN.safetensors + scores-manifest.json    one per window

Each holds one ``U8`` tensor ``records`` of shape ``[rows, record_bytes]``: row ``i`` is one
packed record whose layout (a NumPy structured dtype) is the metadata ``record_dtype``.

Which window a request scores comes from the capture client's request id
(:func:`request_tag`, ``kldtui-<run>-wNNN-<8 hex>``); where the reference is comes from the
server's environment (``KLDTUI_CAPTURE_MODE``, ``KLDTUI_SCORE_SUITE``, ``KLDTUI_SCORE_REFERENCE``:
:mod:`kldtui.settings`). The reference
file is checked (:func:`kldtui.formats.identity.check_logits_file`: size, shape, header
``window_index`` and token hash against the reference manifest and the suite) before a row of it
is used. A failure fails that request only: its folder gets the error marker with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.formats.atomic import atomic_open, write_json_atomic
from kldtui.formats.names import safe_name
from kldtui.formats.safetensors_io import RowReader, encode_header, read_header
from kldtui.formats.suite import (
    Suite,
    WindowSpec,
    load_logits_manifest,
    load_suite,
    read_versioned,
    require_field,
    token_ids_hash,
)
from kldtui.redact import redact_json

MODES = ("logits", "score")
SCORE_KEY = "records"
SCORE_DTYPE = "U8"
SCORE_CHUNK_FORMAT = "kldtui-score-chunk-v1"
SCORE_FILE_FORMAT = "kldtui-scores-v1"
SCORES_MANIFEST = "scores-manifest.json"
SCORE_CHUNK_NAME = re.compile(r"^scores\.rows-(\d{6})-(\d{6})\.safetensors$")
_REQUEST_WINDOW = re.compile(r"kldtui-.+?-w(\d{3,})-[0-9a-f]{8}(?![0-9a-f])")


def request_tag(run: str, window_index: int, token: str) -> str:
    """The capture client's ``X-Request-Id`` for a window (the server's request id contains it)."""
    return f"kldtui-{safe_name(run)}-w{window_index:03d}-{token}"


def window_of_request(request_id: str) -> int | None:
    """The window index named in a request id made from :func:`request_tag` (the last one)."""
    found = _REQUEST_WINDOW.findall(request_id)
    return int(found[-1]) if found else None


def capture_mode() -> str:
    """``"score"`` or ``"logits"``, from ``KLDTUI_CAPTURE_MODE`` (:data:`kldtui.settings.CAPTURE_MODE`)."""
    return settings.CAPTURE_MODE.get()


def score_chunk_name(row_start: int, row_end: int) -> str:
    return f"scores.rows-{row_start:06d}-{row_end:06d}.safetensors"


def score_file_name(window_index: int) -> str:
    return f"scores_{window_index:03d}.safetensors"


def dtype_text(dtype: np.dtype) -> str:
    """A record layout as the text stored in ``record_dtype`` (NumPy's ``descr``, as JSON)."""
    return json.dumps([list(d) for d in dtype.descr])


def _records_bytes(records: np.ndarray) -> tuple[np.ndarray, int]:
    if records.ndim != 1 or records.dtype.names is None:
        raise ValueError("records must be a 1-D structured array")
    width = int(records.dtype.itemsize)
    return np.ascontiguousarray(records).view(np.uint8).reshape(len(records), width), width


def write_score_chunk(capture_dir: str | os.PathLike[str], request_id: str, row_start: int,
                      records: np.ndarray, metadata: dict[str, str]) -> Path | None:
    """Publish one score chunk (never overwrites: FileExistsError); None for zero rows."""
    rows = int(records.shape[0])
    if rows == 0:
        return None
    data, width = _records_bytes(records)
    folder = Path(capture_dir) / safe_name(request_id)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / score_chunk_name(row_start, row_start + rows)
    if final.exists():
        raise FileExistsError(f"score chunk {final} already exists; refusing to overwrite")
    meta = {**metadata, "format": SCORE_CHUNK_FORMAT, "request_id": request_id,
            "row_start": str(row_start), "row_end": str(row_start + rows),
            "record_dtype": dtype_text(records.dtype),
            # which node wrote it (as logits chunks say; the capture client names it)
            "writer_host": socket.gethostname() or "unknown-host",
            "writer_dir": os.path.abspath(capture_dir)}
    header = encode_header({SCORE_KEY: (SCORE_DTYPE, (rows, width))}, meta)
    with atomic_open(final, "wb", replace=False, fsync=False) as handle:
        handle.write(header)
        handle.write(data.data.cast("B"))
    return final


def read_records(path: str | os.PathLike[str], dtype: np.dtype) -> tuple[np.ndarray, dict[str, str]]:
    """The records of a score chunk or score file, checked against ``dtype``; ``(records, metadata)``."""
    header = read_header(path)
    meta = header.metadata
    stored = meta.get("record_dtype")
    if stored != dtype_text(dtype):
        raise BadInput(f"{path}: record layout {stored!r} is not the one this kldtui reads "
                       f"({dtype_text(dtype)}); score the window again with this kldtui")
    with RowReader(path, key=SCORE_KEY, dtype=SCORE_DTYPE) as reader:
        if reader.cols != dtype.itemsize:
            raise BadInput(f"{path}: records of {reader.cols} bytes, expected {dtype.itemsize}; "
                           "the file is corrupt, score the window again")
        raw = reader.read(0, reader.rows)
    return raw.reshape(-1).view(dtype).copy(), meta


# -- the finalized folder ------------------------------------------------------------------------
@dataclass(frozen=True)
class WrittenScores:
    """One finalized score file as ``scores-manifest.json`` lists it."""

    window_index: int
    domain: str
    file: str
    rows: int
    size_bytes: int
    sha256: str
    token_ids_json_sha256: str
    reference_sha256: str

    def manifest_entry(self) -> dict[str, Any]:
        return {"window_index": self.window_index, "domain": self.domain, "file": self.file,
                "key": SCORE_KEY, "rows": self.rows, "size_bytes": self.size_bytes,
                "sha256": self.sha256, "token_ids_json_sha256": self.token_ids_json_sha256,
                "reference_sha256": self.reference_sha256}


@dataclass(frozen=True)
class ScoresManifest:
    root: Path
    path: Path
    vocab_size: int
    suite_token_hash_sha256: str
    record_dtype: str
    entries: dict[int, WrittenScores]
    runtime: Any

    def file_path(self, window_index: int) -> Path:
        entry = self.entries.get(window_index)
        if entry is None:
            raise BadInput(f"{self.path}: window {window_index} is not scored; capture it in score mode")
        target = (self.root / entry.file).resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise BadInput(f"{self.path}: window {window_index} file {entry.file!r} points outside "
                           f"{self.root}; fix the manifest")
        return target


def write_score_file(folder: str | os.PathLike[str], window: WindowSpec, records: np.ndarray,
                     metadata: dict[str, str], reference_sha256: str) -> WrittenScores:
    """Write ``scores_NNN.safetensors`` atomically (replacing an older one); hashed while written."""
    data, width = _records_bytes(records)
    meta = {**metadata, "format": SCORE_FILE_FORMAT, "window_index": str(window.index),
            "domain": window.domain, "token_ids_json_sha256": window.token_ids_json_sha256,
            "reference_sha256": reference_sha256, "record_dtype": dtype_text(records.dtype)}
    header = encode_header({SCORE_KEY: (SCORE_DTYPE, (len(records), width))}, meta)
    body = header + data.tobytes()
    final = Path(folder) / score_file_name(window.index)
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(final, "wb", replace=True, fsync=True) as handle:
        handle.write(body)
    return WrittenScores(window.index, window.domain, final.name, len(records), len(body),
                         hashlib.sha256(body).hexdigest(), window.token_ids_json_sha256, reference_sha256)


def write_scores_manifest(folder: str | os.PathLike[str], suite: Suite, written: Sequence[WrittenScores],
                          *, vocab_size: int, record_dtype: np.dtype, kind: str, runtime: Any = None,
                          window_range: tuple[int, int] | None = None) -> Path:
    items = sorted(written, key=lambda w: w.window_index)
    if not items:
        raise BadInput(f"{folder}: no scored windows to list in {SCORES_MANIFEST}")
    if window_range is None:
        window_range = (items[0].window_index, items[-1].window_index + 1)
    import datetime as _dt

    doc = {"format_version": 1, "format": SCORE_FILE_FORMAT,
           "created_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kind": kind, "tensor_key": SCORE_KEY, "record_dtype": dtype_text(record_dtype),
           "vocab_size": vocab_size, "context_length": suite.context_length,
           "window_count": len(items), "window_range": list(window_range),
           "total_scored_positions": sum(w.rows for w in items),
           "total_size_bytes": sum(w.size_bytes for w in items),
           "suite_token_hash_sha256": suite.suite_token_hash_sha256, "runtime": redact_json(runtime),
           "windows": [w.manifest_entry() for w in items]}
    path = Path(folder) / SCORES_MANIFEST
    write_json_atomic(path, doc)
    return path


def load_scores_manifest(path: str | os.PathLike[str]) -> ScoresManifest:
    """``scores-manifest.json`` (the file, or the folder holding it)."""
    p, doc = read_versioned(path, SCORES_MANIFEST, "scores manifest")
    where = str(p)
    entries: dict[int, WrittenScores] = {}
    for position, e in enumerate(require_field(doc, "windows", list, where)):
        w_where = f"{where} windows[{position}]"
        if not isinstance(e, dict):
            raise BadInput(f"{w_where}: expected an object")
        try:
            item = WrittenScores(int(e["window_index"]), str(e["domain"]), safe_name(str(e["file"])),
                                 int(e["rows"]), int(e["size_bytes"]), str(e["sha256"]),
                                 str(e["token_ids_json_sha256"]), str(e["reference_sha256"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{w_where}: malformed entry ({exc}); finalize the window again") from None
        entries[item.window_index] = item
    return ScoresManifest(root=p.parent, path=p, vocab_size=require_field(doc, "vocab_size", int, where),
                          suite_token_hash_sha256=require_field(doc, "suite_token_hash_sha256", str, where),
                          record_dtype=require_field(doc, "record_dtype", str, where), entries=entries,
                          runtime=doc.get("runtime"))


# -- the server side: one session per server process ---------------------------------------------
ScoreRows = Callable[[np.ndarray, Any, np.ndarray], np.ndarray]
"""``score_rows(reference_rows, candidate_rows, next_tokens) -> records``: reference rows are
float32 host rows, candidate rows the logits as the server has them (device tensor or array)."""


class ScoreFailed(Exception):
    """This request cannot be scored (the message says why); the server goes on."""


@dataclass
class _Request:
    window: WindowSpec
    tokens: np.ndarray  # next tokens of rows 0..N-2
    reader: RowReader
    metadata: dict[str, str]
    prefetch: tuple[int, int, Future[np.ndarray]] | None = None
    failed: bool = False
    rows_done: int = 0


class ScoreSession:
    """Scores prefill chunks against the reference, request by request (see the module doc).

    ``chunk`` is called on the engine's thread for each chunk of prompt rows; the reference rows of
    the request's next chunk (same size as this one) are read beforehand on a helper thread, so
    the engine waits for the disk only on a request's first chunk. Memory: two row blocks of the
    reference on the host; on the device, whatever ``score_rows`` needs for ``block_rows`` rows.
    ``write(request_id, row_start, records, metadata)`` publishes a chunk (the hook hands it to its
    background writer); ``fail(request_id, message)`` leaves the error marker.
    """

    MAX_OPEN = 4  # requests whose state is kept (older ones are closed)

    def __init__(self, suite_dir: str | os.PathLike[str], reference_dir: str | os.PathLike[str] | None,
                 score_rows: ScoreRows, write: Callable[[str, int, np.ndarray, dict[str, str]], None],
                 fail: Callable[[str, str], None], *, block_rows: int | None = None) -> None:
        self.suite_dir = Path(suite_dir)
        self.reference_dir = Path(reference_dir) if reference_dir else self.suite_dir / "ref"
        self.score_rows = score_rows
        self.write = write
        self.fail = fail
        self.block_rows = max(1, settings.SCORE_ROWS.get() if block_rows is None else block_rows)
        self._requests: OrderedDict[str, _Request] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kldtui-score-prefetch")

    @classmethod
    def from_env(cls, score_rows: ScoreRows, write: Callable[[str, int, np.ndarray, dict[str, str]], None],
                 fail: Callable[[str, str], None]) -> ScoreSession:
        suite = settings.SCORE_SUITE.get()
        if suite is None:
            raise ScoreFailed(f"score mode ({settings.CAPTURE_MODE.name}=score) needs "
                              f"{settings.SCORE_SUITE.name}: the suite folder on the server host")
        return cls(suite, settings.SCORE_REFERENCE.get(), score_rows, write, fail)

    # -- per request ------------------------------------------------------------------------------
    def _open(self, request_id: str, vocab_size: int, prompt: Sequence[int] | None) -> _Request:
        index = window_of_request(request_id)
        if index is None:
            raise ScoreFailed(f"request {request_id!r} names no window (kldtui-RUN-wNNN-XXXXXXXX); "
                              "score mode scores only kldtui's capture requests")
        try:
            # read again for every request: a reference finalized while the server runs counts
            suite, manifest = load_suite(self.suite_dir), load_logits_manifest(self.reference_dir)
            window = suite.window(index)
            if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
                raise ScoreFailed(f"{manifest.path}: the reference was made from another suite than "
                                  f"{suite.path}")
            entry = manifest.entry(index)
            if entry.token_ids_json_sha256 != window.token_ids_json_sha256:
                raise ScoreFailed(f"{manifest.path}: {window.label}: the reference's token hash differs "
                                  "from the suite's")
            from kldtui.formats.identity import check_logits_file

            identity = check_logits_file(manifest, index, suite=suite, side="reference")
            if not identity.ok:
                raise ScoreFailed(identity.problems[0])
            if entry.dtype != "F32":
                raise ScoreFailed(f"{manifest.path}: {window.label}: reference dtype {entry.dtype}, "
                                  "score mode reads F32")
            if vocab_size != manifest.vocab_size:
                raise ScoreFailed(f"{manifest.path}: {window.label}: the server's vocabulary is "
                                  f"{vocab_size}, the reference's {manifest.vocab_size}")
            ids = suite.load_tokens(window, check_hash=True)
            if (prompt is not None
                    and token_ids_hash([int(t) for t in prompt]) != window.token_ids_json_sha256):
                raise ScoreFailed(f"request {request_id!r} names {window.label} but its prompt is not "
                                  "that window's tokens")
            reader = RowReader(identity.path)
        except BadInput as exc:
            raise ScoreFailed(str(exc)) from None
        except OSError as exc:
            raise ScoreFailed(f"{self.reference_dir}: window {index:03d}: the reference cannot be read "
                              f"({exc})") from None
        meta = {"window_index": str(index), "token_ids_json_sha256": window.token_ids_json_sha256,
                "reference_sha256": entry.sha256, "vocab_size": str(vocab_size),
                "context_length": str(suite.context_length)}
        return _Request(window, np.asarray(ids[1:], dtype=np.int64), reader, meta)

    def _state(self, request_id: str, vocab_size: int, prompt: Sequence[int] | None) -> _Request:
        with self._lock:
            req = self._requests.get(request_id)
        if req is not None:
            return req
        req = self._open(request_id, vocab_size, prompt)
        with self._lock:
            self._requests[request_id] = req
            while len(self._requests) > self.MAX_OPEN:
                _, old = self._requests.popitem(last=False)
                self._close(old)
        return req

    def _close(self, req: _Request) -> None:
        if req.prefetch is not None:
            with contextlib.suppress(Exception):
                req.prefetch[2].result()
            req.prefetch = None
        req.reader.close()

    def _finish(self, request_id: str) -> None:
        with self._lock:
            req = self._requests.pop(request_id, None)
        if req is not None:
            self._close(req)

    def _reference_rows(self, req: _Request, start: int, stop: int) -> np.ndarray:
        pre = req.prefetch
        req.prefetch = None
        rows: np.ndarray | None = None
        if pre is not None:
            got = pre[2].result()  # a read error surfaces here
            if (pre[0], pre[1]) == (start, stop):
                rows = got
        if rows is None:
            rows = req.reader.pread(start, stop)
        nxt = min(stop + (stop - start), req.window.scored_positions)
        if nxt > stop:
            req.prefetch = (stop, nxt, self._pool.submit(req.reader.pread, stop, nxt))
        return rows

    def chunk(self, request_id: str, row_start: int, logits: Any, vocab_size: int,
              prompt: Sequence[int] | None = None) -> bool:
        """Score prompt rows ``row_start ..`` (``logits[:, :vocab_size]``) of a request and publish
        their records; never raises. False when the request failed (now or earlier)."""
        with self._lock:
            known = self._requests.get(request_id)
        if known is not None and known.failed:
            return False
        try:
            req = self._state(request_id, vocab_size, prompt)
            rows = int(logits.shape[0])
            stop = row_start + rows
            if row_start != req.rows_done or stop > req.window.scored_positions:
                raise ScoreFailed(f"rows {row_start}..{stop} of {req.window.label} arrived after rows "
                                  f"0..{req.rows_done} (prefix caching must be off); not scored")
            x = self._reference_rows(req, row_start, stop)
            parts = []
            for lo in range(0, rows, self.block_rows):
                hi = min(lo + self.block_rows, rows)
                parts.append(self.score_rows(x[lo:hi], logits[lo:hi, :vocab_size],
                                             req.tokens[row_start + lo:row_start + hi]))
            records = np.concatenate(parts) if len(parts) > 1 else parts[0]
            self.write(request_id, row_start, records, dict(req.metadata))
            req.rows_done = stop
            if stop == req.window.scored_positions:
                self._finish(request_id)
            return True
        except Exception as exc:  # noqa: BLE001 - one request fails, never the server
            message = str(exc) if isinstance(exc, ScoreFailed) else f"{type(exc).__name__}: {exc}"
            self.fail(request_id, f"kldtui score: rows from {row_start} of request {request_id!r} "
                                  f"not scored: {message}")
            with self._lock:
                req_ = self._requests.get(request_id)
            if req_ is not None:
                req_.failed = True
            else:
                self._remember_failed(request_id)
            return False

    def _remember_failed(self, request_id: str) -> None:
        """A request that failed before it was opened: later chunks are skipped quietly."""
        dummy = _Request.__new__(_Request)
        dummy.failed = True
        dummy.prefetch = None
        dummy.reader = _NullReader()  # type: ignore[assignment]
        with self._lock:
            self._requests[request_id] = dummy
            while len(self._requests) > self.MAX_OPEN:
                _, old = self._requests.popitem(last=False)
                self._close(old)

    def close(self) -> None:
        with self._lock:
            items = list(self._requests.values())
            self._requests.clear()
        for req in items:
            self._close(req)
        self._pool.shutdown(wait=True)


class _NullReader:
    def close(self) -> None:
        pass
