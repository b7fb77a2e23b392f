"""A small suite that reproduces the published Kimi K3 dataset's files field for field.

The JSON documents below copy the structure of the published ``suite-manifest.json`` and
``ref/manifest.json`` (every field, same types, same nesting, same key order conventions) at
a small size: 3 windows of 8 tokens over a vocabulary of 32. They are written by hand, not by
kldtui's writers, so loading them proves kldtui reads the published files as they are.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

VOCAB = 32
CONTEXT = 8
DOMAINS = ["prose", "code", "instruction"]


def _compact(ids: list[int]) -> str:
    return json.dumps(ids, separators=(",", ":"))


def build(root: Path, seed: int = 0) -> dict[str, object]:
    """Write the fixture under ``root``; returns the documents and token lists."""
    rng = np.random.default_rng(seed)
    (root / "tokens").mkdir(parents=True)
    (root / "ref").mkdir()
    windows = []
    tokens = []
    for index, domain in enumerate(DOMAINS):
        ids = [int(v) for v in rng.integers(0, VOCAB, CONTEXT)]
        tokens.append(ids)
        rel = f"tokens/window-{index:03d}-{domain}.json"
        (root / rel).write_text(_compact(ids) + "\n")
        windows.append({
            "dataset": ["allenai/c4", "bigcode/the-stack-smol", "HuggingFaceH4/ultrachat_200k"][index],
            "dataset_revision": "1588ec454efa1a09f29cd18ddd04fe05fc8653a2",
            "domain": domain,
            "domain_index": 0,
            "index": index,
            "num_tokens": CONTEXT,
            "source_token_end": 100 + CONTEXT,
            "source_token_start": 100,
            "token_file": rel,
            "token_ids_first16": ids[:16],
            "token_ids_json_sha256": hashlib.sha256(_compact(ids).encode()).hexdigest(),
            "token_ids_last16": ids[-16:],
        })
    suite_hash = hashlib.sha256("\n".join(w["token_ids_json_sha256"] for w in windows).encode()).hexdigest()
    suite = {
        "add_special_tokens": False,
        "context_length": CONTEXT,
        "datasets": [{"config": "en", "construction": "contiguous 2048-token windows",
                      "dataset": "allenai/c4",
                      "revision": "1588ec454efa1a09f29cd18ddd04fe05fc8653a2", "split": "validation",
                      "window_starts": [100]}],
        "domain_counts": {"code": 1, "instruction": 1, "prose": 1},
        "format_version": 1,
        "scored_positions_per_window": CONTEXT - 1,
        "suite_token_hash_sha256": suite_hash,
        "total_scored_positions": (CONTEXT - 1) * len(DOMAINS),
        "window_count": len(DOMAINS),
        "windows": windows,
    }
    (root / "suite-manifest.json").write_text(json.dumps(suite, indent=2, sort_keys=True) + "\n")
    entries = []
    for index, domain in enumerate(DOMAINS):
        logits = rng.normal(0, 3, (CONTEXT - 1, VOCAB)).astype(np.float32)
        name = f"logits_{index:03d}.safetensors"
        save_file({"logits": logits}, str(root / "ref" / name), metadata={
            "format": "kimi-k3-kld-reference-v1", "window_index": str(index), "domain": domain,
            "context_length": str(CONTEXT), "vocab_size": str(VOCAB), "dtype": "float32",
            "token_ids_json_sha256": windows[index]["token_ids_json_sha256"]})
        data = (root / "ref" / name).read_bytes()
        entries.append({"domain": domain, "dtype": "F32", "file": name, "key": "logits",
                        "sha256": hashlib.sha256(data).hexdigest(), "shape": [CONTEXT - 1, VOCAB],
                        "size_bytes": len(data),
                        "token_ids_json_sha256": windows[index]["token_ids_json_sha256"],
                        "window_index": index})
    ref = {
        "context_length": CONTEXT, "created_utc": "2026-07-01T12:00:00Z", "dtype": "float32",
        "format_version": 1, "kind": "kimi-k3-full-mxfp4-reference",
        "runtime": {"checkpoint": "kimi-k3-mxfp4", "vllm_commit": "55e46aeb4c6e8a2dab15f640929d65124a6d41df",
                    "flags": ["--max-num-batched-tokens", "256"]},
        "suite_token_hash_sha256": suite_hash, "tensor_key": "logits",
        "total_scored_positions": (CONTEXT - 1) * len(DOMAINS),
        "total_size_bytes": sum(e["size_bytes"] for e in entries), "vocab_size": VOCAB,
        "window_count": len(DOMAINS), "window_range": [0, len(DOMAINS)], "windows": entries,
    }
    (root / "ref" / "manifest.json").write_text(json.dumps(ref, indent=2, sort_keys=True) + "\n")
    return {"suite": suite, "ref": ref, "tokens": tokens}
