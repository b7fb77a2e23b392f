"""Score mode's files (issue 16; docs/FORMATS.md, "Score mode").

In score mode the server does not save a candidate's logits: for each prefill chunk it scores the
candidate's rows against the reference's and saves only per-row records (a few dozen bytes per
position). This module owns what is on disk; the scoring itself runs in the server
(:mod:`kldtui.scoring`), so the files do not depend on how the rows were scored.

Files::

    <capture dir>/<request id>/scores.rows-SSSSSS-EEEEEE.safetensors   one per scored chunk
    <finalized folder>/scores_NNN.safetensors + scores-manifest.json    one per window

Each holds one ``U8`` tensor ``records`` of shape ``[rows, record_bytes]``: row ``i`` is one
packed record whose layout (a NumPy structured dtype) is the metadata ``record_dtype``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import BadField, BadInput, remedy
from kldtui.events import Cancel
from kldtui.formats.atomic import atomic_open, write_json_atomic
from kldtui.formats.chunks import ChunkInfo, ChunkKind
from kldtui.formats.names import check_name, safe_name
from kldtui.formats.safetensors_io import RowReader, encode_header, read_header
from kldtui.formats.suite import (
    Suite,
    WindowSpec,
    read_versioned,
    require_count,
    require_field,
    require_sha256,
    require_width,
)
from kldtui.metrics.limits import KL_ROW_MAX
from kldtui.redact import redact_json

SCORE_KEY = "records"
SCORE_DTYPE = "U8"
SCORE_CHUNK_FORMAT = "kldtui-score-chunk-v1"
SCORE_FILE_FORMAT = "kldtui-scores-v1"
SCORES_MANIFEST = "scores-manifest.json"
# What to do about a scores folder kldtui cannot read: no such folder (the path is wrong), or a
# damaged manifest (every field error, through kldtui.errors.remedy)
SCORES_REMEDY = "give a candidate folder that kldtui finalize or kldtui run wrote in score mode"
SCORES_DAMAGED = "finalize the folder again"


class ScoreChunks(ChunkKind):
    """Score chunks: ``scores.rows-SSSSSS-EEEEEE.safetensors``, one U8 tensor ``records`` of one
    record width; the vocabulary is their metadata ``vocab_size``, and each names the window
    (index and token hash) it scored. Their values are read by finalize, not here."""

    prefix = "scores"
    key = SCORE_KEY
    dtype = SCORE_DTYPE
    checks_values = False

    def chunk_vocab(self, path: Path, meta: Mapping[str, str], window: WindowSpec, cols: int,
                    first_cols: int | None) -> int:
        try:
            vocab = int(meta["vocab_size"])
            if int(meta["window_index"]) != window.index:
                raise BadInput(f"{path}: {window.label}: scored as window {meta['window_index']}; "
                               "the request folder belongs to another window, capture again")
        except (KeyError, ValueError):
            raise BadInput(f"{path}: {window.label}: score chunk without window_index/vocab_size "
                           "metadata; it was not written by the kldtui capture hook") from None
        if meta.get("token_ids_json_sha256") != window.token_ids_json_sha256:
            raise BadInput(f"{path}: {window.label}: scored tokens differ from the suite's "
                           "(token hash); capture the window again")
        if first_cols is not None and cols != first_cols:
            raise BadInput(f"{path}: {window.label}: records of {cols} bytes, other chunks "
                           f"have {first_cols}; capture the window again")
        return vocab

    def check_values(self, chunk: ChunkInfo, window: WindowSpec, cancel: Cancel | None) -> None:
        """Nothing here: finalize reads every record (and refuses NaN)."""

    def rows_wanted(self, window: WindowSpec) -> int:
        """Score chunks hold the scored rows only: row ``j`` is position ``scored_row_start + j``."""
        return window.scored_positions


SCORE_CHUNKS = ScoreChunks()


def score_chunk_name(row_start: int, row_end: int) -> str:
    return SCORE_CHUNKS.file_name(row_start, row_end)


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


_LN2 = 0.6931471805599453
_TOL = 1e-6


def impossible_record(records: np.ndarray, vocab_size: int | None) -> tuple[int, str] | None:
    """The first row of ``records`` (score-mode fields present in its dtype) holding a value no
    scoring can give, and why: a KL below 0 or finite above :data:`KL_ROW_MAX` (+inf is a masked
    token), a JS outside [0, ln 2], a probability outside [0, 1], a log-probability above 0, an
    entropy outside [0, log(vocabulary)], an
    argmax or rank below 0 or beyond the vocabulary. NaN is left to the caller (a failed row)."""
    names = set(records.dtype.names or ())
    checks: list[tuple[str, np.ndarray, str]] = []
    with np.errstate(invalid="ignore"):
        for name in ("kl", "kl_reverse"):
            if name in names:
                v = records[name]
                checks.append((name, (v < -_TOL) | (np.isfinite(v) & (v > KL_ROW_MAX)),
                               f"a KL is >= 0 and, from float32 logits, finite below {KL_ROW_MAX:g} or +inf"))
        if "js" in names:
            checks.append(("js", (records["js"] < -_TOL) | (records["js"] > _LN2 + _TOL),
                           "a JS is between 0 and ln 2"))
        if "ref_top_prob" in names:
            v = records["ref_top_prob"]
            checks.append(("ref_top_prob", (v < -_TOL) | (v > 1 + _TOL), "a probability is between 0 and 1"))
        for name in ("logp_ref_next", "logp_cand_next"):
            if name in names:
                checks.append((name, records[name] > _TOL, "a log-probability is at most 0"))
        for name in ("entropy_ref", "entropy_cand"):
            if name in names:
                v = records[name]
                top = math.inf if vocab_size is None else math.log(max(vocab_size, 1)) + 1e-6
                checks.append((name, (v < -_TOL) | (v > top),
                               "an entropy is between 0 and log(vocabulary size)"))
        for name in ("argmax_ref", "argmax_cand", "rank_ref_top"):
            if name in names:
                v = records[name]
                bad = v < 0 if vocab_size is None else (v < 0) | (v >= vocab_size)
                checks.append((name, bad, "a token index or rank is between 0 and the vocabulary size - 1"
                               + (f" ({vocab_size - 1})" if vocab_size is not None else "")))
    first: tuple[int, str] | None = None
    for name, bad, why in checks:
        rows = np.flatnonzero(bad)
        if rows.size and (first is None or int(rows[0]) < first[0]):
            first = (int(rows[0]), f"{name} {records[name][rows[0]].item()!r} is impossible ({why})")
    return first


def read_records(path: str | os.PathLike[str], dtype: np.dtype) -> tuple[np.ndarray, dict[str, str]]:
    """The records of a score chunk or score file, checked against ``dtype`` and for impossible
    values (:func:`impossible_record`); ``(records, metadata)``."""
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
    records = raw.reshape(-1).view(dtype).copy()
    try:
        vocab: int | None = int(meta["vocab_size"])
    except (KeyError, ValueError):
        vocab = None
    bad = impossible_record(records, vocab)
    if bad is not None:
        row_start = int(meta["row_start"]) if meta.get("row_start", "").isdigit() else 0
        raise BadInput(f"{path}: row {bad[0] + row_start}: {bad[1]}; the file is damaged or forged, capture "
                       "the window again")
    return records, meta


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
    p, doc = read_versioned(path, SCORES_MANIFEST, "scores manifest", what_to_do=SCORES_REMEDY)
    with remedy(SCORES_DAMAGED):
        return _scores_manifest(p, doc)


def _scores_manifest(p: Path, doc: dict[str, Any]) -> ScoresManifest:
    where = str(p)
    entries: dict[int, WrittenScores] = {}
    for position, e in enumerate(require_field(doc, "windows", list, where)):
        w_where = f"{where} windows[{position}]"
        if not isinstance(e, dict):
            raise BadField(f"{w_where}: expected an object")
        item = WrittenScores(require_count(e, "window_index", w_where),
                             check_name(require_field(e, "domain", str, w_where), "domain", w_where),
                             check_name(require_field(e, "file", str, w_where), "file", w_where),
                             require_count(e, "rows", w_where), require_count(e, "size_bytes", w_where),
                             require_sha256(e, "sha256", w_where),
                             require_sha256(e, "token_ids_json_sha256", w_where),
                             require_sha256(e, "reference_sha256", w_where))
        if item.window_index in entries:
            raise BadField(f"{w_where}: window {item.window_index} is listed twice")
        entries[item.window_index] = item
    return ScoresManifest(root=p.parent, path=p, vocab_size=require_width(doc, "vocab_size", where),
                          suite_token_hash_sha256=require_field(doc, "suite_token_hash_sha256", str, where),
                          record_dtype=require_field(doc, "record_dtype", str, where), entries=entries,
                          runtime=doc.get("runtime"))
