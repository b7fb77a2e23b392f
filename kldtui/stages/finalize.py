"""Finalize: merge each window's capture chunks into ``logits_NNN.safetensors`` + ``manifest.json``.

Chunks are checked by metadata first (:func:`kldtui.stages.capture.check_chunk_dir`), then streamed
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
    null_sink,
)
from kldtui.formats.logits_writer import LogitsFileWriter, WrittenLogits, write_logits_manifest
from kldtui.formats.safetensors_io import RowReader, read_header
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
from kldtui.stages.capture import ChunkSet, check_chunk_dir

STAGE: StageName = "finalize"
BLOCK_BYTES = 16 * 1024 * 1024
Verify = Literal["sample", "full", "none"]


def _known_hashes(output_dir: Path) -> dict[str, tuple[int, str]]:
    """file name -> (size, sha256) from an existing manifest, to skip re-hashing finished files."""
    path = output_dir / LOGITS_MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {str(e["file"]): (int(e["size_bytes"]), str(e["sha256"])) for e in doc["windows"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _check_finite(block: np.ndarray, path: Path, window: WindowSpec, first_row: int) -> None:
    """Raise BadInput at the first NaN/inf. The sum is finite for finite logits (unless they
    are near float32's limit, then the exact check runs) and costs half of ``isfinite``."""
    if np.isfinite(np.add.reduce(block, axis=None)):
        return
    bad = np.argwhere(~np.isfinite(block))
    if len(bad):
        raise BadInput(f"{path}: {window.label}: non-finite logits (nan or inf) at row "
                       f"{int(bad[0][0]) + first_row}; capture the window again")


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
    from kldtui.stages.verify import VerifiedCache

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
                    _check_finite(block, c.path, window, start + c.row_start)
                    writer.write_rows(block)
                    if throttle.ready():
                        done = writer.written_rows * row_bytes
                        elapsed = time.monotonic() - started
                        rate = done / elapsed if elapsed > 0 else None
                        emit(Progress(STAGE, task, done, total, "bytes", rate=rate,
                                      eta_s=(total - done) / rate if rate else None))
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


def _published(written: dict[int, WrittenLogits], output_dir: Path) -> str:
    """Which windows are finished despite a failure (kept: a rerun skips them)."""
    if not written:
        return f"no window was published in {output_dir}"
    shown = ", ".join(str(i) for i in sorted(written))
    return (f"published before the failure: window(s) {shown} in {output_dir} (kept; a rerun finishes "
            "the rest)")


def finalize_run(suite: Suite, windows: Sequence[WindowSpec], run_dir: Path, output_dir: Path, *,
                 runtime: dict[str, Any] | None, force: bool = False, emit: EventSink = null_sink,
                 cancel: Cancel | None = None, kind: str = "candidate",
                 expected_vocab: int | None = None, verify: Verify = "sample") -> Path:
    """Finalize ``run_dir/window-NNN-DOMAIN-chunks`` for ``windows``; write and return manifest.json.

    Windows an earlier finalize put in ``output_dir`` (listed in its manifest, file present, same
    suite) are kept in the new manifest, so finalizing windows 0-7 and then 8-31 gives one folder.
    ``runtime`` (vLLM version, model path, arguments) is stored as the manifest's ``runtime``.
    """
    if not windows:
        raise BadInput(f"{run_dir}: no windows to finalize")
    run_dir = Path(run_dir)
    output_dir = Path(output_dir)
    emit(StageStarted(STAGE, detail=f"{len(windows)} windows {run_dir} -> {output_dir}"))
    started = time.monotonic()
    written: dict[int, WrittenLogits] = {}
    kept: dict[int, WrittenLogits] = {}
    manifest_path = output_dir / LOGITS_MANIFEST
    if manifest_path.exists():
        try:
            previous = load_logits_manifest(manifest_path)
        except BadInput as exc:
            emit(Notice(STAGE, f"{exc}; it is rewritten", level="warning"))
        else:
            if previous.suite_token_hash_sha256 == suite.suite_token_hash_sha256:
                wanted = {w.index for w in windows}
                for e in previous.entries.values():
                    if e.window_index not in wanted and (output_dir / e.file).is_file():
                        kept[e.window_index] = WrittenLogits(e.window_index, e.domain, e.file, e.shape[0],
                                                             e.shape[1], e.size_bytes, e.sha256,
                                                             e.token_ids_json_sha256)
    vocab = expected_vocab
    skipped = 0
    for n, w in enumerate(windows):
        if cancel is not None:
            cancel.check()
        skipped += int(not force and (output_dir / logits_file_name(w.index)).exists())
        try:
            result = finalize_window(suite, w, run_dir / w.chunk_dir_name, output_dir, expected_vocab=vocab,
                                     force=force, emit=emit, cancel=cancel, verify=verify)
        except StageFailed as exc:
            raise type(exc)(f"{exc}; {_published(written, output_dir)}") from None
        vocab = result.vocab_size
        written[w.index] = result
        emit(Progress(STAGE, "windows", n + 1, len(windows), "windows"))
    if kept and any(k.vocab_size != vocab for k in kept.values()):
        raise BadInput(f"{manifest_path}: earlier windows have another vocabulary than {vocab}; "
                       "finalize into a fresh folder")
    items = {**kept, **written}
    window_range = (min(items), max(items) + 1)
    try:
        path = write_logits_manifest(output_dir, suite, list(items.values()), kind=kind, runtime=runtime,
                                     window_range=window_range)
    except StageFailed as exc:
        raise type(exc)(f"{exc}; {_published(written, output_dir)}") from None
    elapsed = time.monotonic() - started
    nbytes = sum(w.size_bytes for w in written.values())
    emit(StageFinished(STAGE, summary=f"{len(written)} windows -> {path}", figures={
        "windows": len(written), "kept": len(kept), "bytes": nbytes, "seconds": round(elapsed, 3),
        "skipped": skipped}))
    return path
