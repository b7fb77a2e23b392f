"""Verification of a hidden-state suite folder (docs/FORMATS.md, "Hidden-state suites"), or of the
part of it a selection of contexts needs: ``kldtui verify`` on such a folder and the end of
``kldtui download``.

What is checked, every failure collected (one line each):

- ``checksums.txt``: every file present that the selection needs, and every other suite-level
  file present, hashed (through the verified-file cache) against its line; a file in the folder
  that ``checksums.txt`` does not list is a failure (someone added it), but for the dataset card
  (``README.md`` at the top, a regular file no manifest names: a note); a listed file the selection
  needs but that is missing is a failure; listed files outside the selection are counted in a note;
- the suite: ``suite-manifest.json``'s structure and counts, the suite hash recomputed from the
  contexts' token hashes (and the published value when asked), each selected context's token file
  against its ``token_ids_json_sha256``, ``partitions.json`` against the suite;
- the top-level ``manifest.json``: the suite manifest's, the hidden-state manifest's and the
  capture runtime's SHA-256, the suite hash, the LM head's file and payload hashes and shape;
- the hidden-state folder: its suite hash, its runtime manifest's SHA-256, each selected record's
  token hash against the suite and its SHA-256 against ``checksums.txt``, each selected file's
  identity (header, only key, BF16, shape, size, metadata) without reading its data;
- the LM head: structure (one BF16 tensor of the manifest's shape), file SHA-256, and the payload's
  ``raw_tensor_sha256`` whenever the file is hashed;
- the sentinel repeat folders present (or, with ``sentinel_runs``, required): the same as the
  hidden-state folder for the selected sentinel contexts.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Notice, Progress, StageFinished, StageStarted, null_sink
from kldtui.formats import fidelity as fid
from kldtui.formats.safe_io import is_present, open_regular_raw, read_failure
from kldtui.formats.suite import DATASET_CARD, SUITE_MANIFEST, Suite, WindowSpec, load_suite, sha256_file
from kldtui.formats.verified_cache import VerifiedCache
from kldtui.stages.verify import (
    STAGE,
    VerifiedKind,
    VerifyResult,
    card_note,
    hash_files,
    read_record,
    recorded_windows,
    unfinished_download,
)

KIND: VerifiedKind = "hidden-state suite"


def is_hidden_suite(root: Path) -> bool:
    """Whether ``root`` holds a hidden-state suite (its suite manifest lists contexts)."""
    try:
        return fid.is_context_suite(load_suite(root)) if (root / SUITE_MANIFEST).is_file() else False
    except BadInput:
        return (root / fid.TOP_MANIFEST).is_file() and (root / fid.HIDDEN_DIR).is_dir()


def selected_windows(suite: Suite, root: Path, selection: fid.ContextFilter | None,
                     result: VerifyResult | None = None) -> list[WindowSpec]:
    """The contexts to check: the selection; else those a download recorded; else all."""
    if selection is not None and not selection.is_everything:
        return selection.apply(suite)
    wanted = recorded_windows(read_record(root))
    if selection is None and wanted:
        if result is not None:
            result.notes.append(f"checked the {len(wanted)} context(s) downloaded into this folder (record "
                                ".kldtui-reference.json); pass --context-filter all to check every context")
        return [w for w in suite.windows if w.index in wanted]
    return list(suite.windows)


def payload_sha256(path: Path, begin: int, end: int) -> str:
    """SHA-256 of bytes [begin, end) of a file (an LM head's tensor payload: ``raw_tensor_sha256``)."""
    digest = hashlib.sha256()
    buf = bytearray(8 * 1024 * 1024)
    view = memoryview(buf)
    with open_regular_raw(path) as handle:
        handle.seek(begin)
        left = end - begin
        while left > 0:
            n = handle.readinto(view[:min(left, len(buf))])
            if not n:
                break
            digest.update(view[:n])
            left -= n
    return digest.hexdigest()


def verify_hidden_suite(root: str | Path, *, selection: fid.ContextFilter | None = None,
                        sentinel_runs: bool | None = None, reverify: bool = False, workers: int | None = None,
                        expected_suite_hash: str | None = None, emit: EventSink = null_sink,
                        cancel: Cancel | None = None) -> VerifyResult:
    """Verify a hidden-state suite folder for a selection (see the module docstring).
    ``sentinel_runs``: True requires the sentinel repeat folders' files of the selected sentinel
    contexts, False skips them, None checks those present."""
    started = time.monotonic()
    base = Path(root)
    result = VerifyResult(path=base, kind=KIND, file_word="file")
    emit(StageStarted(STAGE, detail=f"{KIND} {base}"))
    unfinished = unfinished_download(base, read_record(base))
    if unfinished is not None:
        # said first, before any check (the failures after it may be files not fetched yet), and again
        # as the first failure: the verdict
        emit(Notice(STAGE, unfinished, level="warning"))
        result.failures.append(unfinished)
    checker = _Checker(base, result, emit, cancel)
    checker.run(selection, sentinel_runs, reverify, workers, expected_suite_hash)
    result.finish(started, emit)
    return result


def is_hidden_folder(folder: Path) -> bool:
    """Whether ``folder`` is a hidden-state tensor folder (its manifest names ``hidden_width``)."""
    path = folder / fid.TENSOR_MANIFEST
    try:
        return path.is_file() and fid.load_tensor_manifest(path).holds_hidden
    except BadInput:
        return False


def verify_hidden_folder(folder: str | Path, *, reverify: bool = False, workers: int | None = None,
                         emit: EventSink = null_sink, cancel: Cancel | None = None) -> VerifyResult:
    """A hidden-state folder alone (``kldtui verify reference-hidden/``): its manifest, each file's
    identity and SHA-256 against its record, and against the suite in the folder above when there
    is one (suite hash, token hashes)."""
    started = time.monotonic()
    base = Path(folder)
    result = VerifyResult(path=base, kind="hidden-state folder", file_word="hidden-state file")
    emit(StageStarted(STAGE, detail=f"hidden-state folder {base}"))
    try:
        manifest = fid.load_tensor_manifest(base)
    except BadInput as exc:
        result.failures.append(str(exc))
        result.malformed.append(str(exc))
        return result
    suite = None
    if (base.parent / SUITE_MANIFEST).is_file():
        try:
            suite = load_suite(base.parent)
        except BadInput as exc:
            result.failures.append(str(exc))
    else:
        result.notes.append(f"no {SUITE_MANIFEST} above this folder; checked the files without the suite")
    if suite is not None and manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        result.failures.append(f"{manifest.path}: suite hash differs from the suite's ({suite.path})")
    result.windows = sorted(manifest.entries)
    to_hash: dict[Path, str] = {}
    for index in result.windows:
        problems, _ = fid.check_tensor_file(manifest, index, suite)
        result.failures.extend(problems)
        path = manifest.file_path(index)
        if path.is_file():
            to_hash[path] = manifest.entries[index].sha256
    cache = VerifiedCache(base)
    need = [p for p in to_hash if reverify or cache.lookup(p) is None]
    result.cached.extend(p for p in to_hash if p not in need)
    errors: dict[Path, str] = {}
    hashed = hash_files(need, workers=workers, emit=emit, cancel=cancel, on_hashed=cache.record,
                        errors=errors)
    cache.save()
    result.failures.extend(errors.values())
    result.checked.extend(hashed)
    result.bytes_hashed = sum(p.stat().st_size for p in hashed)
    for path, want in to_hash.items():
        got = hashed.get(path) or cache.lookup(path)
        if got is not None and got != want:
            result.failures.append(f"{path}: SHA-256 {got[:12]}... does not match the manifest's "
                                   f"{want[:12]}...; "
                                   "the file is corrupt, delete it and fetch it again")
    result.elapsed_s = time.monotonic() - started
    for note in result.notes:
        emit(Notice(STAGE, note))
    emit(StageFinished(STAGE, summary=result.summary(), figures={"ok": result.ok,
                                                                 "failures": len(result.failures)}))
    return result


class _Checker:
    def __init__(self, root: Path, result: VerifyResult, emit: EventSink, cancel: Cancel | None) -> None:
        self.root = root
        self.result = result
        self.emit = emit
        self.cancel = cancel
        self.expected: dict[str, str] = {}  # rel -> SHA-256 a manifest lists (cross-checked with checksums)
        self.head: fid.LmHead | None = None

    def fail(self, text: str, *, malformed: bool = False) -> None:
        self.result.failures.append(text)
        if malformed:
            self.result.malformed.append(text)

    def run(self, selection: fid.ContextFilter | None, sentinel_runs: bool | None, reverify: bool,
            workers: int | None, expected_suite_hash: str | None) -> None:
        root = self.root
        # a suite as `kldtui prepare --layout hidden` leaves it: contexts, no reference yet, and
        # so no checksums.txt (finalize writes it with the reference); its suite is checked
        prepared = not any((root / rel).exists() for rel in (fid.CHECKSUMS, fid.TOP_MANIFEST, fid.HIDDEN_DIR))
        try:
            listed = {} if prepared else fid.read_checksums(root)
        except BadInput as exc:
            self.fail(str(exc), malformed=True)
            listed = {}
        try:
            suite = load_suite(root)
        except BadInput as exc:
            self.fail(str(exc), malformed=True)
            return
        self.result.suite_hash = suite.suite_token_hash_sha256
        try:
            suite.check_suite_hash()
        except BadInput as exc:
            self.fail(str(exc))
        if expected_suite_hash is not None and suite.suite_token_hash_sha256 != expected_suite_hash:
            self.fail(f"{suite.path}: suite_token_hash_sha256 {suite.suite_token_hash_sha256[:12]}... is not "
                      f"the published {expected_suite_hash[:12]}...; this is not the published suite")
        windows = selected_windows(suite, root, selection, self.result)
        self.result.windows = [w.index for w in windows]
        for n, w in enumerate(windows):
            if self.cancel is not None:
                self.cancel.check()
            try:
                suite.load_tokens(w, check_hash=True)
            except BadInput as exc:
                self.fail(str(exc))
            self.emit(Progress(STAGE, task="token files", done=n + 1, total=len(windows), unit="files"))
        self.result.token_files = len(windows)
        self._partitions(suite)
        if prepared:
            self.result.suite_only = (f"no hidden states checked (no {fid.HIDDEN_DIR}/, {fid.TOP_MANIFEST} "
                                      f"or {fid.CHECKSUMS} here: a prepared suite; capture its reference in "
                                      "hidden mode, docs/PRODUCING.md)")
            return
        hidden = self._tensor_folder(root / fid.HIDDEN_DIR, suite, windows, required=True)
        head_rel = self._head()
        self._top(suite, hidden)
        runs = []
        if sentinel_runs is not False:
            sentinels = [w for w in windows if fid.is_sentinel(w)]
            for rel in fid.run_manifests(listed):
                folder = root / rel
                if not folder.is_file():
                    if sentinel_runs and sentinels:
                        self.fail(f"{folder}: missing; download the sentinel runs (--sentinel-runs)")
                    continue
                run = self._tensor_folder(folder.parent, suite, sentinels, required=bool(sentinel_runs))
                if run is not None:
                    runs.append(run)
        needed = self._needed(suite, windows, hidden, head_rel, runs, listed)
        self._hash(listed, needed, head_rel, reverify, workers)

    # -- parts --------------------------------------------------------------------------------
    def _partitions(self, suite: Suite) -> None:
        path = self.root / fid.PARTITIONS
        if not path.is_file():
            return
        try:
            found = fid.check_partitions(suite, fid.read_partitions(self.root), str(path))
            self.result.failures.extend(found)
        except BadInput as exc:
            self.fail(str(exc))

    def _tensor_folder(self, folder: Path, suite: Suite, windows: Sequence[WindowSpec],
                       required: bool) -> fid.TensorManifest | None:
        try:
            manifest = fid.load_tensor_manifest(folder)
        except BadInput as exc:
            if required or (folder / fid.TENSOR_MANIFEST).exists():
                self.fail(str(exc), malformed=True)
            return None
        where = manifest.path
        if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
            self.fail(f"{where}: suite hash {manifest.suite_token_hash_sha256[:12]}... differs from the "
                      "suite's "
                      f"{suite.suite_token_hash_sha256[:12]}... ({suite.path}); made from another suite")
        if manifest.runtime_manifest is not None and manifest.runtime_manifest_sha256 is not None:
            runtime = self.root / manifest.runtime_manifest
            if runtime.is_file() and sha256_file(runtime) != manifest.runtime_manifest_sha256:
                self.fail(f"{where}: runtime_manifest_sha256 differs from {runtime}'s SHA-256; the runtime "
                          "record was changed")
        # by name, not by real path: a folder link you made (to another disk) is followed
        rel_folder = folder.relative_to(self.root).as_posix()
        for w in windows:
            if w.index not in manifest.entries:
                if required:
                    self.fail(f"{where}: {w.label} is not listed")
                continue
            record = manifest.entries[w.index]
            if record.token_ids_json_sha256 != w.token_ids_json_sha256:
                self.fail(f"{where}: {w.label}: token hash differs from the suite's; made from other tokens")
            if not (folder / record.file).exists() and not required:
                continue
            self.expected[f"{rel_folder}/{record.file}"] = record.sha256
            problems, _ = fid.check_tensor_file(manifest, w.index, suite)
            self.result.failures.extend(problems)
        return manifest

    def _head(self) -> str:
        rel = fid.head_file(self.root)
        try:
            head = fid.load_lm_head(self.root / fid.LM_HEAD_DIR)
        except BadInput as exc:
            self.fail(str(exc), malformed=True)
            return rel
        if head.file_sha256 is not None:
            self.expected[rel] = head.file_sha256
        self.head = head
        return rel

    def _top(self, suite: Suite, hidden: fid.TensorManifest | None) -> None:
        path = self.root / fid.TOP_MANIFEST
        try:
            top = fid.load_top_manifest(path)
        except BadInput as exc:
            self.fail(str(exc), malformed=True)
            return
        checks = [(top.suite_manifest, top.suite_manifest_sha256, "suite.manifest_sha256"),
                  (top.hidden_manifest, top.hidden_manifest_sha256, "reference_hidden.manifest_sha256")]
        runtime = top.raw.get("capture_runtime")
        if (isinstance(runtime, dict) and isinstance(runtime.get("file"), str)
                and fid.is_sha256(runtime.get("sha256"))):
            checks.append((runtime["file"], runtime["sha256"], "capture_runtime.sha256"))
        for rel, want, name in checks:
            target = self.root / rel
            if not target.is_file():
                self.fail(f"{path}: {name} names {rel}, which is missing")
            elif sha256_file(target) != want:
                self.fail(f"{path}: {name} {want[:12]}... differs from {rel}'s SHA-256; the file was changed")
        if top.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
            self.fail(f"{path}: suite.suite_token_hash_sha256 differs from the suite's")
        head = self.head
        if head is not None:
            if head.file_sha256 is not None and head.file_sha256 != top.lm_head_file_sha256:
                self.fail(f"{path}: lm_head.file_sha256 differs from {head.manifest_path}'s; the head was "
                          "replaced")
            raw = head.raw_tensor_sha256
            if top.lm_head_raw_tensor_sha256 and raw not in (None, top.lm_head_raw_tensor_sha256):
                self.fail(f"{path}: lm_head.raw_tensor_sha256 differs from {head.manifest_path}'s")
            if tuple(top.lm_head_shape) != (head.vocab, head.hidden):
                self.fail(f"{path}: lm_head.shape {list(top.lm_head_shape)} but {head.path} is "
                          f"[{head.vocab}, {head.hidden}]")
        if hidden is not None and hidden.width != top.lm_head_shape[1]:
            self.fail(f"{hidden.path}: hidden width {hidden.width} differs from the LM head's "
                      f"{top.lm_head_shape[1]} ({path})")

    def _needed(self, suite: Suite, windows: Sequence[WindowSpec], hidden: fid.TensorManifest | None,
                head_rel: str, runs: Sequence[fid.TensorManifest], listed: dict[str, str]) -> set[str]:
        # the suite-level files every download takes: needed when checksums.txt lists them
        needed = {rel for rel in fid.SUITE_FILES if rel in listed or (self.root / rel).exists()}
        needed.add(head_rel)
        needed.update(w.token_file for w in windows)
        needed.update(self.expected)
        return needed

    def _hash(self, listed: dict[str, str], needed: set[str], head_rel: str, reverify: bool,
              workers: int | None) -> None:
        root = self.root
        present = set(fid.listed_files(root))
        unlisted = present - set(listed)
        card = card_note(root)
        if card is not None and DATASET_CARD in unlisted and DATASET_CARD not in needed:
            unlisted.discard(DATASET_CARD)  # the Hub's card: no stage reads it, so it vouches for nothing
            self.result.notes.append(card)
        if listed:
            for rel in sorted(unlisted):
                self.fail(f"{root / rel}: not listed in {fid.CHECKSUMS}, so nothing vouches for it; remove "
                          "it, or fetch the suite again if it belongs to it")
        for rel, stated in self.expected.items():
            if rel in listed and listed[rel] != stated:
                self.fail(f"{root / fid.CHECKSUMS}: {rel} is listed with {listed[rel][:12]}..., its manifest "
                          f"says {stated[:12]}...; the suite is inconsistent")
        for rel in sorted(needed - set(self.expected)):  # tensor files: check_tensor_file says so
            if rel not in present and not os.path.lexists(root / rel):
                self.fail(f"{root / rel}: missing; download it (kldtui download)")
        for rel in sorted((needed | set(listed)) - set(self.expected)):  # tensor files: check_tensor_file
            try:
                is_present(root / rel)  # a FIFO, a folder, a dangling link at the name
            except OSError as exc:
                self.fail(str(read_failure(root / rel, exc, "file", "delete it and fetch it again")))
        to_hash = sorted(rel for rel in needed | (present & set(listed)) if (root / rel).is_file())
        absent = sorted(rel for rel in set(listed) - present - needed if not os.path.lexists(root / rel))
        if absent and read_record(root) is None:
            # no download record: the folder is the whole suite (finalize's, or a full snapshot)
            for rel in absent:
                self.fail(f"{root / rel}: listed in {fid.CHECKSUMS} but missing; fetch the suite again, or "
                          "finalize its reference again")
        elif absent:
            self.result.notes.append(f"{len(absent)} file(s) of the suite are not here (outside the "
                                     "selection)")
        caches: dict[Path, VerifiedCache] = {}
        known: dict[str, str] = {}
        need: list[Path] = []
        for rel in to_hash:
            path = root / rel
            cache = caches.setdefault(path.parent, VerifiedCache(path.parent))
            sha = None if reverify else cache.lookup(path)
            if sha is None:
                need.append(path)
            else:
                known[rel] = sha
                self.result.cached.append(path)

        def record(path: Path, sha: str) -> None:
            caches[path.parent].record(path, sha)

        errors: dict[Path, str] = {}
        hashed = hash_files(need, workers=workers, emit=self.emit, cancel=self.cancel, on_hashed=record,
                            errors=errors)
        for cache in caches.values():
            cache.save()
        self.result.failures.extend(errors.values())
        self.result.checked.extend(p for p in need if p in hashed)
        self.result.bytes_hashed += sum(p.stat().st_size for p in need if p in hashed)
        for path, sha in hashed.items():
            known[path.relative_to(root).as_posix()] = sha
        for rel, sha in known.items():
            want = listed.get(rel, self.expected.get(rel))
            if want is not None and sha != want:
                self.fail(f"{root / rel}: SHA-256 {sha[:12]}... does not match {fid.CHECKSUMS}'s "
                          f"{want[:12]}...; the file is corrupt, delete it and fetch it again")
        head = self.head
        # The payload is checked whenever the head file or the manifest stating its payload hash was
        # hashed in this run (a cached head under a changed manifest too); a head that fails leaves
        # the cache, so the next verify hashes and checks it again instead of passing it.
        stated_here = head is not None and (root / head_rel in hashed or (
            head.manifest_path is not None and head.manifest_path in hashed))
        if head is not None and stated_here and head.raw_tensor_sha256 is not None:
            raw = payload_sha256(head.path, head.info.begin, head.info.end)
            if raw != head.raw_tensor_sha256:
                caches.setdefault(head.path.parent, VerifiedCache(head.path.parent)).forget(head.path)
                caches[head.path.parent].save()
                self.fail(f"{head.path}: the tensor payload's SHA-256 {raw[:12]}... differs from "
                          f"raw_tensor_sha256 {head.raw_tensor_sha256[:12]}...; the head is damaged: export "
                          "the head again (kldtui export-head) or download it again")


__all__ = ["KIND", "is_hidden_folder", "is_hidden_suite", "payload_sha256", "selected_windows",
           "verify_hidden_folder", "verify_hidden_suite"]
