"""Writing a suite folder (``suite-manifest.json`` + ``tokens/``) with the published layout.

Used by the example generator, ``kldtui demo`` and test fixtures, so every suite kldtui makes
has the same fields as the published Kimi K3 suite (docs/FORMATS.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kldtui.formats.atomic import write_bytes_atomic, write_json_atomic
from kldtui.formats.suite import (
    SUITE_MANIFEST,
    TOKENS_DIR,
    Suite,
    load_suite,
    suite_token_hash,
    token_file_name,
    token_ids_hash,
    token_ids_json,
)


def write_suite(root: str | os.PathLike[str], windows: Sequence[tuple[str, Sequence[int]]], *,
                dataset: str = "kldtui/synthetic", dataset_revision: str = "0",
                datasets: list[dict[str, Any]] | None = None, scored_row_start: int = 0) -> Suite:
    """Write a suite of ``(domain, token_ids)`` windows; all windows must have equal length.
    ``scored_row_start`` > 0: only positions from there on are scored (kldtui's field, for
    suites imported from llama.cpp, which scores the second half of each chunk)."""
    root = Path(root)
    if not windows:
        raise ValueError("a suite needs at least one window")
    context_length = len(windows[0][1])
    if any(len(ids) != context_length for _, ids in windows):
        raise ValueError("all windows of a suite have the same number of tokens")
    (root / TOKENS_DIR).mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    domain_seen: dict[str, int] = {}
    for index, (domain, ids) in enumerate(windows):
        domain_index = domain_seen.get(domain, 0)
        domain_seen[domain] = domain_index + 1
        rel = token_file_name(index, domain)
        write_bytes_atomic(root / rel, (token_ids_json(ids) + "\n").encode("ascii"))
        entries.append({
            "index": index,
            "domain": domain,
            "domain_index": domain_index,
            "dataset": dataset,
            "dataset_revision": dataset_revision,
            "source_token_start": index * context_length,
            "source_token_end": (index + 1) * context_length,
            "num_tokens": context_length,
            "token_file": rel,
            "token_ids_json_sha256": token_ids_hash(ids),
            "token_ids_first16": [int(i) for i in ids[:16]],
            "token_ids_last16": [int(i) for i in ids[-16:]],
            **({"scored_row_start": scored_row_start} if scored_row_start else {}),
        })
    doc = {
        "format_version": 1,
        "context_length": context_length,
        "add_special_tokens": False,
        "window_count": len(entries),
        "scored_positions_per_window": context_length - 1 - scored_row_start,
        "total_scored_positions": (context_length - 1 - scored_row_start) * len(entries),
        "domain_counts": domain_seen,
        "suite_token_hash_sha256": suite_token_hash([e["token_ids_json_sha256"] for e in entries]),
        "datasets": datasets if datasets is not None else [
            {"dataset": dataset, "revision": dataset_revision, "construction": "synthetic"}],
        "windows": entries,
    }
    write_json_atomic(root / SUITE_MANIFEST, doc)
    return load_suite(root)
