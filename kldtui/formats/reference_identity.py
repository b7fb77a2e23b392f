"""A reference's identity from its content: what two reports must share to be paired.

Two captures of one reference on one machine, a day apart, have logits files with the same bytes
but manifests that differ in ``created_utc`` and in the server's port and command line (``runtime``);
the hash of the manifest's bytes (``reference_manifest_sha256``) tells them apart, so ``kldtui diff``
refused two runs of the demo that compared against bit-identical references. The identity here
depends only on what the comparison read:

- the suite (``suite_token_hash_sha256``), the vocabulary, the tensor key and dtype;
- per compared window: its index, its token hash, its file's SHA-256 (which the comparison checks
  against the file) and the file's shape.

The model is identified by its logits: the same files are the same reference whatever the model's
path, the server's name, port or version were when they were captured. A hidden-state reference
(replayed with an LM head) is identified the same way by its hidden-state files, plus the head's
file SHA-256 and the replay's output rounding (:func:`replayed_identity`): the logits it stands
for are the product of both, so the same states replayed with another head are another reference.
A report carries the identity as ``reference_identity_sha256`` (docs/REPORT.md);
``kldtui.decide.reports.check_same_suite`` pairs two reports by it, by the manifest's bytes only
when a report has no identity (older reports).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

from kldtui.errors import KldError
from kldtui.formats.fidelity import TensorManifest
from kldtui.formats.suite import LogitsManifest, load_logits_manifest

IDENTITY_FORMAT = "kldtui-reference-identity-v1"
REPLAYED_IDENTITY_FORMAT = "kldtui-replayed-reference-identity-v1"


def _digest(doc: dict[str, object]) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _window_rows(manifest: LogitsManifest | TensorManifest, windows: Iterable[int]) -> list[list[Any]] | None:
    """Each listed window's token hash, file hash, shape and dtype, in window order; None when one
    has no file hash or none is listed."""
    rows = []
    for index in sorted({int(w) for w in windows}):
        entry = manifest.entries.get(index)
        if entry is None or not entry.sha256:
            return None
        rows.append([index, entry.token_ids_json_sha256, entry.sha256, list(entry.shape), entry.dtype])
    return rows or None


def reference_identity(manifest: LogitsManifest, windows: Iterable[int]) -> str | None:
    """The identity of ``manifest``'s reference over ``windows`` (a SHA-256 hex digest), or None
    when it lists one of them without a file hash."""
    rows = _window_rows(manifest, windows)
    if rows is None:
        return None
    doc = {"format": IDENTITY_FORMAT, "suite_token_hash_sha256": manifest.suite_token_hash_sha256,
           "vocab_size": manifest.vocab_size, "tensor_key": manifest.tensor_key, "windows": rows}
    return _digest(doc)


def replayed_identity(manifest: TensorManifest, head_file_sha256: str | None, replay_dtype: str,
                      windows: Iterable[int]) -> str | None:
    """The identity of a hidden-state reference replayed with the head whose file has SHA-256
    ``head_file_sha256``, its logits rounded as ``replay_dtype`` says, over ``windows`` (contexts);
    None when the head's or a listed file's hash is unknown."""
    if not head_file_sha256:
        return None
    rows = _window_rows(manifest, windows)
    if rows is None:
        return None
    return _digest({"format": REPLAYED_IDENTITY_FORMAT,
                    "suite_token_hash_sha256": manifest.suite_token_hash_sha256,
                    "hidden_width": manifest.width, "tensor_key": manifest.tensor_key,
                    "lm_head_file_sha256": head_file_sha256, "replay_dtype": replay_dtype, "windows": rows})


def reference_identity_of(folder: str | os.PathLike[str], windows: Iterable[int]) -> str | None:
    """:func:`reference_identity` of the logits folder ``folder`` (None when its manifest cannot be
    read: the report then pairs by the manifest's bytes)."""
    try:
        manifest = load_logits_manifest(folder)
    except (KldError, OSError, ValueError):
        return None
    return reference_identity(manifest, windows)
