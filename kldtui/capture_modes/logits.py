"""Logits mode (the default): the server saves each prefill chunk's prompt logits, finalize joins
them into one F32 file per window (``logits_NNN.safetensors`` + ``manifest.json``, the published
suite's layout), and compare reads them next to the reference's.

Finalize checks the chunks by metadata first (:func:`kldtui.formats.chunks.check_chunk_dir`), then
streams them a block of rows at a time into :class:`kldtui.formats.logits_writer.LogitsFileWriter`,
which hashes while writing and publishes atomically: peak memory is one block (``BLOCK_BYTES``),
whatever the window size. Values are checked to be finite on the way (the block is in memory
anyway). A finalized file is never overwritten without ``force``; one that already matches the
window (header: shape, dtype, window index, token hash) is skipped, so an interrupted finalize
resumes. After publishing, the file is re-read (``verify``): ``"sample"`` (default) re-parses the
header, checks the size and compares the first and last row of every chunk with the chunk, which
costs almost nothing; ``"full"`` re-hashes the whole file from disk, which halves throughput (see
``benchmarks/finalize_bench.py``); ``"none"`` skips it. A failed write (full disk) leaves no file
under the final name and no temporary file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.capture_modes.base import (
    CaptureMode,
    ChunkRows,
    Finalized,
    FinalizeJob,
    ServerIO,
    ServerSink,
    Verify,
)
from kldtui.errors import BadInput, StageFailed
from kldtui.events import Progress, StageName, Throttle, WindowState
from kldtui.formats.suite import (
    LOGITS_FORMAT,
    LOGITS_MANIFEST,
    MANIFEST_LIMIT,
    TENSOR_KEY,
    LogitsManifest,
    Suite,
    WindowSpec,
    load_logits_manifest,
    logits_file_name,
    sha256_file,
)

if TYPE_CHECKING:
    import numpy as np

    from kldtui.formats.chunks import ChunkKind, ChunkSet
    from kldtui.formats.logits_writer import WrittenLogits

# Imports of NumPy and the modules built on it are inside the functions: the registry is imported
# by the CLI's parser and the profile, which stay light (kldtui view never loads NumPy).

STAGE: StageName = "finalize"
BLOCK_BYTES = 16 * 1024 * 1024


class LogitsSink(ServerSink):
    """Each chunk's logits go to the host (a non-blocking copy started on the engine's thread) and
    are written as a logits chunk beside the engine (:func:`kldtui.formats.chunks.write_chunk`)."""

    def take(self, request_id: str, row_start: int, rows: ChunkRows,
             prompt: Sequence[int] | None = None) -> Any:
        try:
            return self.io.stage(rows.logits, int(rows.vocab_size))
        except Exception as exc:  # noqa: BLE001 - never crash the engine over a capture file
            self.io.fail(request_id, f"kldtui capture: copying rows from {row_start} of request "
                         f"{request_id!r} to the host failed: {type(exc).__name__}: {exc}")
            return None

    def put(self, request_id: str, row_start: int, pieces: Sequence[Any], vocab_size: int) -> bool:
        from kldtui.formats.chunks import write_chunk

        folder = self.io.folder

        def write(rows: Any) -> None:
            write_chunk(folder, request_id, row_start, rows, vocab_size)

        return self.io.submit_rows(request_id, row_start, pieces, write)


class LogitsMode(CaptureMode):
    name = "logits"
    label = "logits mode"
    badge = None
    summary = "the server saves the candidate's prompt logits; finalize and compare read them"
    record_value = None
    manifest_name = LOGITS_MANIFEST

    @property
    def chunks(self) -> ChunkKind:
        from kldtui.formats.chunks import LOGITS_CHUNKS

        return LOGITS_CHUNKS

    def smoke_logprobs(self, chunk: Path, next_tokens: np.ndarray) -> np.ndarray:
        """log_softmax of each saved row (float64) at its next token."""
        import numpy as np

        from kldtui.formats.safetensors_io import RowReader

        with RowReader(chunk) as reader:
            rows = reader.read(0, reader.rows).astype(np.float64)
        top = rows.max(axis=1, keepdims=True)
        lse = np.log(np.exp(rows - top).sum(axis=1)) + top[:, 0]
        picked: np.ndarray = rows[np.arange(rows.shape[0]), next_tokens] - lse
        return picked

    def server_env(self, suite_dir: Path | None, reference_dir: Path | None) -> dict[str, str]:
        return {}  # the server's default

    def server_sink(self, io: ServerIO, env: Mapping[str, str] | None) -> ServerSink:
        return LogitsSink(io)

    def holds(self, folder: Path) -> bool:
        """A logits folder: its ``manifest.json`` is there and is not a hidden-state folder's (of
        the same name: it names a hidden width instead of a vocabulary)."""
        from kldtui.formats.fidelity import holds_hidden_states

        return self.manifest_path(folder).is_file() and not holds_hidden_states(folder)

    def file_name(self, window_index: int) -> str:
        return logits_file_name(window_index)

    def finalize_window(self, job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> Finalized:
        result = finalize_logits_window(job, window, chunk_dir)
        if any(w.vocab_size != result.vocab_size for i, w in job.others.items() if i != window.index):
            raise BadInput(f"{self.manifest_path(job.output_dir)}: earlier windows have another "
                           f"vocabulary than {result.vocab_size}; finalize into a fresh folder")
        return Finalized(result, result.vocab_size)

    def write_manifest(self, folder: Path, suite: Suite, entries: Sequence[Any], *, vocab_size: int,
                       kind: str, runtime: Any, window_range: tuple[int, int]) -> Path:
        from kldtui.formats.logits_writer import write_logits_manifest

        return write_logits_manifest(folder, suite, list(entries), kind=kind, runtime=runtime,
                                     window_range=window_range)

    def read_manifest(self, path: Path) -> LogitsManifest:
        return load_logits_manifest(path)

    def listed(self, manifest: Any, suite: Suite | None) -> dict[int, Any]:
        from kldtui.formats.logits_writer import WrittenLogits

        return {i: WrittenLogits.from_entry(e) for i, e in manifest.entries.items()}

    def disk_bytes_per_row(self, vocab_size: int, hidden_width: int | None = None) -> int | None:
        return 4 * vocab_size  # F32


LOGITS = LogitsMode()


# -- finalize ----------------------------------------------------------------------------------------
def _known_hashes(output_dir: Path) -> dict[str, tuple[int, str]]:
    """file name -> (size, sha256) from an existing manifest, to skip re-hashing finished files."""
    from kldtui.formats.safe_io import read_text

    path = output_dir / LOGITS_MANIFEST
    try:
        doc = json.loads(read_text(path, limit=MANIFEST_LIMIT))
        return {str(e["file"]): (int(e["size_bytes"]), str(e["sha256"])) for e in doc["windows"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _existing(final: Path, suite: Suite, window: WindowSpec, expected_vocab: int | None,
              output_dir: Path) -> WrittenLogits:
    """The already-finalized file as a WrittenLogits if it matches ``window``; else BadInput."""
    from kldtui.formats.logits_writer import WrittenLogits
    from kldtui.formats.safetensors_io import read_header

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
    import numpy as np

    from kldtui.formats.safetensors_io import RowReader, read_header

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
    first = window.scored_row_start  # the file's row j is position first + j
    with RowReader(final) as out:
        for c in chunks.chunks:
            with RowReader(c.path) as src:
                for r in {max(0, first - c.row_start), c.rows - 1}:
                    pos = c.row_start + r
                    if pos < first or r >= c.rows:
                        continue
                    if not np.array_equal(out.read(pos - first, pos - first + 1),
                                          src.read(r, r + 1), equal_nan=True):
                        raise StageFailed(f"{final}: {window.label}: row {pos} read back "
                                          f"differs from {c.path.name}; the disk or file system is "
                                          "faulty")


def finalize_logits_window(job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> WrittenLogits:
    """Merge ``chunk_dir``'s chunks into ``job.output_dir/logits_NNN.safetensors`` (see the module
    doc); ``job.vocab`` is the vocabulary the chunks must have (None: theirs)."""
    import numpy as np

    from kldtui.formats.chunks import check_chunk_dir, check_logit_rows
    from kldtui.formats.logits_writer import LogitsFileWriter
    from kldtui.formats.safetensors_io import RowReader

    suite, output_dir, expected_vocab = job.suite, Path(job.output_dir), job.vocab
    force, emit, cancel, verify = job.force, job.emit, job.cancel, job.verify
    final = output_dir / logits_file_name(window.index)
    if final.exists() and not force:
        # checked against the suite, not the chunks: they may have been deleted since
        done = _existing(final, suite, window, expected_vocab, output_dir)
        emit(WindowState.of(STAGE, window, "finalized", {"skipped": True, "bytes": done.size_bytes}))
        return done
    chunks = check_chunk_dir(chunk_dir, window, expected_vocab=expected_vocab)
    vocab = chunks.vocab_size
    emit(WindowState.of(STAGE, window, "finalizing"))
    started = time.monotonic()
    writer = LogitsFileWriter(output_dir, window, vocab, suite.context_length, force=force,
                              hash_thread=True)
    row_bytes = 4 * vocab
    block_rows = max(1, BLOCK_BYTES // row_bytes)
    first = window.scored_row_start  # positions before it are captured, not kept (docs/FORMATS.md)
    total = window.scored_positions * row_bytes
    throttle = Throttle(0.25)
    task = window.name
    try:
        # two buffers: the writer hashes one block in a helper thread while the next is read
        bufs = [np.empty((block_rows, vocab), dtype=np.float32) for _ in range(2)]
        n = 0
        for c in chunks.chunks:
            with RowReader(c.path) as reader:
                for start in range(max(0, first - c.row_start), reader.rows, block_rows):
                    if cancel is not None:
                        cancel.check()
                    block = reader.read(start, start + block_rows, out=bufs[n % 2])
                    n += 1
                    check_logit_rows(block, c.path, window, start + c.row_start)
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
    if job.remember_hash is not None:
        job.remember_hash(final, written.sha256)
    elapsed = time.monotonic() - started
    emit(Progress(STAGE, task, total, total, "bytes",
                  rate=total / elapsed if elapsed > 0 else None, eta_s=0.0))
    emit(WindowState.of(STAGE, window, "finalized", {
        "bytes": written.size_bytes, "seconds": round(elapsed, 3),
        "gb_per_s": round(written.size_bytes / elapsed / 1e9, 3) if elapsed > 0 else None}))
    return written
