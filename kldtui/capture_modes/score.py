"""Score mode (issue 16, docs/SCORE_MODE.md): the server scores each prefill chunk against the
reference where the candidate's logits are, and saves only per-row records (76 bytes a position);
finalize joins a window's records into ``scores_NNN.safetensors`` + ``scores-manifest.json``, and
compare reads the figures instead of computing them.

The server is told where the reference is by its environment (``KLDTUI_SCORE_SUITE``,
``KLDTUI_SCORE_REFERENCE``, optionally ``KLDTUI_SCORE_ROWS``: :mod:`kldtui.settings`; the embedded
server also takes ``--score-suite`` / ``--score-reference``); the scoring runs in
:class:`kldtui.scoring.ScoreSession`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui import settings
from kldtui.capture_modes.base import (
    CaptureMode,
    ChunkRows,
    Finalized,
    FinalizeJob,
    ServerFigures,
    ServerIO,
    ServerSink,
)
from kldtui.errors import BadInput, StageFailed
from kldtui.events import StageName, WindowState
from kldtui.formats.suite import OTHER_SUITE, Suite, WindowSpec, sha256_file
from kldtui.text import kldtui_command, shell_arg

if TYPE_CHECKING:
    import numpy as np

    from kldtui.formats.chunks import ChunkKind
    from kldtui.formats.scores import ScoresManifest, WrittenScores
    from kldtui.formats.suite import LogitsManifest
    from kldtui.metrics.kernels import RowStats
    from kldtui.scoring import ScoreSession

# Imports of NumPy and the modules built on it are inside the functions (see logits.py).

# formats.scores.SCORES_MANIFEST, spelt here so the registry stays light (a test ties them)
SCORES_MANIFEST = "scores-manifest.json"
STAGE: StageName = "finalize"
_DONE = True  # a piece of a chunk scored (or queued for scoring) at take time
# what a chunk scored against a hidden-state reference says of the replay (kldtui.scoring), kept by
# finalize in the window's score file: compare checks the head against the reference's
REPLAY_FIELDS = ("reference_kind", "lm_head_file_sha256", "replay_output")


class ScoreSink(ServerSink):
    """Each chunk is scored against the reference (:class:`kldtui.scoring.ScoreSession`, made at
    the first chunk from the server's environment) and only its records are written.

    Logits on an accelerator are copied on their device (vLLM reuses their buffer after the call)
    and scored on the writer thread, on their device; CPU logits (which vLLM does not modify
    afterwards, as logits mode relies on too) are handed whole to the writer. Either way the
    engine's thread only queues them: the reference rows are read and the precise rows computed
    beside it."""

    def __init__(self, io: ServerIO, env: Mapping[str, str] | None) -> None:
        super().__init__(io)
        self.env = env  # where the settings are read (None: this process's environment)
        self._session: ScoreSession | None = None

    def session(self) -> ScoreSession:
        """The session (made at first use); ScoreFailed when the environment names no suite."""
        from kldtui.formats.scores import write_score_chunk
        from kldtui.metrics.score import score_rows
        from kldtui.scoring import ScoreFailed, ScoreSession

        if self._session is not None:
            return self._session
        try:
            suite = settings.SCORE_SUITE.get(self.env)
            reference = settings.SCORE_REFERENCE.get(self.env)
            block_rows = settings.SCORE_ROWS.get(self.env)
            lm_head = settings.SCORE_LM_HEAD.get(self.env)
            placement = settings.SCORE_HEAD.get(self.env)
            torch_on_cpu = settings.SCORE_KERNEL.get(self.env) == "torch"
        except settings.SettingError as exc:
            raise ScoreFailed(str(exc)) from None
        if suite is None:
            raise ScoreFailed(f"score mode ({settings.CAPTURE_MODE.name}=score) needs "
                              f"{settings.SCORE_SUITE.name}: the suite folder on the server host")
        io = self.io
        folder = io.folder

        def write(request_id: str, row_start: int, records: np.ndarray, metadata: dict[str, str]) -> None:
            if io.on_writer_thread():  # scored there (CPU rows): write at once
                write_score_chunk(folder, request_id, row_start, records, metadata)
                return

            def job() -> None:
                write_score_chunk(folder, request_id, row_start, records, metadata)

            io.submit_job(request_id, row_start, int(records.shape[0]), job)

        session = ScoreSession(suite, reference, score_rows, write, io.fail, block_rows=block_rows,
                               lm_head=lm_head, head_placement=placement, torch_on_cpu=torch_on_cpu)
        self._session = session
        io.log(f"kldtui score mode: scoring against {session.reference_dir} (suite {session.suite_dir}), "
               f"{session.block_rows} rows at a time on the logits' device")
        return session

    def take(self, request_id: str, row_start: int, rows: ChunkRows,
             prompt: Sequence[int] | None = None) -> Any:
        from kldtui.scoring import ScoreFailed

        try:
            session = self.session()
        except ScoreFailed as exc:
            self.io.fail(request_id, f"kldtui score: {exc}")
            return None
        logits, vocab = rows.logits, int(rows.vocab_size)
        device = getattr(logits, "device", None)
        if device is None or getattr(device, "type", "cpu") == "cpu":
            part = logits.detach() if hasattr(logits, "detach") else logits
            if self.io.inline:
                return _DONE if session.chunk(request_id, int(row_start), part, vocab, prompt) else None

            def job() -> None:
                session.chunk(request_id, int(row_start), part, vocab, prompt)

            self.io.submit_job(request_id, int(row_start), int(part.shape[0]), job)
            return _DONE
        # Rows on an accelerator: a device copy is made on the engine's stream (vLLM reuses the
        # logits' buffer after the call) and everything else happens on the writer thread, so the
        # engine's thread (and with it every tensor-parallel rank) never waits for the first chunk's
        # reference rows from disk, nor for rows on the precise path.
        index = getattr(device, "index", None)
        index = int(index) if index is not None else _current_device()
        copy, ready = _device_copy(logits, vocab)

        def scored() -> None:
            _wait_on_device(index, ready)
            with self.io.device_sync_allowed():  # the records are copied to the host: a deliberate sync
                session.chunk(request_id, int(row_start), copy, vocab, prompt)

        if self.io.inline:
            scored()
        else:
            self.io.submit_job(request_id, int(row_start), int(copy.shape[0]), scored)
        return _DONE

    def put(self, request_id: str, row_start: int, pieces: Sequence[Any], vocab_size: int) -> bool:
        return True  # every piece was scored (or queued) when it was taken

    def close(self) -> None:
        if self._session is not None:
            self._session.close()


def _device_copy(logits: Any, vocab: int) -> tuple[Any, Any]:
    from kldtui.metrics.score import device_copy

    return device_copy(logits, vocab)


def _current_device() -> int:
    from kldtui.metrics.score import current_device

    return current_device()


def _wait_on_device(index: int, event: Any) -> None:
    from kldtui.metrics.score import wait_on_device

    wait_on_device(index, event)


class ScoreMode(CaptureMode):
    name = "score"
    label = "score mode"
    badge = "score mode"
    summary = ("the server scores each chunk against the reference and saves per-row figures only "
               "(docs/SCORE_MODE.md)")
    record_value = "score"
    manifest_name = SCORES_MANIFEST

    @property
    def chunks(self) -> ChunkKind:
        from kldtui.formats.scores import SCORE_CHUNKS

        return SCORE_CHUNKS

    smoke_needs_window = True  # the server scores against the reference: a suite window

    def smoke_logprobs(self, chunk: Path, next_tokens: np.ndarray) -> np.ndarray:
        """The records' ``logp_cand_next``: the server's own log-probability of the next token."""
        import numpy as np

        from kldtui.formats.scores import read_records
        from kldtui.metrics.score import RECORD_DTYPE

        records, _meta = read_records(chunk, RECORD_DTYPE)
        values: np.ndarray = np.asarray(records["logp_cand_next"], dtype=np.float64)
        return values

    def server_env(self, suite_dir: Path | None, reference_dir: Path | None) -> dict[str, str]:
        if suite_dir is None or reference_dir is None:
            raise ValueError("score mode needs the suite and reference folders")
        return {**settings.CAPTURE_MODE.entry(self.name), **settings.SCORE_SUITE.entry(suite_dir),
                **settings.SCORE_REFERENCE.entry(reference_dir)}

    def add_server_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--score-suite", type=Path, default=None,
                            help=f"score mode: the suite folder (default: ${settings.SCORE_SUITE.name})")
        parser.add_argument("--score-reference", type=Path, default=None,
                            help="score mode: the reference logits folder (default: "
                            f"${settings.SCORE_REFERENCE.name}, else SUITE/ref)")

    def server_env_from_args(self, args: argparse.Namespace) -> dict[str, str]:
        env: dict[str, str] = {}
        if getattr(args, "score_suite", None) is not None:
            env.update(settings.SCORE_SUITE.entry(args.score_suite))
        if getattr(args, "score_reference", None) is not None:
            env.update(settings.SCORE_REFERENCE.entry(args.score_reference))
        return env

    def server_sink(self, io: ServerIO, env: Mapping[str, str] | None) -> ServerSink:
        return ScoreSink(io, env)

    def file_name(self, window_index: int) -> str:
        return f"scores_{window_index:03d}.safetensors"  # kldtui.formats.scores.score_file_name

    def finalize_window(self, job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> Finalized:
        result, vocab = finalize_scores_window(job, window, chunk_dir)
        if job.vocab is not None and vocab and vocab != job.vocab:
            raise BadInput(f"{self.manifest_path(job.output_dir)}: earlier windows were scored with a "
                           f"vocabulary of {job.vocab}, {window.label} with {vocab}; finalize into a "
                           "fresh folder")
        return Finalized(result, vocab or job.vocab)

    def write_manifest(self, folder: Path, suite: Suite, entries: Sequence[Any], *, vocab_size: int,
                       kind: str, runtime: Any, window_range: tuple[int, int]) -> Path:
        from kldtui.formats.scores import write_scores_manifest
        from kldtui.metrics.score import RECORD_DTYPE

        return write_scores_manifest(folder, suite, list(entries), vocab_size=vocab_size,
                                     record_dtype=RECORD_DTYPE, kind=kind + "-scores", runtime=runtime,
                                     window_range=window_range)

    def read_manifest(self, path: Path) -> ScoresManifest:
        from kldtui.formats.scores import load_scores_manifest

        return load_scores_manifest(path)

    def listed(self, manifest: Any, suite: Suite | None) -> dict[int, Any]:
        return dict(manifest.entries)

    def reference_problems(self, suite_dir: Path, reference_dir: Path,
                           server_env: Mapping[str, str]) -> list[str]:
        """A hidden-state reference needs its LM head on the server's host: named by
        ``KLDTUI_SCORE_LM_HEAD`` in the server's environment, or found in the reference, beside it or in
        the suite (as :class:`kldtui.scoring.ScoreSession` looks for it)."""
        from kldtui.formats import fidelity as fid

        if not fid.holds_hidden_states(reference_dir) or settings.SCORE_LM_HEAD.raw(server_env):
            return []
        if fid.reference_head_dir(reference_dir, suite_dir) is not None:
            return []
        places = [str(p) for p in fid.reference_head_places(reference_dir, suite_dir)]
        return [f"{reference_dir}: score mode replays these hidden states with their LM head, and there is "
                f"none in {' or '.join(places)}; export it ({kldtui_command()} export-head --checkpoint "
                f"MODEL --output {shell_arg(suite_dir / fid.LM_HEAD_DIR)}) or set "
                f"{settings.SCORE_LM_HEAD.name} in [candidate] env"]

    def server_figures(self, suite: Suite, reference_dir: Path, candidate_dir: Path,
                       windows: Sequence[WindowSpec]) -> ServerFigures | None:
        return ScoreFigures.checked(suite, reference_dir, candidate_dir, windows)

    def disk_bytes_per_row(self, vocab_size: int, hidden_width: int | None = None) -> int | None:
        return None  # RECORD_DTYPE.itemsize (76) bytes a row: nothing to plan for


SCORE = ScoreMode()


# -- compare -----------------------------------------------------------------------------------------
class ScoreFigures(ServerFigures):
    """A finalized score folder read for compare: every file checked before its figures count."""

    backend = "server-scores"

    def __init__(self, reference: LogitsManifest, scores: ScoresManifest,
                 lm_head_sha256: str | None = None) -> None:
        super().__init__(reference)
        self.scores = scores
        # a hidden-state reference: the SHA-256 of the LM head its rows are replayed with, which
        # every score file must name (None: a logits reference)
        self.lm_head_sha256 = lm_head_sha256

    @classmethod
    def checked(cls, suite: Suite, reference_dir: Path, candidate_dir: Path,
                windows: Sequence[WindowSpec]) -> ScoreFigures:
        """Validation before any window: the suite's hash, the reference manifest against the
        suite, the scores manifest's suite, vocabulary and record layout, the windows' tokens."""
        from kldtui.formats.scores import dtype_text, load_scores_manifest
        from kldtui.formats.suite import check_manifest_matches_suite, load_logits_manifest
        from kldtui.metrics.score import RECORD_DTYPE

        suite.check_suite_hash()
        head_sha: str | None = None
        from kldtui.formats.fidelity import holds_hidden_states

        if holds_hidden_states(reference_dir):
            ref, head_sha = _replayed_reference(suite, Path(reference_dir))
        else:
            ref = load_logits_manifest(reference_dir)
        check_manifest_matches_suite(ref, suite, windows)
        scores = load_scores_manifest(candidate_dir)
        if scores.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
            raise BadInput(f"{scores.path}: made from another suite than {suite.path}; {OTHER_SUITE}")
        if scores.vocab_size != ref.vocab_size:
            raise BadInput(f"{scores.path}: vocabulary {scores.vocab_size} differs from the reference's "
                           f"{ref.vocab_size} ({ref.path}); score against the same tokenizer's reference")
        if scores.record_dtype != dtype_text(RECORD_DTYPE):
            raise BadInput(f"{scores.path}: records of another layout than this kldtui reads; capture again")
        for w in windows:
            suite.load_tokens(w, check_hash=True)
        return cls(ref, scores, head_sha)

    def window(self, window: WindowSpec, reverse: bool) -> tuple[RowStats, int]:
        """One window's figures from its score file, checked first: its SHA-256 against its
        manifest, the window and tokens it scored, and that it scored against the reference file
        the reference manifest lists now (SHA-256)."""
        from kldtui.formats.scores import read_records
        from kldtui.metrics.score import RECORD_DTYPE, from_records

        scores, reference = self.scores, self.reference
        entry = scores.entries.get(window.index)
        if entry is None:
            raise BadInput(f"{scores.path}: {window.label} is not scored; capture and finalize it in score "
                           "mode")
        path = scores.file_path(window.index)
        where = f"{path}: {window.label}"
        if entry.token_ids_json_sha256 != window.token_ids_json_sha256:
            raise BadInput(f"{where}: scored other tokens than the suite's (token hash); capture it again")
        ref_entry = reference.entry(window.index)
        if entry.reference_sha256 != ref_entry.sha256:
            raise BadInput(f"{where}: scored against a reference file with SHA-256 "
                           f"{entry.reference_sha256[:12]}..., "
                           f"{reference.path} lists {ref_entry.sha256[:12]}...; capture the window again "
                           "in score mode against this reference")
        try:
            digest = sha256_file(path)
        except OSError as exc:
            raise BadInput(f"{where}: cannot be read ({exc.strerror or exc}); finalize it again") from None
        if digest != entry.sha256:
            raise BadInput(f"{where}: SHA-256 {digest[:12]}... differs from the manifest's "
                           f"{entry.sha256[:12]}...; "
                           "the file is damaged, finalize it again")
        records, meta = read_records(path, RECORD_DTYPE)
        if meta.get("reference_sha256") != ref_entry.sha256:  # the file's own word, not only the manifest's
            raise BadInput(f"{where}: the file says it scored against a reference file with SHA-256 "
                           f"{str(meta.get('reference_sha256'))[:12]}..., {reference.path} lists "
                           f"{ref_entry.sha256[:12]}...; capture the window again in score mode against "
                           "this reference")
        if self.lm_head_sha256 is not None and meta.get("lm_head_file_sha256") != self.lm_head_sha256:
            raise BadInput(f"{where}: scored with an LM head of SHA-256 "
                           f"{str(meta.get('lm_head_file_sha256'))[:12]}..., the reference's head is "
                           f"{self.lm_head_sha256[:12]}...; capture the window again in score mode with "
                           "the reference's head")
        if (meta.get("window_index") != str(window.index) or len(records) != window.scored_positions
                or meta.get("token_ids_json_sha256") != window.token_ids_json_sha256):
            raise BadInput(f"{where}: the file holds window {meta.get('window_index')} with {len(records)} "
                           f"rows, expected {window.index} with {window.scored_positions}; finalize it again")
        rows = from_records(records, reverse=reverse)
        bad = rows.nonfinite_rows()
        if bad.size:
            raise BadInput(f"{where}: non-finite figures at row {int(bad[0])}; capture the window again")
        return rows, entry.size_bytes


def _replayed_reference(suite: Suite, reference_dir: Path) -> tuple[LogitsManifest, str]:
    """A hidden-state reference as score files name it: its contexts with the head's vocabulary,
    and the SHA-256 of the head found in it, beside it or in the suite, which the server replayed with."""
    from kldtui.formats import fidelity as fid

    manifest = fid.load_tensor_manifest(reference_dir)
    where = fid.reference_head_dir(reference_dir, suite.root)
    if where is None:
        raise BadInput(f"{manifest.path}: holds hidden states and no LM head was found in it, beside it "
                       f"or in {suite.root}; put the head the server replayed with in "
                       f"{suite.root / fid.LM_HEAD_DIR}")
    head = fid.load_lm_head(where)
    if head.hidden != manifest.width:
        raise BadInput(f"{head.path}: the LM head is {head.hidden} wide, the hidden states of "
                       f"{manifest.path} {manifest.width}; they are not of one model")
    return manifest.as_replayed_manifest(head.vocab), head.file_sha256 or sha256_file(head.path)


# -- finalize ----------------------------------------------------------------------------------------
def _existing_scores(final: Path, window: WindowSpec) -> WrittenScores:
    """An already-finalized score file as a WrittenScores if it is ``window``'s; else BadInput."""
    from kldtui.formats.scores import SCORE_FILE_FORMAT, WrittenScores, read_records
    from kldtui.metrics.score import RECORD_DTYPE

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


def finalize_scores_window(job: FinalizeJob, window: WindowSpec,
                           chunk_dir: Path) -> tuple[WrittenScores, int]:
    """Score mode: join ``chunk_dir``'s score chunks into ``output_dir/scores_NNN.safetensors``;
    ``(written, vocab)``. Every chunk must have scored this window (window index, token hash)
    against one reference file (its SHA-256), with finite figures (KL may be +inf: a token the
    candidate masks); the file is read back and compared before it counts."""
    import numpy as np

    from kldtui.formats.chunks import check_chunk_dir
    from kldtui.formats.safetensors_io import read_header
    from kldtui.formats.scores import SCORE_CHUNKS, read_records, score_file_name, write_score_file
    from kldtui.metrics.score import RECORD_DTYPE, from_records

    suite, output_dir, force, emit, cancel = job.suite, Path(job.output_dir), job.force, job.emit, job.cancel
    final = output_dir / score_file_name(window.index)
    if final.exists() and not force:
        done = _existing_scores(final, window)
        emit(WindowState.of(STAGE, window, "finalized", {"skipped": True, "bytes": done.size_bytes}))
        return done, int(read_header(final).metadata.get("vocab_size", "0"))
    chunks = check_chunk_dir(chunk_dir, window, kind=SCORE_CHUNKS)
    emit(WindowState.of(STAGE, window, "finalizing"))
    started = time.monotonic()
    parts = []
    refs: set[str] = set()
    replays: set[tuple[tuple[str, str], ...]] = set()  # a hidden reference's head and rounding
    for c in chunks.chunks:
        if cancel is not None:
            cancel.check()
        records, meta = read_records(c.path, RECORD_DTYPE)
        refs.add(meta.get("reference_sha256", ""))
        replays.add(tuple((k, meta[k]) for k in REPLAY_FIELDS if k in meta))
        parts.append(records)
    if len(refs) != 1 or "" in refs:
        raise BadInput(f"{chunk_dir}: {window.label}: the chunks were scored against "
                       f"{len(refs)} different reference files; capture the window again")
    if len(replays) != 1:
        raise BadInput(f"{chunk_dir}: {window.label}: the chunks were scored with {len(replays)} different "
                       "LM heads or replays of the reference; capture the window again")
    records = np.concatenate(parts)
    bad = from_records(records).nonfinite_rows()
    if bad.size:
        raise BadInput(f"{chunk_dir}: {window.label}: non-finite figures (NaN) at row {int(bad[0])}; the "
                       "server computed garbage there: check the model and capture the window again")
    reference_sha = refs.pop()
    meta = {"context_length": str(suite.context_length), "vocab_size": str(chunks.vocab_size),
            **dict(replays.pop())}
    written = write_score_file(output_dir, window, records, meta, reference_sha)
    back, _ = read_records(final, RECORD_DTYPE)
    if back.tobytes() != records.tobytes() or sha256_file(final) != written.sha256:
        final.unlink(missing_ok=True)
        raise StageFailed(f"{final}: {window.label}: the file read back differs from what was written; "
                          "the disk or file system is faulty")
    elapsed = time.monotonic() - started
    emit(WindowState.of(STAGE, window, "finalized", {
        "bytes": written.size_bytes, "seconds": round(elapsed, 3)}))
    return written, chunks.vocab_size
