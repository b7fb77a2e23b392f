"""Stage chaining: reference -> server -> capture -> finalize -> compare, driven by a profile.

API (used by ``kldtui run``, ``kldtui demo`` and the dashboard's workers)::

    pipeline = Pipeline(profile, emit, cancel)   # emit: EventSink, cancel: Cancel | None
    state = pipeline.run_all()                   # everything, overlapped; stops the server;
                                                 # the RunState it leaves (report, windows, KL)

    # or stage by stage (each is resumable and may be called alone):
    pipeline.load_suite()       # the suite only (no reference logits needed)
    pipeline.reference()        # download/verify the suite + reference logits (Hub or local);
                                # with [reference] capture, capture missing reference logits
                                # first (kldtui.stages.reference_capture)
    pipeline.serve()            # start the candidate server and wait until ready (or attach)
    pipeline.capture()          # capture every window of the range (server must be up)
    pipeline.candidate_head()   # hidden mode: the candidate's own LM head, exported from its
                                # checkpoint when missing (finalize and compare ask it too)
    pipeline.finalize()         # merge captured chunks into workdir/candidate
    pipeline.compare()          # compare all finalized windows, write workdir/comparison.json
    pipeline.stop_server()      # SIGINT/SIGTERM/SIGKILL the server's process group

All progress goes through ``emit`` (events of :mod:`kldtui.events`, stage names ``reference``,
``server``, ``capture``, ``finalize``, ``compare``); :class:`~kldtui.events.WindowState` events
carry ``figures={"kl": mean KL, ...}`` once a window is compared, so a window grid fills in live.
Setting ``cancel`` stops the current stage at its next safe point with
:class:`~kldtui.errors.Interrupted`; state on disk stays resumable.

Overlap (``run_all``): the server starts first and loads while the reference is fetched and
verified; then each window is finalized and compared in a second thread as soon as it is
captured, while the next window is being captured. With ``[compare] abort_kl_above`` the run
stops (StageFailed) after the first window whose mean KL is above it, after writing the report
of the windows compared so far.

The pipeline only schedules: each stage is its driver's (kldtui.stages), the servers' kinds are
kldtui.servers', every path is the workspace's (:attr:`Pipeline.workspace`,
:class:`kldtui.workspace.Workspace`: the work folder layout).
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kldtui import events
from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput, Interrupted, KldError, StageFailed
from kldtui.events import (
    Cancel,
    EarlyAbort,
    Event,
    EventSink,
    LogLine,
    Notice,
    StageFinished,
    StageStarted,
    WindowState,
    failure_reported,
    null_sink,
)
from kldtui.folder_lock import FolderLocks
from kldtui.formats.suite import Suite, WindowSpec, load_logits_manifest, load_suite, unit_of, units_of
from kldtui.servers.base import CaptureTarget, ServerConfig, server_identity
from kldtui.servers.registry import kind_of
from kldtui.stages.reference_capture import (
    REFERENCE_MODE,
    ReferenceCapture,
    RepeatCompare,
    reference_complete,
)
from kldtui.stages.serve import stop_reason
from kldtui.text import human_bytes, precise_number, shell_arg
from kldtui.workflow.control import StageRequest
from kldtui.workflow.profile import Profile
from kldtui.workflow.state import RunState
from kldtui.workspace import Workspace


class _LinkedCancel(Cancel):
    """A Cancel that is also set when its parent is (the pipeline's own stop, e.g. early abort)."""

    def __init__(self, parent: Cancel | None) -> None:
        super().__init__()
        self.parent = parent

    def is_set(self) -> bool:
        if self.parent is not None and self.parent.is_set():
            self.reason = self.parent.reason
            return True
        return super().is_set()

    def check(self) -> None:
        if self.is_set():
            raise Interrupted(self.reason)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.is_set():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            super().wait(min(left, 0.1))


def _only_problems(emit: EventSink) -> EventSink:
    """``emit`` for a check made again whose passing was said already: its warnings, errors and
    failure go on, its start, notes, progress and end do not."""

    def relay(event: Event) -> None:
        problem = isinstance(event, Notice | LogLine) and event.level in ("warning", "error")
        if problem or isinstance(event, events.StageFailed):
            emit(event)

    return relay


class Pipeline:
    """The whole chain for one profile; see the module docstring."""

    def __init__(self, profile: Profile, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                 output_dir: Path | None = None, output_kind: str = "candidate",
                 workspace: Workspace | None = None, reference_checked: bool = False) -> None:
        # the profile a run of its own (not one of a campaign's candidates, whose campaign claims) claims
        # its files in the work folder for (kldtui.workflow.owners) before it writes there or starts a
        # server; a campaign profile given here (its first candidate, stage by stage) claims as a campaign
        self._claimer = profile if workspace is None else None
        claimed_in = profile.workspace() if profile.is_campaign else None  # (a single profile: its own)
        if profile.is_campaign:  # stage by stage: the first candidate, in its campaign folders;
            # kldtui.workflow.campaign runs them all
            first = profile.candidates[0]
            workspace = profile.member_workspace(first.name) if workspace is None else workspace
            profile = profile.member(first)
        self.profile = profile
        self.output_dir = output_dir
        self.output_kind = output_kind
        self.emit = emit
        self.user_cancel = cancel
        self.cancel = _LinkedCancel(cancel)
        self.run_name = profile.run.run_name
        workspace = profile.workspace() if workspace is None else workspace
        self._workspace = workspace if output_dir is None else workspace.with_candidate_dir(output_dir)
        self._claimed_in = claimed_in or self._workspace
        self.suite: Suite | None = None
        # a campaign checked the shared reference before its first candidate: the check each candidate's
        # run makes again says only what went wrong (it repeated every line of the first for each)
        self.reference_checked = reference_checked
        self._lock = threading.Lock()
        self._abort_message: str | None = None
        self._reference_capture: ReferenceCapture | None = None  # while it runs
        # kldtui.stages.serve.ServerSession of the server in use: the one record of it (server,
        # base_url, server_capture_dir and runtime below read it)
        self._session: Any = None
        self._locks = FolderLocks()
        self._backend_line: str | None = None  # the compare backend's choice said last (BackendChosen)

    # -- one writer per folder --------------------------------------------------------------------
    def lock_folders(self) -> None:
        """Take (once) the locks of every folder this pipeline writes: the work folder, the
        capture and candidate folders, and the suite folder when the reference is fetched or
        captured into it.
        A second kldtui on one of them gets BadInput naming the holder (kldtui.folder_lock).
        Held until :meth:`release_folders` or the end of the process."""
        ref = self.profile.reference
        ws = self._workspace
        # the capture folder too: `kldtui capture --capture-dir` on it locks that folder itself
        folders = [f for f in (ws.workdir, ws.capture_root, ws.candidate_dir) if f is not None]
        if ref.repo_id or ref.capture:
            folders.append(self._workspace.suite_dir)
        # the run's report too: `kldtui compare --output WORKDIR/comparison.json` meanwhile is refused
        report = [ws.report_path] if ws.report_path is not None else []
        if self._locks.held:
            return
        self.claim_folder("run")  # before any folder is made: another profile's is refused first
        self._locks.acquire(folders, what="work folder", files=report, fixed_names=True)

    def claim_folder(self, stage: events.StageName) -> None:
        """A profile's own run checks and records that what it writes in the work folder is its own
        (:func:`kldtui.workflow.owners.claim`) before it writes there or starts a server; a campaign's
        candidate does not (its campaign claims)."""
        if self._claimer is not None:
            from kldtui.workflow.owners import claim

            claim(self._claimer, self._claimed_in, self.emit, stage)

    def release_folders(self) -> None:
        self._locks.release()

    @property
    def workspace(self) -> Workspace:
        """Every path of the run (the front ends ask it, not the pipeline)."""
        return self._workspace

    # -- stages ---------------------------------------------------------------------------------
    def load_suite(self) -> Suite:
        """Load and check the suite (token hashes are checked when each window is used)."""
        if self.suite is None:
            suite = load_suite(self._workspace.suite_dir)
            suite.check_suite_hash()
            self.suite = suite
        return self.suite

    def windows(self) -> list[WindowSpec]:
        """The windows the run covers: ``[run]`` range, ``context_filter`` and ``strata``."""
        return self.profile.windows(self.load_suite())

    def reference(self) -> Suite:
        """Fetch (Hub) or find (local folder) the suite and its reference logits; verify them.

        With ``[reference] capture`` (``embedded`` for the demo, ``vllm``, ``attach``) missing
        reference logits are first captured and finalized into ``local_dir/ref``. A campaign's
        candidate (``reference_checked``) checks it again quietly: only what went wrong is said.
        """
        from kldtui.stages.reference import run_reference

        ref = self.profile.reference
        self.lock_folders()
        with failure_reported(self.emit, "reference"):
            if ref.server is not None and not reference_complete(self._workspace, self.windows()):
                self._capture_reference(ref.server)
        run = self.profile.run
        emit = _only_problems(self.emit) if self.reference_checked else self.emit
        result = run_reference(self._workspace, emit, self.cancel, repo_id=ref.repo_id,
                               revision=ref.revision, start_window=run.start_window,
                               stop_window=run.stop_window, selection=self.profile.contexts())
        self.suite = result.suite
        return self.load_suite()

    def _capture_reference(self, server: ServerConfig) -> None:
        """The reference capture stage (kldtui.stages.reference_capture) with the reference's
        server; it is reachable for :meth:`stop_server` while it runs."""
        self.cancel.check()  # a stop asked before this stage: no server is launched
        ref = self.profile.reference
        kind = kind_of(server)
        cmp_ = self.profile.compare
        capture = ReferenceCapture(
            self._workspace, self.emit, self.cancel,
            plan=kind.plan(server, CaptureTarget(REFERENCE_MODE)),
            request_timeout=server.request_timeout, suite=self.load_suite(), windows=self.windows(),
            window_range=self._window_range(), keep_chunks=self.profile.run.keep_chunks,
            repeat=ref.repeat if ref.repeat is not None else not kind.builtin,
            records_to_suite=not kind.builtin,  # a built-in model's demo suite keeps its layout
            compare=RepeatCompare(cmp_.bootstrap_samples, cmp_.bootstrap_seed, cmp_.reverse, cmp_.backend,
                                  cmp_.threads),
            command=self._command(), identity=server_identity(server))
        self._reference_capture = capture
        try:
            capture.run()
        finally:
            self._reference_capture = None

    def server_plan(self) -> Any:
        """The serve stage's plan for this pipeline's server (see :func:`server_plan`)."""
        from kldtui.workflow.profile import server_plan

        return server_plan(self.profile, workspace=self._workspace)

    def start_server(self) -> None:
        """Start the candidate server (returns while it loads; an attached one is checked by
        :meth:`serve`)."""
        if self._session is not None:
            return
        # no folder lock here: `kldtui serve` keeps a server up while other shells capture and
        # finalize into the work folder; the server writes only its own fresh capture folder
        from kldtui.stages.serve import start_serve

        self.cancel.check()  # a stop asked before the run started: no server is launched
        self.claim_folder("server")  # another profile's work folder: refused before its server starts
        self._session = start_serve(self._workspace, self.emit, self.server_plan())

    def serve(self) -> str:
        """The serve stage (:func:`~kldtui.stages.serve.run_serve`): start the server, or check the
        attached one, and wait until it is ready; return its URL."""
        from kldtui.stages.serve import run_serve

        if self.base_url is not None:
            return self.base_url
        if self._session is None:  # the server stage alone (the dashboard's): it starts one here
            self.claim_folder("server")
        try:
            self._session = run_serve(self._workspace, self.emit, self.cancel, self.server_plan(),
                                      session=self._session)
        except BaseException:
            self._session = None
            raise
        url: str = self._session.url
        return url

    @property
    def stopped_early(self) -> bool:
        """The run stopped itself ([compare] abort_kl_above): a verdict, its report written."""
        return self._abort_message is not None

    @property
    def server(self) -> Any:
        """The server process this pipeline started (a ServerProcess; None when attached or none)."""
        return self._session.process if self._session is not None else None

    @property
    def base_url(self) -> str | None:
        """The server's URL once it is ready."""
        return self._session.url if self._session is not None else None

    @property
    def server_capture_dir(self) -> Path | None:
        """Where the server in use writes its capture chunks."""
        return self._session.capture_dir if self._session is not None else None

    @property
    def runtime(self) -> dict[str, Any]:
        """The server's identity for manifests (secrets redacted), with the profile's settings that
        make the candidate what it is (``identity``: kldtui.servers.base.server_identity)."""
        if self._session is None:
            return {}
        return {**self._session.runtime, "identity": self.server_identity}

    @property
    def server_identity(self) -> dict[str, Any]:
        """The candidate server's settings that change what it answers (recorded per window)."""
        return server_identity(self.profile.candidate)

    def capture(self, on_window_captured: Callable[[WindowSpec, Any], None] | None = None) -> list[Any]:
        """Capture the window range (resumes from the capture records), starting the server when it
        is not up (the dashboard's capture stage run on its own). Records of another capture mode or
        server settings are refused first (:func:`~kldtui.stages.capture.changed_server`, as
        ``kldtui run``'s preflight): before a server starts, not after it loaded."""
        from kldtui.stages.capture import CaptureServer, changed_server, run_capture

        self.lock_folders()
        suite = self.load_suite()
        with failure_reported(self.emit, "capture"):
            if (changed := changed_server(self._workspace, self.server_identity, self.mode,
                                          windows=suite.windows)) is not None:
                windows = self.windows()
                self.emit(StageStarted("capture", detail=f"{len(windows)} {units_of(windows)} -> "
                                                         f"{self._workspace.run_dir}"))
                raise BadInput(changed)
        url = self.serve()
        assert self.server_capture_dir is not None
        plan = self._session.plan
        live = self.mode.live_sample(suite, self.windows(), self.profile.capture.replay_check)
        server = CaptureServer(url, plan.served_model_name, self.server_capture_dir,
                               api_key=plan.api_key, request_timeout=self.profile.candidate.request_timeout,
                               mode=self.mode,
                               alive=self.server.alive if self.server is not None else None,
                               live_windows=live, identity=self.server_identity)
        return run_capture(self._workspace, self.emit, self.cancel, suite=suite, windows=self.windows(),
                           server=server, expected_vocab=self._expected_vocab(),
                           on_window_captured=on_window_captured, finalized=self._finalized_predicate())

    def candidate_head(self) -> Path | None:
        """Hidden mode: put the candidate's own LM head in its folder when it is missing, the same
        model's reused (a repeat capture's leader's) or exported from its checkpoint
        (kldtui.stages.candidate_head); the folder written, else None."""
        from kldtui.stages.candidate_head import export_candidate_head

        ws = self._workspace
        if ws.candidate_dir is None:
            return None
        self.lock_folders()
        return export_candidate_head(self.mode, self.profile.candidate, ws, emit=self.emit)

    def finalize(self) -> Path:
        """Finalize every captured window of the range (already finalized ones are kept)."""
        from kldtui.stages.finalize import run_finalize

        self.lock_folders()
        self.candidate_head()  # the replay check's
        done = self._captured_indices()
        windows = [w for w in self.windows() if w.index in done]
        if not windows:
            self.emit(StageStarted("finalize", detail=str(self._workspace.candidate)))
            self.emit(StageFinished("finalize", summary=f"0 {units_of(self.windows())} in "
                                                        f"{self._workspace.candidate}",
                                    figures={"windows": 0}))
            return self._workspace.candidate
        run_finalize(self._workspace, self.emit, self.cancel, suite=self.load_suite(), windows=windows,
                     kind=self.output_kind, runtime=self.runtime or None,
                     window_range=self._window_range(), expected_vocab=self._expected_vocab(),
                     keep_chunks=self.profile.run.keep_chunks, mode=self.mode)
        return self._workspace.candidate

    def compare(self) -> Path:
        """Compare every finalized window (reusing stored results) and write the report."""
        from kldtui.stages.compare import run_compare
        from kldtui.stages.finalize import load_finalized

        self.lock_folders()
        self.candidate_head()  # compare replays the candidate with it
        with failure_reported(self.emit, "compare"):
            finalized = load_finalized(self._workspace, self.load_suite(), self.emit, self.mode)
            windows = [w for w in self.windows() if w.index in finalized]
            if not windows:
                ws = self._workspace
                self.emit(StageStarted("compare", detail=f"{ws.reference} vs {ws.candidate}"))
                raise BadInput(f"{ws.candidate}: no finalized {units_of(self.windows())} to compare; run "
                               "capture and finalize first")
            options = self._compare_options()  # an explicit backend that cannot run here: refused now
        run_compare(self._workspace, self.emit, self.cancel, options=options,
                    suite=self.load_suite(), windows=windows, command=self._command())
        return self._workspace.report

    def stop_server(self, reason: str = "done") -> None:
        """Stop the server we started (never an attached one); safe to call any time."""
        capture = self._reference_capture
        if capture is not None:
            capture.stop_server(reason)
        server = self.server
        if server is not None:
            server.stop(reason=reason)
            self._session = None

    @property
    def server_running(self) -> bool:
        """True while a server this pipeline started is up (the dashboard asks before quitting)."""
        capture = self._reference_capture
        return (self.server is not None and self.server.alive() is None) or (
            capture is not None and capture.server_running)

    def window_list(self) -> list[tuple[int, str]]:
        """``(index, domain)`` of the windows this run covers (empty until the suite is there)."""
        try:
            return [(w.index, w.domain) for w in self.windows()]
        except KldError:
            return []

    def run_stage(self, stage: StageRequest) -> object:
        """Run one pipeline stage by its name (or ``"all"``); see :class:`PipelineControl`."""
        if stage == "all":
            return self.run_all()
        if stage == "reference":
            return self.reference()
        if stage == "server":
            return self.serve()
        if stage == "capture":
            return self.capture()
        if stage == "finalize":
            return self.finalize()
        return self.compare()

    @property
    def server_url(self) -> str | None:
        return self.base_url

    # -- everything, overlapped -------------------------------------------------------------------
    def run_all(self) -> RunState:
        """Reference + server concurrently, then capture with finalize+compare per window; return
        the state the run leaves (the report, per-window KL, the suite's size: what the front ends
        show next)."""
        from kldtui.stages.compare import Comparer
        from kldtui.stages.finalize import Finalizer
        from kldtui.workflow.owners import owner_problem
        from kldtui.workflow.preflight import preflight, refuse
        from kldtui.workflow.state import state_after_run

        # before anything is launched: another profile's run in the work folder first (its other
        # problems would not matter here)
        owned = owner_problem(self._claimer, self._claimed_in) if self._claimer is not None else None
        refuse([owned] if owned else preflight(self.profile, self._workspace), self.emit, "run")
        self.lock_folders()
        try:
            try:
                self.start_server()
                self.candidate_head()  # while the server loads
                self.reference()
                self.serve()
            except BaseException as exc:
                self.stop_server(reason=stop_reason(exc))
                raise
            suite = self.load_suite()
            finalizer = Finalizer(self._workspace, suite, kind=self.output_kind,
                                  runtime=self.runtime or None, window_range=self._window_range(),
                                  expected_vocab=self._expected_vocab(),
                                  keep_chunks=self.profile.run.keep_chunks, emit=self.emit,
                                  cancel=self.cancel, mode=self.mode)
            comparer = Comparer(self._workspace, suite, self._compare_options(), emit=self.emit,
                                cancel=self.cancel)
            self._disk_preflight(set(finalizer.written))
            work: queue.Queue[WindowSpec | None] = queue.Queue()
            failure: list[BaseException] = []
            queued: set[int] = set()
            by_index = {w.index: w for w in self.windows()}

            def enqueue(index: int) -> None:
                with self._lock:
                    if index in queued or index not in by_index:
                        return
                    queued.add(index)
                work.put(by_index[index])

            def on_captured(window: WindowSpec, record: Any) -> None:
                enqueue(window.index)

            ws = self._workspace
            self.emit(StageStarted("finalize", detail=str(ws.candidate)))
            self.emit(StageStarted("compare", detail=f"{ws.reference} vs {ws.candidate}"))
            worker = threading.Thread(target=self._window_worker, args=(work, failure, finalizer, comparer),
                                      name="kldtui-finalize-compare", daemon=True)
            worker.start()
            ended: BaseException | None = None  # how the capture ended, when it raised
            try:
                # windows an earlier run captured come through on_captured once the capture has checked
                # them (a record whose window is gone is dropped and captured again, never finalized)
                try:
                    self.capture(on_window_captured=on_captured)
                except Interrupted:
                    # our own stop (early abort, or a finalize/compare failure) is reported below
                    if self._abort_message is None and not failure:
                        raise
                for index in sorted(self._captured_indices()):
                    enqueue(index)
            except BaseException as exc:
                ended = exc
                raise
            finally:
                work.put(None)
                while worker.is_alive():
                    worker.join(timeout=0.2)
                # the reason is what happened: a user's stop, or a capture that failed (its server
                # died), is not "capture finished"
                reason = "error" if failure else "early abort" if self._abort_message is not None \
                    else "interrupted" if self.cancel.is_set() \
                    else stop_reason(ended) if ended is not None else "capture finished"
                self.stop_server(reason=reason)
            if failure:
                raise failure[0]
            if self._abort_message is not None:  # the stop was ours: report what was compared
                self.cancel = _LinkedCancel(self.user_cancel)
                comparer.cancel = self.cancel
            written = finalizer.written
            if written:  # what the mode adds once the windows are in: hidden mode's live manifest and
                finalizer.finish()  # replay check (as `kldtui finalize` does)
            self.emit(StageFinished("finalize", summary=f"{len(written)} {units_of(self.windows())} in "
                                                        f"{ws.candidate}",
                                    figures={"windows": len(written)}))
            results = [comparer.window(w, announce=False) for w in self.windows() if w.index in written]
            if not results:
                raise StageFailed(f"{self._workspace.candidate}: no {unit_of(self.windows())} was captured "
                                  "and finalized")
            report = comparer.report(results, command=self._command())
            comparer.publish(report)
            if self._abort_message is not None:
                raise StageFailed(self._abort_message)
            return state_after_run(suite, report, self._workspace.report_path,
                                   captured=self._captured_indices(), finalized=set(written))
        finally:
            self.stop_server(reason="stopped")
            self.release_folders()

    # -- internals ------------------------------------------------------------------------------
    def _window_worker(self, work: queue.Queue[WindowSpec | None], failure: list[BaseException],
                       finalizer: Any, comparer: Any) -> None:
        threshold = self.profile.compare.abort_kl_above
        while True:
            window = work.get()
            if window is None:
                return
            if failure or self._abort_message is not None:
                continue
            try:
                self.cancel.check()
                if window.index not in finalizer.written:
                    finalizer.finalize(window)
                result = comparer.window(window, options=self._compare_options())
                kl = result.kl_mean
                if threshold is not None and kl is not None and kl > threshold:
                    self._abort_message = (f"{window.label}: mean KL {precise_number(kl)} is above "
                                           f"abort_kl_above {threshold:g}; stopped early (report of the "
                                           f"{window.unit}s compared so far: {self._workspace.report})")
                    self.emit(Notice("compare", self._abort_message, level="error"))
                    self.emit(EarlyAbort("compare", self._abort_message,
                                         report_path=str(self._workspace.report)))
                    self.cancel.set("early abort: " + self._abort_message)
            except Interrupted as exc:
                failure.append(exc)  # the user stopped the run: the window is not failed
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                failure.append(exc)
                self.emit(WindowState.of("finalize", window, "failed", {"error": str(exc)}))
                self.cancel.set(f"stopped: {exc}")

    @property
    def mode(self) -> CaptureMode:
        """``[capture] mode``: what the server saves (kldtui.capture_modes)."""
        return self.profile.capture.mode

    def _expected_vocab(self) -> int | None:
        try:
            return load_logits_manifest(self._workspace.reference).vocab_size
        except BadInput:
            return None

    def _captured_indices(self) -> set[int]:
        """Windows listed in the capture records (docs/FORMATS.md: listed means complete)."""
        from kldtui.stages.capture import load_records

        return set(load_records(self._workspace.records_path, unit=unit_of(self.load_suite().windows)))

    def _window_range(self) -> tuple[int, int]:
        run = self.profile.run
        stop = run.stop_window if run.stop_window is not None else self.load_suite().window_count
        return (run.start_window, stop)

    def _finalized_predicate(self) -> Callable[[WindowSpec], bool]:
        """Whether a window is in the finalized folder (its chunks may be gone: keep_chunks off)."""
        from kldtui.stages.finalize import load_finalized

        done = set(load_finalized(self._workspace, self.load_suite(), mode=self.mode))
        return lambda w: w.index in done

    def _disk_preflight(self, finalized: set[int]) -> None:
        """Say before capturing how much disk the run needs at peak, and warn when it is short."""
        from kldtui.workflow.preflight import capture_need, reference_widths

        vocab, hidden = reference_widths(self._workspace)
        if vocab is None:
            return
        windows = self.windows()
        need = capture_need(self.profile, self.load_suite(), windows,
                            [w for w in windows if w.index not in finalized], vocab, hidden,
                            workspace=self._workspace)
        if need is None:  # e.g. score mode: a few dozen bytes a row
            return
        where = self._workspace.workdir or self._workspace.candidate
        probe = where
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        short = free < need.total
        self.emit(Notice("capture", f"disk: this run needs {need.describe()} in {where}; "
                         f"{human_bytes(free)} free" + ("; free space first or the capture will fail "
                                                         "with a full disk" if short else ""),
                         level="warning" if short else "info"))

    def _command(self) -> str:
        # a record in the report, read on other machines: the documented name, not kldtui_command()'s
        return f"kldtui run --profile {shell_arg(self.profile.where)}"

    def _compare_options(self) -> Any:
        from kldtui.stages.compare import CompareOptions

        cmp_ = self.profile.compare
        run = self.profile.run
        return CompareOptions(start_window=run.start_window, stop_window=run.stop_window,
                              bootstrap_samples=cmp_.bootstrap_samples, bootstrap_seed=cmp_.bootstrap_seed,
                              reverse=cmp_.reverse, backend=self._backend_choice(), mode=self.mode,
                              candidate_size=self.profile.candidate.model_size(),
                              context_filter=run.context_filter, strata=run.strata)

    def _serving(self) -> Any:
        """The server of this run on this host while it starts or runs (None: none here)."""
        from kldtui.stages.compare.backends import Serving
        from kldtui.stages.compare_beside import serving_of

        launched = serving_of(self._session, "the candidate server")
        if launched is not None:
            return launched
        capture = self._reference_capture
        if capture is not None and capture.server_running:
            return Serving(None, "the reference server")
        c = self.profile.candidate
        kind = kind_of(c)
        if not kind.launches and kind.is_local(c):  # up whether or not this run uses it
            return Serving(None, f"the {kind.describe(c)}")
        return None

    def _backend_choice(self) -> Any:
        """Which compare backend runs now, logged (to the dashboard and batch output) on change."""
        from kldtui.stages.compare_beside import choose_beside

        cmp_ = self.profile.compare
        choice = choose_beside(cmp_.backend, cmp_.threads, self._serving(), vocab=self._expected_vocab(),
                               emit=self.emit, said=self._backend_line)
        self._backend_line = choice.event().line
        return choice

