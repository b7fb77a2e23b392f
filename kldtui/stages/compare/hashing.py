"""Hashes a comparison checks and records: every logits or hidden-state file's SHA-256 against its
manifest and an LM head's against its ``manifest.json`` (through ``kldtui verify``'s cache of
verified files), and the reference manifest's own SHA-256, which the report names."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink
from kldtui.formats.fidelity import LmHead
from kldtui.formats.safe_io import read_bytes
from kldtui.formats.suite import MANIFEST_LIMIT, WindowSpec

# (file, its SHA-256 in the manifest, its window, the folder of the manifest that lists it)
ListedFile = tuple[Path, str, WindowSpec, Path]


def manifest_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a manifest file's bytes (the report's ``reference_manifest_sha256``); OSError
    for anything but a regular file (a FIFO put there after the manifest was loaded never blocks)."""
    return hashlib.sha256(read_bytes(path, limit=MANIFEST_LIMIT)).hexdigest()


def verify_sha256(paths: list[ListedFile], emit: EventSink, cancel: Cancel | None) -> str:
    """Check every file's SHA-256 against its manifest, through ``kldtui verify``'s cache of
    verified files (a file unchanged since it was verified is not hashed again).  Returns
    "checked" when something was hashed, "cached" when every hash came from the cache."""
    from kldtui.stages.verify import VerifiedCache, hash_files

    caches: dict[Path, VerifiedCache] = {}
    known: dict[Path, str] = {}
    for path, _, _, root in paths:
        cache = caches.setdefault(root.resolve(), VerifiedCache(root))
        sha = cache.lookup(path)
        if sha is not None:
            known[path] = sha
    need = list(dict.fromkeys(p for p, _, _, _ in paths if p not in known))

    def record(path: Path, sha: str) -> None:
        for root, cache in caches.items():
            if path.resolve().is_relative_to(root):
                cache.record(path, sha)

    known.update(hash_files(need, emit=emit, cancel=cancel, stage="compare", task="verify sha256",
                            on_hashed=record))
    for cache in caches.values():
        cache.save()
    for path, expected, w, _ in paths:
        if known[path] != expected:
            raise BadInput(f"{path}: {w.label}: SHA-256 {known[path][:12]}... differs from the manifest's "
                           f"{expected[:12]}...; the file is damaged, fetch or finalize it again")
    return "checked" if need else "cached"


def verify_head(head: LmHead, emit: EventSink, cancel: Cancel | None) -> str | None:
    """An LM head's file against its manifest's ``file_sha256`` (hashed once, then remembered by
    the verified-file cache); returns the SHA-256 (None for a head without a manifest, which is
    hashed so that the report can name it)."""
    from kldtui.stages.verify import VerifiedCache, hash_files

    cache = VerifiedCache(head.path.parent)
    sha = cache.lookup(head.path)
    if sha is None:
        sha = hash_files([head.path], emit=emit, cancel=cancel, stage="compare", task="verify LM head",
                         on_hashed=cache.record)[head.path]
        cache.save()
    if head.file_sha256 is not None and sha != head.file_sha256:
        raise BadInput(f"{head.path}: SHA-256 {sha[:12]}... differs from {head.manifest_path}'s file_sha256 "
                       f"{head.file_sha256[:12]}...; the head is damaged or not the one the manifest names, "
                       "fetch it again")
    return sha


__all__ = ["ListedFile", "manifest_sha256", "verify_head", "verify_sha256"]
