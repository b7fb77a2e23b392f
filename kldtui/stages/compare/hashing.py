"""Hashes a comparison checks and records: every logits file's SHA-256 against its manifest
(through ``kldtui verify``'s cache of verified files) and the reference manifest's own SHA-256,
which the report names."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink
from kldtui.formats.suite import LogitsManifest, WindowSpec

# (file, its SHA-256 in the manifest, its window, the manifest that lists it)
ListedFile = tuple[Path, str, WindowSpec, LogitsManifest]


def manifest_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a manifest file's bytes (the report's ``reference_manifest_sha256``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify_sha256(paths: list[ListedFile], emit: EventSink, cancel: Cancel | None) -> str:
    """Check every file's SHA-256 against its manifest, through ``kldtui verify``'s cache of
    verified files (a file unchanged since it was verified is not hashed again).  Returns
    "checked" when something was hashed, "cached" when every hash came from the cache."""
    from kldtui.stages.verify import VerifiedCache, hash_files

    caches: dict[Path, VerifiedCache] = {}
    known: dict[Path, str] = {}
    for path, _, _, manifest in paths:
        cache = caches.setdefault(manifest.root.resolve(), VerifiedCache(manifest.root))
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


__all__ = ["ListedFile", "manifest_sha256", "verify_sha256"]
