"""Hidden mode (issue 22): the server saves each prefill chunk's final normalized hidden states
(after the model's final norm, before the LM head: the tensor vLLM passes to the model's
``compute_logits``), and finalize writes the published hidden-state layout
(:mod:`kldtui.formats.fidelity`): ``hidden_NNNN.safetensors`` (BF16 ``[L - 1, hidden]``, key
``hidden_states``) and ``manifest.json``. A context's states take ``hidden / vocab`` of its logits
(29 MB instead of 1.34 GB a context for Kimi K3); compare and score mode replay the logits with
the LM head (``logits = h · Wᵀ``, :mod:`kldtui.metrics.replay`).

What the server does (:class:`HiddenSink`): each chunk's rows (``ChunkRows.hidden``) are rounded
to BF16 where they are (the model's own dtype when it is BF16: nothing changes; a float32 server's
states are rounded to nearest even, and the chunk says ``source_dtype`` F32), copied to the host
and written as ``hidden.rows-SSSSSS-EEEEEE.safetensors`` (metadata ``semantic_point``,
``vocab_size``, ``hidden_size``, ``source_dtype``). For the requests the capture client marks
(:func:`kldtui.formats.chunks.request_tag` with ``live=True``: the replay check's sample) the
server also saves the same rows' live logits as logits chunks, from the same forward pass, so
the replay check measures the replay alone.

Finalize (:func:`finalize_hidden_window`) joins a window's hidden chunks into its file (never
overwritten; one that matches is kept) and, where the window has live logits, writes them in the
published live-logits layout too (``logits_NNNN.safetensors``, F32 as captured). What a finished
folder gets beyond its windows (the live manifest, the replay check, and for a suite's
``reference-hidden/`` the suite's top-level files) is :mod:`kldtui.capture_modes.hidden_suite`'s.

A float32 server's hidden states lose precision in BF16; so does a float32 head when it is
exported (``kldtui export-head``); the replay check says by how much (docs/PRODUCING.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui import settings
from kldtui.capture_modes.base import (
    CaptureMode,
    ChunkRows,
    Finalized,
    FinalizeJob,
    ServerIO,
    ServerSink,
)
from kldtui.errors import BadInput, StageFailed
from kldtui.events import EventSink, StageName, WindowState, null_sink
from kldtui.formats.chunks import ChunkInfo, ChunkKind
from kldtui.formats.suite import Suite, WindowSpec

if TYPE_CHECKING:
    import numpy as np

    from kldtui.events import Cancel
    from kldtui.formats.fidelity import TensorManifest

# Imports of NumPy and the modules built on it are inside the functions (see logits.py).

STAGE: StageName = "finalize"
HIDDEN_MANIFEST = "manifest.json"  # kldtui.formats.fidelity.TENSOR_MANIFEST (checked in tests)
SEMANTIC_POINT = "after_final_rmsnorm_before_lm_head"  # kldtui.formats.fidelity.SEMANTIC_HIDDEN
LIVE_SUBDIR = "live-logits"  # a finalized hidden folder's live sample, when it is not a suite's
DEFAULT_REPLAY_CHECK = 4  # contexts whose live logits are captured beside their hidden states
SOURCE_DTYPES = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float16": "F16",
                 "float32": "F32", "float16": "F16", "uint16": "BF16"}


class HiddenChunks(ChunkKind):
    """Hidden-state chunks: ``hidden.rows-SSSSSS-EEEEEE.safetensors``, one BF16 tensor
    ``hidden_states`` ``[rows, hidden]``. The vocabulary the capture records is the chunk's
    metadata ``vocab_size`` (the server's), not the tensor's width; every chunk of a window has
    one width and says where it was taken (``semantic_point``)."""

    prefix = "hidden"
    key = "hidden_states"
    dtype = "BF16"
    checks_values = True

    def chunk_vocab(self, path: Path, meta: Mapping[str, str], window: WindowSpec, cols: int,
                    first_cols: int | None) -> int:
        try:
            vocab = int(meta["vocab_size"])
        except (KeyError, ValueError):
            raise BadInput(f"{path}: {window.label}: hidden-state chunk without vocab_size metadata; it "
                           "was not written by the kldtui capture hook") from None
        if meta.get("semantic_point") != SEMANTIC_POINT:
            raise BadInput(f"{path}: {window.label}: semantic_point {meta.get('semantic_point')!r}, "
                           f"expected {SEMANTIC_POINT!r}; capture the {window.unit} again")
        if meta.get("hidden_size", str(cols)) != str(cols):
            raise BadInput(f"{path}: {window.label}: metadata hidden_size {meta.get('hidden_size')} but "
                           f"the tensor is {cols} wide; the chunk is corrupt, capture again")
        if first_cols is not None and cols != first_cols:
            raise BadInput(f"{path}: {window.label}: hidden states {cols} wide, other chunks are "
                           f"{first_cols}; capture the {window.unit} again")
        return vocab

    def check_values(self, chunk: ChunkInfo, window: WindowSpec, cancel: Cancel | None) -> None:
        check_hidden_values(chunk.path, window, chunk.row_start, cancel)


HIDDEN_CHUNKS = HiddenChunks()


def check_hidden_values(path: Path, window: WindowSpec, first_row: int, cancel: Cancel | None) -> None:
    """BadInput for the rows of a hidden-state chunk or file holding NaN or an infinity, in the
    words compare and score mode use (:mod:`kldtui.formats.finite`)."""
    from kldtui.formats import finite
    from kldtui.formats.safetensors_io import RowReader

    with RowReader(path, HIDDEN_CHUNKS.key, "BF16") as reader:
        block = max(1, (16 * 1024 * 1024) // max(1, 2 * reader.cols))
        for start in range(0, reader.rows, block):
            if cancel is not None:
                cancel.check()
            bad = finite.nonfinite_state_rows(reader.read(start, start + block))
            if bad.size:
                raise BadInput(finite.states_problem(path, window.label, finite.CAPTURED,
                                                     bad + start + first_row))


# -- the server --------------------------------------------------------------------------------------
def source_dtype(tensor: Any) -> str:
    """The dtype a server's hidden states have, as a safetensors dtype name (``BF16``, ``F32``)."""
    name = str(getattr(tensor, "dtype", "unknown"))
    return SOURCE_DTYPES.get(name, name)


@dataclass(frozen=True)
class _Piece:
    hidden: Any  # staged BF16 rows
    logits: Any  # staged logits rows (the live sample) or None
    source_dtype: str
    width: int


class HiddenSink(ServerSink):
    """Each chunk's hidden states go to the host in BF16 (a non-blocking copy started on the
    engine's thread) and are written beside the engine as a hidden-state chunk; a request the
    client marked for the replay check also gets its live logits written as logits chunks."""

    def take(self, request_id: str, row_start: int, rows: ChunkRows,
             prompt: Sequence[int] | None = None) -> Any:
        from kldtui.formats.chunks import wants_live_logits
        from kldtui.metrics.replay import rows_to_bf16

        if rows.hidden is None:
            self.io.fail(request_id, f"kldtui capture: hidden mode, but the server passed no hidden states "
                         f"for rows from {row_start} of request {request_id!r} (this hook or server "
                         "cannot capture them); use logits mode")
            return None
        try:
            hidden = rows_to_bf16(rows.hidden)
            width = int(hidden.shape[-1])
            staged = self.io.stage(hidden, width)
            logits = (self.io.stage(rows.logits, int(rows.vocab_size))
                      if wants_live_logits(request_id) else None)
        except Exception as exc:  # noqa: BLE001 - never crash the engine over a capture file
            self.io.fail(request_id, f"kldtui capture: copying hidden states from row {row_start} of "
                         f"request {request_id!r} to the host failed: {type(exc).__name__}: {exc}")
            return None
        return _Piece(staged, logits, source_dtype(rows.hidden), width)

    def put(self, request_id: str, row_start: int, pieces: Sequence[Any], vocab_size: int) -> bool:
        from kldtui.formats.chunks import write_chunk, write_kind_chunk
        from kldtui.metrics.replay import bf16_host_bits

        folder = self.io.folder
        first: _Piece = pieces[0]
        live = [p.logits for p in pieces if p.logits is not None]
        if live:
            # queued before the hidden chunk: the client collects a request once all its hidden rows
            # are there, and the writer runs jobs in order, so its live logits are there by then
            def write_live(rows: Any) -> None:
                write_chunk(folder, request_id, row_start, rows, vocab_size)

            if not self.io.submit_rows(request_id, row_start, live, write_live):
                return False
        meta = {"semantic_point": SEMANTIC_POINT, "vocab_size": str(vocab_size),
                "hidden_size": str(first.width), "source_dtype": first.source_dtype}

        def write(rows: Any) -> None:
            write_kind_chunk(folder, request_id, row_start, HIDDEN_CHUNKS, bf16_host_bits(rows), meta)

        return self.io.submit_rows(request_id, row_start, [p.hidden for p in pieces], write)


# -- finalize ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HiddenEntry:
    """A finalized context: its hidden-state file (the manifest's record) and, for the replay
    check's sample, its live-logits file."""

    window_index: int
    domain: str
    file: str
    size_bytes: int
    sha256: str
    record: dict[str, Any] = field(compare=False)  # the tensor manifest's record
    live: dict[str, Any] | None = field(default=None, compare=False)  # the live manifest's record
    vocab_size: int | None = None


class HiddenMode(CaptureMode):
    name = "hidden"
    label = "hidden mode"
    badge = "hidden states"
    summary = ("the server saves the final normalized hidden states (BF16, before the LM head); finalize "
               "writes the published hidden-state layout, replayed with the LM head (docs/REPLAY.md)")
    record_value = "hidden"
    manifest_name = HIDDEN_MANIFEST
    saves_live_sample = True
    replays_own_head = True
    saves_hidden_states = True

    @property
    def chunks(self) -> ChunkKind:
        return HIDDEN_CHUNKS

    def server_env(self, suite_dir: Path | None, reference_dir: Path | None) -> dict[str, str]:
        return dict(settings.CAPTURE_MODE.entry(self.name))

    def server_sink(self, io: ServerIO, env: Mapping[str, str] | None) -> ServerSink:
        return HiddenSink(io)

    def file_name(self, window_index: int) -> str:
        from kldtui.formats.fidelity import hidden_file_name

        return hidden_file_name(window_index)

    def manifest_path(self, folder: Path) -> Path:
        return Path(folder) / self.manifest_name

    def holds(self, folder: Path) -> bool:
        """A hidden-state folder: its ``manifest.json`` lists contexts and a hidden width."""
        from kldtui.formats.fidelity import holds_hidden_states

        return holds_hidden_states(folder)

    def finalize_window(self, job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> Finalized:
        entry = finalize_hidden_window(job, window, chunk_dir)
        return Finalized(entry, entry.vocab_size or job.vocab)

    def write_manifest(self, folder: Path, suite: Suite, entries: Sequence[Any], *, vocab_size: int,
                       kind: str, runtime: Any, window_range: tuple[int, int]) -> Path:
        from kldtui.capture_modes.hidden_suite import write_hidden_manifest

        return write_hidden_manifest(folder, suite, list(entries), kind=kind, runtime=runtime)

    def read_manifest(self, path: Path) -> TensorManifest:
        from kldtui.formats.fidelity import load_tensor_manifest

        manifest = load_tensor_manifest(path)
        if not manifest.holds_hidden:
            raise BadInput(f"{manifest.path}: lists logits, not hidden states")
        return manifest

    def listed(self, manifest: Any, suite: Suite | None) -> dict[int, Any]:
        # a context's domain is its suite window's (the allocation stratum), as finalize gives it: the
        # records' source_class is the finer semantic class, another grouping
        domains = {w.index: w.domain for w in suite.windows} if suite is not None else {}
        out: dict[int, HiddenEntry] = {}
        for index, record in manifest.entries.items():
            raw = dict(record.raw)
            out[index] = HiddenEntry(index, domains.get(index, ""), record.file,
                                     record.size_bytes, record.sha256, raw, raw.get("kldtui_live"),
                                     _int_or_none(raw.get("kldtui_vocab_size")))
        return out

    def finish(self, folder: Path, suite: Suite, entries: Sequence[Any], *, runtime: Any,
               emit: EventSink = null_sink, cancel: Cancel | None = None) -> None:
        from kldtui.capture_modes.hidden_suite import finish_hidden_folder

        finish_hidden_folder(folder, suite, list(entries), runtime=runtime, emit=emit, cancel=cancel)

    def live_sample(self, suite: Suite, windows: Sequence[WindowSpec], count: int | None) -> frozenset[int]:
        """The replay check's sample among ``windows``: ``count`` contexts (default
        :data:`DEFAULT_REPLAY_CHECK`) evenly spread over the suite's sentinel contexts when it has
        them among ``windows``, else over ``windows``; 0 captures no live logits."""
        from kldtui.formats.fidelity import context_info

        n = DEFAULT_REPLAY_CHECK if count is None else count
        if n <= 0 or not windows:
            return frozenset()
        sentinels = [w for w in windows if (info := context_info(w)) is not None and info.sentinel]
        pool = sentinels or list(windows)
        if n >= len(pool):
            return frozenset(w.index for w in pool)
        picks = {round(i * (len(pool) - 1) / (n - 1)) for i in range(n)} if n > 1 else {0}
        return frozenset(pool[i].index for i in sorted(picks))

    def disk_bytes_per_row(self, vocab_size: int, hidden_width: int | None = None) -> int | None:
        # BF16: 2 bytes x the served model's hidden width (a few percent of a logits row: 14 KiB a
        # position for Kimi K3), known from a hidden-state reference or its LM head, else once it
        # serves. The replay check's live logits (F32, vocab_size wide) come on top: the preflight
        # counts them for the sample (live_sample)
        return 2 * hidden_width if hidden_width else None


HIDDEN = HiddenMode()


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


# -- finalize: one window --------------------------------------------------------------------------
class _ChunkRows:
    """A window's chunk files as one ``[rows, cols]`` array for a streamed writer: row blocks
    are read from the chunk files when sliced (memory: one block)."""

    def __init__(self, chunks: Sequence[ChunkInfo], key: str, dtype: str, cols: int) -> None:
        import numpy as np

        from kldtui.formats.safetensors_io import DTYPES

        self.chunks = list(chunks)
        self.key = key
        self.file_dtype = dtype
        self.dtype = np.dtype(DTYPES[dtype])
        rows = sum(c.rows for c in self.chunks)
        self.shape = (rows, cols)
        self.ndim = 2

    def __getitem__(self, item: slice) -> np.ndarray:
        import numpy as np

        from kldtui.formats.safetensors_io import RowReader

        start, stop, _ = item.indices(self.shape[0])
        parts = []
        for c in self.chunks:
            lo, hi = max(start, c.row_start), min(stop, c.row_end)
            if lo < hi:
                with RowReader(c.path, self.key, self.file_dtype) as reader:
                    parts.append(reader.read(lo - c.row_start, hi - c.row_start))
        if not parts:
            return np.empty((0, self.shape[1]), dtype=self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _existing_hidden(final: Path, window: WindowSpec, known: Mapping[int, Any]) -> tuple[int, str, int]:
    """An already-finalized hidden file that is ``window``'s: (size, sha256, width); else BadInput."""
    from kldtui.formats.fidelity import HIDDEN_KEY, SEMANTIC_HIDDEN
    from kldtui.formats.safetensors_io import read_header
    from kldtui.formats.suite import sha256_file

    header = read_header(final)
    problems = []
    info = header.tensors.get(HIDDEN_KEY)
    if info is None or set(header.tensors) != {HIDDEN_KEY}:
        problems.append(f"tensors {sorted(header.tensors)}")
    elif info.dtype != "BF16" or len(info.shape) != 2 or info.shape[0] != window.scored_positions:
        problems.append(f"tensor {info.dtype} {list(info.shape)}, expected BF16 [{window.scored_positions}, "
                        "hidden]")
    meta = header.metadata
    if meta.get("context_index") != str(window.index):
        problems.append(f"context_index {meta.get('context_index')}")
    if meta.get("token_ids_json_sha256") != window.token_ids_json_sha256:
        problems.append("token hash differs from the suite's")
    if meta.get("semantic_point") != SEMANTIC_HIDDEN:
        problems.append(f"semantic_point {meta.get('semantic_point')!r}")
    if info is not None and header.file_size != info.end:
        problems.append(f"{header.file_size - info.end} trailing bytes")
    if problems or info is None:
        raise BadInput(f"{final}: already finalized but does not match {window.label} "
                       f"({'; '.join(problems)}); pass --force to write it again")
    listed = known.get(window.index)
    if isinstance(listed, HiddenEntry) and listed.size_bytes == header.file_size:
        digest = listed.sha256
    else:
        digest = sha256_file(final)
    return header.file_size, digest, int(info.shape[1])


def finalize_hidden_window(job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> HiddenEntry:
    """Join ``chunk_dir``'s hidden-state chunks into ``job.output_dir``'s ``hidden_NNNN.safetensors``
    (and its live logits, when the window has them, into the live folder); read back and checked
    before it counts. A file that already matches is kept unless ``job.force``."""
    import numpy as np

    from kldtui.formats.chunks import check_chunk_dir
    from kldtui.formats.fidelity import tensor_record, write_context_tensor
    from kldtui.formats.safetensors_io import read_header

    output_dir = Path(job.output_dir)
    emit, cancel = job.emit, job.cancel
    final = output_dir / HIDDEN.file_name(window.index)
    earlier = job.others.get(window.index)
    if final.exists() and not job.force:
        size, digest, width = _existing_hidden(final, window, job.others)
        record = dict(earlier.record) if isinstance(earlier, HiddenEntry) else _record_for(
            window, final, size, digest, width)
        emit(WindowState.of(STAGE, window, "finalized", {"skipped": True, "bytes": size}))
        return HiddenEntry(window.index, window.domain, final.name, size, digest, record,
                           earlier.live if isinstance(earlier, HiddenEntry) else None,
                           earlier.vocab_size if isinstance(earlier, HiddenEntry) else None)
    chunks = check_chunk_dir(chunk_dir, window, kind=HIDDEN_CHUNKS)
    emit(WindowState.of(STAGE, window, "finalizing"))
    started = time.monotonic()
    first = read_header(chunks.chunks[0].path)
    width = int(first.tensor(HIDDEN_CHUNKS.key).shape[1])
    widths = {int(read_header(c.path).tensor(HIDDEN_CHUNKS.key).shape[1]) for c in chunks.chunks}
    if widths != {width}:
        raise BadInput(f"{chunk_dir}: {window.label}: hidden chunks of widths {sorted(widths)}; capture the "
                       "window again")
    others = {e.record.get("shape", [0, 0])[1] for i, e in job.others.items()
              if isinstance(e, HiddenEntry) and i != window.index}
    if others and others != {width}:
        raise BadInput(f"{HIDDEN.manifest_path(output_dir)}: earlier contexts are {sorted(others)} wide, "
                       f"{window.label} is {width}; finalize into a fresh folder")
    source = first.metadata.get("source_dtype", "BF16")
    for c in chunks.chunks:
        if cancel is not None:
            cancel.check()
        check_hidden_values(c.path, window, c.row_start, cancel)
    live = _finalize_live(job, window, chunk_dir, chunks.vocab_size)  # first: the hidden file marks it done
    rows = _ChunkRows(chunks.chunks, HIDDEN_CHUNKS.key, "BF16", width)
    if job.force:
        final.unlink(missing_ok=True)
    written = write_context_tensor(output_dir, "hidden", window, rows)  # type: ignore[arg-type]
    back = _ChunkRows([ChunkInfo(final, 0, written.shape[0], width)], HIDDEN_CHUNKS.key, "BF16", width)
    for c in chunks.chunks:  # first and last row of every chunk, read back from the file
        for r in {c.row_start, c.row_end - 1}:
            if not np.array_equal(back[r:r + 1], rows[r:r + 1]):
                final.unlink(missing_ok=True)
                raise StageFailed(f"{final}: {window.label}: row {r} read back differs from the chunks; the "
                                  "disk or file system is faulty")
    if job.remember_hash is not None:
        job.remember_hash(final, written.sha256)
    record = tensor_record(window, written, request_id=first.metadata.get("request_id"),
                           raw_chunks_retained=job.keep_chunks,
                           chunk_dir=str(chunk_dir) if job.keep_chunks else None,
                           chunks=chunks.names if job.keep_chunks else ())
    record["kldtui_source_dtype"] = source
    record["kldtui_vocab_size"] = chunks.vocab_size
    if live is not None:
        record["kldtui_live"] = live
    elapsed = time.monotonic() - started
    emit(WindowState.of(STAGE, window, "finalized", {
        "bytes": written.size_bytes, "seconds": round(elapsed, 3), "live_logits": live is not None}))
    return HiddenEntry(window.index, window.domain, final.name, written.size_bytes, written.sha256, record,
                       live, chunks.vocab_size)


def _finalize_live(job: FinalizeJob, window: WindowSpec, chunk_dir: Path,
                   vocab: int) -> dict[str, Any] | None:
    """The window's live logits (the replay check's sample), when the server saved them beside its
    hidden states, as a published live-logits file (F32, as captured); its manifest record."""
    from kldtui.capture_modes.hidden_suite import live_dir
    from kldtui.formats.chunks import LOGITS_CHUNKS, check_chunk_dir
    from kldtui.formats.fidelity import live_logits_file_name, tensor_record, write_context_tensor

    if not any(LOGITS_CHUNKS.pattern.match(p.name) for p in Path(chunk_dir).iterdir()):
        return None
    logits = check_chunk_dir(chunk_dir, window, kind=LOGITS_CHUNKS, expected_vocab=vocab)
    for c in logits.chunks:
        LOGITS_CHUNKS.check_values(c, window, job.cancel)
    target = live_dir(job.output_dir, job.suite)
    # one left by an interrupted finalize of this window (its hidden file is not there, or --force)
    (target / live_logits_file_name(window.index)).unlink(missing_ok=True)
    rows = _ChunkRows(logits.chunks, LOGITS_CHUNKS.key, "F32", logits.vocab_size)
    written = write_context_tensor(target, "logits", window, rows, dtype="F32")  # type: ignore[arg-type]
    return tensor_record(window, written)


def _record_for(window: WindowSpec, final: Path, size: int, digest: str, width: int) -> dict[str, Any]:
    from kldtui.formats.fidelity import HIDDEN_KEY, WrittenTensor, tensor_record

    written = WrittenTensor(final, HIDDEN_KEY, "BF16", (window.scored_positions, width), size, digest, "")
    return tensor_record(window, written)


__all__ = ["DEFAULT_REPLAY_CHECK", "HIDDEN", "HIDDEN_CHUNKS", "HiddenChunks", "HiddenEntry", "HiddenMode",
           "HiddenSink", "check_hidden_values", "finalize_hidden_window", "source_dtype"]
