"""Finalize: merge each window's capture chunks into ``logits_NNN.safetensors`` + ``manifest.json``.

Chunks are checked by metadata first (:func:`kldtui.formats.chunks.check_chunk_dir`), then streamed
a block of rows at a time into :class:`kldtui.formats.logits_writer.LogitsFileWriter`, which hashes while
writing and publishes atomically: peak memory is one block (``BLOCK_BYTES``), whatever the
window size. Values are checked to be finite on the way (the block is in memory anyway).

A finalized file is never overwritten without ``force``; one that already matches the window
(header: shape, dtype, window index, token hash) is skipped, so an interrupted finalize resumes.
After publishing, the file is re-read (``verify``): ``"sample"`` (default) re-parses the header,
checks the size and compares the first and last row of every chunk with the chunk, which costs
almost nothing; ``"full"`` re-hashes the whole file from disk, which halves throughput (see
``benchmarks/finalize_bench.py``); ``"none"`` skips it. A failed write (full disk) leaves no file
under the final name and no temporary file.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kldtui.errors import BadInput, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    Throttle,
    WindowState,
    failure_reported,
    null_sink,
)
from kldtui.formats.chunks import ChunkSet, check_chunk_dir, check_finite_rows
from kldtui.formats.logits_writer import LogitsFileWriter, WrittenLogits, write_logits_manifest
from kldtui.formats.safe_io import read_text
from kldtui.formats.safetensors_io import RowReader, read_header
from kldtui.formats.scores import (
    SCORE_FILE_FORMAT,
    WrittenScores,
    load_scores_manifest,
    read_records,
    score_file_name,
    write_score_file,
    write_scores_manifest,
)
from kldtui.formats.suite import (
    LOGITS_FORMAT,
    LOGITS_MANIFEST,
    TENSOR_KEY,
    Suite,
    WindowSpec,
    load_logits_manifest,
    logits_file_name,
    sha256_file,
)
from kldtui.metrics.score import RECORD_DTYPE, from_records
from kldtui.workspace import Workspace

STAGE: StageName = "finalize"
BLOCK_BYTES = 16 * 1024 * 1024
Verify = Literal["sample", "full", "none"]


def _known_hashes(output_dir: Path) -> dict[str, tuple[int, str]]:
    """file name -> (size, sha256) from an existing manifest, to skip re-hashing finished files."""
    path = output_dir / LOGITS_MANIFEST
    try:
        doc = json.loads(read_text(path))
        return {str(e["file"]): (int(e["size_bytes"]), str(e["sha256"])) for e in doc["windows"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _existing(final: Path, suite: Suite, window: WindowSpec, expected_vocab: int | None,
              output_dir: Path) -> WrittenLogits:
    """The already-finalized file as a WrittenLogits if it matches ``window``; else BadInput."""
    header = read_header(final)
    info = header.tensor(TENSOR_KEY)
    meta = header.metadata
    vocab = expected_vocab if expected_vocab is not None else (
        info.shape[-1] if info.shape else 0)
    problems = []
    if info.dtype != "F32" or info.shape != (window.scored_positions, vocab):
        problems.append(f"tensor {info.dtype} {list(info.shape)}, expected F32 "
                        f"{[window.scored_positions, vocab]}")
    if meta.get("window_index") != str(window.index):
        problems.append(f"window_index {meta.get('window_index')}")
    if meta.get("token_ids_json_sha256") != window.token_ids_json_sha256:
        problems.append("token hash differs from the suite's")
    if meta.get("context_length") != str(suite.context_length):
        problems.append(f"context_length {meta.get('context_length')}")
    if meta.get("format") != LOGITS_FORMAT:
        problems.append(f"format {meta.get('format')!r}")
    if header.file_size != info.end:
        problems.append(f"{header.file_size - info.end} trailing bytes")
    if problems:
        raise BadInput(f"{final}: already finalized but does not match {window.label} "
                       f"({'; '.join(problems)}); pass --force to write it again")
    known = _known_hashes(output_dir).get(final.name)
    digest = known[1] if known and known[0] == header.file_size else sha256_file(final)
    return WrittenLogits(window.index, window.domain, final.name, window.scored_positions, vocab,
                         header.file_size, digest, window.token_ids_json_sha256)


def _verify_written(final: Path, written: WrittenLogits, window: WindowSpec, chunks: ChunkSet,
                    verify: Verify) -> None:
    if verify == "none":
        return
    header = read_header(final)
    info = header.tensor(TENSOR_KEY)
    if (header.file_size != written.size_bytes or info.shape != (written.rows, written.vocab_size)
            or info.dtype != "F32" or header.metadata.get("window_index") != str(window.index)):
        raise StageFailed(f"{final}: {window.label}: the file read back does not match what was "
                          "written (size, shape or metadata); the disk or file system is faulty")
    if verify == "full":
        if sha256_file(final) != written.sha256:
            raise StageFailed(f"{final}: {window.label}: SHA-256 read back differs from the one "
                              "computed while writing; the disk or file system is faulty")
        return
    with RowReader(final) as out:
        for c in chunks.chunks:
            with RowReader(c.path) as src:
                for r in {0, c.rows - 1}:
                    if not np.array_equal(out.read(c.row_start + r, c.row_start + r + 1),
                                          src.read(r, r + 1), equal_nan=True):
                        raise StageFailed(f"{final}: {window.label}: row {c.row_start + r} read back "
                                          f"differs from {c.path.name}; the disk or file system is "
                                          "faulty")


def _remember_hash(output_dir: Path, final: Path, sha256: str) -> None:
    """Hash once: the SHA-256 computed while writing goes into the verified-file cache, so the
    reference stage (and ``verify`` without ``--reverify``) does not hash the file again."""
    from kldtui.formats.verified_cache import VerifiedCache

    cache = VerifiedCache(output_dir)
    cache.record(final, sha256)
    cache.save()


def finalize_window(suite: Suite, window: WindowSpec, chunk_dir: Path, output_dir: Path, *,
                    expected_vocab: int | None, force: bool = False, emit: EventSink = null_sink,
                    cancel: Cancel | None = None, verify: Verify = "sample") -> WrittenLogits:
    """Merge ``chunk_dir``'s chunks into ``output_dir/logits_NNN.safetensors``; see the module doc."""
    output_dir = Path(output_dir)
    final = output_dir / logits_file_name(window.index)
    if final.exists() and not force:
        # checked against the suite, not the chunks: they may have been deleted since
        done = _existing(final, suite, window, expected_vocab, output_dir)
        emit(WindowState(STAGE, window.index, "finalized", window.domain,
                         figures={"skipped": True, "bytes": done.size_bytes}))
        return done
    chunks = check_chunk_dir(chunk_dir, window, expected_vocab=expected_vocab)
    vocab = chunks.vocab_size
    emit(WindowState(STAGE, window.index, "finalizing", window.domain))
    started = time.monotonic()
    writer = LogitsFileWriter(output_dir, window, vocab, suite.context_length, force=force,
                              hash_thread=True)
    row_bytes = 4 * vocab
    block_rows = max(1, BLOCK_BYTES // row_bytes)
    total = chunks.rows * row_bytes
    throttle = Throttle(0.25)
    task = f"window {window.index:03d}"
    try:
        # two buffers: the writer hashes one block in a helper thread while the next is read
        bufs = [np.empty((block_rows, vocab), dtype=np.float32) for _ in range(2)]
        n = 0
        for c in chunks.chunks:
            with RowReader(c.path) as reader:
                for start in range(0, reader.rows, block_rows):
                    if cancel is not None:
                        cancel.check()
                    block = reader.read(start, start + block_rows, out=bufs[n % 2])
                    n += 1
                    check_finite_rows(block, c.path, window, start + c.row_start)
                    writer.write_rows(block)
                    if throttle.ready():
                        moved = writer.written_rows * row_bytes
                        elapsed = time.monotonic() - started
                        rate = moved / elapsed if elapsed > 0 else None
                        emit(Progress(STAGE, task, moved, total, "bytes", rate=rate,
                                      eta_s=(total - moved) / rate if rate else None))
        written = writer.commit()
    except BaseException:
        writer.abort()
        raise
    try:
        _verify_written(final, written, window, chunks, verify)
    except BaseException:
        final.unlink(missing_ok=True)
        raise
    _remember_hash(output_dir, final, written.sha256)
    elapsed = time.monotonic() - started
    emit(Progress(STAGE, task, total, total, "bytes",
                  rate=total / elapsed if elapsed > 0 else None, eta_s=0.0))
    emit(WindowState(STAGE, window.index, "finalized", window.domain, figures={
        "bytes": written.size_bytes, "seconds": round(elapsed, 3),
        "gb_per_s": round(written.size_bytes / elapsed / 1e9, 3) if elapsed > 0 else None}))
    return written


def _existing_scores(final: Path, window: WindowSpec) -> WrittenScores:
    """An already-finalized score file as a WrittenScores if it is ``window``'s; else BadInput."""
    records, meta = read_records(final, RECORD_DTYPE)
    problems = []
    if len(records) != window.scored_positions:
        problems.append(f"{len(records)} rows, expected {window.scored_positions}")
    if meta.get("window_index") != str(window.index):
        problems.append(f"window_index {meta.get('window_index')}")
    if meta.get("token_ids_json_sha256") != window.token_ids_json_sha256:
        problems.append("token hash differs from the suite's")
    if meta.get("format") != SCORE_FILE_FORMAT or "reference_sha256" not in meta:
        problems.append(f"format {meta.get('format')!r}")
    if problems:
        raise BadInput(f"{final}: already finalized but does not match {window.label} "
                       f"({'; '.join(problems)}); pass --force to write it again")
    return WrittenScores(window.index, window.domain, final.name, len(records), final.stat().st_size,
                         sha256_file(final), window.token_ids_json_sha256, meta["reference_sha256"])


def finalize_scores_window(suite: Suite, window: WindowSpec, chunk_dir: Path, output_dir: Path, *,
                           force: bool = False, emit: EventSink = null_sink,
                           cancel: Cancel | None = None) -> tuple[WrittenScores, int]:
    """Score mode: join ``chunk_dir``'s score chunks into ``output_dir/scores_NNN.safetensors``;
    ``(written, vocab)``. Every chunk must have scored this window (window index, token hash)
    against one reference file (its SHA-256), with finite figures (KL may be +inf: a token the
    candidate masks); the file is read back and compared before it counts."""
    output_dir = Path(output_dir)
    final = output_dir / score_file_name(window.index)
    if final.exists() and not force:
        done = _existing_scores(final, window)
        emit(WindowState(STAGE, window.index, "finalized", window.domain,
                         figures={"skipped": True, "bytes": done.size_bytes}))
        return done, int(read_header(final).metadata.get("vocab_size", "0"))
    chunks = check_chunk_dir(chunk_dir, window, mode="score")
    emit(WindowState(STAGE, window.index, "finalizing", window.domain))
    started = time.monotonic()
    parts = []
    refs: set[str] = set()
    for c in chunks.chunks:
        if cancel is not None:
            cancel.check()
        records, meta = read_records(c.path, RECORD_DTYPE)
        refs.add(meta.get("reference_sha256", ""))
        parts.append(records)
    if len(refs) != 1 or "" in refs:
        raise BadInput(f"{chunk_dir}: {window.label}: the chunks were scored against "
                       f"{len(refs)} different reference files; capture the window again")
    records = np.concatenate(parts)
    bad = from_records(records).nonfinite_rows()
    if bad.size:
        raise BadInput(f"{chunk_dir}: {window.label}: non-finite figures (NaN) at row {int(bad[0])}; the "
                       "server computed garbage there: check the model and capture the window again")
    reference_sha = refs.pop()
    meta = {"context_length": str(suite.context_length), "vocab_size": str(chunks.vocab_size)}
    written = write_score_file(output_dir, window, records, meta, reference_sha)
    back, _ = read_records(final, RECORD_DTYPE)
    if back.tobytes() != records.tobytes() or sha256_file(final) != written.sha256:
        final.unlink(missing_ok=True)
        raise StageFailed(f"{final}: {window.label}: the file read back differs from what was written; "
                          "the disk or file system is faulty")
    elapsed = time.monotonic() - started
    emit(WindowState(STAGE, window.index, "finalized", window.domain, figures={
        "bytes": written.size_bytes, "seconds": round(elapsed, 3)}))
    return written, chunks.vocab_size


def load_finalized_scores(workspace: Workspace, suite: Suite,
                          emit: EventSink = null_sink) -> dict[int, WrittenScores]:
    """What the score folder's manifest lists (files present), by window index."""
    manifest = _listed(workspace.scores_manifest, suite, load_scores_manifest, emit)
    if manifest is None:
        return {}
    return {i: e for i, e in manifest.entries.items() if (workspace.candidate / e.file).is_file()}


def _listed(path: Path, suite: Suite, load: Any, emit: EventSink) -> Any:
    """A finalized folder's manifest (logits or scores), None when missing or unreadable (a notice
    says it is rewritten); one made from another suite is refused: its files would be mixed in."""
    if not path.exists():
        return None
    try:
        manifest = load(path)
    except BadInput as exc:
        emit(Notice(STAGE, f"{exc}; it is rewritten", level="warning"))
        return None
    if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        raise BadInput(f"{path}: made from another suite; finalize into another folder (or "
                       "another [run] workdir)")
    return manifest


def _published(written: dict[int, Any], output_dir: Path) -> str:
    """Which windows are finished despite a failure (kept: a rerun skips them)."""
    if not written:
        return f"no window was published in {output_dir}"
    shown = ", ".join(str(i) for i in sorted(written))
    return (f"published before the failure: window(s) {shown} in {output_dir} (kept; a rerun finishes "
            "the rest)")


def load_finalized(workspace: Workspace, suite: Suite, emit: EventSink = null_sink,
                   mode: str = "logits") -> dict[int, Any]:
    """What the finalized folder's manifest lists (files still present), by window index.

    A manifest that does not parse is rewritten (a notice says so); one made from another suite
    is refused: its files would be mixed with this suite's. ``mode="score"``: the score files
    (:func:`load_finalized_scores`).
    """
    if mode == "score":
        return load_finalized_scores(workspace, suite, emit)
    manifest = _listed(workspace.candidate_manifest, suite, load_logits_manifest, emit)
    if manifest is None:
        return {}
    return {i: WrittenLogits.from_entry(e) for i, e in manifest.entries.items()
            if (workspace.candidate / e.file).is_file()}


class Finalizer:
    """The finalized folder of one run, extended a window at a time (resumable).

    Each finished window is added to ``manifest.json`` at once, so an interrupted run keeps what
    it finished; windows an earlier finalize put there (same suite, file present) stay listed, so
    finalizing windows 0-7 and then 8-31 gives one folder. Without ``keep_chunks`` a window's
    chunk folder is deleted once its new file is verified. ``window_range`` is the manifest's
    (default: the lowest to the highest listed window). Thread-safe: the pipeline finalizes in a
    worker thread while it captures.
    """

    def __init__(self, workspace: Workspace, suite: Suite, *, kind: str = "candidate",
                 runtime: dict[str, Any] | None = None, window_range: tuple[int, int] | None = None,
                 expected_vocab: int | None = None, force: bool = False, verify: Verify = "sample",
                 keep_chunks: bool = True, emit: EventSink = null_sink, cancel: Cancel | None = None,
                 mode: str = "logits") -> None:
        self.mode = mode
        self.workspace = workspace
        self.suite = suite
        self.kind = kind
        self.runtime = runtime
        self.window_range = window_range
        self.vocab = expected_vocab
        self.force = force
        self.verify: Verify = verify
        self.keep_chunks = keep_chunks
        self.emit = emit
        self.cancel = cancel
        self.written: dict[int, Any] = load_finalized(workspace, suite, emit, mode)
        self._lock = threading.Lock()
        self._changed = False

    def finalize(self, window: WindowSpec) -> Any:
        """Finalize one window (a file that already matches is kept) and list it in the manifest."""
        ws = self.workspace
        chunk_dir = ws.chunk_dir(window.chunk_dir_name)
        if self.mode == "score":
            return self._finalize_scores(window, chunk_dir)
        result = finalize_window(self.suite, window, chunk_dir, ws.candidate,
                                 expected_vocab=self.vocab, force=self.force, emit=self.emit,
                                 cancel=self.cancel, verify=self.verify)
        with self._lock:
            others = [w for i, w in self.written.items() if i != window.index]
            if any(w.vocab_size != result.vocab_size for w in others):
                raise BadInput(f"{ws.candidate_manifest}: earlier windows have another vocabulary than "
                               f"{result.vocab_size}; finalize into a fresh folder")
            self.vocab = result.vocab_size
            self._record(window, result)
        self._drop_chunks(chunk_dir)
        return result

    def _finalize_scores(self, window: WindowSpec, chunk_dir: Path) -> WrittenScores:
        ws = self.workspace
        result, vocab = finalize_scores_window(self.suite, window, chunk_dir, ws.candidate, force=self.force,
                                               emit=self.emit, cancel=self.cancel)
        with self._lock:
            if self.vocab is not None and vocab and vocab != self.vocab:
                raise BadInput(f"{ws.scores_manifest}: earlier windows were scored with a vocabulary of "
                               f"{self.vocab}, {window.label} with {vocab}; finalize into a fresh folder")
            self.vocab = vocab or self.vocab
            self._record(window, result)
        self._drop_chunks(chunk_dir)
        return result

    def _record(self, window: WindowSpec, result: Any) -> None:
        """List a window's verified file in the manifest (under ``self._lock``)."""
        if self.written.get(window.index) != result:
            self.written[window.index] = result
            self._write_manifest()
            self._changed = True

    def _drop_chunks(self, chunk_dir: Path) -> None:
        """One disk write per window: the chunks go once the verified file is in the manifest, not
        before (a kill in between left a recorded window with neither: resume failed); a rerun
        removes what such a kill left. ``keep_chunks`` keeps them."""
        if not self.keep_chunks and chunk_dir.exists():
            shutil.rmtree(chunk_dir, ignore_errors=True)

    def _write_manifest(self) -> Path:
        items = self.written
        window_range = self.window_range or (min(items), max(items) + 1)
        if self.mode == "score":
            return write_scores_manifest(self.workspace.candidate, self.suite, list(items.values()),
                                         vocab_size=int(self.vocab or 0), record_dtype=RECORD_DTYPE,
                                         kind=self.kind + "-scores", runtime=self.runtime,
                                         window_range=window_range)
        return write_logits_manifest(self.workspace.candidate, self.suite, list(items.values()),
                                     kind=self.kind, runtime=self.runtime, window_range=window_range)

    def finish(self) -> Path:
        """The manifest's path. Nothing added: it is written again only to record a ``runtime``
        (or when it is missing), so a rerun without one keeps the runtime already recorded."""
        with self._lock:
            if not self.written:
                raise BadInput(f"{self.workspace.candidate}: no finalized windows")
            ws = self.workspace
            path = ws.scores_manifest if self.mode == "score" else ws.candidate_manifest
            if path.exists() and (self._changed or self.runtime is None):
                return path
            return self._write_manifest()


def run_finalize(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                 suite: Suite, windows: Sequence[WindowSpec], kind: str = "candidate",
                 runtime: dict[str, Any] | None = None, window_range: tuple[int, int] | None = None,
                 expected_vocab: int | None = None, force: bool = False,
                 verify: Verify = "sample", keep_chunks: bool = True, mode: str = "logits") -> Path:
    """The finalize stage: ``workspace.run_dir``'s chunk folders of ``windows`` into
    ``workspace.candidate`` (logits files + manifest.json); returns the manifest's path.

    ``runtime`` (vLLM version, model path, arguments) is stored as the manifest's ``runtime``.
    """
    with failure_reported(emit, STAGE):
        if not windows:
            raise BadInput(f"{workspace.run_dir}: no windows to finalize")
        emit(StageStarted(STAGE, detail=f"{len(windows)} windows {workspace.run_dir} -> "
                                        f"{workspace.candidate}"))
        started = time.monotonic()
        finalizer = Finalizer(workspace, suite, kind=kind, runtime=runtime, window_range=window_range,
                              expected_vocab=expected_vocab, force=force, verify=verify,
                              keep_chunks=keep_chunks, emit=emit, cancel=cancel, mode=mode)
        wanted = {w.index for w in windows}
        kept = sum(1 for i in finalizer.written if i not in wanted)
        skipped = 0
        done: dict[int, WrittenLogits] = {}  # this run's windows, named when a later one fails
        try:
            for n, w in enumerate(windows):
                if cancel is not None:
                    cancel.check()
                name = score_file_name(w.index) if mode == "score" else logits_file_name(w.index)
                skipped += int(not force and (workspace.candidate / name).exists())
                done[w.index] = finalizer.finalize(w)
                emit(Progress(STAGE, "windows", n + 1, len(windows), "windows"))
            path = finalizer.finish()
        except StageFailed as exc:
            raise type(exc)(f"{exc}; {_published(done, workspace.candidate)}") from None
        nbytes = sum(r.size_bytes for r in done.values())
    elapsed = time.monotonic() - started
    emit(StageFinished(STAGE, summary=f"{len(windows)} windows -> {path}", figures={
        "windows": len(windows), "kept": kept, "bytes": nbytes, "seconds": round(elapsed, 3),
        "skipped": skipped}))
    return path
