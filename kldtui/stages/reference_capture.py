"""The reference capture stage driver: missing reference logits captured and finalized into the
suite's ``ref/`` through a server of the profile's ``[reference] capture`` kind (the demo's embedded
model, vLLM serving the reference checkpoint, or an attached server).

:class:`ReferenceCapture` runs it: it serves the reference server (the serve stage's driver),
captures the run's windows into the workspace's reference work folder
(``Workspace.reference_capture()``: ``WORKDIR/reference-run``), finalizes them into the suite's
``ref/`` (manifest ``kind = "reference"``, the server's redacted runtime identity), copies the
capture records to the suite root (``capture-reference.json``, the published layout; not for a
built-in model's demo suite; under the output-file rule, which the stage applies to that name before
the server starts too) and, with ``repeat``, captures the first window a second time from
the same server and stores that repeat's comparison with the first capture as
``repeat-noise-windowNNN.json`` (the runtime's own noise; written by the reports' one writer,
:func:`kldtui.formats.report.write_report`, under the output-file rule, which the stage applies to that
name before the server starts too). It resumes like the stages it runs:
captured and finalized windows are kept. The reference server is stopped at the end, on error and
from another thread (:meth:`ReferenceCapture.stop_server`).

Its steps' events are shown as the ``reference`` stage (:func:`as_reference_stage`): stage
changes and failures become log lines and notices, its progress bars are named for what they count
("captured", "finalized"), its windows' states end their bars, the server's log lines are marked
``[reference server]``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kldtui import capture_modes
from kldtui.errors import BadInput
from kldtui.events import (
    Cancel,
    Event,
    EventSink,
    LogLine,
    Notice,
    Progress,
    ResultReady,
    ServerReady,
    StageFailed,
    StageFinished,
    StageName,
    StageStarted,
    WindowState,
    failure_reported,
)
from kldtui.folder_lock import FolderLocks, check_output_file
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.report import write_report
from kldtui.formats.report_model import REPORT_LIMIT
from kldtui.formats.safe_io import read_text
from kldtui.formats.suite import COUNT_TASKS, Suite, WindowSpec, load_logits_manifest, unit_of, units_of
from kldtui.servers.base import ServerPlan
from kldtui.stages.serve import ServerSession, run_serve, stop_reason
from kldtui.workspace import Workspace

REFERENCE_MODE = capture_modes.LOGITS  # a reference is its logits (what compare and score mode read)

STAGE: StageName = "reference"
# what the copy of the capture records at the suite root (capture-reference.json) is called in a line
RECORDS_COPY = "capture records"


def reference_complete(workspace: Workspace, windows: Sequence[WindowSpec]) -> bool:
    """The reference logits list every window of ``windows``, each file present. A manifest
    listing fewer is the resume state of an interrupted reference capture, not a finished
    reference: the capture resumes from it."""
    path = workspace.reference_manifest
    if not path.exists():
        return False
    try:
        manifest = load_logits_manifest(path)
        have = {i for i in manifest.entries if manifest.file_path(i).is_file()}
    except BadInput:
        return False
    return {w.index for w in windows} <= have


@dataclasses.dataclass(frozen=True)
class RepeatCompare:
    """How the repeat capture is compared with the first: the profile's ``[compare]`` settings
    (``backend``/``threads`` as asked: the chooser decides with the reference server running)."""

    bootstrap_samples: int = 10000
    bootstrap_seed: int = 1
    reverse: bool = False
    backend: str = "auto"
    threads: int | None = None


class ReferenceCapture:
    """One reference capture (see the module docstring). ``plan`` is the reference server's
    (its kind's plan in logits mode); ``windows`` the run's, ``window_range`` the run's range."""

    def __init__(self, workspace: Workspace, emit: EventSink, cancel: Cancel | None, *, plan: ServerPlan,
                 request_timeout: float, suite: Suite, windows: Sequence[WindowSpec],
                 window_range: tuple[int, int], keep_chunks: bool, repeat: bool,
                 records_to_suite: bool, compare: RepeatCompare, command: str | None = None,
                 identity: dict[str, Any] | None = None) -> None:
        self.workspace = workspace
        self.emit = emit
        self.cancel = cancel
        self.plan = plan
        self.request_timeout = request_timeout
        self.suite = suite
        self.windows = list(windows)
        self.window_range = window_range
        self.keep_chunks = keep_chunks
        self.repeat = repeat
        self.records_to_suite = records_to_suite
        self.compare = compare
        self.command = command
        # the reference server's settings (kldtui.servers.base.server_identity): recorded per window, so
        # that a capture resumed after the profile changed the reference is refused, not joined
        self.identity = identity
        self.session: ServerSession | None = None  # the reference server while it runs
        self._locks: list[FolderLocks] = []

    @property
    def server_running(self) -> bool:
        """A reference server this capture started is up."""
        session = self.session
        return session is not None and session.process is not None and session.process.alive() is None

    def stop_server(self, reason: str = "done") -> None:
        """Stop the reference server (never an attached one); safe any time, from any thread."""
        session = self.session
        if session is not None:
            session.stop(reason=reason)

    def run(self) -> None:
        """Serve, capture, finalize (and repeat); the server is stopped at the end."""
        ws = self.workspace.reference_capture()
        emit = as_reference_stage(self.emit, len(self.windows))
        self.emit(StageStarted(STAGE, detail=f"capturing the reference ({self.plan.kind})"))
        # names of kldtui's at the suite root, checked before any work: the capture records' copy and the
        # repeat's report
        if self.records_to_suite:
            check_output_file(self.workspace.suite_capture_records, what=RECORDS_COPY, fixed_name=True)
        if self.repeat and self.windows:
            check_output_file(self.workspace.repeat_noise_path(self.windows[0].index),
                              what="comparison report", fixed_name=True)
        try:
            self.session = run_serve(ws, emit, self.cancel, self.plan)
            self._lock(ws)
            self._capture(ws, emit, self.windows)
            self._finalize(ws, emit, self.windows, kind="reference", window_range=self.window_range)
            if self.records_to_suite:
                from kldtui.stages.capture import CAPTURE_RECORDS_LIMIT

                _copy_json(ws.records_path, self.workspace.suite_capture_records, CAPTURE_RECORDS_LIMIT,
                           what=RECORDS_COPY)
            if self.repeat:
                self._repeat_first_window()
        except BaseException as exc:
            self.stop_server(stop_reason(exc))
            raise
        finally:
            self.stop_server("reference captured")
            for locks in self._locks:
                locks.release()
            self._locks.clear()

    # -- steps -----------------------------------------------------------------------------------
    def _lock(self, ws: Workspace) -> None:
        """The reference work folder, its capture folder and the suite's ref/: one writer each."""
        folders = [f for f in (ws.workdir, ws.capture_root, ws.candidate_dir) if f is not None]
        locks = FolderLocks()
        locks.acquire(folders, what="work folder")
        self._locks.append(locks)

    def _capture(self, ws: Workspace, emit: EventSink, windows: Sequence[WindowSpec]) -> None:
        from kldtui.stages.capture import CaptureServer, run_capture
        from kldtui.stages.finalize import load_finalized

        session = self.session
        assert session is not None and session.url is not None
        done = set(load_finalized(ws, self.suite, mode=REFERENCE_MODE))
        server = CaptureServer(session.url, self.plan.served_model_name, session.capture_dir,
                               api_key=self.plan.api_key, request_timeout=self.request_timeout,
                               mode=REFERENCE_MODE,
                               alive=session.process.alive if session.process is not None else None,
                               identity=self.identity)
        run_capture(ws, emit, self.cancel, suite=self.suite, windows=windows, server=server,
                    expected_vocab=_vocab(ws), finalized=lambda w: w.index in done)

    def _finalize(self, ws: Workspace, emit: EventSink, windows: Sequence[WindowSpec], *, kind: str,
                  window_range: tuple[int, int]) -> None:
        from kldtui.stages.capture import load_records
        from kldtui.stages.finalize import run_finalize

        captured = set(load_records(ws.records_path, unit=unit_of(self.suite.windows)))
        todo = [w for w in windows if w.index in captured]
        if not todo:
            emit(StageStarted("finalize", detail=str(ws.candidate)))
            emit(StageFinished("finalize", summary=f"0 {units_of(windows)} in {ws.candidate}",
                               figures={"windows": 0}))
            return
        assert self.session is not None
        run_finalize(ws, emit, self.cancel, suite=self.suite, windows=todo, kind=kind,
                     runtime=self._runtime(), window_range=window_range,
                     expected_vocab=_vocab(ws), keep_chunks=self.keep_chunks, mode=REFERENCE_MODE)

    def _runtime(self) -> dict[str, Any] | None:
        """The reference server's redacted runtime for the manifest, with its settings."""
        assert self.session is not None
        runtime = dict(self.session.runtime)
        if self.identity is not None:
            runtime["identity"] = self.identity
        return runtime or None

    def _repeat_first_window(self) -> None:
        """The first window again from the same server, compared with the first capture."""
        from kldtui.stages.compare import CompareOptions, run_compare
        from kldtui.stages.compare_beside import choose_beside, serving_of
        from kldtui.stages.finalize import load_finalized

        first = self.windows[0]
        ws = self.workspace.reference_repeat()
        emit = as_reference_stage(self.emit)
        self._lock(ws)
        self._capture(ws, emit, [first])
        self._finalize(ws, emit, [first], kind="reference-repeat",
                       window_range=(first.index, first.index + 1))
        with failure_reported(emit, "compare"):
            if first.index not in load_finalized(ws, self.suite, emit, REFERENCE_MODE):
                emit(StageStarted("compare", detail=f"{ws.reference} vs {ws.candidate}"))
                raise BadInput(f"{ws.candidate}: no finalized {units_of([first])} to compare; run capture "
                               "and finalize first")
        assert self.session is not None
        c = self.compare
        # the compare keeps the GPUs to the reference server while it runs
        choice = choose_beside(c.backend, c.threads, serving_of(self.session, "the reference server"),
                               vocab=_vocab(ws), emit=emit)
        options = CompareOptions(start_window=first.index, stop_window=first.index + 1,
                                 bootstrap_samples=c.bootstrap_samples, bootstrap_seed=c.bootstrap_seed,
                                 reverse=c.reverse, backend=choice, mode=REFERENCE_MODE)
        run_compare(ws, emit, self.cancel, options=options, suite=self.suite, windows=[first],
                    command=self.command)
        # the reports' one writer: the output-file rule again (a folder that took the name during the
        # capture is one line), a link or FIFO at the name replaced, never written through or opened
        write_report(self.workspace.repeat_noise_path(first.index),
                     json.loads(read_text(ws.report, limit=REPORT_LIMIT)))
        self.emit(Notice(STAGE, f"repeat capture of {first.name} stored as "
                         f"{self.workspace.repeat_noise_path(first.index).name}"))


def _vocab(ws: Workspace) -> int | None:
    """The reference's vocabulary once some of it is finalized (a check on every capture)."""
    try:
        return load_logits_manifest(ws.reference).vocab_size
    except BadInput:
        return None


def _copy_json(src: Path, dst: Path, limit: int, *, what: str) -> Path:
    """Copy a JSON document of at most ``limit`` bytes atomically (parsed and rewritten: a
    half-copied file never appears) to ``dst``, a name of kldtui's, where the output-file rule allows
    (:func:`kldtui.folder_lock.check_output_file`, ``what`` naming the file: a folder that took the name
    since the stage's own check is one line); a link or FIFO at ``dst`` is replaced, never written
    through or opened. Returns the path written."""
    target = check_output_file(dst, what=what, fixed_name=True)
    write_json_atomic(target, json.loads(read_text(src, limit=limit)))
    return target


# The reference capture's task names as shown under the reference stage: its capture and finalize
# both count "windows" (a context suite's "contexts"), which would read as one bar twice ("ref windows",
# "ref reference windows").
_RELABELLED_TASKS = {(stage, units): done
                     for stage, done in (("capture", "captured"), ("finalize", "finalized"))
                     for units in COUNT_TASKS}


def as_reference_stage(emit: EventSink, total: int | None = None) -> EventSink:
    """Show the reference capture's steps as the ``reference`` stage: stage changes and failures
    become notes, its progress is named for what it counts (``captured``, ``finalized``, of
    ``total`` when a count has none), its windows' states are passed on under ``reference`` (front
    ends end those windows' bars; the run's window grid is the candidate's), server lines are marked."""

    def relabelled(event: Event) -> None:
        if isinstance(event, WindowState):
            emit(dataclasses.replace(event, stage=STAGE))
            return
        if isinstance(event, Progress):
            task = _RELABELLED_TASKS.get((event.stage, event.task), event.task)
            emit(dataclasses.replace(event, stage=STAGE, task=task,
                                     total=event.total if event.total is not None else total))
            return
        if isinstance(event, StageFinished) and event.stage == "server":
            return  # loaded, not done: the ServerReady line below says it once
        if isinstance(event, StageStarted | StageFinished):
            what = "started" if isinstance(event, StageStarted) else "done"
            text = getattr(event, "detail", "") or getattr(event, "summary", "")
            emit(LogLine(STAGE, f"{event.stage} {what}{': ' + text if text else ''}"))
            return
        if isinstance(event, StageFailed):
            emit(Notice(STAGE, f"{event.stage}: {event.message}", level="error"))
            return
        if isinstance(event, LogLine) and event.stage == "server":  # still a server's line (--server-log)
            emit(dataclasses.replace(event, line=f"[reference server] {event.line}"))
            return
        if isinstance(event, ServerReady):
            emit(LogLine(STAGE, f"reference server ready at {event.url}"))
            return
        if isinstance(event, ResultReady):
            emit(LogLine(STAGE, f"comparison written to {event.path}" if event.path else "comparison done"))
            return
        emit(dataclasses.replace(event, stage=STAGE))

    return relabelled
