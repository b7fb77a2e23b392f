"""The compare stage's driver: :class:`Comparer` compares a workspace's windows (through the
per-window cache) and builds and publishes their report; :func:`run_compare` is the stage
(``kldtui compare``, the pipeline's compare step), and the pipeline calls
:meth:`Comparer.window` as each window is finalized."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path

from kldtui import capture_modes
from kldtui.capture_modes import ServerFigures
from kldtui.errors import BadInput
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    ResultReady,
    StageFinished,
    StageStarted,
    WindowState,
    failure_reported,
    null_sink,
)
from kldtui.formats.reference_identity import replayed_identity
from kldtui.formats.report_model import Comparator, ComparisonReport, SideDescription, Verified
from kldtui.formats.suite import Suite, WindowSpec, load_suite, units_of
from kldtui.stages.compare.cache import WindowCache
from kldtui.stages.compare.engine import Engine
from kldtui.stages.compare.figures import figures_window
from kldtui.stages.compare.hashing import manifest_sha256
from kldtui.stages.compare.inputs import load_sides, prepare
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.report import build_report
from kldtui.stages.compare.results import WindowResult
from kldtui.stages.compare.sides import HiddenSide, Side, load_side, memory_text
from kldtui.workspace import Workspace

# a report's reference and candidate descriptions and its comparator (None: a logits suite's report)
Described = tuple[tuple[SideDescription | None, SideDescription | None] | None, Comparator | None]


def compare_window(suite: Suite | str | os.PathLike[str], window: WindowSpec | int,
                   reference_dir: str | os.PathLike[str], candidate_dir: str | os.PathLike[str],
                   options: CompareOptions | None = None, cancel: Cancel | None = None,
                   emit: EventSink = null_sink, engine: Engine | None = None,
                   said: set[str] | None = None) -> WindowResult:
    """Validate and compare ONE window (e.g. as soon as it is finalized); ``said``: the notices about
    the inputs already given, as :func:`prepare` takes them."""
    options = options or CompareOptions()
    s = suite if isinstance(suite, Suite) else load_suite(suite)
    w = s.window(window) if isinstance(window, int) else window
    inputs = prepare(s, reference_dir, candidate_dir, options, emit, cancel, windows=[w], said=said)
    if engine is not None:
        return engine.compare_window(inputs, w, emit, cancel)
    with Engine(inputs.vocab_size, options, emit) as eng:
        return eng.compare_window(inputs, w, emit, cancel)


class Comparer:
    """Compares the windows of one workspace and builds their report.

    Window results are kept in the workspace's per-window cache (``compare/window-NNN.json``)
    when it has one, keyed by both files' SHA-256 and the options that change the numbers: a
    rerun reuses them. :meth:`window` compares one window as soon as it is finalized (the
    pipeline); :meth:`windows` validates every window before the first row (``kldtui compare``).
    What the candidate folder holds is its capture mode's (``options.mode``; None: the mode whose
    finalized manifest is there): figures its server computed are read, never computed.
    """

    def __init__(self, workspace: Workspace, suite: Suite, options: CompareOptions, *,
                 emit: EventSink = null_sink, cancel: Cancel | None = None) -> None:
        self.workspace = workspace
        self.suite = suite
        self.options = options
        self.mode = options.mode or capture_modes.finalized_in(workspace.candidate) or capture_modes.DEFAULT
        self.emit = emit
        self.cancel = cancel
        self.cache = WindowCache(workspace, options)
        self.computed = 0  # windows compared (not taken from the cache) by this comparer
        self.engine_info: tuple[str, int | None] | None = None  # (backend, threads) of windows()
        self.verified: Verified | None = None
        self.reference_manifest_sha256: str | None = None
        self.described: Described | None = None
        self.server_figures = False  # windows() of figures a server computed (score mode), one at a time
        self.head_sha256: dict[str, str] = {}  # role -> the LM head's file SHA-256, as prepare verified it
        self.said: set[str] = set()  # notices about the inputs given so far: each once per compare

    # -- comparing ------------------------------------------------------------------------------
    def window(self, window: WindowSpec, *, announce: bool = True,
               options: CompareOptions | None = None) -> WindowResult:
        """One window: the figures its server computed, else from the cache, else validated and
        compared now (``options`` may differ per window: the pipeline picks the backend by what
        else runs)."""
        ws = self.workspace
        figures = self.mode.server_figures(self.suite, ws.reference, ws.candidate, [window])
        if figures is not None:
            result = figures_window(figures, window, options or self.options)
            self.server_figures = True  # a server computed the figures: the report describes the reference
            self.computed += 1
        else:
            cached = self.cache.get(window)
            if cached is None:
                self.emit(WindowState.of("compare", window, "comparing"))
                cached = compare_window(self.suite, window, ws.reference, ws.candidate,
                                        options or self.options, self.cancel, emit=self.emit, said=self.said)
                self.computed += 1
                self.cache.put(window, cached)
            result = cached
        if announce:
            self._announce(window, result)
        return result

    def windows(self, windows: Sequence[WindowSpec] | None = None) -> list[WindowResult]:
        """Validate every window first (:func:`prepare`), then compare them with one engine."""
        ws, options = self.workspace, self.options
        selected = list(windows) if windows is not None else options.select(self.suite)
        figures = self.mode.server_figures(self.suite, ws.reference, ws.candidate, selected)
        if figures is not None:
            return self._figures_windows(figures, selected)
        inputs = prepare(self.suite, ws.reference, ws.candidate, self.options, self.emit, self.cancel,
                         windows=windows, said=self.said)
        self.verified = inputs.verified
        self.reference_manifest_sha256 = inputs.reference_manifest_sha256
        results: list[WindowResult] = []
        with Engine(inputs.vocab_size, self.options, self.emit) as engine:
            self.described = describe(inputs.reference, inputs.candidate, inputs.windows, self.options,
                                      engine, inputs.head_sha256)
            self.head_sha256 = inputs.head_sha256
            if inputs.replayed:
                sides = (inputs.reference, inputs.candidate)
                self.emit(Notice("compare", memory_text(sides, engine.replay_rows, inputs.vocab_size,
                                                             engine.replays)))
            for n, w in enumerate(inputs.windows):
                if self.cancel is not None:
                    self.cancel.check()
                r = self.cache.get(w)
                if r is None:
                    self.emit(WindowState.of("compare", w, "comparing"))
                    r = engine.compare_window(inputs, w, self.emit, self.cancel)
                    self.computed += 1
                    self.cache.put(w, r)
                results.append(r)
                self._announce(w, r)
                units = units_of(inputs.windows)
                self.emit(Progress("compare", task=units, done=n + 1, total=len(inputs.windows), unit=units))
            self.engine_info = (str(engine.backend), engine.threads)
        return results

    def _figures_windows(self, figures: ServerFigures, selected: Sequence[WindowSpec]) -> list[WindowResult]:
        """Windows whose figures the candidate's server computed (checked file by file)."""
        self.verified = Verified(token_hashes=True, suite_hash=True, logits_sha256="checked")
        self.reference_manifest_sha256 = manifest_sha256(figures.reference.path)
        self.server_figures = True
        self.described = self._reference_described(list(selected))
        results = []
        for n, w in enumerate(selected):
            if self.cancel is not None:
                self.cancel.check()
            r = figures_window(figures, w, self.options)
            self.computed += 1
            results.append(r)
            self._announce(w, r)
            units = units_of(selected)
            self.emit(Progress("compare", task=units, done=n + 1, total=len(selected), unit=units))
        self.engine_info = (figures.backend, None)
        return results

    def _announce(self, window: WindowSpec, r: WindowResult) -> None:
        self.emit(WindowState.of("compare", window, "compared", {
            "kl": r.kl_mean, "js": r.figure("js_mean"), "top1": r.top1_agreement, "rows": r.positions}))

    # -- the report -----------------------------------------------------------------------------
    def report(self, results: Sequence[WindowResult], *, command: str | None = None,
               elapsed_seconds: float | None = None) -> ComparisonReport:
        """The report of ``results``: the whole window range when every window of it is there,
        else the compared span. Backend and threads are named when this comparer computed every
        window itself with one engine (cached results may come from another)."""
        if not results:
            raise BadInput(f"{self.workspace.candidate}: no finalized {units_of(self.suite.windows)} to "
                           "compare; run capture and finalize first")
        options = self.options
        stop = options.stop_window if options.stop_window is not None else self.suite.window_count
        compared = sorted(r.window_index for r in results)
        complete = compared == list(range(options.start_window, stop))
        ref_sha = self.reference_manifest_sha256 or manifest_sha256(self.workspace.reference_manifest)
        own = self.engine_info is not None and self.computed == len(results)
        backend, threads = self.engine_info if own and self.engine_info else (None, None)
        verified = self._identity_unchecked(compared, self.verified)
        described = self.described
        if described is None:
            described = (self._reference_described([self.suite.window(i) for i in compared])
                         if self.server_figures else self._describe(results))
        sides, comparator = described
        return build_report(
            results, suite=self.suite, reference_dir=self.workspace.reference,
            candidate_dir=self.workspace.candidate, options=options,
            window_range=(options.start_window, stop) if complete else (compared[0], compared[-1] + 1),
            reference_manifest_sha256=ref_sha, verified=verified, elapsed_seconds=elapsed_seconds,
            backend=backend, threads=threads, command=command, sides=sides, comparator=comparator,
            reference_identity_sha256=self._reference_identity(results))

    def _reference_identity(self, results: Sequence[WindowResult]) -> str | None:
        """A replayed reference's identity over the compared contexts (None for a logits reference:
        the report takes it from the folder's manifest; None for figures a server computed, whose
        replay's rounding is the server's)."""
        if self.server_figures:
            return None
        compared = sorted(r.window_index for r in results)
        try:
            ref = load_side(self.workspace.reference, "reference", lm_head=self.options.lm_head,
                            suite_dir=self.suite.root, replay_dtype=self.options.replay_dtype)
        except BadInput:
            return None  # a folder build_report reads itself (or one that is gone)
        return replayed_reference_identity(ref, [self.suite.window(i) for i in compared], self.options,
                                           self.head_sha256)

    def _reference_described(self, windows: list[WindowSpec]) -> Described:
        try:
            ref = load_side(self.workspace.reference, "reference", lm_head=self.options.lm_head,
                            suite_dir=self.suite.root)
        except BadInput:
            return None, None  # the server's figures were checked against it; nothing more to say
        return describe_reference(ref, windows)

    def _describe(self, results: Sequence[WindowResult]) -> Described:
        """What the sides were, for a report of windows compared one at a time (the pipeline) or
        taken from the cache: read from the folders' manifests now."""
        ws = self.workspace
        ref, cand = load_sides(self.suite, ws.reference, ws.candidate, self.options)
        windows = [self.suite.window(r.window_index) for r in results]
        return describe(ref, cand, windows, self.options, None, {})

    def _identity_unchecked(self, compared: list[int], verified: Verified | None) -> Verified | None:
        """Files whose window identity could not be checked (no header metadata) are named in the
        report and said at once: never skipped silently. A folder without a logits manifest (score
        mode's candidate) has no such files."""
        from kldtui.formats.identity import unchecked_windows
        from kldtui.formats.suite import load_logits_manifest

        unchecked: list[str] = []
        ws = self.workspace
        for side, folder in (("reference", ws.reference), ("candidate", ws.candidate)):
            try:
                unchecked += unchecked_windows(load_logits_manifest(folder), compared, side)
            except BadInput:
                continue
        if not unchecked:
            return verified
        self.emit(Notice("compare", f"window identity NOT checked for {len(unchecked)} file(s) whose header "
                                    f"carries no window metadata ({', '.join(unchecked[:4])}"
                                    f"{', ...' if len(unchecked) > 4 else ''}): a file swapped with another "
                                    "window's would not be noticed; the report names them", level="warning"))
        base = verified or Verified(token_hashes=True, suite_hash=True, logits_sha256="skipped")
        return dataclasses.replace(base, window_identity_unchecked=unchecked)

    def publish(self, report: ComparisonReport) -> None:
        """Write the report to the workspace's report path (when it has one) and say so."""
        from kldtui.formats.report import headline, summary_text, write_report

        path = self.workspace.report_path
        if path is not None:
            write_report(path, report)
            self.emit(ResultReady("compare", path=str(path), report=report))
        summary = summary_text(report).strip().splitlines()
        self.emit(StageFinished("compare", summary=summary[0] if summary else "",
                                figures=headline(report)))


def replayed_reference_identity(ref: Side, windows: Sequence[WindowSpec], options: CompareOptions,
                                head_sha256: dict[str, str]) -> str | None:
    """The report's ``reference_identity_sha256`` for a hidden-state reference: its files over
    ``windows``, the head's file SHA-256 (as verified, else as its manifest says) and the replay's
    rounding (kldtui.formats.reference_identity). None for a logits reference."""
    if not isinstance(ref, HiddenSide):
        return None
    return replayed_identity(ref.manifest, head_sha256.get(ref.role, ref.head.file_sha256 or ""),
                             ref.output, [w.index for w in windows])


def current_reference_identity(reference_dir: Path, suite_dir: Path, windows: Sequence[int]) -> str | None:
    """The ``reference_identity_sha256`` a comparison against ``reference_dir`` over ``windows``
    records, from the folder as it is now: a hidden-state reference's replayed with the head compare
    finds for it (as its manifest names it), a logits folder's from its manifest; None where it
    cannot be read (a campaign then compares again rather than trust a report)."""
    from kldtui.errors import KldError
    from kldtui.formats.reference_identity import reference_identity_of

    try:
        ref = load_side(reference_dir, "reference", suite_dir=suite_dir)
    except (KldError, OSError, ValueError):
        return None
    if isinstance(ref, HiddenSide):
        return replayed_identity(ref.manifest, ref.head.file_sha256, ref.output, windows)
    return reference_identity_of(reference_dir, windows)


def side_description(side: Side, windows: list[WindowSpec], head_sha256: dict[str, str]) -> SideDescription:
    info = side.info(windows)
    return SideDescription(kind=info.kind, label=info.label, manifest_sha256=info.manifest_sha256,
                           lm_head_file_sha256=head_sha256.get(side.role, info.lm_head_file_sha256),
                           file_dtype=info.file_dtype, bytes_on_disk=info.bytes_on_disk,
                           full_logits_bytes=info.full_logits_bytes)


def describe_reference(ref: Side, windows: list[WindowSpec]) -> Described:
    """For figures a server computed (score mode): the candidate folder holds no logits to describe,
    but a replayed reference, or a suite of contexts, is still described (what the reference was and
    its size on disk: the report's and the dashboard's reference line)."""
    if not isinstance(ref, HiddenSide) and not (windows and windows[0].context):
        return None, None
    return (side_description(ref, windows, {}), None), None


def describe(ref: Side, cand: Side, windows: list[WindowSpec], options: CompareOptions, engine: Engine | None,
             head_sha256: dict[str, str]) -> Described:
    """The report's ``reference``, ``candidate`` and ``comparator`` objects: written when a side
    is replayed or the suite's windows are contexts (a logits suite's report keeps its fields)."""
    replayed = isinstance(ref, HiddenSide) or isinstance(cand, HiddenSide)
    if not replayed and not (windows and windows[0].context):
        return None, None
    infos = [side_description(side, windows, head_sha256) for side in (ref, cand)]
    comparator = None
    if replayed:
        settings = engine.replays.settings() if engine is not None else {}
        cuda = str(settings.get("device", "")).startswith("cuda")
        outputs = sorted({s.output for s in (ref, cand) if isinstance(s, HiddenSide)})
        bf16_gemm = ("/".join(sorted({engine.replays.gemm_path(o) for o in outputs}))
                     if engine is not None else None)
        comparator = Comparator(
            two_pass_full_vocabulary=True,
            lm_head_file_sha256=infos[0].lm_head_file_sha256,
            candidate_lm_head_file_sha256=infos[1].lm_head_file_sha256,
            replay_dtype="/".join(sorted({s.output for s in (ref, cand) if isinstance(s, HiddenSide)})),
            vocab_chunk=options.vocab_chunk,
            replay_rows=engine.replay_rows if engine is not None else None,
            position_block=engine.row_block if engine is not None else None,
            device=settings.get("device"), library=settings.get("library"),
            tf32=False if cuda else None, bf16_reduced_precision_reduction=False if cuda else None,
            source_file_hashes_verified=options.verify_sha256, bf16_gemm=bf16_gemm)
    return (infos[0], infos[1]), comparator


def run_compare(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                options: CompareOptions | None = None, suite: Suite | str | os.PathLike[str] | None = None,
                windows: Sequence[WindowSpec] | None = None, command: str | None = None) -> ComparisonReport:
    """The compare stage: validate everything, compare ``windows`` (default: the options' range;
    cached results are reused), write ``workspace.report`` (when set); return the report.
    ``suite`` is the loaded suite or its manifest's path (default: the workspace's suite folder)."""
    options = options or CompareOptions()
    t0 = time.perf_counter()
    emit(StageStarted("compare", detail=f"{workspace.reference} vs {workspace.candidate}"))
    with failure_reported(emit, "compare"):
        s = suite if isinstance(suite, Suite) else load_suite(workspace.suite_dir if suite is None else suite)
        comparer = Comparer(workspace, s, options, emit=emit, cancel=cancel)
        results = comparer.windows(windows)
        report = comparer.report(results, command=command, elapsed_seconds=time.perf_counter() - t0)
        comparer.publish(report)
    return report


def compare(suite_manifest: str | os.PathLike[str] | Suite, reference_dir: str | os.PathLike[str],
            candidate_dir: str | os.PathLike[str], options: CompareOptions | None = None,
            emit: EventSink = null_sink, cancel: Cancel | None = None,
            command: str | None = None) -> ComparisonReport:
    """Validate everything, compare every selected window, and return the report (nothing written)."""
    where = suite_manifest.root if isinstance(suite_manifest, Suite) else Path(suite_manifest)
    workspace = Workspace.for_compare(where, reference_dir, candidate_dir)
    return run_compare(workspace, emit, cancel, options=options, suite=suite_manifest, command=command)


__all__ = ["Comparer", "compare", "compare_window", "current_reference_identity", "describe", "run_compare"]
