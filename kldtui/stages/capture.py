"""The capture client: one ``/v1/completions`` request per window, chunks moved and checked.

For each window (docs/FORMATS.md, "The capture request") the client sends the window's token ids with
``prompt_logprobs=1`` and an ``X-Request-Id`` of its own (``kldtui-<run>-wNNN-<random>``), so the
request folder the hook writes (``cmpl-<that id>-0-<8 hex>``) is found by name, never by guessing
"the newest folder". While the request runs it watches that folder and reports the rows landed.
After the answer it moves the folder to ``<capture-dir>/<run>/window-NNN-DOMAIN-chunks``, checks
the chunks by their metadata (rows ``0..N-2`` contiguous whatever the chunk edges, vocabulary,
F32, finite values, no error marker) and only then records the window in
``<capture-dir>/capture-<run>.json`` (atomic replace, sorted by window, the original tools'
fields). A window in the records is complete: a rerun re-checks its chunks and skips it (or, when
neither its chunks nor a finalized file stand for it any more, drops its record with a warning and
captures it again). A failed or interrupted window leaves nothing behind (its request folder and
moved folder are removed, no record).

Attach mode (a server started elsewhere) works the same way as long as the server's capture
folder is reachable from this host under ``server_capture_dir`` (same machine, or a shared
file system); the move falls back to copy-then-delete across file systems.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui import capture_modes, settings
from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput, Interrupted, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    LogLine,
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
from kldtui.formats.atomic import remove_tree_atomically, sweep_removals, write_json_atomic
from kldtui.formats.chunks import (
    ERROR_MARKER,
    LOGITS_CHUNKS,
    WRITER_RECORD_LIMIT,
    ChunkInfo,
    ChunkKind,
    ChunkSet,
    check_chunk_dir,
    request_tag,
    sanitize_request_id,
    writer_host,
    writers_dir,
)
from kldtui.formats.names import check_name, safe_name
from kldtui.formats.safe_io import read_failure, read_text
from kldtui.formats.safetensors_io import read_header
from kldtui.formats.suite import (
    Suite,
    WindowSpec,
    manifest_object,
    name_among,
    token_ids_hash,
    unit_of,
    units_of,
)
from kldtui.servers.base import identity_changes
from kldtui.text import plural
from kldtui.workspace import Workspace

STAGE: StageName = "capture"
POLL_INTERVAL = 0.1
# A finished request's folder and last chunk may take a moment to show in a listing: this long on a
# local file system, NETWORK_SETTLE_SECONDS on a shared one (NFS caches attributes for ~30 s);
# KLDTUI_LISTING_WAIT overrides both (listing_wait).
SETTLE_SECONDS = 2.0
NETWORK_SETTLE_SECONDS = 60.0
# The hook writes chunks in the background and marks each queued one with a pending file:
# after the answer, wait this long at most for them (a 2,048-row F32 chunk on a slow mount).
PENDING_SECONDS = 300.0
PENDING_PREFIX = ".pending.rows-"  # kldtui.hook.writer.PENDING_PREFIX
# bytes of a run's capture records read (capture/capture-RUN.json: about 1 KB a window, so a
# 10,000-window suite's take 10 MB)
CAPTURE_RECORDS_LIMIT = 64 * 1024 * 1024
# bytes of a finalized marker read (a window's chunk folder .finalized.json: a format, a window, a
# folder, a file name, a size and a hash take well under 1 KB)
FINALIZED_MARKER_LIMIT = 64 * 1024


# -- records ------------------------------------------------------------------------------------
@dataclass
class CaptureRecord:
    """One entry of ``capture-<run>.json`` (docs/FORMATS.md); ``extra`` keeps unknown fields."""

    window_index: int
    domain: str
    prompt_tokens: int
    request_id: str
    elapsed_seconds: float
    usage: dict[str, Any]
    finish_reason: str | None
    chunk_dir: str
    chunks: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = ("window_index", "domain", "prompt_tokens", "request_id", "elapsed_seconds", "usage",
              "finish_reason", "chunk_dir", "chunks")

    def to_dict(self) -> dict[str, Any]:
        doc = dict(self.extra)
        doc.update({k: getattr(self, k) for k in self.FIELDS})
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> CaptureRecord:
        if not isinstance(doc, dict):
            raise BadInput(f"{where}: each record must be an object; fix or delete the file")
        try:
            return cls(
                window_index=int(doc["window_index"]), domain=str(doc["domain"]),
                prompt_tokens=int(doc.get("prompt_tokens", 0)),
                request_id=str(doc.get("request_id", "")),
                elapsed_seconds=float(doc.get("elapsed_seconds", 0.0)),
                usage=dict(doc.get("usage") or {}), finish_reason=doc.get("finish_reason"),
                chunk_dir=str(doc.get("chunk_dir", "")), chunks=list(doc.get("chunks") or []),
                extra={k: v for k, v in doc.items() if k not in cls.FIELDS},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{where}: malformed record ({exc}); fix or delete the file") from None


def load_records(path: str | os.PathLike[str], *, unit: str) -> dict[int, CaptureRecord]:
    """Records by window index; a missing file is an empty run. ``unit``: what the suite's units are
    called (:func:`kldtui.formats.suite.unit_of`: ``window``, a hidden-state suite's ``context``), for
    the line that says what deleting the file recaptures."""
    p = Path(path)
    try:
        doc = json.loads(read_text(p, limit=CAPTURE_RECORDS_LIMIT))
    except FileNotFoundError:
        return {}
    except OSError as exc:  # a FIFO, a folder, no permission
        raise read_failure(p, exc, "capture records", "restore or delete the file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{p}: capture records are not valid JSON ({exc}); restore or delete the "
                       f"file (deleting it recaptures every {unit})") from None
    if not isinstance(doc, list):
        raise BadInput(f"{p}: capture records must be a JSON list; restore or delete the file (deleting it "
                       f"recaptures every {unit})")
    records = [CaptureRecord.from_dict(d, f"{p}[{i}]") for i, d in enumerate(doc)]
    return {r.window_index: r for r in records}


def save_records(path: str | os.PathLike[str], records: dict[int, CaptureRecord]) -> None:
    write_json_atomic(path, [records[i].to_dict() for i in sorted(records)])


# -- the client ---------------------------------------------------------------------------------
def _api_root(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _short(text: str, limit: int = 1500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _remove_tree(path: Path) -> None:
    """Whole or gone at any kill (:func:`kldtui.formats.atomic.remove_tree_atomically`)."""
    remove_tree_atomically(path)


def _move_folder(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_tree(dest)
    try:
        os.rename(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        tmp = dest.parent / f".{dest.name}.{os.getpid()}-{secrets.token_hex(4)}.copying"
        _remove_tree(tmp)
        shutil.copytree(src, tmp)
        os.rename(tmp, dest)
        shutil.rmtree(src, ignore_errors=True)


class _Request:
    """The HTTP request of one window, run in a daemon thread so the caller can keep watching."""

    def __init__(self, client: Any, url: str, body: dict[str, Any], headers: dict[str, str],
                 timeout: float) -> None:
        self.response: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, url, body, headers, timeout),
                                        name="kldtui-capture-request", daemon=True)
        self._thread.start()

    def _run(self, client: Any, url: str, body: dict[str, Any], headers: dict[str, str],
             timeout: float) -> None:
        try:
            self.response = client.post(url, json=body, headers=headers, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc
        finally:
            self.done.set()


class _WindowFailed(Exception):
    pass


@dataclass(frozen=True)
class CaptureServer:
    """The server a capture talks to, as seen from this host."""

    base_url: str
    served_model_name: str
    capture_dir: Path  # its VLLM_KLD_CAPTURE_DIR, reachable here
    api_key: str | None = None
    request_timeout: float = 600.0  # seconds per window's request
    # None while the server runs, else why it stopped (with its last log lines); None: not ours
    alive: Callable[[], str | None] | None = None
    mode: CaptureMode = capture_modes.DEFAULT  # what the server saves (its KLDTUI_CAPTURE_MODE)
    # windows whose live logits the server saves too (a mode that saves a live sample: hidden
    # mode's replay check, CaptureMode.live_sample); their requests are tagged for it
    live_windows: frozenset[int] = frozenset()
    # what the server is (kldtui.servers.base.server_identity) when kldtui launched it from a profile:
    # recorded for each window, and a window recorded from another one is never resumed with it
    identity: Mapping[str, Any] | None = None


def run_capture(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                suite: Suite, windows: Sequence[WindowSpec], server: CaptureServer,
                expected_vocab: int | None = None,
                on_window_captured: Callable[[WindowSpec, CaptureRecord], None] | None = None,
                finalized: Callable[[WindowSpec], bool] | None = None,
                ) -> list[CaptureRecord]:
    """The capture stage: capture ``windows`` (resuming); return their records in window order.

    Chunk folders go to the workspace's run folder, records to its ``records_path``.
    ``on_window_captured`` is called for each window that is complete, including windows skipped
    because an earlier run captured them. A recorded window whose chunks were deleted after
    finalizing (``finalized(window)`` true) counts as captured. The first failed window stops
    the capture with :class:`StageFailed`; cancelling raises :class:`Interrupted`. Either way
    the records list exactly the complete windows.
    """
    with failure_reported(emit, STAGE):
        check_name(workspace.run_name, "run name", str(workspace.captures))
        emit(StageStarted(STAGE, detail=f"{len(windows)} {units_of(windows)} -> {workspace.run_dir}"))
        records = load_records(workspace.records_path, unit=unit_of(suite.windows))
        if (changed := changed_server(workspace, server.identity, server.mode, records,
                                      windows=suite.windows)) is not None:
            raise BadInput(changed)
        results, todo, vocab = _resume(workspace, windows, records, expected_vocab, emit,
                                       on_window_captured, finalized, server.mode)
        return _capture_todo(workspace, suite, windows, todo, records, results, vocab, server, emit,
                             cancel, on_window_captured)


FINALIZED_FORMAT = "kldtui-finalized-v1"


def write_finalized_marker(workspace: Workspace, window: WindowSpec, folder: Path, file: str,
                           size_bytes: int, sha256: str) -> None:
    """Say, in the run folder, which verified file a window's chunks became (before they go)."""
    write_json_atomic(workspace.finalized_marker(window.chunk_dir_name), {
        "format": FINALIZED_FORMAT, "window_index": window.index,
        "token_ids_json_sha256": window.token_ids_json_sha256, "folder": str(Path(folder).resolve()),
        "file": file, "size_bytes": size_bytes, "sha256": sha256})


def finalized_elsewhere(workspace: Workspace, window: WindowSpec) -> Path | None:
    """The finalized file a window's (deleted) chunks became, when the run folder's marker names
    one that is there with its recorded size and the window's tokens; None otherwise."""
    try:
        marker = workspace.finalized_marker(window.chunk_dir_name)
        doc = json.loads(read_text(marker, limit=FINALIZED_MARKER_LIMIT))
        if (doc.get("format") != FINALIZED_FORMAT or doc.get("window_index") != window.index
                or doc.get("token_ids_json_sha256") != window.token_ids_json_sha256):
            return None
        path = Path(str(doc["folder"])) / safe_name(str(doc["file"]))
        return path if path.is_file() and path.stat().st_size == int(doc["size_bytes"]) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def changed_server(workspace: Workspace, identity: Mapping[str, Any] | None,
                   mode: CaptureMode = capture_modes.DEFAULT,
                   records: dict[int, CaptureRecord] | None = None, *,
                   windows: Sequence[WindowSpec]) -> str | None:
    """One line when this run's windows were captured (its records) in another capture mode than
    ``mode`` (:func:`mode_change`, whatever the server: an attached one too), or captured or
    finalized (its folder's manifest, ``mode``'s) from a server whose settings differ from
    ``identity`` (a changed model, arguments or rounding): resuming would join two candidates'
    windows in one report, and a finished report would be ranked under the changed candidate's
    name. None when they agree, when nothing was recorded (earlier versions), or, for the settings,
    when ``identity`` is None (a server kldtui did not launch from a profile). ``records``: the
    run's, when the caller has read them; unreadable ones are left to the capture stage, which says
    so. ``windows``: the suite's, whose words the line names a record's unit in
    (:func:`kldtui.formats.suite.name_among`: ``context 0003 (chinese)`` for a hidden-state suite's;
    empty where there is no suite to read: window words)."""
    if records is None:
        try:
            records = load_records(workspace.records_path, unit=unit_of(windows))
        except BadInput:
            records = {}
    def named(rec: CaptureRecord) -> str:  # asked only for the record a line names
        return name_among(windows, rec.window_index, rec.domain)

    for rec in records.values():  # another mode's capture is another capture, whatever its server
        if capture_modes.from_record(rec.extra.get("mode")) is not mode:
            other_mode = mode_change(workspace, rec, named(rec), mode)
            assert other_mode is not None
            return other_mode
    if identity is None:  # a server kldtui did not launch: its settings are not known to compare
        return None
    found: list[tuple[CaptureRecord | str, Any]] = [(rec, rec.extra.get("server"))
                                                    for rec in records.values()]
    if workspace.candidate_dir is not None:
        manifest = mode.manifest_path(workspace.candidate)
        runtime = (manifest_object(manifest) or {}).get("runtime")
        found.append((str(manifest), runtime.get("identity") if isinstance(runtime, dict) else None))
    for source, recorded in found:
        changes = identity_changes(recorded, identity)
        if changes:
            where = source if isinstance(source, str) else f"{workspace.records_path}: {named(source)}"
            paths = [str(d) for d in (workspace.records_path, workspace.run_dir, workspace.candidate_dir)
                     if d is not None and d.exists()]
            shown = ", ".join(paths[:-1]) + f" and {paths[-1]}" if len(paths) > 1 else "".join(paths)
            if workspace.keeps_reference:
                keep = "set the reference's settings back"
            elif workspace.campaign_candidate:
                keep = "give the changed candidate another name to keep both"
            else:
                keep = "run the changed candidate in another work folder ([run] workdir) to keep both"
            return (f"{where} was captured from a server whose settings differ from this run's ({changes}); "
                    f"remove {shown} to capture it again, or {keep}")
    return None


def mode_change(workspace: Workspace, rec: CaptureRecord, label: str, mode: CaptureMode) -> str | None:
    """One line when the record ``rec`` of ``label`` (its unit's name: :attr:`WindowSpec.label`, or
    :func:`kldtui.formats.suite.name_among` where no spec is at hand) says it was captured in another
    mode than ``mode`` (the profile's [capture] mode changed, or another profile sharing the work
    folder captured a campaign candidate of the same name in its mode): its chunks are not this run's
    to resume. None when it was captured in ``mode``."""
    recorded = capture_modes.from_record(rec.extra.get("mode"))
    if recorded is mode:
        return None
    said = recorded.label if recorded is not None else f"mode {rec.extra.get('mode')!r}"
    if workspace.campaign_candidate or workspace.same_model_as is not None:
        # its record may be another profile's capture in this folder: removing it would lose that one
        what = ("give the candidate another name (profiles sharing a work folder each need names of "
                "their own)")
    else:
        what = ("use another run name ([run] run_name, --run-name) to keep both, or remove its record to "
                "capture it again")
    return (f"{workspace.records_path}: {label} was captured in {said}, this run captures in {mode.label}; "
            f"{what}")


def _resume(workspace: Workspace, windows: Sequence[WindowSpec], records: dict[int, CaptureRecord],
            vocab: int | None, emit: EventSink,
            on_window_captured: Callable[[WindowSpec, CaptureRecord], None] | None,
            finalized: Callable[[WindowSpec], bool] | None = None,
            mode: CaptureMode = capture_modes.DEFAULT,
            ) -> tuple[dict[int, CaptureRecord], list[WindowSpec], int | None]:
    """Recorded windows whose chunks still check out (skipped), the windows to capture, the
    vocabulary seen; leftovers of an interrupted capture are removed, and a recorded window that
    neither its chunks nor a finalized file stand for any more is dropped from ``records`` (saved)
    and captured again, with a warning. ``records`` hold none of another capture mode than ``mode``:
    :func:`run_capture`, its one caller, refused the run first (:func:`changed_server`)."""
    records_path = workspace.records_path
    results: dict[int, CaptureRecord] = {}
    todo: list[WindowSpec] = []
    dropped = False  # a record whose window is captured again: the records must stop listing it now

    def capture_again(w: WindowSpec, what: str) -> None:
        """Nothing stands for a recorded window any more (its chunks deleted as corrupt, as verify
        advises, say): capturing it again is the only way back, said out loud."""
        nonlocal dropped
        emit(Notice(STAGE, f"{records_path}: {w.label} is recorded {what}; its record is dropped and the "
                           f"{w.unit} is captured again", level="warning"))
        _remove_tree(workspace.chunk_dir(w.chunk_dir_name))
        del records[w.index]
        dropped = True
        todo.append(w)

    sweep_removals(workspace.run_dir)  # chunk folders a kill caught while they were being removed
    for w in windows:
        rec = records.get(w.index)
        if rec is None:
            todo.append(w)
            leftover = workspace.chunk_dir(w.chunk_dir_name)
            if leftover.exists():
                emit(Notice(STAGE, f"{leftover}: left by an interrupted capture of {w.label}; "
                                   f"removed, the {w.unit} is captured again", level="warning"))
                _remove_tree(leftover)
            continue
        folder = workspace.chunk_dir(w.chunk_dir_name)

        def is_finalized(w: WindowSpec = w) -> bool:  # asked only where the chunks are gone or broken
            return (finalized is not None and finalized(w)) or finalized_elsewhere(workspace, w) is not None

        folder_name = rec.extra.get("request_folder")
        request_folder = folder_name if isinstance(folder_name, str) else None
        checked = None
        if folder.exists() or not is_finalized():
            try:
                checked = check_chunk_dir(folder, w, expected_vocab=vocab, request_folder=request_folder,
                                          kind=mode.chunks)
            except BadInput as exc:
                if not is_finalized():
                    capture_again(w, f"as captured, but its chunks do not check out ({exc}) and no "
                                     "finalized file stands for them")
                    continue
                # what a kill left of the chunks' removal by an earlier version, after finalize
                emit(Notice(STAGE, f"{folder}: the rest of {w.label}'s chunks, whose removal was "
                                   f"interrupted after the {w.unit} was finalized; removed"))
                _remove_tree(folder)
        if checked is None:  # finalized and verified, its chunks deleted: nothing to capture
            results[w.index] = rec
            emit(WindowState.of(STAGE, w, "captured", {"rows": w.scored_positions, "skipped": True}))
            if on_window_captured is not None:
                on_window_captured(w, rec)
            continue
        if rec.extra.get("live_logits"):
            try:
                _check_live(folder, w, checked.vocab_size, request_folder, None, values=False)
            except BadInput as exc:
                capture_again(w, f"with its live logits, but they do not check out ({exc})")
                continue
        vocab = checked.vocab_size
        results[w.index] = rec
        emit(WindowState.of(STAGE, w, "captured", {"rows": checked.rows, "skipped": True}))
        if on_window_captured is not None:
            on_window_captured(w, rec)
    if dropped:  # before anything is captured, so that no later step (finalize) takes them as complete
        save_records(records_path, records)
    if results:
        done = plural(len(results), windows[0].unit)
        emit(Notice(STAGE, f"{done} already captured in {records_path.name}; skipped after checking their "
                           "chunks"))
    return results, todo, vocab


def _capture_todo(workspace: Workspace, suite: Suite, windows: Sequence[WindowSpec], todo: list[WindowSpec],
                  records: dict[int, CaptureRecord], results: dict[int, CaptureRecord], vocab: int | None,
                  server: CaptureServer, emit: EventSink, cancel: Cancel | None,
                  on_window_captured: Callable[[WindowSpec, CaptureRecord], None] | None,
                  ) -> list[CaptureRecord]:
    """Capture ``todo`` one window at a time, recording each as soon as it checked out."""
    import httpx

    records_path = workspace.records_path
    total_tokens = sum(w.num_tokens for w in todo)
    done_tokens = 0
    done_windows = len(results)
    session_start = time.monotonic()
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    units = units_of(windows)
    emit(Progress(STAGE, units, done_windows, len(windows), units))
    with httpx.Client(trust_env=False) as client:
        session = _Session(client, _api_root(server.base_url), server.served_model_name, headers,
                           Path(server.capture_dir), workspace.run_name, server.request_timeout, emit,
                           cancel, server.alive, server.mode,
                           server.live_windows if server.mode.saves_live_sample else frozenset(),
                           server.identity)
        for w in todo:
            if cancel is not None:
                cancel.check()
            rec, vocab = _capture_one(session, suite, w, workspace.chunk_dir(w.chunk_dir_name), vocab)
            records[w.index] = rec
            try:
                save_records(records_path, records)
            except OSError as exc:
                del records[w.index]
                _remove_tree(workspace.chunk_dir(w.chunk_dir_name))
                message = (f"{records_path}: could not record {w.label} ({exc.strerror or exc}); "
                           f"free disk space and run again (the {w.unit} is captured again)")
                emit(WindowState.of(STAGE, w, "failed", {"error": message}))
                raise StageFailed(message) from None
            results[w.index] = rec
            done_windows += 1
            done_tokens += w.num_tokens
            elapsed = time.monotonic() - session_start
            rate = done_tokens / elapsed if elapsed > 0 else None
            eta = (total_tokens - done_tokens) / rate if rate else None
            emit(WindowState.of(STAGE, w, "captured", {
                "rows": w.scored_positions, "seconds": round(rec.elapsed_seconds, 3),
                "tokens_per_s": round(w.num_tokens / rec.elapsed_seconds, 1)
                if rec.elapsed_seconds > 0 else None}))
            emit(Progress(STAGE, units, done_windows, len(windows), units,
                          rate=done_windows / elapsed if elapsed > 0 else None, eta_s=eta))
            emit(Progress(STAGE, "tokens", done_tokens, total_tokens, "tokens", rate=rate, eta_s=eta))
            if on_window_captured is not None:
                on_window_captured(w, rec)
    ordered = [results[w.index] for w in windows]
    elapsed = time.monotonic() - session_start
    emit(StageFinished(STAGE, summary=f"{len(todo)} captured, {len(windows) - len(todo)} skipped",
                       figures={"captured": len(todo), "skipped": len(windows) - len(todo),
                                "seconds": round(elapsed, 3),
                                "tokens_per_s": round(total_tokens / elapsed, 1)
                                if todo and elapsed > 0 else None}))
    return ordered


@dataclass(frozen=True)
class _Session:
    """What every window's request of one capture run shares."""

    client: Any  # httpx.Client
    root: str  # the server's URL without /v1
    served_model_name: str
    headers: dict[str, str]  # authorization
    server_capture_dir: Path
    run_name: str
    request_timeout: float
    emit: EventSink
    cancel: Cancel | None
    server_alive: Callable[[], str | None] | None
    mode: CaptureMode = capture_modes.DEFAULT
    live_windows: frozenset[int] = frozenset()
    # what the server is (kldtui.servers.base.server_identity) when kldtui launched it from a profile:
    # recorded for each window, and a window recorded from another one is never resumed with it
    identity: Mapping[str, Any] | None = None

    @property
    def url(self) -> str:
        return f"{self.root}/v1/completions"


class _WindowCapture:
    """One window's capture request: send it, watch its folder, check the answer, collect the chunks.

    Its own ``X-Request-Id`` names the request folder the hook writes, so the folder is found by
    name. A failure raises :class:`_WindowFailed` (turned into StageFailed by :func:`_capture_one`).
    """

    def __init__(self, session: _Session, suite: Suite, w: WindowSpec, dest: Path) -> None:
        self.s = session
        self.w = w
        self.dest = dest
        self.tokens = suite.load_tokens(w)
        self.live = w.index in session.live_windows  # the server saves its live logits too
        self.x_request_id = request_tag(session.run_name, w.index, secrets.token_hex(4), live=self.live)
        self.tag = sanitize_request_id(self.x_request_id)
        self.values_checked: set[str] = set()  # chunk names whose values were checked while landing

    def request_folders(self) -> list[Path]:
        folder = self.s.server_capture_dir
        try:
            return [folder / n for n in os.listdir(folder) if self.tag in n]
        except OSError:
            return []

    def cleanup(self) -> None:
        for folder in self.request_folders():
            _remove_tree(folder)
        _remove_tree(self.dest)

    def _died(self) -> str | None:
        """The server's death message, waiting briefly for the process to be seen as gone."""
        if self.s.server_alive is None:
            return None
        for _ in range(30):
            msg = self.s.server_alive()
            if msg:
                return msg
            time.sleep(0.1)
        return None

    def send_and_wait(self, started: float) -> Any:
        """Send the request and wait for its answer, reporting rows as they land; the response."""
        import httpx

        s, w = self.s, self.w
        body = {"model": s.served_model_name, "prompt": self.tokens, "max_tokens": 1, "temperature": 0,
                "seed": 1, "prompt_logprobs": 1}
        headers = {**s.headers, "X-Request-Id": self.x_request_id}
        request = _Request(s.client, s.url, body, headers, s.request_timeout)
        throttle = Throttle(0.25)
        task = w.name
        want = s.mode.chunks.rows_wanted(w)
        while not request.done.wait(POLL_INTERVAL):
            if s.cancel is not None and s.cancel.is_set():
                raise Interrupted(f"{s.cancel.reason} while capturing {w.label}; it is not recorded "
                                  "and will be captured again")
            if s.server_alive is not None:
                msg = s.server_alive()
                if msg:
                    raise _WindowFailed(f"{w.label}: the server stopped during the capture request: {msg}")
            elapsed = time.monotonic() - started
            if elapsed > s.request_timeout + 10:
                raise _WindowFailed(_timeout_message(w, s.url, s.request_timeout))
            if throttle.ready():
                folders = self.request_folders()
                rows = s.mode.chunks.rows_landed(folders[0]) if folders else 0
                rate = rows / elapsed if rows and elapsed > 0 else None
                s.emit(Progress(STAGE, task, rows, want, "rows", rate=rate,
                                eta_s=(want - rows) / rate if rate else None))
                if len(folders) == 1 and s.mode.chunks.checks_values:
                    # check values while the server computes the next chunks
                    _check_landed(folders[0], w, self.values_checked, s.mode.chunks)
        if request.error is not None:
            exc = request.error
            if isinstance(exc, httpx.TimeoutException):
                msg = s.server_alive() if s.server_alive is not None else None
                raise _WindowFailed(f"{w.label}: the server stopped during the capture request: "
                                    f"{msg}" if msg else _timeout_message(w, s.url, s.request_timeout))
            if isinstance(exc, httpx.HTTPError):
                msg = self._died()
                if msg:
                    raise _WindowFailed(f"{w.label}: the server stopped during the capture request: {msg}")
                raise _WindowFailed(f"{w.label}: the capture request to {s.url} failed: "
                                    f"{type(exc).__name__}: {exc}; is the server running?")
            raise exc
        return request.response

    def read_answer(self, response: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``(answer, choice, usage)`` of a completion that took the window's tokens unchanged."""
        w = self.w
        if response.status_code != 200:
            raise _WindowFailed(f"{w.label}: the server answered HTTP {response.status_code} "
                                f"to the capture request: {_short(response.text)}")
        try:
            answer = response.json()
            choice = answer["choices"][0]
            usage = dict(answer.get("usage") or {})
        except (ValueError, KeyError, IndexError, TypeError):
            raise _WindowFailed(f"{w.label}: the server's answer is not a completion: "
                                f"{_short(response.text, 300)}") from None
        prompt_tokens = int(usage.get("prompt_tokens", len(self.tokens)))
        if prompt_tokens != len(self.tokens):
            raise _WindowFailed(f"{w.label}: the server counted {prompt_tokens} prompt tokens, "
                                f"the {w.unit} has {len(self.tokens)}; it must take token ids unchanged "
                                "(no special tokens, no chat template)")
        return answer, choice, usage

    def collect(self, vocab: int | None) -> tuple[Path, ChunkSet]:
        """Move the request's one folder to ``dest`` and check its chunks; ``(folder, chunks)``."""
        w, s = self.w, self.s
        folders = settled_folders(self.request_folders, w, s.server_alive, s.mode.chunks,
                                  listing_wait(s.server_capture_dir))
        if not folders:
            raise _WindowFailed(f"{w.label}: no capture folder for request {self.x_request_id} "
                                f"appeared in {s.server_capture_dir}; "
                                f"{no_folder_hint(s.server_capture_dir)}")
        if len(folders) > 1:
            raise _WindowFailed(f"{w.label}: {len(folders)} capture folders for one request "
                                f"({', '.join(f.name for f in folders)}); expected exactly one")
        _move_folder(folders[0], self.dest)
        try:
            kind = s.mode.chunks
            checked = check_chunk_dir(self.dest, w, expected_vocab=vocab, request_folder=folders[0].name,
                                      kind=kind)
            for chunk in checked.chunks if kind.checks_values else ():
                if chunk.path.name not in self.values_checked:
                    kind.check_values(chunk, w, s.cancel)
            if self.live:
                _check_live(self.dest, w, checked.vocab_size, folders[0].name, s.cancel)
        except BadInput as exc:
            raise _WindowFailed(str(exc)) from None
        return folders[0], checked

    def fail(self, message: str) -> StageFailed:
        self.cleanup()
        self.s.emit(WindowState.of(STAGE, self.w, "failed", {"error": message}))
        return StageFailed(message)


def _capture_one(session: _Session, suite: Suite, w: WindowSpec, dest: Path,
                 vocab: int | None) -> tuple[CaptureRecord, int]:
    """Capture one window into ``dest``; its record and vocabulary. Nothing is left on failure."""
    job = _WindowCapture(session, suite, w, dest)
    emit = session.emit
    emit(WindowState.of(STAGE, w, "capturing"))
    started = time.monotonic()
    try:
        try:
            response = job.send_and_wait(started)
            elapsed = time.monotonic() - started
            answer, choice, usage = job.read_answer(response)
            folder, checked = job.collect(vocab)
        except _WindowFailed as exc:
            raise job.fail(str(exc)) from None
        except OSError as exc:
            raise job.fail(f"{w.label}: moving or reading its chunks failed: {exc}") from None
    except (Interrupted, KeyboardInterrupt):
        job.cleanup()
        emit(WindowState.of(STAGE, w, "pending"))
        emit(LogLine(STAGE, f"{w.label}: capture interrupted; nothing recorded", "warning"))
        raise
    except StageFailed:
        raise
    except BaseException:
        job.cleanup()
        raise
    written_by = _written_by(checked)
    if written_by is not None and written_by[0] != writer_host():
        emit(LogLine(STAGE, f"{w.label}: chunks written on node {written_by[0]} into "
                            f"{written_by[1]}, read here on {writer_host()} from "
                            f"{session.server_capture_dir}"))
    tokens = job.tokens
    extra = {"x_request_id": job.x_request_id, "request_folder": folder.name,
             # the tokens sent: finalize refuses the chunks for a suite whose window differs
             "token_ids_json_sha256": token_ids_hash(tokens),
             "vocab_size": checked.vocab_size, "rows": checked.rows,
             "tokens_per_second": round(len(tokens) / elapsed, 3) if elapsed > 0 else None}
    if session.mode.record_value is not None:
        extra["mode"] = session.mode.record_value
    if session.identity is not None:
        extra["server"] = dict(session.identity)
    precise = _precise_rows(checked)
    if precise is not None:  # score mode: rows the server computed on the precise path
        extra["precise_rows"] = precise
    if job.live:
        extra["live_logits"] = True
    record = CaptureRecord(
        window_index=w.index, domain=w.domain, prompt_tokens=len(tokens),
        request_id=str(answer.get("id", job.x_request_id)), elapsed_seconds=round(elapsed, 6),
        usage=usage, finish_reason=choice.get("finish_reason"), chunk_dir=str(dest.resolve()),
        chunks=checked.names, extra=extra)
    return record, checked.vocab_size


def _precise_rows(checked: ChunkSet) -> int | None:
    """The sum of the chunks' ``precise_rows`` metadata (score mode's server counts them); None
    when no chunk says."""
    total, seen = 0, False
    for chunk in checked.chunks:
        try:
            value = read_header(chunk.path).metadata.get("precise_rows")
        except (BadInput, OSError):
            return None
        if value is None:
            continue
        try:
            total, seen = total + max(0, int(value)), True
        except ValueError:
            return None
    return total if seen else None


def _check_live(folder: Path, w: WindowSpec, vocab: int, request_folder: str | None, cancel: Cancel | None,
                *, values: bool = True) -> None:
    """The live logits the server saved beside a window's chunks (the replay check's sample):
    every row, the run's vocabulary, finite values."""
    checked = check_chunk_dir(folder, w, expected_vocab=vocab, request_folder=request_folder,
                              kind=LOGITS_CHUNKS)
    for chunk in checked.chunks if values else ():
        LOGITS_CHUNKS.check_values(chunk, w, cancel)


def _written_by(checked: ChunkSet) -> tuple[str, str] | None:
    """``(writer host, writer folder)`` from the first chunk's metadata (None: not recorded)."""
    try:
        meta = read_header(checked.chunks[0].path).metadata
    except (BadInput, OSError, IndexError):
        return None
    host = meta.get("writer_host")
    return (host, meta.get("writer_dir", "?")) if host else None


def _check_landed(folder: Path, w: WindowSpec, done: set[str], kind: ChunkKind) -> None:
    """Check the values of chunks that landed since the last look (chunks are published whole)."""
    pattern = kind.pattern
    try:
        names = sorted(n for n in os.listdir(folder) if pattern.match(n) and n not in done)
    except OSError:
        return
    for name in names:
        path = folder / name
        try:
            header = read_header(path)
            info = header.tensor(kind.key)
        except BadInput:
            continue  # reported with its reason by the full check after the answer
        if info.dtype != kind.dtype or len(info.shape) != 2:
            continue
        m = pattern.match(name)
        assert m is not None
        try:
            kind.check_values(ChunkInfo(path, int(m.group(1)), int(m.group(2)), info.shape[1]), w, None)
        except BadInput as exc:
            raise _WindowFailed(str(exc)) from None
        done.add(name)


def _pending(folder: Path) -> bool:
    try:
        return any(n.startswith(PENDING_PREFIX) for n in os.listdir(folder))
    except OSError:
        return False


def listing_wait(capture_dir: Path) -> float:
    """How long a listing of ``capture_dir`` may lag behind the server's writes: KLDTUI_LISTING_WAIT
    when set, else SETTLE_SECONDS on a local file system and NETWORK_SETTLE_SECONDS on a shared one."""
    from kldtui.this_host import on_network_filesystem

    given = settings.LISTING_WAIT.get()
    if given is not None:
        return float(given)
    return NETWORK_SETTLE_SECONDS if on_network_filesystem(capture_dir) else SETTLE_SECONDS


def settled_folders(list_folders: Callable[[], list[Path]], w: WindowSpec,
                     server_alive: Callable[[], str | None] | None = None,
                     kind: ChunkKind = LOGITS_CHUNKS, settle_seconds: float = SETTLE_SECONDS) -> list[Path]:
    """The request's folder(s) once its rows are all there (or after ``settle_seconds``:
    :func:`listing_wait` of the capture folder).

    Chunks the hook still has queued (pending files) are waited for up to PENDING_SECONDS
    while the server lives.
    """
    start = time.monotonic()
    deadline = start + settle_seconds
    while True:
        folders = list_folders()
        if len(folders) == 1 and (kind.rows_landed(folders[0]) >= kind.rows_wanted(w)
                                  or (folders[0] / ERROR_MARKER).exists()):
            if not _pending(folders[0]):
                return folders
        now = time.monotonic()
        waiting = (len(folders) == 1 and _pending(folders[0]) and now < start + PENDING_SECONDS
                   and (server_alive is None or server_alive() is None))
        if now >= deadline and not waiting:
            return folders
        time.sleep(0.05)


def writer_records(server_capture_dir: Path) -> list[dict[str, Any]]:
    """The hook's writer records (``.kldtui-writers/*.json``) visible in the capture folder."""
    out = []
    try:
        names = sorted(os.listdir(writers_dir(server_capture_dir)))
    except OSError:
        return []
    for name in names:
        try:
            doc = json.loads(read_text(writers_dir(server_capture_dir) / name, limit=WRITER_RECORD_LIMIT))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def no_folder_hint(server_capture_dir: Path) -> str:
    """Why no request folder showed up, from what the writer ranks recorded (multi-node runs)."""
    here = writer_host()
    records = writer_records(server_capture_dir)
    if not records:
        return (f"no writer rank has recorded itself in {server_capture_dir} as seen from {here}: "
                "the capture hook is not active in the server (VLLM_KLD_CAPTURE_DIR unset or the "
                "hook not installed), or the writer (vLLM's output rank: the last pipeline stage, "
                "every data-parallel rank) runs on another node and wrote into that path on its own "
                "disk; the server log names it ('kldtui capture writer: host ...'). Put the capture "
                "folder on a file system shared by all nodes, mounted at the same path")
    writers = ", ".join(f"{r.get('host')}:{r.get('folder')} (pid {r.get('pid')})" for r in records)
    return (f"writer ranks recorded here: {writers}; the server writes its chunks elsewhere "
            "(--server-capture-dir), or the writer of this request runs on a node whose folder "
            "is not this one (a data-parallel rank on another node)")
def _timeout_message(w: WindowSpec, url: str, timeout: float) -> str:
    return (f"{w.label}: no answer from {url} within {timeout:g} s (request timeout); the server "
            "may be hung or overloaded: check its log, or raise the request timeout")
