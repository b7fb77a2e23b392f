"""Downloading a hidden-state suite, or the part of it a selection of contexts needs
(``kldtui download``; docs/FORMATS.md, "Hidden-state suites").

With the real ``huggingface_hub`` client, at one commit, begun as a logits suite's download is
(:func:`~kldtui.stages.reference.begin_download`: another repository's folder refused, a folder
downloaded earlier resumed at its recorded commit, the record written before the first file):

1. ``checksums.txt`` and the suite-level files it lists (manifests, partitions, sources, the
   capture runtime: small), then the selection is made from the suite manifest
   (:class:`~kldtui.formats.fidelity.ContextFilter`: range, partition, sentinels, strata);
2. the selected contexts' token files;
3. with ``sentinel_runs``, the sentinel repeat folders' manifests;
4. the large files, resumable and checked against ``checksums.txt`` before they get their final
   name: the LM head and the selected contexts' hidden-state files (and their sentinel-run files);
   nothing else of the suite is fetched;
5. the folder is verified for the selection (:func:`~kldtui.stages.verify_hidden.verify_hidden_suite`).

A folder that already holds everything the selection needs, from a finished download of the
repository asked for (or none), is verified without the network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from kldtui import settings
from kldtui.errors import BadInput, StageFailed
from kldtui.events import Cancel, EventSink, Notice, StageFinished, StageStarted, failure_reported, null_sink
from kldtui.formats import fidelity as fid
from kldtui.formats.suite import SUITE_MANIFEST, Suite, load_suite
from kldtui.stages.reference import (
    STAGE,
    HubDownloader,
    ReferenceSuite,
    RemoteFile,
    as_reference_events,
    begin_download,
    ensure_reference,
    finished_download_of,
    write_record,
)
from kldtui.stages.verify import VerifyResult, read_record
from kldtui.stages.verify_hidden import verify_hidden_suite
from kldtui.text import human_bytes


@dataclass(frozen=True)
class HiddenReference:
    """A verified local hidden-state suite for a selection of contexts."""

    root: Path
    suite: Suite
    contexts: tuple[int, ...]
    repo_id: str | None
    commit: str | None
    offline: bool
    downloaded: tuple[str, ...] = ()
    bytes_downloaded: int = 0
    verify: VerifyResult | None = field(default=None, repr=False)

    @property
    def hidden_dir(self) -> Path:
        return self.root / fid.HIDDEN_DIR

    def summary_line(self) -> str:
        source = "local copy, no network" if self.offline else f"commit {self.commit}"
        return (f"hidden-state reference ready: {self.root}, {len(self.contexts)} of "
                f"{self.suite.window_count} "
                f"contexts ({source}); suite {self.suite.path}, hidden states {self.hidden_dir}, LM head "
                f"{self.root / fid.LM_HEAD_DIR}")


def _needed(root: Path, suite: Suite, selection: fid.ContextFilter, runs: list[str]) -> list[fid.NeededFile]:
    windows = selection.apply(suite)
    hidden = fid.load_tensor_manifest(root / fid.HIDDEN_DIR)
    head_rel = fid.head_file(root)
    head_doc_size = head_doc_sha = None
    head_manifest = root / fid.LM_HEAD_DIR / fid.TENSOR_MANIFEST
    if head_manifest.is_file():
        from kldtui.formats.suite import read_versioned

        _, doc = read_versioned(head_manifest, fid.TENSOR_MANIFEST, "LM head manifest",
                                what_to_do=fid.HEAD_DAMAGED)
        head_doc_size = doc.get("size_bytes") if isinstance(doc.get("size_bytes"), int) else None
        head_doc_sha = doc.get("file_sha256") if fid.is_sha256(doc.get("file_sha256")) else None
    sentinel = [w for w in windows if fid.is_sentinel(w)]
    run_manifests = [fid.load_tensor_manifest((root / rel).parent) for rel in runs]
    files = fid.selection_files(suite, windows, hidden, head_rel, head_doc_size, head_doc_sha)
    if run_manifests and sentinel:
        files += [f for f in fid.selection_files(suite, sentinel, hidden, head_rel, None, None, run_manifests)
                  if f.large and f.rel != head_rel and not f.rel.startswith(fid.HIDDEN_DIR + "/")]
    return files


def _complete(root: Path, repo_id: str | None, revision: str | None, selection: fid.ContextFilter,
              sentinel_runs: bool) -> bool:
    """Whether ``root`` already holds every file the selection needs (not checked here), from a finished
    download of ``repo_id`` at ``revision`` where its download record says where it came from
    (:func:`~kldtui.stages.reference.finished_download_of`)."""
    if not finished_download_of(read_record(root), repo_id, revision):
        return False
    try:
        listed = fid.read_checksums(root)
        suite = load_suite(root)
        runs = fid.run_manifests(listed) if sentinel_runs else []
        if any(not (root / rel).is_file() for rel in runs):
            return False
        needed = _needed(root, suite, selection, runs)
    except BadInput:
        return False
    small = [rel for rel in fid.SUITE_FILES if rel in listed]
    return all((root / rel).is_file() for rel in small) and all((root / f.rel).is_file() for f in needed)


def ensure_hidden_suite(repo_id: str | None, local_dir: str | Path, *,
                        selection: fid.ContextFilter | None = None,
                        sentinel_runs: bool = False, revision: str | None = None, reverify: bool = False,
                        emit: EventSink = null_sink, cancel: Cancel | None = None,
                        workers: int | None = None, begun: HubDownloader | None = None) -> HiddenReference:
    """Make ``local_dir`` hold a verified hidden-state suite for ``selection`` (see the module
    docstring). ``repo_id`` None: local only; ``begun``: the download
    :func:`~kldtui.stages.reference.begin_download` began already. Raises StageFailed when a file fails
    verification or cannot be fetched, BadInput for a selection the suite does not have or a folder
    another repository's suite was downloaded into (before any download)."""
    root = Path(local_dir)
    chosen = selection or fid.ContextFilter()
    started = time.monotonic()
    emit(StageStarted(STAGE, detail=f"{repo_id or 'local'} -> {root} ({chosen.describe()})"))
    if _complete(root, repo_id, revision, chosen, sentinel_runs):
        suite = load_suite(root)
        windows = chosen.apply(suite)
        emit(Notice(STAGE, f"{root} already holds {len(windows)} selected context(s); verifying, no network"))
        result = verify_hidden_suite(root, selection=chosen, sentinel_runs=sentinel_runs or None,
                                     reverify=reverify,
                                     workers=workers, emit=as_reference_events(emit), cancel=cancel)
        result.raise_for_failures()
        record = read_record(root) or {}
        emit(StageFinished(STAGE, summary=f"hidden-state reference ready (local): {result.summary()}",
                           figures={"offline": True, "contexts": len(windows)}))
        return HiddenReference(root, suite, tuple(w.index for w in windows), repo_id or record.get("repo_id"),
                               record.get("commit"), True, verify=result)
    if repo_id is None:
        raise BadInput(f"{root}: the hidden-state suite is not complete here for {chosen.describe()}; give a "
                       "repository id to download it")
    downloader = begun or begin_download(
        root, repo_id, revision, emit=emit, cancel=cancel,
        offline_line=f"{root}: the suite is incomplete and HF_HUB_OFFLINE is set; unset it to download")
    commit = downloader.commit
    assert commit is not None
    downloader.fetch_small([fid.CHECKSUMS])
    listed = fid.read_checksums(root)
    downloader.fetch_small([rel for rel in fid.SUITE_FILES if rel in listed], task="suite files")
    suite = load_suite(root)
    windows = chosen.apply(suite)
    downloader.fetch_small([w.token_file for w in windows], task="token files")
    runs = fid.run_manifests(listed) if sentinel_runs else []
    if runs:
        downloader.fetch_small(runs, task="sentinel run manifests")
    large: list[RemoteFile] = []
    needed = _needed(root, suite, chosen, runs)
    downloader.claim(item.rel for item in needed)  # the selection's files: this commit's (a move keeps them)
    for item in needed:
        if not item.large:
            continue
        want = listed.get(item.rel)
        if want is None:
            raise StageFailed(f"{root / fid.CHECKSUMS}: does not list {item.rel} ({item.label}); the suite "
                              "is incomplete at this revision")
        if item.sha256 is not None and item.sha256 != want:
            raise StageFailed(f"{root / fid.CHECKSUMS}: {item.rel} is listed with {want[:12]}..., its "
                              "manifest says "
                              f"{item.sha256[:12]}...; the suite is inconsistent at this revision")
        final = root / item.rel
        if item.size_bytes is None:
            raise StageFailed(f"{item.rel}: no size in its manifest; the suite's manifests are incomplete")
        large.append(RemoteFile(final, item.size_bytes, want, item.label, fid.CHECKSUMS))
    todo = downloader.still_needed(large, workers=workers)
    downloader.check_disk_space(todo, f"the {len(windows)} selected context(s) and the LM head",
                                "narrow the selection (--context-filter, --stratum, "
                                "--start-context/--stop-context)",
                                kind="tensor")
    downloader.fetch_files(todo, workers=workers)
    downloader.set_aside_others()
    write_record(root, repo_id, downloader.requested, commit, {w.index for w in windows}, downloader.endpoint,
                 layout="hidden-state suite", sentinel_runs=sentinel_runs)
    emit(Notice(STAGE, f"verifying {root}"))
    result = verify_hidden_suite(root, selection=chosen, sentinel_runs=sentinel_runs or None,
                                 reverify=reverify,
                                 workers=workers, emit=as_reference_events(emit), cancel=cancel)
    result.raise_for_failures()
    elapsed = time.monotonic() - started
    emit(StageFinished(STAGE, summary=f"hidden-state reference ready: {len(todo)} file(s) downloaded "
                                      f"({human_bytes(downloader.bytes_fetched)}) in {elapsed:.1f}s; "
                                      f"{result.summary()}",
                       figures={"offline": False, "commit": commit, "contexts": len(windows),
                                "bytes_downloaded": downloader.bytes_fetched, "elapsed_s": elapsed}))
    return HiddenReference(root, suite, tuple(w.index for w in windows), repo_id, commit, False,
                           tuple(downloader.fetched_paths), downloader.bytes_fetched, result)


def is_hidden_suite_file(path: Path) -> bool:
    try:
        return fid.is_context_suite(load_suite(path))
    except BadInput:
        return False


def ensure_suite(repo_id: str | None, local_dir: str | Path, *, revision: str | None = None,
                 selection: fid.ContextFilter | None = None, sentinel_runs: bool = False,
                 reverify: bool = False,
                 emit: EventSink = null_sink, cancel: Cancel | None = None,
                 workers: int | None = None) -> ReferenceSuite | HiddenReference:
    """``kldtui download``: a logits suite (:func:`~kldtui.stages.reference.ensure_reference`, for
    ``selection``'s index range and strata, its windows' domains) or a hidden-state suite
    (:func:`ensure_hidden_suite`), whichever the suite manifest describes (fetched first when the
    folder has none)."""
    with failure_reported(emit, STAGE):
        root = Path(local_dir)
        begun = None
        offline = settings.HF_HUB_OFFLINE.get()
        if not (root / SUITE_MANIFEST).is_file() and repo_id is not None and not offline:
            # the suite manifest says which kind of suite this is: fetched first, by the download itself
            # (begun here, so it is recorded before its first file and resumed at one commit)
            begun = begin_download(root, repo_id, revision, emit=emit, cancel=cancel)
            begun.fetch_small([SUITE_MANIFEST])
        if (root / SUITE_MANIFEST).is_file() and is_hidden_suite_file(root / SUITE_MANIFEST):
            return ensure_hidden_suite(repo_id, root, selection=selection, sentinel_runs=sentinel_runs,
                                       revision=revision, reverify=reverify, emit=emit, cancel=cancel,
                                       workers=workers, begun=begun)
        chosen = selection or fid.ContextFilter()
        if chosen.which != "all" or sentinel_runs:
            raise BadInput(f"{root / SUITE_MANIFEST}: a logits suite has windows, not contexts with "
                           "partitions and sentinel runs; choose windows with --start-window, --stop-window "
                           "and --stratum (a domain)")
        return ensure_reference(repo_id, root, revision=revision, start_window=chosen.start,
                                stop_window=chosen.stop, reverify=reverify, emit=emit, cancel=cancel,
                                workers=workers, selection=chosen, begun=begun)


__all__ = ["HiddenReference", "ensure_hidden_suite", "ensure_suite"]
