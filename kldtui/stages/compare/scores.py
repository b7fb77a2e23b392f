"""Score mode's side of compare: a window's figures read from the server's score file instead of
computed from logits, each file checked first (issue 16, docs/SCORE_MODE.md).  The one module
that reads score files for compare (the capture-mode strategy for ``score`` builds on it)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from kldtui.errors import BadInput
from kldtui.formats.scores import ScoresManifest, dtype_text, load_scores_manifest, read_records
from kldtui.formats.suite import (
    LogitsManifest,
    Suite,
    WindowSpec,
    check_manifest_matches_suite,
    load_logits_manifest,
    sha256_file,
)
from kldtui.metrics.score import RECORD_DTYPE, from_records
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult

SCORE_BACKEND = "server-scores"


def load_score_window(suite: Suite, window: WindowSpec, reference: LogitsManifest, scores: ScoresManifest,
                      options: CompareOptions) -> WindowResult:
    """Score mode: one window's figures from the server's score file, checked first: its SHA-256
    against its manifest, the window and tokens it scored, and that it scored against the
    reference file the reference manifest lists now (SHA-256)."""
    t0 = time.perf_counter()
    entry = scores.entries.get(window.index)
    if entry is None:
        raise BadInput(f"{scores.path}: {window.label} is not scored; capture and finalize it in score mode")
    path = scores.file_path(window.index)
    where = f"{path}: {window.label}"
    if entry.token_ids_json_sha256 != window.token_ids_json_sha256:
        raise BadInput(f"{where}: scored other tokens than the suite's (token hash); capture it again")
    ref_entry = reference.entry(window.index)
    if entry.reference_sha256 != ref_entry.sha256:
        raise BadInput(f"{where}: scored against a reference file with SHA-256 "
                       f"{entry.reference_sha256[:12]}..., "
                       f"{reference.path} lists {ref_entry.sha256[:12]}...; capture the window again "
                       "in score mode against this reference")
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise BadInput(f"{where}: cannot be read ({exc.strerror or exc}); finalize it again") from None
    if digest != entry.sha256:
        raise BadInput(f"{where}: SHA-256 {digest[:12]}... differs from the manifest's "
                       f"{entry.sha256[:12]}...; "
                       "the file is damaged, finalize it again")
    records, meta = read_records(path, RECORD_DTYPE)
    if (meta.get("window_index") != str(window.index) or len(records) != window.scored_positions
            or meta.get("token_ids_json_sha256") != window.token_ids_json_sha256):
        raise BadInput(f"{where}: the file holds window {meta.get('window_index')} with {len(records)} rows, "
                       f"expected {window.index} with {window.scored_positions}; finalize it again")
    rows = from_records(records, reverse=options.reverse)
    bad = rows.nonfinite_rows()
    if bad.size:
        raise BadInput(f"{where}: non-finite figures at row {int(bad[0])}; capture the window again")
    return WindowResult(window.index, window.domain, reference.vocab_size, rows,
                        elapsed_seconds=time.perf_counter() - t0, bytes_compared=entry.size_bytes,
                        backend=SCORE_BACKEND)


def prepare_scores(suite: Suite, reference_dir: str | os.PathLike[str], candidate_dir: str | os.PathLike[str],
                   windows: Sequence[WindowSpec]) -> tuple[LogitsManifest, ScoresManifest]:
    """Score mode's validation before any window: suite hash, the reference manifest against the
    suite, the scores manifest's suite and vocabulary."""
    suite.check_suite_hash()
    ref = load_logits_manifest(reference_dir)
    check_manifest_matches_suite(ref, suite, windows)
    scores = load_scores_manifest(candidate_dir)
    if scores.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        raise BadInput(f"{scores.path}: made from another suite than {suite.path}")
    if scores.vocab_size != ref.vocab_size:
        raise BadInput(f"{scores.path}: vocabulary {scores.vocab_size} differs from the reference's "
                       f"{ref.vocab_size} ({ref.path}); score against the same tokenizer's reference")
    if scores.record_dtype != dtype_text(RECORD_DTYPE):
        raise BadInput(f"{scores.path}: records of another layout than this kldtui reads; capture again")
    for w in windows:
        suite.load_tokens(w, check_hash=True)
    return ref, scores


__all__ = ["SCORE_BACKEND", "load_score_window", "prepare_scores"]
