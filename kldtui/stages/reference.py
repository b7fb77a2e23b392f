"""The Reference stage: get the reference suite from the Hugging Face Hub and know it is intact.

:func:`ensure_reference` is what the CLI (``kldtui download``) and the pipeline call:

1. A local folder that already holds the suite, ``ref/manifest.json``, every token file and the
   logits files of the window range is verified (hashes remembered in the verified-file cache)
   and used as it is: no network, ``huggingface_hub`` is not even imported.
2. Otherwise, with the real ``huggingface_hub`` client (dataset repository; ``HF_ENDPOINT`` and
   ``HF_TOKEN`` honoured), begun by :func:`begin_download`: a folder whose download record names
   another repository is refused; the revision is resolved to a commit once (a folder downloaded
   earlier from this repository: the commit its record names, whatever ``main`` names now), and
   recorded before the first file; the two manifests and all token files are fetched first, free
   disk space is checked against what the window range still needs, then only the logits files of
   the range are fetched, several at once (one already here is kept only when its SHA-256 is the
   manifest's: the verified-file cache's, else hashed then; another is fetched again). A
   ``selection`` (the run's strata: the windows of some domains) narrows the range further:
   only its windows are fetched and verified.
3. Logits files go to ``<local_dir>/.kldtui-download/`` first and get their final name only
   after their SHA-256 matched ``ref/manifest.json``; a corrupt download never appears under
   its final name.
4. The classic HTTP path (``huggingface_hub.file_download.http_get``) resumes: within one run
   the client retries a dropped connection with a ``Range`` request; across runs the partial
   file is kept and the next run asks for the rest (``Range: bytes=N-``). When the server offers
   Xet storage and ``hf_xet`` is installed (the fast backend of huggingface_hub >= 1.0;
   ``hf_transfer`` and ``HF_HUB_ENABLE_HF_TRANSFER`` are gone), the file is fetched through Xet.
5. Finally, where the download moved the folder from another commit of the repository (another
   revision asked for), that commit's files the new one does not have here are set aside in
   ``.kldtui-previous/<commit>/`` (:meth:`HubDownloader.set_aside_others`); the record lists the
   windows fetched, as finished, and the whole range is verified
   (suite hash, token hashes, each file's SHA-256; for the published repository also the published
   suite hash); a failure names the file and stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

from kldtui import settings
from kldtui.errors import BadInput, Interrupted, KldError, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    Throttle,
    failure_reported,
    null_sink,
)
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.fidelity import ContextFilter
from kldtui.formats.safe_io import open_private, regular_size
from kldtui.formats.suite import (
    LOGITS_MANIFEST,
    SUITE_MANIFEST,
    LogitsManifest,
    Suite,
    load_logits_manifest,
    load_suite,
    sha256_file,
    unit_of,
    units_of,
)
from kldtui.formats.untrusted_json import printable_name
from kldtui.formats.verified_cache import VerifiedCache
from kldtui.stages.verify import (
    DOWNLOADING,
    FINISHED,
    PUBLISHED_REPO_ID,
    PUBLISHED_SUITE_HASH,
    RECORD_NAME,
    REF_DIR,
    VerifyResult,
    download_under_way,
    downloaded_from,
    hash_files,
    read_record,
    recorded_source,
    recorded_windows,
    verify_reference,
)
from kldtui.text import human_bytes, kldtui_command, shell_arg
from kldtui.workspace import Workspace

STAGE: StageName = "reference"
PARTIAL_DIR = ".kldtui-download"
# where a revision move sets aside the files of the folder that are not the new commit's (one folder per
# commit they were of: .kldtui-previous/<commit>/<their path>)
SET_ASIDE_DIR = ".kldtui-previous"
REPO_TYPE = "dataset"
DOWNLOAD_WORKERS = 4
COMMIT_ID = re.compile(r"[0-9a-f]{40}")  # a git commit id, as the Hub gives it (X-Repo-Commit)


@dataclass(frozen=True)
class ReferenceSuite:
    """A verified local reference for a window range."""

    root: Path
    suite_manifest: Path
    ref_dir: Path
    suite: Suite
    manifest: LogitsManifest
    window_range: tuple[int, int]
    repo_id: str | None
    commit: str | None  # the repository commit the files came from (None: unknown / local only)
    offline: bool  # True when no network was used
    downloaded: tuple[str, ...] = ()  # repository paths fetched by this call
    verify: VerifyResult | None = field(default=None, repr=False)
    # the windows of window_range that were fetched and verified (a selection can keep fewer)
    windows: tuple[int, ...] = ()

    def summary_line(self) -> str:
        source = "local copy, no network" if self.offline else f"commit {self.commit}"
        held = windows_text(self.suite, self.window_range, self.windows)
        return (f"reference ready: {self.root} {held} ({source}); suite {self.suite_manifest}, "
                f"logits {self.ref_dir}")


def windows_text(suite: Suite, window_range: tuple[int, int], windows: Sequence[int]) -> str:
    """"windows 0..31", or where a selection kept fewer "8 window(s) of 0..31 (2, 3, ...)", in the
    suite's unit word (a hidden-state suite's: "contexts 0..31", "8 context(s) of ...")."""
    unit = unit_of(suite.windows)
    lo, hi = window_range
    if not windows or list(windows) == list(range(lo, hi)):
        return f"{unit}s {lo}..{hi - 1}"
    shown = ", ".join(str(i) for i in windows[:8]) + (", ..." if len(windows) > 8 else "")
    return f"{len(windows)} {unit}(s) of {lo}..{hi - 1} ({shown})"


def chosen_windows(suite: Suite, window_range: tuple[int, int], selection: ContextFilter | None) -> list[int]:
    """The windows of ``window_range`` a selection keeps (all of them without one): its strata name
    domains of a logits suite (:meth:`ContextFilter.indices_within`)."""
    return (selection or ContextFilter()).indices_within(suite, *window_range)


def as_reference_events(emit: EventSink) -> EventSink:
    """The verification inside this stage reports as part of it. Its own start and end are not
    relayed: the caller says it verifies (a local suite's "already holds ...; verifying") and its
    end line carries the verification's summary, which a notice repeated word for word; a failure
    raises with its own message."""

    def relay(event: Any) -> None:
        if not isinstance(event, StageStarted | StageFinished):
            emit(dataclasses.replace(event, stage=STAGE))

    return relay


def _window_range(suite: Suite, start_window: int, stop_window: int | None) -> tuple[int, int]:
    windows = suite.select(start_window, stop_window)
    return windows[0].index, windows[-1].index + 1


def _local_state(root: Path, repo_id: str | None, revision: str | None, start_window: int,
                 stop_window: int | None, selection: ContextFilter | None,
                 ) -> tuple[Suite, LogitsManifest, tuple[int, int], list[int]] | None:
    """The local suite if it holds everything the chosen windows need (files exist), else None."""
    if not (root / SUITE_MANIFEST).is_file() or not (root / REF_DIR / LOGITS_MANIFEST).is_file():
        return None
    if not finished_download_of(read_record(root), repo_id, revision):
        return None
    try:
        suite = load_suite(root)
        manifest = load_logits_manifest(root / REF_DIR)
        rng = _window_range(suite, start_window, stop_window)
    except BadInput:
        return None
    chosen = chosen_windows(suite, rng, selection)  # a selection this suite cannot meet: said now
    try:
        for w in suite.windows:
            if not suite.token_path(w).is_file():
                return None
        for index in chosen:
            if not manifest.file_path(index).is_file():
                return None
    except BadInput:
        return None
    return suite, manifest, rng, chosen


def check_repo_id(repo_id: str) -> None:
    """BadInput for a repository id the Hub would refuse (one line, before anything is done)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise BadInput(f"repository id {repo_id[:200]!r} is not valid ({str(exc).splitlines()[0]}); "
                       "give owner/name as on the Hub") from None


def ensure_reference(repo_id: str | None, local_dir: str | os.PathLike[str], *, revision: str | None = None,
                     stop_window: int | None = None, start_window: int = 0, reverify: bool = False,
                     emit: EventSink = null_sink, cancel: Cancel | None = None,
                     workers: int | None = None, selection: ContextFilter | None = None,
                     begun: HubDownloader | None = None) -> ReferenceSuite:
    """Make ``local_dir`` hold a verified reference for windows ``[start_window, stop_window)``, only
    those ``selection`` keeps (its strata: the domains a run covers) when it is given.

    ``repo_id`` None means local only (a missing file is a :class:`BadInput`). ``begun``: the
    download :func:`begin_download` began already (``kldtui download``'s look at the suite manifest).
    Raises :class:`BadInput` for a folder another repository's suite was downloaded into (before any
    download), :class:`StageFailed` when a file fails verification (naming it), the disk is too small, or
    the Hub cannot deliver a file; :class:`Interrupted` when ``cancel`` is set (partial downloads
    are kept and resumed next time).
    """
    root = Path(local_dir)
    started = time.monotonic()
    units = "windows"  # the local suite's word for them where it has one (a hidden-state suite's: contexts)
    if repo_id is None and (root / SUITE_MANIFEST).is_file():
        # a range the local suite does not have: say so, rather than "give a repository id"
        local_suite = load_suite(root)
        chosen_windows(local_suite, _window_range(local_suite, start_window, stop_window), selection)
        units = units_of(local_suite.windows)
    expected_hash = PUBLISHED_SUITE_HASH if repo_id == PUBLISHED_REPO_ID else None
    emit(StageStarted(STAGE, detail=f"{repo_id or 'local'} -> {root}"))
    local = _local_state(root, repo_id, revision, start_window, stop_window, selection)
    if local is not None:
        suite, manifest, rng, chosen = local
        emit(Notice(STAGE, f"{root} already holds {windows_text(suite, rng, chosen)}; verifying, no network"))
        result = verify_reference(root, start_window=rng[0], stop_window=rng[1], reverify=reverify,
                                  workers=workers, expected_suite_hash=expected_hash,
                                  emit=as_reference_events(emit), cancel=cancel, selection=selection)
        result.raise_for_failures()
        record = read_record(root) or {}
        emit(StageFinished(STAGE, summary=f"reference ready (local): {result.summary()}",
                           figures={"offline": True, "windows": list(rng)}))
        return ReferenceSuite(root, suite.path, root / REF_DIR, suite, manifest, rng,
                              repo_id or record.get("repo_id"), record.get("commit"), True, (), result,
                              tuple(chosen))
    if repo_id is None:
        raise BadInput(f"{root}: no complete reference suite here for the requested {units} "
                       "(suite-manifest.json, ref/manifest.json, token files and logits files); "
                       "give a repository id to download it")
    # only now: a complete local folder never imports huggingface_hub
    downloader = begun or begin_download(
        root, repo_id, revision, emit=emit, cancel=cancel,
        offline_line=f"{root}: the reference is incomplete and HF_HUB_OFFLINE is set; copy a complete "
                     "suite here or unset HF_HUB_OFFLINE to download it")
    commit = downloader.commit
    assert commit is not None
    downloader.fetch_small([SUITE_MANIFEST, f"{REF_DIR}/{LOGITS_MANIFEST}"])
    suite = load_suite(root)
    manifest = load_logits_manifest(root / REF_DIR)
    rng = _window_range(suite, start_window, stop_window)
    chosen = chosen_windows(suite, rng, selection)
    token_files = []
    for w in suite.windows:
        suite.token_path(w)  # refuses a token_file that leaves the folder before anything is fetched
        token_files.append(Path(w.token_file).as_posix())
    downloader.fetch_small(token_files, task="token files")
    entries = [manifest.entry(i) for i in chosen]
    todo = downloader.still_needed(
        [RemoteFile(manifest.file_path(entry.window_index), entry.size_bytes, entry.sha256,
                    f"window {entry.window_index:03d}", f"{REF_DIR}/{LOGITS_MANIFEST}") for entry in entries],
        workers=workers)
    downloader.check_disk_space(todo, windows_text(suite, rng, chosen), "choose a smaller --stop-window")
    fetched = downloader.fetch_files(todo, workers=workers)
    downloader.set_aside_others()
    write_record(root, repo_id, downloader.requested, commit, set(chosen), downloader.endpoint)
    emit(Notice(STAGE, f"verifying {root}"))
    result = verify_reference(root, start_window=rng[0], stop_window=rng[1], reverify=reverify,
                              workers=workers, expected_suite_hash=expected_hash,
                              emit=as_reference_events(emit), cancel=cancel, selection=selection)
    result.raise_for_failures()
    elapsed = time.monotonic() - started
    emit(StageFinished(STAGE, summary=f"reference ready: {len(fetched)} logits file(s) downloaded "
                                      f"({human_bytes(downloader.bytes_fetched)}) in {elapsed:.1f}s; "
                                      f"{result.summary()}",
                       figures={"offline": False, "commit": commit, "windows": list(rng),
                                "bytes_downloaded": downloader.bytes_fetched, "elapsed_s": elapsed}))
    return ReferenceSuite(root, suite.path, root / REF_DIR, suite, manifest, rng, repo_id, commit, False,
                          tuple(downloader.fetched_paths), result, tuple(chosen))


def write_record(root: Path, repo_id: str, revision: str | None, commit: str, indices: set[int],
                 endpoint: str | None, *, state: str = FINISHED, **extra: Any) -> None:
    """The download record (``.kldtui-reference.json``): repository, the revision asked for, its
    commit, the windows (or contexts) fetched so far from that commit and whether a download into the
    folder is under way (``state``: :data:`DOWNLOADING` from before its first file until it has them
    all)."""
    previous = read_record(root) or {}
    windows = set(indices)
    if previous.get("repo_id") == repo_id and previous.get("commit") == commit:
        windows |= recorded_windows(previous)
    write_json_atomic(root / RECORD_NAME, {
        "format": 1, "repo_id": repo_id, "repo_type": REPO_TYPE, "revision": revision, "commit": commit,
        "endpoint": endpoint, "windows": sorted(windows), "state": state, **extra,
        "updated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })


def finished_download_of(record: dict[str, Any] | None, repo_id: str | None, revision: str | None) -> bool:
    """Whether a folder whose download record is ``record`` may be used as it is for ``repo_id`` at
    ``revision`` (its files permitting): it has no record (a folder kldtui did not download), no
    repository is asked for, or the record is of that repository and revision
    (:func:`~kldtui.stages.verify.downloaded_from`) and its download finished. A download stopped
    before its end resumes instead, at its commit."""
    if record is None or repo_id is None:
        return True
    return downloaded_from(record, repo_id, revision) and not download_under_way(record)


def _pinned_commit(record: dict[str, Any] | None, repo_id: str, revision: str | None) -> str | None:
    """The commit a download of ``repo_id`` at ``revision`` into a folder with ``record`` resumes at:
    the record's, when it is of that repository and ``revision`` is none, the revision the record
    was asked for (a branch such as main, which may name a newer commit by now) or that commit."""
    if record is None or record.get("repo_id") != repo_id:
        return None
    commit = record.get("commit")
    if not isinstance(commit, str) or not COMMIT_ID.fullmatch(commit):
        return None
    return commit if revision in (None, record.get("revision"), commit) else None


def begin_download(root: Path, repo_id: str, revision: str | None, *, emit: EventSink,
                   cancel: Cancel | None, offline_line: str | None = None) -> HubDownloader:
    """Begin a download of ``repo_id`` at ``revision`` into ``root``, before any file is fetched:

    - refused (BadInput, one line naming the folder and what to do) when the folder's download record
      is of another repository, finished or not: no other suite is fetched over the folder's;
    - ``offline_line`` (StageFailed) when HF_HUB_OFFLINE is set: the caller's words for its folder
      (what to copy there), else a line naming the folder and the repository and saying to unset it
      (a caller that begins only when HF_HUB_OFFLINE is not set need not give one);
    - a folder downloaded (or being downloaded) from this repository resumes at the commit its record
      names when ``revision`` is none, the revision recorded or that commit, and says so: a moving
      revision (main) is not followed, so every file of the folder is of one commit; refused when the
      Hub no longer has that commit (another one's files would mix two versions of the suite);
    - the revision is resolved to a commit, and the record then names the repository, the revision
      asked for and the commit, as a download under way (:data:`DOWNLOADING`): a download stopped at
      any moment from here on resumes as this one, at this commit, and is refused to another
      repository (``kldtui download``, or a profile: kldtui.workflow.owners);
    - a folder of another commit of the repository (another revision asked for) moves to this one: the
      record names the commit it moves from (:data:`MOVING_FROM`) until the download has finished, and
      :meth:`HubDownloader.set_aside_others` then sets aside every file that is not this commit's.

    Returns the downloader, resolved (``commit``; ``requested``: the revision to record)."""
    check_repo_id(repo_id)
    earlier = read_record(root)
    if earlier is not None and isinstance(earlier.get("repo_id"), str) and earlier["repo_id"] != repo_id:
        held = "a download, not finished, of" if download_under_way(earlier) else \
            "the suite downloaded from"
        raise BadInput(f"{root}: holds {held} {recorded_source(earlier)} ({RECORD_NAME}), which a download "
                       f"of {repo_id} would mix with or write over; download {repo_id} into a folder of its "
                       "own (--local-dir, or [reference] local_dir), or delete this folder to download it "
                       "here")
    if settings.HF_HUB_OFFLINE.get():
        raise StageFailed(offline_line or f"{root}: HF_HUB_OFFLINE is set, so {repo_id} is not downloaded "
                                          "here; unset it to download")
    pinned = _pinned_commit(earlier, repo_id, revision)
    downloader = HubDownloader(repo_id, root, pinned or revision, emit=emit, cancel=cancel)
    if pinned is None or earlier is None:
        commit = downloader.resolve()
    else:
        recorded = earlier.get("revision")
        requested = recorded if revision is None or revision == pinned else revision
        downloader.requested = requested if isinstance(requested, str) else None
        downloader.revision_gone = (
            f"{root}: was downloaded from {repo_id} at commit {pinned[:12]}, which {downloader.where_repo()} "
            "no longer has; the files still missing cannot come from it, and another commit's would mix two "
            "versions of the suite; download into a new folder (--local-dir, or [reference] local_dir), or "
            "delete this folder to download it again")
        commit = downloader.resolve()
        named = isinstance(recorded, str) and recorded != pinned
        asked = f" (revision {printable_name(str(recorded))})" if named else ""
        emit(Notice(STAGE, f"{root} was downloaded from commit {pinned[:12]}{asked}; fetching the rest from "
                           "that commit, so every file is of one commit"))
    move = _move_of(root, earlier, repo_id, commit)
    extra: dict[str, Any] = {}
    if move is not None:
        downloader.moving_from, downloader.previous_files = move
        extra[MOVING_FROM] = {"commit": move[0], "files": sorted(move[1])}
        aside = root / SET_ASIDE_DIR / move[0]
        emit(Notice(STAGE, f"{root} holds files of commit {move[0][:12]}; moving it to commit {commit[:12]}: "
                           f"those this commit does not have are set aside in {aside} once its files are "
                           "here"))
    write_record(root, repo_id, downloader.requested, commit, set(), downloader.endpoint, state=DOWNLOADING,
                 **extra)
    return downloader


# a download record's field while a download moves the folder from another commit of the repository:
# {"commit": the commit the folder held, "files": its files there then (relative paths)}
MOVING_FROM = "moving_from"


def _plain_path(rel: object) -> bool:
    """Whether ``rel`` is a relative path inside a folder naming no dot-file or -folder (``..``,
    kldtui's own ``.kldtui*``, the client's ``.cache/``): what a move may set aside."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        return False
    parts = rel.split("/")
    return not rel.startswith("/") and all(part and not part.startswith(".") for part in parts)


def _listed_here(root: Path) -> set[str]:
    """The files of the folder its manifests list, present now (relative paths): the manifests, the
    suite's token files, the logits files ``ref/manifest.json`` lists, every file ``checksums.txt``
    lists (a hidden-state suite's). A manifest that cannot be read lists nothing."""
    from kldtui.formats import fidelity as fid

    listed = {SUITE_MANIFEST, f"{REF_DIR}/{LOGITS_MANIFEST}", fid.CHECKSUMS}
    with contextlib.suppress(BadInput):
        listed.update(Path(w.token_file).as_posix() for w in load_suite(root).windows)
    with contextlib.suppress(BadInput):
        logits = load_logits_manifest(root / REF_DIR)
        listed.update(f"{REF_DIR}/{Path(e.file).as_posix()}" for e in logits.entries.values())
    with contextlib.suppress(BadInput):
        listed.update(fid.read_checksums(root))
    return {rel for rel in listed if _plain_path(rel) and os.path.lexists(root / rel)}


def _move_of(root: Path, record: dict[str, Any] | None, repo_id: str,
             commit: str) -> tuple[str, set[str]] | None:
    """Whether a download of ``repo_id`` at ``commit`` into ``root`` (with download record ``record``)
    moves the folder from another commit of the repository, and if so that commit and the files the
    folder holds of it: the record's commit when it is another one (a revision move; its files are
    what the folder's manifests list now, before this commit's replace them, together with those a
    move still under way named); or, for a move stopped before its end and resumed at ``commit``, what
    the record says it moves from. Only a commit id and plain relative paths are taken from the record
    (it is the folder's words: the set-aside folder is named by the commit)."""
    if record is None or record.get("repo_id") != repo_id:
        return None
    held = record.get("commit")
    under_way = record.get(MOVING_FROM) if download_under_way(record) else None
    named: set[str] = set()
    earlier: object = None
    if isinstance(under_way, dict):
        earlier = under_way.get("commit")
        files = under_way.get("files")
        if isinstance(files, list):
            named = {rel for rel in files if _plain_path(rel)}
    if isinstance(held, str) and COMMIT_ID.fullmatch(held) and held != commit:
        return held, _listed_here(root) | named
    if (held == commit and isinstance(earlier, str) and COMMIT_ID.fullmatch(earlier) and earlier != commit):
        return earlier, named
    return None


# ------------------------------------------------------------------------------------------------
# the Hub side


class _ProgressFile:
    """A file wrapper for ``http_get``: counts bytes written and checks for cancellation."""

    def __init__(self, handle: BinaryIO, on_bytes: Callable[[int], None], check: Callable[[], None]) -> None:
        self._h = handle
        self._on_bytes = on_bytes
        self._check = check

    def write(self, data: bytes) -> int:
        self._check()
        n = self._h.write(data)
        self._on_bytes(len(data))
        return n

    def seek(self, *args: Any) -> int:
        pos = self._h.tell()
        new = self._h.seek(*args)
        if new < pos:
            self._on_bytes(new - pos)  # http_get rewinds when a server ignored the Range request
        return new

    def tell(self) -> int:
        return self._h.tell()

    def truncate(self, *args: Any) -> int:
        return self._h.truncate(*args)

    def flush(self) -> None:
        self._h.flush()


class _Meter:
    """Aggregated byte progress of all downloads plus per-file progress, throttled."""

    def __init__(self, emit: EventSink, total: int, initial: int) -> None:
        self.emit = emit
        self.total = total
        self.done = initial
        self.session = 0  # bytes received by this run (for the rate)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._throttle = Throttle(0.25)
        self._file_throttle: dict[str, Throttle] = {}
        self._files: dict[str, list[int]] = {}  # name -> [done, total, bytes received by this run]
        self._file_started: dict[str, float] = {}

    def start_file(self, name: str, done: int, total: int) -> None:
        with self._lock:
            self._files[name] = [done, total, 0]
            self._file_started[name] = time.monotonic()
            self._file_throttle[name] = Throttle(0.5)
        self.emit(Progress(STAGE, task=name, done=done, total=total, unit="B"))

    def finish(self) -> None:
        with self._lock:
            done, session = self.done, self.session
        elapsed = max(time.monotonic() - self.started, 1e-9)
        self.emit(Progress(STAGE, task="download", done=done, total=self.total, unit="B",
                           rate=session / elapsed if session else None, eta_s=0.0))

    def add(self, name: str, n: int, final: bool = False) -> None:
        with self._lock:
            self.done += n
            self.session += n
            f = self._files.setdefault(name, [0, 0, 0])
            f[0] += n
            f[2] += n
            file_done, file_total, file_session = f
            file_started = self._file_started.setdefault(name, time.monotonic())
            send_total = self._throttle.ready(final)
            send_file = self._file_throttle.setdefault(name, Throttle(0.5)).ready(final)
            done, session = self.done, self.session
        now = time.monotonic()
        rate = session / max(now - self.started, 1e-9) if session > 0 else None
        if send_file:
            file_rate = file_session / max(now - file_started, 1e-9) if file_session > 0 else None
            eta = (file_total - file_done) / file_rate if file_rate else None
            self.emit(Progress(STAGE, task=name, done=file_done, total=file_total, unit="B", rate=file_rate,
                               eta_s=eta))
        if send_total:
            eta = (self.total - done) / rate if rate else None
            self.emit(Progress(STAGE, task="download", done=done, total=self.total, unit="B", rate=rate,
                               eta_s=eta))


def _xet_available() -> bool:
    """Whether huggingface_hub can use hf_xet (its fast transfer backend) in this environment."""
    try:
        from huggingface_hub.utils._runtime import is_xet_available
    except ImportError:
        import importlib.util

        return importlib.util.find_spec("hf_xet") is not None
    return bool(is_xet_available())


def _silent_tqdm() -> type:
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Silent(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Silent


@dataclass(frozen=True)
class RemoteFile:
    """A large file to fetch from the repository: where it goes (its repository path is its path
    under the download folder), its size and SHA-256 as a listing gives them, and how messages
    name it (``label``: "window 003", "context 0007", "the LM head"; ``listed_in``: the listing)."""

    final: Path
    size_bytes: int
    sha256: str
    label: str
    listed_in: str


class HubDownloader:
    """Fetches files of one dataset repository at one commit into a local folder, with the real
    ``huggingface_hub`` client: small files with ``hf_hub_download``, large ones resumable through
    ``.kldtui-download/`` and published under their final name only once their SHA-256 matched."""

    def __init__(self, repo_id: str, root: Path, revision: str | None, *, emit: EventSink,
                 cancel: Cancel | None) -> None:
        self.repo_id = repo_id
        self.root = root
        self.revision = revision
        self.emit = emit
        self.cancel = cancel
        self.endpoint: str | None = settings.HF_ENDPOINT.get()
        # An explicit HF_TOKEN is always sent (even with HF_HUB_DISABLE_IMPLICIT_TOKEN); without it the
        # library's own rules apply (a token saved by `hf auth login`).
        self.token: str | None = settings.HF_TOKEN.get()
        self.commit: str | None = None
        self.requested: str | None = revision  # the revision a download record names (begin_download)
        self.revision_gone: str | None = None  # the line when the Hub has no such revision (a pinned commit)
        self.fetched_paths: list[str] = []
        self.bytes_fetched = 0
        # the commit the folder held before, when this download moves it to another (begin_download)
        self.moving_from: str | None = None
        self.previous_files: set[str] = set()  # the paths the folder held of that commit (a move's)
        self.claimed: set[str] = set()  # the folder's paths that are this commit's files, as they are named
        self._lock = threading.Lock()
        self._abort = Cancel()  # set when one parallel download failed: the others stop too
        self._noted: set[str] = set()
        root.mkdir(parents=True, exist_ok=True)

    def _note_once(self, key: str, text: str) -> None:
        with self._lock:
            if key in self._noted:
                return
            self._noted.add(key)
        self.emit(Notice(STAGE, text))

    def check(self) -> None:
        if self.cancel is not None:
            self.cancel.check()
        self._abort.check()

    # -- errors ----------------------------------------------------------------------------------
    def where_repo(self) -> str:
        """The repository in words: the Hub's address and the dataset's id."""
        return f"{self.endpoint or 'https://huggingface.co'} dataset {self.repo_id}"

    def _where(self) -> str:
        return f"{self.where_repo()}@{self.commit or self.revision or 'main'}"

    def _translate(self, exc: BaseException, path: str) -> KldError:
        from huggingface_hub import errors as hf_errors

        if isinstance(exc, KldError):
            return exc
        if isinstance(exc, hf_errors.GatedRepoError):
            return BadInput(f"{self._where()}: the repository is gated; accept its terms on the Hub and "
                            "set HF_TOKEN")
        if isinstance(exc, hf_errors.RepositoryNotFoundError):
            return BadInput(f"{self._where()}: repository not found (or private: set HF_TOKEN); check the "
                            "repository id and HF_ENDPOINT")
        if isinstance(exc, hf_errors.RevisionNotFoundError):
            if self.revision_gone is not None:
                return BadInput(self.revision_gone)
            return BadInput(f"{self._where()}: revision {self.revision!r} not found; check --revision")
        if isinstance(exc, hf_errors.RemoteEntryNotFoundError):
            return StageFailed(f"{path}: missing from {self._where()} (404); the dataset is incomplete at "
                               "this revision, try another --revision or a smaller window range")
        if isinstance(exc, hf_errors.LocalEntryNotFoundError | hf_errors.OfflineModeIsEnabled):
            return StageFailed(f"{path}: cannot reach {self._where()} and the file is not here "
                               f"({' '.join(str(exc).split())[:200]}); check the network and HF_ENDPOINT")
        if isinstance(exc, hf_errors.HfHubHTTPError):
            status = getattr(getattr(exc, "response", None), "status_code", "?")
            return StageFailed(f"{path}: HTTP {status} from {self._where()}; try again later")
        module = type(exc).__module__ or ""
        if module.startswith(("httpx", "httpcore")) and "Connect" in type(exc).__name__:
            return StageFailed(f"{path}: cannot reach {self._where()} ({' '.join(str(exc).split())[:200]}); "
                               "check the network, HF_ENDPOINT and proxies (a complete local folder needs "
                               "no network)")
        if module.startswith(("httpx", "httpcore")) or isinstance(exc, OSError):
            return StageFailed(f"{path}: download from {self._where()} failed: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:300]}; run again to resume")
        return StageFailed(f"{path}: download failed: {type(exc).__name__}: {exc}")

    # -- steps -----------------------------------------------------------------------------------
    def _file_metadata(self, repo_path: str, revision: str | None, *, retry: bool) -> tuple[str, Any]:
        """The file's URL and Hub metadata (one HEAD request); errors become one line."""
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        url = hf_hub_url(self.repo_id, repo_path, repo_type=REPO_TYPE, revision=revision,
                         endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint, retry_on_errors=retry)
        except Exception as exc:  # noqa: BLE001 - translated to one line
            raise self._translate(exc, repo_path) from None
        return url, meta

    def resolve(self) -> str:
        """Resolve the revision to a commit id (one HEAD request), so every file comes from it."""
        # no retries here: an unreachable Hub is reported at once (file transfers do retry)
        url, meta = self._file_metadata(SUITE_MANIFEST, self.revision, retry=False)
        if not meta.commit_hash:
            raise StageFailed(f"{url}: no X-Repo-Commit header; HF_ENDPOINT does not look like a Hub")
        self.commit = meta.commit_hash
        self.emit(Notice(STAGE, f"{self.repo_id}: revision {self.revision or 'main'} is commit "
                                f"{self.commit[:12]}"))
        return self.commit

    def fetch_small(self, paths: Sequence[str], task: str = "manifests") -> None:
        """Manifests and token files with ``hf_hub_download`` into the local folder (parallel)."""
        from huggingface_hub import hf_hub_download

        tqdm_class = _silent_tqdm()
        done = [0]
        lock = threading.Lock()
        self.claim(paths)

        def one(path: str) -> None:
            self.check()
            try:
                hf_hub_download(self.repo_id, path, repo_type=REPO_TYPE, revision=self.commit,
                                local_dir=self.root, endpoint=self.endpoint, token=self.token,
                                tqdm_class=tqdm_class)
            except Exception as exc:  # noqa: BLE001 - translated to one line
                raise self._translate(exc, path) from None
            with lock:
                done[0] += 1
                n = done[0]
            self.emit(Progress(STAGE, task=task, done=n, total=len(paths), unit="files"))

        _run_parallel(one, list(paths), workers=8, check=self.check, abort=self._abort)

    def claim(self, paths: Iterable[str]) -> None:
        """Paths of the folder (relative, as the repository names them) that are this commit's files:
        a move sets aside every other one (:meth:`set_aside_others`)."""
        self.claimed.update(Path(path).as_posix() for path in paths)

    def still_needed(self, files: Sequence[RemoteFile], *, workers: int | None) -> list[RemoteFile]:
        """The large files of ``files`` to fetch: those not here at their size, and those here whose
        SHA-256 is not the one their listing gives: known from the verified-file cache, else hashed now
        (and remembered, so the verification after the download does not hash them again). A file of
        another commit, or one changed in place, is fetched again, not kept to fail the verification."""
        todo: list[RemoteFile] = []
        unknown: list[RemoteFile] = []
        caches: dict[Path, VerifiedCache] = {}
        for item in files:
            final = item.final
            self.claimed.add(self._relative(final))
            if not (final.is_file() and final.stat().st_size == item.size_bytes):
                todo.append(item)
                continue
            cache = caches.setdefault(final.parent, VerifiedCache(final.parent))
            known = cache.lookup(final)
            if known is None:
                unknown.append(item)
            elif known != item.sha256:
                todo.append(item)
        if unknown:
            self.emit(Notice(STAGE, f"{len(unknown)} file(s) here not verified yet: hashing them against "
                                    f"{unknown[0].listed_in} of commit {(self.commit or '?')[:12]}"))
            try:
                hashed = hash_files([item.final for item in unknown], workers=workers, emit=self.emit,
                                    cancel=self.cancel, stage=STAGE, errors={},
                                    on_hashed=lambda path, sha: caches[path.parent].record(path, sha))
            finally:
                for cache in caches.values():
                    cache.save()
            todo.extend(item for item in unknown if hashed.get(item.final) != item.sha256)
        stale = [item for item in todo if item.final.is_file()]
        if stale:
            shown = ", ".join(item.label for item in stale[:8]) + (", ..." if len(stale) > 8 else "")
            self.emit(Notice(STAGE, f"{len(stale)} file(s) here do not match {stale[0].listed_in} of commit "
                                    f"{(self.commit or '?')[:12]} ({shown}); fetching them again"))
        wanted = {id(item) for item in todo}
        return [item for item in files if id(item) in wanted]  # in the order asked for

    def _relative(self, path: Path) -> str:
        """A path of the folder as the folder names it (``ref/logits_000.safetensors``): a listing's
        paths are resolved, so the folder's own name may be a link."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.relative_to(self.root.resolve()).as_posix()

    def set_aside_others(self) -> None:
        """When this download moves the folder from another commit (:attr:`moving_from`): each file the
        folder held of that commit (:attr:`previous_files`, what its manifests listed when the move
        began) that is not one of this commit's files the download claimed is moved to
        ``.kldtui-previous/<that commit>/`` under its path, and the partial files left in
        ``.kldtui-download/`` are removed; the folder then holds one commit's files. Nothing else of the
        folder is touched (a head exported into it, a repeat-noise report). No link is followed on the
        way (a link at a listed name is what moves, not what it points to) and nothing is written
        through one: the set-aside folders are made by kldtui, one step at a time, and a link or a file
        at a step's name stops the download (one line). Moves are renames: a stop at any moment resumes
        here, and the record keeps the list until the download has finished."""
        if self.moving_from is None:
            return
        aside_rel = Path(SET_ASIDE_DIR) / self.moving_from
        moved: list[str] = []
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for rel in sorted(self.previous_files - self.claimed):
                if os.path.lexists(self.root / rel):
                    _rename_inside(root_fd, self.root, Path(rel), aside_rel / rel)
                    moved.append(rel)
            partial_fd = _open_dir_inside(root_fd, self.root, Path(PARTIAL_DIR), create=False)
            if partial_fd is not None:
                try:
                    for name in os.listdir(partial_fd):
                        if name.endswith(".part"):
                            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                                os.unlink(name, dir_fd=partial_fd)
                finally:
                    os.close(partial_fd)
        finally:
            os.close(root_fd)
        if moved:
            shown = ", ".join(moved[:6]) + (", ..." if len(moved) > 6 else "")
            self.emit(Notice(STAGE, f"{len(moved)} file(s) of commit {self.moving_from[:12]} that commit "
                                    f"{(self.commit or '?')[:12]} does not have here set aside in "
                                    f"{self.root / aside_rel} ({shown}); delete that folder when you no "
                                    "longer need them"))

    def check_disk_space(self, todo: Sequence[RemoteFile], what: str, smaller: str,
                         kind: str = "logits") -> None:
        """Refuse to start when ``todo`` needs more than the free space (``what``: the selection
        in words, ``smaller``: how to ask for less); say what will be fetched otherwise."""
        need = 0
        for item in todo:
            have = sum(p.stat().st_size for p in self._partials(item.final))
            need += max(item.size_bytes - have, 0)
        if not todo:
            return
        free = shutil.disk_usage(self.root).free
        if need > free:
            raise StageFailed(f"{self.root}: {what} need {human_bytes(need)} "
                              f"({need} bytes) more, but only {human_bytes(free)} ({free} bytes) are free; "
                              f"free disk space or {smaller}")
        self.emit(Notice(STAGE, f"{len(todo)} {kind} file(s) to fetch, {human_bytes(need)}; "
                                f"{human_bytes(free)} free"))

    def _partial_dir(self) -> Path:
        return self.root / PARTIAL_DIR

    def _partials(self, final: Path) -> list[Path]:
        folder = self._partial_dir()
        if not folder.is_dir():
            return []
        return sorted(folder.glob(f"{final.parent.name}__{final.name}.*.part"))

    def fetch_files(self, todo: Sequence[RemoteFile], *, workers: int | None) -> list[Path]:
        """Fetch ``todo`` (several at once), each checked against its listing's SHA-256."""
        if not todo:
            return []
        total = sum(item.size_bytes for item in todo)
        initial = sum(min(sum(p.stat().st_size for p in self._partials(item.final)), item.size_bytes)
                      for item in todo)
        meter = _Meter(self.emit, total, initial)
        caches: dict[Path, VerifiedCache] = {}
        for item in todo:
            folder = item.final.parent
            if folder not in caches:
                folder.mkdir(parents=True, exist_ok=True)
                caches[folder] = VerifiedCache(folder)
        fetched: list[Path] = []

        def one(item: RemoteFile) -> None:
            path = self._fetch_one(item, meter, caches[item.final.parent])
            with self._lock:
                fetched.append(path)

        try:
            _run_parallel(one, list(todo), workers=min(workers or DOWNLOAD_WORKERS, len(todo)),
                          check=self.check, abort=self._abort)
        finally:
            for cache in caches.values():
                cache.save()
        meter.finish()
        return fetched

    def _fetch_one(self, item: RemoteFile, meter: _Meter, cache: VerifiedCache) -> Path:
        from huggingface_hub import constants

        final = item.final
        repo_path = final.relative_to(self.root.resolve()).as_posix()
        url, meta = self._file_metadata(repo_path, self.commit, retry=True)
        if meta.size is not None and meta.size != item.size_bytes:
            raise StageFailed(f"{repo_path}: the Hub has {meta.size} bytes, {item.listed_in} says "
                              f"{item.size_bytes} ({item.label}); the dataset is "
                              "inconsistent at this revision")
        etag = (meta.etag or "noetag").replace("/", "_")[:16]
        folder = self._partial_dir()
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f"{final.parent.name}__{final.name}.{etag}.part"
        for stale in self._partials(final):
            if stale != part:
                stale.unlink(missing_ok=True)  # a partial of another version of the file
        name = final.name
        use_xet = (meta.xet_file_data is not None and _xet_available()
                   and not getattr(constants, "HF_HUB_DISABLE_XET", False))
        try:
            if use_xet:
                self._note_once("xet", "transfers through Xet storage (hf_xet); HF_XET_HIGH_PERFORMANCE=1 "
                                       "uses more bandwidth and CPU")
                self._fetch_xet(repo_path, part, item.size_bytes, name, meter)
            else:
                # like huggingface_hub: an LFS file straight from the CDN location it was redirected to;
                # a Xet-backed file (hf_xet missing or HF_HUB_DISABLE_XET) through the resolve URL
                location = meta.location if meta.xet_file_data is None else url
                self._fetch_http(location, url, part, item.size_bytes, name, meter)
        except (Interrupted, KldError):
            raise
        except Exception as exc:  # noqa: BLE001 - translated to one line
            raise self._translate(exc, repo_path) from None
        size = part.stat().st_size
        if size != item.size_bytes:
            raise StageFailed(f"{repo_path}: downloaded {size} bytes, {item.listed_in} says "
                              f"{item.size_bytes}; run again to resume")
        sha = sha256_file(part)
        if sha != item.sha256:
            part.unlink(missing_ok=True)
            raise StageFailed(f"{final}: {item.label}: the downloaded file's SHA-256 "
                              f"{sha[:12]}... does not match {item.listed_in}'s {item.sha256[:12]}...; the "
                              f"copy on {self._where()} is corrupt (nothing was kept); report it to the "
                              "dataset's owner")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        cache.record(final, sha)
        with self._lock:
            self.fetched_paths.append(repo_path)
        meter.add(name, 0, final=True)
        return final

    def _fetch_http(self, location: str, url: str, part: Path, size: int, name: str, meter: _Meter) -> None:
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        resume = regular_size(part)  # a link or FIFO at the name (not ours) counts as nothing to resume
        if not resume or resume > size:
            # in kldtui's own partial folder: a link is removed, not followed; an empty one (a run killed
            # before its first byte) too, as "xb" creates it anew
            part.unlink(missing_ok=True)
            resume = 0
        if resume:
            self.emit(Notice(STAGE, f"{name}: resuming at {human_bytes(resume)} of {human_bytes(size)}"))
        meter.start_file(name, resume, size)
        headers = build_hf_headers(token=self.token)
        if urlsplit(location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a CDN's signed URL: the token stays on the Hub
        with open_private(part, "r+b" if resume else "xb") as handle:
            handle.seek(resume)
            handle.truncate()
            counted = [0]

            def on_bytes(n: int) -> None:
                counted[0] += n
                meter.add(name, n)

            progress_file = cast(BinaryIO, _ProgressFile(handle, on_bytes, self.check))
            http_get(location, progress_file, resume_size=resume,
                     headers=headers, expected_size=size, displayed_filename=name,
                     tqdm_class=_silent_tqdm())
            handle.flush()
            os.fsync(handle.fileno())
        with self._lock:
            self.bytes_fetched += counted[0]

    def _fetch_xet(self, repo_path: str, part: Path, size: int, name: str, meter: _Meter) -> None:
        """Through hf_xet (via ``hf_hub_download`` into a staging folder), progress by polling."""
        from huggingface_hub import hf_hub_download

        staging = self._partial_dir() / "xet"
        meter.start_file(name, 0, size)
        stop = threading.Event()
        seen = [0]

        def watch() -> None:
            pattern_root = staging / ".cache"
            while not stop.wait(0.5):
                grown = sum(p.stat().st_size for p in pattern_root.rglob("*.incomplete") if p.is_file()) \
                    if pattern_root.is_dir() else 0
                if grown > seen[0]:
                    meter.add(name, grown - seen[0])
                    seen[0] = grown

        watcher = threading.Thread(target=watch, daemon=True, name="kldtui-xet-watch")
        watcher.start()
        try:
            path = hf_hub_download(self.repo_id, repo_path, repo_type=REPO_TYPE, revision=self.commit,
                                   local_dir=staging, endpoint=self.endpoint, token=self.token,
                                   tqdm_class=_silent_tqdm())
        finally:
            stop.set()
            watcher.join()
        meter.add(name, size - seen[0])
        with self._lock:
            self.bytes_fetched += size
        os.replace(path, part)


def _open_dir_inside(root_fd: int, root: Path, rel: Path, *, create: bool) -> int | None:
    """A descriptor of the folder ``rel`` under the folder ``root_fd`` is open on, each step opened
    without following a link (made when ``create``, else None when a step is missing); a step that is a
    link or not a folder stops with one line naming it."""
    fd = os.dup(root_fd)
    walked = root
    try:
        for part in rel.parts:
            walked = walked / part
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if create:
                    raise
                os.close(fd)
                return None
            except OSError:
                raise BadInput(f"{walked}: a link or a file, not a folder kldtui made; move it away and run "
                               "the download again") from None
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rename_inside(root_fd: int, root: Path, src: Path, dst: Path) -> None:
    """Move the entry ``src`` of the folder to ``dst`` (both relative), without following a link on the
    way to either (the entry itself, a link included, is what moves); an entry already at ``dst`` is kept
    and the moved one gets a numbered name beside it. Gone meanwhile: nothing to do."""
    src_fd = _open_dir_inside(root_fd, root, src.parent, create=False)
    if src_fd is None:
        return
    try:
        dst_fd = _open_dir_inside(root_fd, root, dst.parent, create=True)
        assert dst_fd is not None
        try:
            name, n = dst.name, 0
            while True:
                try:
                    os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
                except FileNotFoundError:
                    break
                n += 1
                name = f"{dst.name}.{n}"
            with contextlib.suppress(FileNotFoundError):
                os.rename(src.name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def _run_parallel(fn: Callable[[Any], None], items: list[Any], *, workers: int, check: Callable[[], None],
                  abort: Cancel) -> None:
    """Run ``fn`` over ``items`` on threads; the first error stops the others and is raised."""
    if not items:
        return

    def guarded(item: Any) -> None:
        check()
        fn(item)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items))),
                            thread_name_prefix="kldtui-dl") as pool:
        futures = [pool.submit(guarded, item) for item in items]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        errors = [f.exception() for f in futures if f.done() and f.exception() is not None]
        error = next((e for e in errors if not isinstance(e, Interrupted)), errors[0] if errors else None)
        if error is not None:
            abort.set("another download failed")
            for f in pending:
                f.cancel()
            wait(pending)
            raise error


def _replayed_or_logits(workspace: Workspace) -> LogitsManifest:
    """The reference folder's manifest as logits: a logits folder's own, or a hidden-state
    folder's contexts as the logits its LM head replays them to (the head found in it, beside it or in
    the suite, as compare and score mode find it; docs/SCORE_MODE.md)."""
    from kldtui.formats import fidelity as fid

    if not fid.holds_hidden_states(workspace.reference):
        return load_logits_manifest(workspace.reference)
    hidden = fid.load_tensor_manifest(workspace.reference)
    where = fid.reference_head_dir(workspace.reference, workspace.suite_dir)
    if where is None:
        raise BadInput(f"{hidden.path}: holds hidden states and no LM head was found in it, beside it or in "
                       f"{workspace.suite_dir}; export it ({kldtui_command()} export-head --checkpoint MODEL "
                       f"--output {shell_arg(workspace.suite_dir / fid.LM_HEAD_DIR)})")
    return hidden.as_replayed_manifest(fid.load_lm_head(where).vocab)


def run_reference(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                  repo_id: str | None = None, revision: str | None = None, start_window: int = 0,
                  stop_window: int | None = None, reverify: bool = False,
                  workers: int | None = None, selection: ContextFilter | None = None) -> ReferenceSuite:
    """The reference stage: the suite and its reference logits in the workspace, verified, for the
    windows of ``[start_window, stop_window)`` that ``selection`` keeps (the run's strata).

    Logits in the suite's own ``ref/`` are fetched from ``repo_id`` when missing (resumable) and
    verified (:func:`ensure_reference`); logits in another folder are only checked against the
    suite (their manifest, windows and token hashes).
    """
    with failure_reported(emit, STAGE):
        if workspace.reference == workspace.suite_dir / REF_DIR:
            return ensure_reference(repo_id, workspace.suite_dir, revision=revision,
                                    start_window=start_window, stop_window=stop_window, reverify=reverify,
                                    emit=emit, cancel=cancel, workers=workers, selection=selection)
        from kldtui.formats.suite import check_manifest_matches_suite

        emit(StageStarted(STAGE, detail=str(workspace.reference)))
        suite = load_suite(workspace.suite_dir)
        suite.check_suite_hash()
        windows = suite.select(start_window, stop_window)
        chosen = chosen_windows(suite, (windows[0].index, windows[-1].index + 1), selection)
        windows = [w for w in windows if w.index in set(chosen)]
        manifest = _replayed_or_logits(workspace)
        check_manifest_matches_suite(manifest, suite, windows)
        emit(StageFinished(STAGE, summary=f"{workspace.reference} matches the suite"))
        stop = stop_window if stop_window is not None else suite.window_count
        return ReferenceSuite(workspace.suite_dir, workspace.suite_manifest, workspace.reference, suite,
                              manifest, (start_window, stop), None, None, True, windows=tuple(chosen))
