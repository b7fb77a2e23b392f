"""A comparison's inputs, every one validated before the first row is compared (:func:`prepare`):
suite hash, token hashes, both manifests against the suite, vocabularies, every file's identity
(key, dtype, shape, size, header metadata) and, with ``verify_sha256``, its SHA-256."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, null_sink
from kldtui.formats.identity import check_logits_file
from kldtui.formats.report_model import Verified
from kldtui.formats.suite import (
    LogitsManifest,
    Suite,
    WindowSpec,
    check_manifest_matches_suite,
    load_logits_manifest,
    load_suite,
)
from kldtui.stages.compare.hashing import ListedFile, manifest_sha256, verify_sha256
from kldtui.stages.compare.options import CompareOptions


@dataclass
class CompareInputs:
    """Everything :func:`prepare` validated; what the engine needs to compare windows."""

    suite: Suite
    windows: list[WindowSpec]
    reference: LogitsManifest
    candidate: LogitsManifest
    vocab_size: int
    next_tokens: dict[int, np.ndarray]
    verified: Verified
    reference_manifest_sha256: str


def _file_checks(manifest: LogitsManifest, suite: Suite, w: WindowSpec, side: str) -> Path:
    """The file is the window the suite expects (header metadata window_index and token hash,
    shape, dtype, size), checked before a row is read; see :mod:`kldtui.formats.identity`."""
    entry = manifest.entry(w.index)
    if entry.dtype != "F32":
        raise BadInput(f"{manifest.path}: {w.label} dtype {entry.dtype!r} is not F32; "
                       "only float32 logits are supported")
    identity = check_logits_file(manifest, w.index, suite=suite, side=side)
    identity.raise_first("" if any("again" in p for p in identity.problems[:1])
                         else "; download or finalize this window again")
    return identity.path


def prepare(suite_manifest: str | os.PathLike[str] | Suite, reference_dir: str | os.PathLike[str],
            candidate_dir: str | os.PathLike[str], options: CompareOptions,
            emit: EventSink = null_sink, cancel: Cancel | None = None,
            windows: Sequence[WindowSpec] | None = None) -> CompareInputs:
    """Validate every input of a comparison; BadInput (one line) on the first problem."""
    suite = suite_manifest if isinstance(suite_manifest, Suite) else load_suite(suite_manifest)
    suite.check_suite_hash()
    selected = list(windows) if windows is not None else suite.select(options.start_window,
                                                                       options.stop_window)
    ref = load_logits_manifest(reference_dir)
    cand = load_logits_manifest(candidate_dir)
    check_manifest_matches_suite(ref, suite, selected)
    check_manifest_matches_suite(cand, suite, selected)
    if cand.vocab_size != ref.vocab_size:
        raise BadInput(f"{cand.path}: vocabulary {cand.vocab_size} differs from the reference's "
                       f"{ref.vocab_size} ({ref.path}); compare logits of the same tokenizer")
    vocab = ref.vocab_size
    next_tokens: dict[int, np.ndarray] = {}
    for w in selected:
        ids = np.asarray(suite.load_tokens(w, check_hash=True), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise BadInput(f"{suite.token_path(w)}: {w.label} has token id {int(ids.max())} outside "
                           f"the vocabulary of {vocab}; the suite and the logits do not belong together")
        next_tokens[w.index] = ids[1:]
    paths: list[ListedFile] = []
    for w in selected:
        paths.append((_file_checks(ref, suite, w, "reference"), ref.entry(w.index).sha256, w, ref))
        paths.append((_file_checks(cand, suite, w, "candidate"), cand.entry(w.index).sha256, w, cand))
    sha_state = "skipped"
    if options.verify_sha256:
        sha_state = verify_sha256(paths, emit, cancel)
    verified = Verified(token_hashes=True, suite_hash=True, logits_sha256=sha_state)
    return CompareInputs(suite, selected, ref, cand, vocab, next_tokens, verified, manifest_sha256(ref.path))


__all__ = ["CompareInputs", "prepare"]
