"""Finalize: merge each window's capture chunks into the finalized folder (one file per window and
its manifest), a window at a time and resumably. What the files are is the capture mode's
(:mod:`kldtui.capture_modes`): logits mode writes ``logits_NNN.safetensors`` + ``manifest.json``
(the published suite's layout), score mode ``scores_NNN.safetensors`` + ``scores-manifest.json``;
this driver keeps the folder's manifest, resumes, and drops chunks once a window is verified.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kldtui import capture_modes
from kldtui.capture_modes import CaptureMode, FinalizeJob, Verify
from kldtui.errors import BadInput, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    failure_reported,
    null_sink,
)
from kldtui.formats.atomic import remove_tree_atomically
from kldtui.formats.suite import WINDOW_UNIT, Suite, WindowSpec, unit_of, units_of
from kldtui.workspace import Workspace

STAGE: StageName = "finalize"


def _remember_hash(final: Path, sha256: str) -> None:
    """Hash once: the SHA-256 computed while writing goes into the verified-file cache, so the
    reference stage (and ``verify`` without ``--reverify``) does not hash the file again."""
    from kldtui.formats.verified_cache import VerifiedCache

    cache = VerifiedCache(final.parent)
    cache.record(final, sha256)
    cache.save()


def finalize_window(suite: Suite, window: WindowSpec, chunk_dir: Path, output_dir: Path, *,
                    expected_vocab: int | None, force: bool = False, emit: EventSink = null_sink,
                    cancel: Cancel | None = None, verify: Verify = "sample",
                    mode: CaptureMode = capture_modes.DEFAULT) -> Any:
    """Finalize one window's chunks into ``output_dir`` (``mode``'s file, its hash remembered);
    its manifest entry. Nothing is listed: :class:`Finalizer` keeps the manifest."""
    job = FinalizeJob(suite, Path(output_dir), expected_vocab, force=force, verify=verify, emit=emit,
                      cancel=cancel, remember_hash=_remember_hash)
    return mode.finalize_window(job, window, Path(chunk_dir)).entry


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
        raise BadInput(other_suite(path))
    return manifest


def other_suite(manifest_path: Path) -> str:
    """The line that refuses to finalize into a folder whose manifest ``manifest_path`` was made from
    another suite (said by finalize, and by the preflight before a server starts)."""
    return (f"{manifest_path}: made from another suite; finalize into another folder (or another "
            "[run] workdir)")


def _published(written: dict[int, Any], output_dir: Path, unit: str = WINDOW_UNIT) -> str:
    """Which windows (called ``unit``: a hidden-state suite's contexts) are finished despite a
    failure (kept: a rerun skips them)."""
    if not written:
        return f"no {unit} was published in {output_dir}"
    shown = ", ".join(str(i) for i in sorted(written))
    return (f"published before the failure: {unit}(s) {shown} in {output_dir} (kept; a rerun finishes "
            "the rest)")


def load_finalized(workspace: Workspace, suite: Suite, emit: EventSink = null_sink,
                   mode: CaptureMode = capture_modes.DEFAULT) -> dict[int, Any]:
    """What the finalized folder's manifest of ``mode`` lists (files still present), by window.

    A manifest that does not parse is rewritten (a notice says so); one made from another suite
    is refused: its files would be mixed with this suite's.
    """
    folder = workspace.candidate
    manifest = _listed(mode.manifest_path(folder), suite, mode.read_manifest, emit)
    if manifest is None:
        return {}
    return {i: e for i, e in mode.listed(manifest, suite).items() if (folder / e.file).is_file()}


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
                 mode: CaptureMode = capture_modes.DEFAULT) -> None:
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
        self._told_no_token_hash = False

    def finalize(self, window: WindowSpec) -> Any:
        """Finalize one window (a file that already matches is kept) and list it in the manifest."""
        ws = self.workspace
        chunk_dir = ws.chunk_dir(window.chunk_dir_name)
        self._check_captured_tokens(window)
        with self._lock:
            job = FinalizeJob(self.suite, ws.candidate, self.vocab, dict(self.written), force=self.force,
                              verify=self.verify, emit=self.emit, cancel=self.cancel,
                              remember_hash=_remember_hash, keep_chunks=self.keep_chunks)
        done = self.mode.finalize_window(job, window, chunk_dir)
        with self._lock:
            self.vocab = done.vocab_size if done.vocab_size is not None else self.vocab
            self._record(window, done.entry)
        self._drop_chunks(chunk_dir, window, done.entry)
        return done.entry

    def _record(self, window: WindowSpec, result: Any) -> None:
        """List a window's verified file in the manifest (under ``self._lock``)."""
        if self.written.get(window.index) != result:
            self.written[window.index] = result
            self._write_manifest()
            self._changed = True

    def _check_captured_tokens(self, window: WindowSpec) -> None:
        """The capture record names the tokens the chunks were captured from: other tokens than the
        suite's window (the suite changed since the capture) are refused, whatever the chunks say
        (logits chunks carry no token hash of their own)."""
        from kldtui.stages.capture import load_records

        try:
            path = self.workspace.records_path
        except ValueError:
            return  # a workspace without capture records (nothing captured through kldtui)
        record = load_records(path, unit=window.unit).get(window.index)
        if record is None:
            return
        captured = record.extra.get("token_ids_json_sha256")
        if captured is None:
            if not self._told_no_token_hash:
                self._told_no_token_hash = True
                self.emit(Notice(STAGE, f"{path}: the capture records carry no token hash (an older "
                                        "kldtui made them): which tokens the chunks came from is not "
                                        "checked", level="warning"))
            return
        if captured != window.token_ids_json_sha256:
            want = window.token_ids_json_sha256
            raise BadInput(f"{path}: {window.label} was captured from other tokens (token hash "
                           f"{str(captured)[:12]}...) than the suite's ({want[:12]}..., {self.suite.path}); "
                           f"the suite changed since: capture the {window.unit} again")

    def _drop_chunks(self, chunk_dir: Path, window: WindowSpec | None = None, result: Any = None) -> None:
        """One disk write per window: the chunks go once the verified file is in the manifest, not
        before (a kill in between left a recorded window with neither: resume failed); a rerun
        removes what such a kill left. ``keep_chunks`` keeps them. Before they go, the run folder
        records which file they became, so a rerun of the capture skips the window."""
        if not self.keep_chunks and chunk_dir.exists():
            if window is not None and result is not None:
                from kldtui.stages.capture import write_finalized_marker

                with contextlib.suppress(OSError, ValueError):
                    write_finalized_marker(self.workspace, window, self.workspace.candidate, result.file,
                                           result.size_bytes, result.sha256)
            remove_tree_atomically(chunk_dir)  # whole or gone at any kill: a rerun never finds half

    def _write_manifest(self) -> Path:
        items = self.written
        window_range = self.window_range or (min(items), max(items) + 1)
        return self.mode.write_manifest(self.workspace.candidate, self.suite, list(items.values()),
                                        vocab_size=int(self.vocab or 0), kind=self.kind,
                                        runtime=self.runtime, window_range=window_range)

    def finish(self) -> Path:
        """The manifest's path. Nothing added: it is written again only to record a ``runtime``
        (or when it is missing), so a rerun without one keeps the runtime already recorded. Then
        the mode finishes the folder (:meth:`CaptureMode.finish`: hidden mode's replay check)."""
        with self._lock:
            if not self.written:
                raise BadInput(f"{self.workspace.candidate}: no finalized {units_of(self.suite.windows)}")
            ws = self.workspace
            path = self.mode.manifest_path(ws.candidate)
            if not (path.exists() and (self._changed or self.runtime is None)):
                path = self._write_manifest()
            entries = [self.written[i] for i in sorted(self.written)]
        self.mode.finish(ws.candidate, self.suite, entries, runtime=self.runtime, emit=self.emit,
                         cancel=self.cancel)
        return path


def run_finalize(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                 suite: Suite, windows: Sequence[WindowSpec], kind: str = "candidate",
                 runtime: dict[str, Any] | None = None, window_range: tuple[int, int] | None = None,
                 expected_vocab: int | None = None, force: bool = False,
                 verify: Verify = "sample", keep_chunks: bool = True,
                 mode: CaptureMode = capture_modes.DEFAULT) -> Path:
    """The finalize stage: ``workspace.run_dir``'s chunk folders of ``windows`` into
    ``workspace.candidate`` (``mode``'s files and manifest); returns the manifest's path.

    ``runtime`` (vLLM version, model path, arguments) is stored as the manifest's ``runtime``.
    """
    with failure_reported(emit, STAGE):
        if not windows:
            raise BadInput(f"{workspace.run_dir}: no {units_of(suite.windows)} to finalize")
        units = units_of(windows)
        emit(StageStarted(STAGE, detail=f"{len(windows)} {units} {workspace.run_dir} -> "
                                        f"{workspace.candidate}"))
        started = time.monotonic()
        finalizer = Finalizer(workspace, suite, kind=kind, runtime=runtime, window_range=window_range,
                              expected_vocab=expected_vocab, force=force, verify=verify,
                              keep_chunks=keep_chunks, emit=emit, cancel=cancel, mode=mode)
        wanted = {w.index for w in windows}
        kept = sum(1 for i in finalizer.written if i not in wanted)
        skipped = 0
        done: dict[int, Any] = {}  # this run's windows, named when a later one fails
        try:
            for n, w in enumerate(windows):
                if cancel is not None:
                    cancel.check()
                skipped += int(not force and (workspace.candidate / mode.file_name(w.index)).exists())
                done[w.index] = finalizer.finalize(w)
                emit(Progress(STAGE, units, n + 1, len(windows), units))
            path = finalizer.finish()
        except StageFailed as exc:
            raise type(exc)(f"{exc}; {_published(done, workspace.candidate, unit_of(windows))}") from None
        nbytes = sum(r.size_bytes for r in done.values())
    elapsed = time.monotonic() - started
    emit(StageFinished(STAGE, summary=f"{len(windows)} {units} -> {path}", figures={
        "windows": len(windows), "kept": kept, "bytes": nbytes, "seconds": round(elapsed, 3),
        "skipped": skipped}))
    return path
