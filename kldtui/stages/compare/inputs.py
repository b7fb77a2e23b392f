"""A comparison's inputs, every one validated before the first row is compared (:func:`prepare`):
suite hash, token hashes, both sides against the suite (logits folders of either layout, or
hidden-state folders with their LM heads: :mod:`kldtui.stages.compare.sides`), vocabularies, every
file's identity (key, dtype, shape, size, header metadata), each LM head's SHA-256 against its
manifest and, with ``verify_sha256``, every file's SHA-256."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Notice, null_sink
from kldtui.formats.report_model import Verified
from kldtui.formats.suite import Suite, WindowSpec, load_suite
from kldtui.stages.compare.hashing import ListedFile, manifest_sha256, verify_head, verify_sha256
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.sides import HiddenSide, Side, heads, load_side, same_head
from kldtui.text import human_bytes


@dataclass
class CompareInputs:
    """Everything :func:`prepare` validated; what the engine needs to compare windows."""

    suite: Suite
    windows: list[WindowSpec]
    reference: Side
    candidate: Side
    vocab_size: int
    next_tokens: dict[int, np.ndarray]
    verified: Verified
    reference_manifest_sha256: str
    head_sha256: dict[str, str] = field(default_factory=dict)  # role -> the LM head's file SHA-256

    @property
    def replayed(self) -> bool:
        return isinstance(self.reference, HiddenSide) or isinstance(self.candidate, HiddenSide)


def load_sides(suite: Suite, reference_dir: str | os.PathLike[str], candidate_dir: str | os.PathLike[str],
               options: CompareOptions) -> tuple[Side, Side]:
    """Both sides of a comparison, read from their folders' manifests."""
    ref = load_side(reference_dir, "reference", lm_head=options.lm_head, suite_dir=suite.root,
                    replay_dtype=options.replay_dtype)
    cand = load_side(candidate_dir, "candidate", lm_head=options.candidate_lm_head, suite_dir=suite.root,
                     replay_dtype=options.replay_dtype)
    return ref, cand


def prepare(suite_manifest: str | os.PathLike[str] | Suite, reference_dir: str | os.PathLike[str],
            candidate_dir: str | os.PathLike[str], options: CompareOptions,
            emit: EventSink = null_sink, cancel: Cancel | None = None,
            windows: Sequence[WindowSpec] | None = None, said: set[str] | None = None) -> CompareInputs:
    """Validate every input of a comparison; BadInput (one line) on the first problem. ``said``: the
    notices about the inputs this comparison already gave, each given once (the pipeline prepares
    every context on its own as it is finalized)."""
    said = set() if said is None else said

    def note(text: str) -> None:
        if text not in said:
            said.add(text)
            emit(Notice("compare", text))

    suite = suite_manifest if isinstance(suite_manifest, Suite) else load_suite(suite_manifest)
    suite.check_suite_hash()
    selected = list(windows) if windows is not None else options.select(suite)
    ref, cand = load_sides(suite, reference_dir, candidate_dir, options)
    ref.check(suite, selected)
    cand.check(suite, selected)
    if cand.vocab != ref.vocab:
        raise BadInput(f"{cand.manifest_path}: vocabulary {cand.vocab} differs from the reference's "
                       f"{ref.vocab} ({ref.manifest_path}); compare logits of the same tokenizer")
    vocab = ref.vocab
    next_tokens: dict[int, np.ndarray] = {}
    for w in selected:
        ids = np.asarray(suite.load_tokens(w, check_hash=True), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise BadInput(f"{suite.token_path(w)}: {w.label} has token id {int(ids.max())} outside "
                           f"the vocabulary of {vocab}; the suite and the logits do not belong together: "
                           "give the suite the logits were made from")
        next_tokens[w.index] = ids[w.scored_row_start + 1:]  # row j: position scored_row_start + j
    ref.check_files(suite, selected)
    cand.check_files(suite, selected)
    head_sha: dict[str, str] = {}
    for side in (ref, cand):
        if isinstance(side, HiddenSide):
            sha = verify_head(side.head, emit, cancel)
            if sha is not None:
                head_sha[side.role] = sha
    if same_head(ref, cand):
        note("the candidate is replayed with the same LM head as the reference: a change to the head "
             "itself is not measured")
    for head in heads(ref, cand):  # verified above: its line says so (batch prints no line for a quick hash)
        checked = ("SHA-256 matches its manifest" if head.file_sha256 is not None
                   else "no manifest names its SHA-256 (the report records it)")
        note(f"LM head {head.path}: [{head.vocab}, {head.hidden}] BF16, {human_bytes(head.size_bytes)}, "
             f"{checked}, mapped from the page cache")
    paths: list[ListedFile] = ref.listed(selected) + cand.listed(selected)
    sha_state = "skipped"
    if options.verify_sha256:
        sha_state = verify_sha256(paths, emit, cancel)
    verified = Verified(token_hashes=True, suite_hash=True, logits_sha256=sha_state)
    return CompareInputs(suite, selected, ref, cand, vocab, next_tokens, verified,
                         manifest_sha256(ref.manifest_path), head_sha)


__all__ = ["CompareInputs", "load_sides", "prepare"]
