"""Verification of a suite folder, a logits folder, or a whole dataset root (suite + ``ref/``).

What is checked (docs/FORMATS.md):

- suite: ``suite-manifest.json`` structure, every token file (inside the suite folder, token
  count, ``token_ids_json_sha256``), the suite hash recomputed from the token hashes, and, when
  asked for (the published repository), the suite hash against the published value;
- logits folder: ``manifest.json`` structure, each listed file's size, safetensors key, dtype,
  shape and metadata against the manifest, the manifest against the suite (suite hash, window
  token hashes, rows) when the suite is known, and each file's SHA-256, streamed, several files
  in parallel (hashlib releases the GIL).

Every failure found is collected (one line each, naming the file and window); nothing stops at
the first. A file's hash is remembered in the user's cache folder, out of reach of the folder's
writers (:mod:`kldtui.formats.verified_cache`: keyed by device, inode, size, modification and change
time), so an unchanged 1.3 GB file is not hashed again (``reverify=True`` forces it).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kldtui import settings
from kldtui.errors import BadInput, Interrupted, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    Throttle,
    null_sink,
)
from kldtui.formats.identity import check_logits_file
from kldtui.formats.safe_io import is_present, read_text
from kldtui.formats.suite import (
    LOGITS_MANIFEST,
    SUITE_MANIFEST,
    WINDOW_UNIT,
    LogitsManifest,
    Suite,
    dataset_card,
    load_logits_manifest,
    load_suite,
    sha256_file,
    unit_of,
)
from kldtui.formats.untrusted_json import printable_name
from kldtui.formats.verified_cache import VerifiedCache as VerifiedCache  # re-exported for the stages
from kldtui.text import human_bytes, kldtui_command, plural, shell_arg

if TYPE_CHECKING:
    from kldtui.formats.fidelity import ContextFilter

RECORD_NAME = ".kldtui-reference.json"  # written by kldtui.stages.reference in a downloaded dataset root
REF_DIR = "ref"
PUBLISHED_REPO_ID = "festr2/kimi-k3-full-mxfp4-kld-reference-32x2048"
PUBLISHED_SUITE_HASH = "a6856e1d0504fd00d13c67a5515c081f349088664d7ea0894dc4d15db2c7d209"
STAGE: StageName = "verify"


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# ------------------------------------------------------------------------------------------------
# parallel hashing


def hash_files(paths: Sequence[Path], *, workers: int | None = None, emit: EventSink = null_sink,
               cancel: Cancel | None = None, stage: StageName = STAGE, task: str = "hash",
               on_hashed: Callable[[Path, str], None] | None = None,
               errors: dict[Path, str] | None = None) -> dict[Path, str]:
    """SHA-256 of each file, several at once, with throttled byte progress.

    ``on_hashed(path, sha)`` runs as each file finishes (the cache records it there, so an
    interrupted run keeps what it hashed). A file that cannot be read goes to ``errors`` (one
    line) when given, else raises :class:`StageFailed`. Raises :class:`Interrupted` when
    ``cancel`` is set.
    """
    if not paths:
        return {}
    sizes = {}
    for p in paths:
        try:
            sizes[p] = p.stat().st_size
        except OSError:
            sizes[p] = 0
    total = sum(sizes.values())
    lock = threading.Lock()
    state = {"done": 0, "reported": -1}
    started = time.monotonic()
    throttle = Throttle(0.2)

    def report(final: bool = False) -> None:
        with lock:
            done = state["done"]
            if final and state["reported"] == done:
                return  # the last chunk's update said it already: the end is not reported twice
            if not throttle.ready(final):
                return
            state["reported"] = done
        elapsed = max(time.monotonic() - started, 1e-9)
        rate = done / elapsed if done else None
        eta = (total - done) / rate if rate else None
        emit(Progress(stage, task=task, done=done, total=total, unit="B", rate=rate, eta_s=eta))

    def progress(n: int) -> None:
        if cancel is not None and cancel.is_set():
            cancel.check()
        with lock:
            state["done"] += n
        report()

    def one(p: Path) -> tuple[Path, str | None]:
        if cancel is not None:
            cancel.check()
        try:
            before = os.stat(p)
            sha = sha256_file(p, progress=progress)
            after = os.stat(p)
        except OSError as exc:
            message = f"{p}: cannot be read ({exc.strerror or exc}); make it readable, or fetch it again"
            if errors is None:
                raise StageFailed(message) from None
            errors[p] = message
            return p, None
        unchanged = (before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns) == (
            after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
        if on_hashed is not None and unchanged:  # a file written while hashed is not remembered
            on_hashed(p, sha)
        emit(Progress(stage, task=p.name, done=sizes[p], total=sizes[p], unit="B"))
        return p, sha

    n_workers = max(1, min(workers or default_workers(), len(paths)))
    results: dict[Path, str] = {}
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="kldtui-hash") as pool:
        futures = [pool.submit(one, p) for p in paths]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            if f.exception() is not None:
                for other in pending:
                    other.cancel()
                if cancel is not None and not isinstance(f.exception(), Interrupted):
                    cancel.set("hashing failed")
                wait(pending)
                raise f.exception()  # type: ignore[misc]
        for f in futures:
            p, sha = f.result()
            if sha is not None:
                results[p] = sha
    report(final=True)
    return results


# ------------------------------------------------------------------------------------------------
# results


# What a verified path is: a suite folder, a logits folder, a dataset root (suite + ref/), a
# hidden-state suite or a folder of hidden states; the summary line starts with it.
VerifiedKind = Literal["suite", "logits", "dataset", "hidden-state suite", "hidden-state folder"]


@dataclass(frozen=True)
class VerifiedLayout:
    """What a :data:`VerifiedKind` holds, which decides what verify says of it: ``has_suite``, a suite
    manifest (its card is read; a lone logits folder says it was checked without one); ``has_reference``,
    the reference's tensors (logits or hidden states; a suite without them never reads a bare "OK", and
    reference files there without their manifest are an incomplete download)."""

    has_suite: bool
    has_reference: bool

    @property
    def downloaded_root(self) -> bool:
        """Suite and reference together: a dataset root, which a download's record describes."""
        return self.has_suite and self.has_reference


VERIFIED_LAYOUTS: dict[VerifiedKind, VerifiedLayout] = {
    "suite": VerifiedLayout(has_suite=True, has_reference=False),
    "logits": VerifiedLayout(has_suite=False, has_reference=True),
    "dataset": VerifiedLayout(has_suite=True, has_reference=True),
    "hidden-state suite": VerifiedLayout(has_suite=True, has_reference=True),
    "hidden-state folder": VerifiedLayout(has_suite=False, has_reference=True),
}


@dataclass
class VerifyResult:
    """What :func:`verify_path` found. ``ok`` is true when ``failures`` is empty."""

    path: Path
    kind: VerifiedKind
    failures: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # failures that are unreadable manifests
    checked: list[Path] = field(default_factory=list)  # files hashed by this run
    cached: list[Path] = field(default_factory=list)  # files whose hash came from the cache
    notes: list[str] = field(default_factory=list)
    suite_hash: str | None = None
    token_files: int = 0  # token files whose ids were hashed against the suite manifest
    windows: list[int] = field(default_factory=list)  # logits windows checked
    # what was not there to check when only the suite and its token files were (a suite without
    # its reference yet): said instead of a bare "OK"
    suite_only: str | None = None
    bytes_hashed: int = 0
    elapsed_s: float = 0.0
    # what the hashed files are, in the summary: a hidden-state suite hashes every file it lists
    file_word: str = "logits file"

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        head = "OK" if self.ok else f"FAILED ({plural(len(self.failures), 'problem')})"
        if self.ok and not VERIFIED_LAYOUTS[self.kind].has_reference:  # never a bare "OK": no logits checked
            head = (f"suite and token files OK; no reference logits checked (no {REF_DIR}/{LOGITS_MANIFEST} "
                    "here)")
        if self.ok and self.suite_only is not None:
            head = f"suite and token files OK; {self.suite_only}"
        parts = []
        if self.token_files:
            parts.append(f"{plural(self.token_files, 'token file')} and the suite hash checked")
        if self.checked or (not self.cached and self.kind != "suite" and self.suite_only is None):
            hashed = human_bytes(self.bytes_hashed)
            parts.append(f"{plural(len(self.checked), self.file_word)} hashed ({hashed})")
        if self.cached:
            # the one line that says so (a notice before the hashing said it again)
            parts.append(f"{plural(len(self.cached), self.file_word)} unchanged since verified (not hashed "
                         f"again; {kldtui_command()} verify --reverify hashes them)")
        return f"{self.kind} {self.path}: {head}" + (f"; {', '.join(parts)}" if parts else "")

    def finish(self, started: float, emit: EventSink) -> None:
        """The end of a verify run (a logits or a hidden-state suite): its time, its notes, its summary."""
        self.elapsed_s = time.monotonic() - started
        for note in self.notes:
            emit(Notice(STAGE, note))
        emit(StageFinished(STAGE, summary=self.summary(),
                           figures={"ok": self.ok, "failures": len(self.failures),
                                    "hashed_files": len(self.checked), "cached_files": len(self.cached),
                                    "bytes_hashed": self.bytes_hashed}))

    @property
    def exit_code(self) -> int:
        """0 verified, 2 a manifest cannot be read (bad input, as compare says), 1 anything else."""
        return 2 if self.malformed else (0 if self.ok else 1)

    def refuse(self, command: str) -> None:
        """The one rule for a command that must not go on from a folder that does not verify
        (``kldtui publish``, either kind of suite): :class:`BadInput` (exit 2), one line: the first
        failure (it names the file and what to do), how many more and where they are listed."""
        if not self.failures:
            return
        first = self.malformed[0] if self.malformed else self.failures[0]
        others = len(self.failures) - 1
        more = (f" (and {plural(others, 'more problem')}: {kldtui_command()} verify "
                f"{shell_arg(self.path)} lists them)" if others else "")
        raise BadInput(f"{first}{more}; {command} refuses a suite that does not verify")

    def raise_for_failures(self) -> None:
        """Raise :class:`StageFailed` naming the first failure (and how many more there are);
        :class:`BadInput` when a manifest cannot be read."""
        if self.failures:
            first = self.malformed[0] if self.malformed else self.failures[0]
            others = len(self.failures) - 1
            more = f" (and {plural(others, 'more problem')})" if others else ""
            if self.malformed:
                raise BadInput(f"verification failed: {first}{more}")
            raise StageFailed(f"verification failed: {first}{more}")


# ------------------------------------------------------------------------------------------------
# suite and logits checks


RECORD_LIMIT = 16 * 1024 * 1024  # bytes of a download record read (a window list of a big suite is ~1 MiB)


def read_record(root: Path) -> dict[str, Any] | None:
    """The download record a dataset root keeps (``.kldtui-reference.json``), if any."""
    try:
        doc = json.loads(read_text(root / RECORD_NAME, limit=RECORD_LIMIT))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


DOWNLOADING = "downloading"  # a download record's state from before its first file until it has them all
FINISHED = "finished"


def download_under_way(record: dict[str, Any]) -> bool:
    """Whether a download record is of a download that has not fetched all its files yet (started, then
    stopped, or still running): the folder holds part of that repository's suite at that commit, and
    the download resumes there (kldtui.stages.reference.begin_download)."""
    return record.get("state") == DOWNLOADING


def recorded_source(record: dict[str, Any]) -> str:
    """The repository and commit a download record names, as a line shows them (they are the folder's
    words, not kldtui's: printed as names)."""
    commit = record.get("commit")
    return printable_name(str(record.get("repo_id"))[:200]) + (
        f" (commit {printable_name(commit[:12])})" if isinstance(commit, str) else "")


def unfinished_download(root: Path, record: dict[str, Any] | None) -> str | None:
    """The line verify says first of a folder whose download has not finished (its record's state is
    :data:`DOWNLOADING`): the folder, where the download was from, and the command that resumes it;
    None for any other folder. The files it has not fetched yet are failures after it, and the exit
    status is 1 even when every file there verifies: the folder is not the suite yet."""
    if record is None or not download_under_way(record):
        return None
    repo = record.get("repo_id")
    named = shell_arg(printable_name(repo[:200]), path=False) if isinstance(repo, str) else "REPO_ID"
    return (f"{root}: the download of {recorded_source(record)} into this folder has not finished "
            f"({RECORD_NAME}), so files may be missing; resume it: {kldtui_command()} download {named} "
            f"--local-dir {shell_arg(root)}")


def downloaded_from(record: dict[str, Any], repo_id: str, revision: str | None) -> bool:
    """Whether a download record is of ``repo_id`` at ``revision`` (None: whatever revision the folder
    holds; else the revision it was asked for or the commit it resolved to): a download of that
    repository and revision into the folder fetches no other suite over it."""
    if record.get("repo_id") != repo_id:
        return False
    return revision is None or revision in (record.get("revision"), record.get("commit"))


def recorded_windows(record: dict[str, Any] | None) -> set[int]:
    """The windows (or contexts) a download record says were fetched; none when its list is not a list
    of whole numbers >= 0 (a damaged or hand-edited record): the record is in the folder it describes,
    so it may only narrow what verify checks when it is what kldtui writes."""
    listed = record.get("windows") if record is not None else None
    if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                               for i in listed):
        return set()
    return set(listed)


def card_note(root: Path) -> str | None:
    """What verify says of the dataset card at the top of a suite folder (a full Hub snapshot
    holds it), or None when there is none: it is not part of the suite's data and is not checked."""
    card = dataset_card(root)
    if card is None:
        return None
    return (f"{card}: the dataset card the Hub shows; not part of the suite's data (no stage reads it), "
            "not checked")


def _check_suite(suite_path: Path, result: VerifyResult, expected_suite_hash: str | None,
                 emit: EventSink, cancel: Cancel | None) -> Suite | None:
    try:
        suite = load_suite(suite_path)
    except BadInput as exc:
        result.failures.append(str(exc))
        result.malformed.append(str(exc))
        return None
    result.suite_hash = suite.suite_token_hash_sha256
    try:
        suite.check_suite_hash()
    except BadInput as exc:
        result.failures.append(str(exc))
    if expected_suite_hash is not None and suite.suite_token_hash_sha256 != expected_suite_hash:
        result.failures.append(
            f"{suite.path}: suite_token_hash_sha256 {suite.suite_token_hash_sha256[:12]}... is not the "
            f"published {expected_suite_hash[:12]}...; this is not the published suite, download it again")
    for i, w in enumerate(suite.windows):
        if cancel is not None:
            cancel.check()
        try:
            suite.load_tokens(w, check_hash=True)
        except BadInput as exc:
            result.failures.append(str(exc))
        result.token_files += 1
        emit(Progress(STAGE, task="token files", done=i + 1, total=len(suite.windows), unit="files"))
    return suite


def _check_manifest_vs_suite(manifest: LogitsManifest, suite: Suite, windows: Iterable[int],
                             result: VerifyResult) -> None:
    if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        result.failures.append(
            f"{manifest.path}: suite hash {manifest.suite_token_hash_sha256[:12]}... differs from the "
            f"suite's {suite.suite_token_hash_sha256[:12]}... ({suite.path}); these logits were made "
            "from another suite")
    if manifest.context_length != suite.context_length:
        result.failures.append(f"{manifest.path}: context_length {manifest.context_length} differs from "
                               f"the suite's {suite.context_length} ({suite.path})")
    by_index = {w.index: w for w in suite.windows}
    for index in windows:
        entry = manifest.entries.get(index)
        w = by_index.get(index)
        if entry is None:
            continue
        if w is None:
            result.failures.append(f"{manifest.path}: window {index} is not in the suite {suite.path}")
            continue
        if entry.token_ids_json_sha256 != w.token_ids_json_sha256:
            result.failures.append(f"{manifest.path}: {w.label}: token hash differs from the suite's; "
                                   "these logits were made from other tokens")
        if entry.domain and entry.domain != w.domain:  # "": the manifest does not say
            result.failures.append(f"{manifest.path}: {w.label}: domain {entry.domain!r} differs from "
                                   f"the suite's {w.domain!r}")
        if entry.shape[0] != w.scored_positions:
            result.failures.append(f"{manifest.path}: {w.label}: {entry.shape[0]} rows, the suite needs "
                                   f"{w.scored_positions}")


def _check_file_structure(manifest: LogitsManifest, index: int, result: VerifyResult,
                          suite: Suite | None) -> Path | None:
    """Size, header, key, dtype, shape and metadata of one window's file (the same identity check
    compare makes, :func:`kldtui.formats.identity.check_logits_file`); the path if it exists."""
    try:
        path = manifest.file_path(index)
    except BadInput as exc:
        result.failures.append(str(exc))
        return None
    in_suite = suite is not None and any(w.index == index for w in suite.windows)
    identity = check_logits_file(manifest, index, suite=suite if in_suite else None)
    result.failures.extend(identity.problems)
    for note in identity.notes:
        if note not in result.notes:
            result.notes.append(note)
    return path if path.is_file() else None


def _check_logits(manifest_path: Path, suite: Suite | None, windows: Sequence[int] | None,
                  result: VerifyResult, *, reverify: bool, workers: int | None, emit: EventSink,
                  cancel: Cancel | None) -> LogitsManifest | None:
    try:
        manifest = load_logits_manifest(manifest_path)
    except BadInput as exc:
        result.failures.append(str(exc))
        result.malformed.append(str(exc))
        return None
    selected = sorted(manifest.entries) if windows is None else list(windows)
    for index in selected:
        if index not in manifest.entries:
            result.failures.append(f"{manifest.path}: window {index} is not listed; the manifest has "
                                   f"windows {sorted(manifest.entries)}")
    selected = [i for i in selected if i in manifest.entries]
    result.windows = selected
    if suite is not None:
        _check_manifest_vs_suite(manifest, suite, selected, result)
    if windows is None:
        total = manifest.raw.get("total_size_bytes")
        listed = sum(e.size_bytes for e in manifest.entries.values())
        if isinstance(total, int) and total != listed:
            result.failures.append(f"{manifest.path}: total_size_bytes {total} differs from the sum of "
                                   f"the listed files ({listed})")
    to_hash: dict[Path, int] = {}
    for index in selected:
        path = _check_file_structure(manifest, index, result, suite)
        size_ok = path is not None and path.stat().st_size == manifest.entries[index].size_bytes
        if path is not None and size_ok:
            to_hash[path] = index
    cache = VerifiedCache(manifest.root)
    if cache.untrusted is not None and not reverify:
        result.notes.append(f"{cache.path}: the verified-hash cache is not trusted ({cache.untrusted}); "
                            "every file is hashed")
    need: list[Path] = []
    known: dict[Path, str] = {}
    for path in to_hash:
        sha = None if reverify else cache.lookup(path)
        if sha is None:
            need.append(path)
        else:
            known[path] = sha
            result.cached.append(path)
    errors: dict[Path, str] = {}
    try:
        hashed = hash_files(need, workers=workers, emit=emit, cancel=cancel, on_hashed=cache.record,
                            errors=errors)
    finally:
        if not cache.save() and cache.untrusted is None:
            result.notes.append(f"{cache.path}: not writable; verified hashes are not remembered (make it "
                                f"writable, or set {settings.VERIFIED_CACHE.name} to a folder of yours)")
    result.checked.extend(p for p in need if p in hashed)
    result.bytes_hashed += sum(p.stat().st_size for p in need if p in hashed)
    result.failures.extend(errors.values())
    known.update(hashed)
    for path, index in to_hash.items():
        want = manifest.entries[index].sha256
        got = known.get(path)
        if got is None:
            continue
        if got != want:
            result.failures.append(f"{path}: window {index:03d}: SHA-256 {got[:12]}... does not match the "
                                   f"manifest's {want[:12]}...; the file is corrupt: delete it and "
                                   "download it again (a capture of kldtui's: delete it and the "
                                   "candidate's comparison report, and run again)")
    return manifest


# ------------------------------------------------------------------------------------------------
# entry points


def _present(path: Path) -> bool:
    """Whether a manifest is there; one line (exit 2) when its name holds a FIFO, a device or a
    folder (never opened: it would block or read forever)."""
    try:
        return is_present(path)
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}; replace it with the file or remove it") from None


@dataclass(frozen=True)
class _Classified:
    """What a path given to verify is: its kind, its suite and logits manifests, the dataset root
    whose download record applies (a lone logits folder is a dataset's ref/: two levels up), and for
    a lone logits folder the suite manifest beside it there, when there is one."""

    kind: VerifiedKind
    suite_path: Path | None
    logits_path: Path | None
    dataset_root: Path
    suite_beside: Path | None = None


def _lone_logits(manifest: Path) -> _Classified:
    root = manifest.parent.parent  # a dataset's ref/ folder: its root is two levels up
    beside = root / SUITE_MANIFEST
    return _Classified("logits", None, manifest, root, beside if beside.is_file() else None)


def _classify(path: Path) -> _Classified:
    """What ``path`` is (:class:`_Classified`); BadInput when it is none of the kinds verify checks."""
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder; give a suite folder, a logits folder or a "
                       "dataset root")
    if not path.is_dir() and _present(path):
        if path.name == SUITE_MANIFEST:
            return _Classified("suite", path, None, path.parent)
        if path.name == LOGITS_MANIFEST:
            return _lone_logits(path)
        raise BadInput(f"{path}: expected {SUITE_MANIFEST}, {LOGITS_MANIFEST} or a folder holding them; give "
                       "a suite folder, a logits folder or a dataset root")
    suite = path / SUITE_MANIFEST
    if _present(suite):
        ref = path / REF_DIR / LOGITS_MANIFEST
        if _present(ref):
            return _Classified("dataset", suite, ref, path)
        if _present(path / LOGITS_MANIFEST):
            return _Classified("dataset", suite, path / LOGITS_MANIFEST, path)
        return _Classified("suite", suite, None, path)
    if _present(path / LOGITS_MANIFEST):
        return _lone_logits(path / LOGITS_MANIFEST)
    raise BadInput(f"{path}: holds neither {SUITE_MANIFEST} nor {LOGITS_MANIFEST}; give a suite folder, "
                   "a logits folder or a dataset root")


def _check_range(start: int | None, stop: int | None, suite_path: Path | None) -> None:
    """A window range the suite does not have is one error, before any work (not one failure
    per missing window); it names the suite's units (a hidden-state suite's contexts, unit_of)."""
    negative = start is not None and start < 0
    suite = None
    if suite_path is not None and (negative or stop is not None):
        try:
            suite = load_suite(suite_path)
        except BadInput:
            pass  # reported with the other suite problems
    unit = unit_of(suite.windows) if suite is not None else WINDOW_UNIT
    index = "" if unit == WINDOW_UNIT else f" (a {unit}'s index)"
    if negative:
        raise BadInput(f"--start-window {start} is negative; {unit}s count from 0")
    if stop is None or suite is None:
        return
    count = suite.window_count
    if stop > count:
        raise BadInput(f"{unit} range [{start or 0}, {stop}) is outside the suite ({unit}s 0-{count - 1}, "
                       f"{suite_path}); check --start-window/--stop-window{index}")


def verify_path(path: str | os.PathLike[str], *, reverify: bool = False, workers: int | None = None,
                start_window: int | None = None, stop_window: int | None = None,
                suite: str | os.PathLike[str] | None = None, expected_suite_hash: str | None = None,
                emit: EventSink = null_sink, cancel: Cancel | None = None,
                selection: ContextFilter | None = None, sentinel_runs: bool | None = None) -> VerifyResult:
    """Verify a suite folder, a logits folder or a dataset root, collecting every failure; a
    hidden-state suite folder is verified by :func:`kldtui.stages.verify_hidden.verify_hidden_suite`
    (``selection``: its contexts; ``sentinel_runs``: its sentinel repeat folders).

    ``suite`` names the suite a logits folder belongs to (default: ``suite-manifest.json`` in the
    folder above it, when there is one). Without a window range, a dataset root downloaded by
    kldtui checks the windows it downloaded; anything else checks every listed window.
    ``expected_suite_hash`` defaults to the published value when the download record says the
    folder came from the published repository. A path that is not a suite or logits folder
    raises :class:`BadInput`.
    """
    started = time.monotonic()
    p = Path(path)
    from kldtui.stages.verify_hidden import (
        is_hidden_folder,
        is_hidden_suite,
        verify_hidden_folder,
        verify_hidden_suite,
    )

    if p.is_dir() and is_hidden_folder(p):  # hidden states alone (reference-hidden/)
        return verify_hidden_folder(p, reverify=reverify, workers=workers, emit=emit, cancel=cancel)

    if p.is_dir() and is_hidden_suite(p):  # a hidden-state suite: its own checks (checksums.txt, heads)
        from kldtui.formats.fidelity import ContextFilter

        chosen = selection
        if start_window is not None or stop_window is not None:
            chosen = ContextFilter(selection.which if selection else "all",
                                   selection.strata if selection else (),
                                   start_window or 0, stop_window)
        return verify_hidden_suite(p, selection=chosen, sentinel_runs=sentinel_runs, reverify=reverify,
                                   workers=workers, expected_suite_hash=expected_suite_hash, emit=emit,
                                   cancel=cancel)
    found = _classify(p)
    kind, suite_path, logits_path = found.kind, found.suite_path, found.logits_path
    result = VerifyResult(path=p, kind=kind)
    _check_range(start_window, stop_window, Path(suite) if suite is not None else suite_path)
    emit(StageStarted(STAGE, detail=f"{kind} {p}"))
    if suite is not None:
        suite_path = Path(suite)
        if suite_path.is_dir():
            suite_path = suite_path / SUITE_MANIFEST
    elif found.suite_beside is not None:
        suite_path = found.suite_beside
    record = read_record(found.dataset_root)
    unfinished = unfinished_download(found.dataset_root, record)
    if unfinished is not None:
        # said first, before any check (the failures after it may be files not fetched yet), and again
        # as the first failure: the verdict
        emit(Notice(STAGE, unfinished, level="warning"))
        result.failures.append(unfinished)
    if expected_suite_hash is None and record and record.get("repo_id") == PUBLISHED_REPO_ID:
        expected_suite_hash = PUBLISHED_SUITE_HASH
    loaded_suite = None
    if suite_path is not None:
        loaded_suite = _check_suite(suite_path, result, expected_suite_hash, emit, cancel)
    layout = VERIFIED_LAYOUTS[kind]
    if (not layout.has_reference and p.is_dir() and (p / REF_DIR).is_dir()
            and any((p / REF_DIR).glob("*.safetensors"))):
        result.failures.append(f"{p / REF_DIR}: holds logits files but no {LOGITS_MANIFEST}; the download "
                               f"is incomplete, run {kldtui_command()} download again")
    elif not layout.has_suite:
        result.notes.append("no suite-manifest.json found next to this folder; checked the logits "
                            "without the suite (pass --suite-manifest to check them against it)")
    card = card_note(p) if layout.has_suite and p.is_dir() else None
    if card is not None:
        result.notes.append(card)
    if logits_path is not None:
        windows: Sequence[int] | None = None
        if start_window is not None or stop_window is not None:
            lo = start_window or 0
            hi = stop_window
            if hi is None:
                try:
                    hi = max(load_logits_manifest(logits_path).entries, default=-1) + 1
                except BadInput:
                    hi = lo
            if hi <= lo:
                raise BadInput(f"window range [{lo}, {hi}) is empty; check --start-window/--stop-window")
            windows = list(range(lo, hi))
        elif layout.downloaded_root and (recorded := recorded_windows(record)):
            windows = sorted(recorded)
            result.notes.append(f"checked the {len(windows)} window(s) downloaded into this folder "
                                f"(record {RECORD_NAME}); pass --start-window/--stop-window to check others")
        if selection is not None and selection.filters and loaded_suite is not None:
            kept = set(selection.indices_within(loaded_suite, 0, loaded_suite.window_count))
            windows = [i for i in (sorted(kept) if windows is None else windows) if i in kept]
        _check_logits(logits_path, loaded_suite, windows, result, reverify=reverify, workers=workers,
                      emit=emit, cancel=cancel)
    result.finish(started, emit)
    return result


def verify_reference(suite_root: str | os.PathLike[str], *, start_window: int = 0,
                     stop_window: int | None = None, reverify: bool = False, workers: int | None = None,
                     expected_suite_hash: str | None = None, emit: EventSink = null_sink,
                     cancel: Cancel | None = None, selection: ContextFilter | None = None) -> VerifyResult:
    """Verify a reference dataset root for a window range: suite, token files, ``ref/`` files (of the
    range's windows ``selection`` keeps, when given).

    Used after a download and by the pipeline. Returns the result; call
    :meth:`VerifyResult.raise_for_failures` to stop on a failure.
    """
    root = Path(suite_root)
    if not (root / SUITE_MANIFEST).is_file():
        raise BadInput(f"{root}: no {SUITE_MANIFEST}; download the reference first")
    if not (root / REF_DIR / LOGITS_MANIFEST).is_file():
        raise BadInput(f"{root}: no {REF_DIR}/{LOGITS_MANIFEST}; download the reference first")
    if stop_window is None:
        stop_window = load_suite(root).window_count
    return verify_path(root, reverify=reverify, workers=workers, start_window=start_window,
                       stop_window=stop_window, expected_suite_hash=expected_suite_hash, emit=emit,
                       cancel=cancel, selection=selection)
