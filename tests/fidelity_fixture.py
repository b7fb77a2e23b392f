"""A small hidden-state suite written the way another tool would write it: straight from the
published format's contract with ``json``, ``hashlib`` and the real ``safetensors`` library (BF16
through ``safetensors.torch``), never through kldtui's writers.  Loading it proves kldtui reads the
published layout as it is; the test of kldtui's writer checks its output with the same rules.

Shapes are tiny (contexts of 16 tokens, hidden width 32, vocabulary 160) but every file, field,
name and hash rule of the published suite is there: top-level ``manifest.json``,
``suite-manifest.json``, ``partitions.json``, ``sources.json`` (an array), ``source-registry.json``,
``capture-runtime.json``, ``tokens/context-NNNN.json``, ``reference-hidden/``, ``lm-head/``,
``sentinel-live-logits/repeat-00/``, ``validation/`` and ``checksums.txt``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CONTEXT = 16
HIDDEN = 32
VOCAB = 160
STRATA = ("encyclopedic_factual", "code_tests_documentation_issues", "chinese")
SEMANTIC_HIDDEN = "after_final_rmsnorm_before_lm_head"
SEMANTIC_LIVE = "live_lm_head_output_before_sampling"


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sha_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dump(path: Path, doc: Any) -> None:
    """As the publishers write JSON: 2-space indentation, sorted keys, a trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def save_bf16(path: Path, key: str, values: np.ndarray, metadata: dict[str, str]) -> tuple[int, str, str]:
    """One BF16 tensor file via safetensors.torch; (size, file sha256, raw payload sha256)."""
    import torch
    from safetensors.torch import save_file

    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16).contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({key: tensor}, str(path), metadata=metadata)
    raw = hashlib.sha256(tensor.view(torch.int16).numpy().tobytes()).hexdigest()
    return path.stat().st_size, sha_file(path), raw


def bf16_round(values: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16).float().numpy()


@dataclass
class Fixture:
    root: Path
    tokens: list[list[int]]
    hidden: np.ndarray  # [contexts, CONTEXT - 1, HIDDEN], BF16 values as float32
    head: np.ndarray  # [VOCAB, HIDDEN], BF16 values as float32
    strata: list[str]
    partitions: list[str]
    sentinels: list[bool]
    clusters: list[str]
    live: dict[int, np.ndarray]  # the sentinels' live logits (BF16 values as float32)

    def replay(self, index: int) -> np.ndarray:
        """The replayed logits of a context in float64 (no rounding)."""
        return self.hidden[index].astype(np.float64) @ self.head.astype(np.float64).T


def build(root: Path, *, contexts: int = 12, seed: int = 0, hidden_rows: int | None = None,
          logit_scale: float = 2.0, head_metadata: dict[str, str] | None = None) -> Fixture:
    """Write the suite under ``root`` (which must not exist or be empty); ``head_metadata``: more
    fields of the LM head's header metadata (another tool's own)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    rows = CONTEXT - 1 if hidden_rows is None else hidden_rows
    head = bf16_round(rng.standard_normal((VOCAB, HIDDEN)) * logit_scale / np.sqrt(HIDDEN))
    hidden = bf16_round(rng.standard_normal((contexts, max(rows, CONTEXT - 1), HIDDEN)))
    strata = [STRATA[i * len(STRATA) // contexts] for i in range(contexts)]
    partitions = ["qualification" if i % 4 == 3 else "analysis" for i in range(contexts)]
    sentinels = [p == "analysis" and i % 4 == 0 for i, p in enumerate(partitions)]
    clusters = [f"host-{i // 2}" for i in range(contexts)]  # two contexts per source cluster
    tokens = [[int(t) for t in rng.integers(0, VOCAB, CONTEXT)] for _ in range(contexts)]
    records = []
    for i in range(contexts):
        rel = f"tokens/context-{i:04d}.json"
        (root / "tokens").mkdir(exist_ok=True)
        (root / rel).write_text(compact(tokens[i]) + "\n")
        records.append({
            "allocation_stratum": strata[i], "chat_template_applied": False, "context_index": i,
            "dataset": ("bigcode/stack" if strata[i] == "code_tests_documentation_issues"
                        else "wikimedia/wikipedia"),
            "dataset_config": "20231101.en", "dataset_revision": "b04c8d1ceb2f5cd4588862100d08de323dccfbaa",
            "dataset_split": "train", "index": i, "language": "zh" if strata[i] == "chinese" else "en",
            "num_tokens": CONTEXT, "partition": partitions[i],
            "representation_type": "raw_continuation", "scored_row_end_exclusive": CONTEXT - 1,
            "scored_row_start": 0, "semantic_class": f"{strata[i]}/{i % 2}", "sentinel": sentinels[i],
            "source_char_start": 17 * i, "source_cluster_id": clusters[i],
            "source_content_sha256": sha_text(f"source text {i}"), "source_id": f"row-{i}",
            "token_file": rel, "token_ids_json_sha256": sha_text(compact(tokens[i])),
        })

    def counts(key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in records:
            out[r[key]] = out.get(r[key], 0) + 1
        return out

    joined = "\n".join(r["token_ids_json_sha256"] for r in records)
    suite_hash = hashlib.sha256(joined.encode("ascii")).hexdigest()
    dump(root / "suite-manifest.json", {
        "allocation_counts": counts("allocation_stratum"), "approximate_deduplication":
            {"method": "minhash-5gram", "rejection_threshold": 0.85},
        "chat_rendering": {"add_generation_prompt": False, "implementation": "Kimi K3 Python XTML encoding",
                           "jinja_template": None, "thinking": False},
        "context_count": contexts, "context_length": CONTEXT, "contexts": records,
        "exact_content_deduplication": True, "format_version": 1,
        "kind": "Kimi K3 distribution-fidelity corpus suite", "language_counts": counts("language"),
        "offset_salt": "offset-salt", "partition_counts": counts("partition"),
        "scored_positions_per_context": CONTEXT - 1, "selection_salt": "selection-salt",
        "sentinel_count": sum(sentinels), "status": "implemented", "suite_token_hash_sha256": suite_hash,
        "tokenizer": {"checkpoint_revision": "2496450e", "class": "TikTokenTokenizer",
                      "files": {"tiktoken.model": sha_text("model")}, "vocabulary_size": VOCAB - 8},
        "total_scored_positions": contexts * (CONTEXT - 1),
    })
    dump(root / "partitions.json", {
        "contexts": [{"context_index": i, "partition": partitions[i], "sentinel": sentinels[i]}
                     for i in range(contexts)],
        "format_version": 1, "partition_salt": "partition-salt", "sentinel_salt": "sentinel-salt"})
    dump(root / "sources.json", [
        {"context_index": i, "extraction": {"method": "paragraphs"}, "metadata": {"title": f"T{i}"},
         "source_cluster_id": clusters[i], "source_content_sha256": records[i]["source_content_sha256"],
         "source_id": records[i]["source_id"], "source_key": "wiki", "source_license": "CC-BY-SA-4.0"}
        for i in range(contexts)])
    dump(root / "source-registry.json", {"sources": [
        {"config": "20231101.en", "dataset": "wikimedia/wikipedia", "dataset_fingerprint": sha_text("fp"),
         "key": "wiki", "license": "CC-BY-SA-4.0", "revision": "b04c8d1c", "scan_limit": 1000,
         "split": "train"}]})
    dump(root / "capture-runtime.json", {"checkpoint": "moonshotai/Kimi-K3@2496450e", "status": "qualified",
                                         "container": "sha256:4be1d706", "source_files": {}})
    runtime_sha = sha_file(root / "capture-runtime.json")

    # the LM head
    head_meta = {**(head_metadata or {}), "checkpoint_tensor_key": "language_model.lm_head.weight"}
    size, head_sha, head_raw = save_bf16(root / "lm-head" / "weight.safetensors", "weight", head,
                                         {**head_meta, "raw_tensor_sha256": ""})
    # metadata holds the raw hash: write again now that it is known
    size, head_sha, head_raw = save_bf16(root / "lm-head" / "weight.safetensors", "weight", head,
                                         {**head_meta, "raw_tensor_sha256": head_raw})
    dump(root / "lm-head" / "manifest.json", {
        "checkpoint_index_sha256": sha_text("index"),
        "checkpoint_tensor_key": "language_model.lm_head.weight",
        "dtype": "BF16", "file": "weight.safetensors", "file_sha256": head_sha, "format_version": 1,
        "key": "weight", "kind": "Kimi K3 BF16 LM head", "raw_tensor_sha256": head_raw,
        "shape": [VOCAB, HIDDEN], "size_bytes": size, "source_shard": "model-00064-of-00064.safetensors"})

    def tensor_folder(folder: str, kind: str, key: str, arrays: dict[int, np.ndarray], width_key: str,
                      width: int) -> None:
        items = []
        for i, values in arrays.items():
            name = f"{'hidden' if kind == 'hidden' else 'logits'}_{i:04d}.safetensors"
            meta = {"context_index": str(i),
                    "semantic_point": SEMANTIC_HIDDEN if kind == "hidden" else SEMANTIC_LIVE,
                    "token_ids_json_sha256": records[i]["token_ids_json_sha256"]}
            fsize, fsha, _ = save_bf16(root / folder / name, key, values, meta)
            items.append({"context_index": i, "dtype": "BF16", "elapsed_seconds": 0.5, "file": name,
                          "key": key,
                          "raw_chunks_retained": False, "request_id": f"cmpl-{i}",
                          "sha256": fsha, "shape": list(values.shape), "size_bytes": fsize,
                          "source_class": records[i]["semantic_class"],
                          "token_ids_json_sha256": records[i]["token_ids_json_sha256"]})
        dump(root / folder / "manifest.json", {
            "context_length": CONTEXT, "contexts": items, "created_utc": "2026-01-01T00:00:00Z",
            "format_version": 1,
            "kind": ("Kimi K3 final-normalized pre-LM-head hidden states" if kind == "hidden"
                     else "Kimi K3 native live prompt logits"),
            "run_name": f"{folder.replace('/', '-')}", "runtime_manifest": "capture-runtime.json",
            "runtime_manifest_sha256": runtime_sha,
            "semantic_point": SEMANTIC_HIDDEN if kind == "hidden" else SEMANTIC_LIVE,
            "scored_rows_per_context": CONTEXT - 1, "suite_token_hash_sha256": suite_hash, "tensor_key": key,
            width_key: width, "total_size_bytes": sum(item["size_bytes"] for item in items)})

    tensor_folder("reference-hidden", "hidden", "hidden_states",
                  {i: hidden[i][:max(rows, CONTEXT - 1)] for i in range(contexts)}, "hidden_width", HIDDEN)
    live = {i: bf16_round(hidden[i][:CONTEXT - 1].astype(np.float64) @ head.astype(np.float64).T)
            for i in range(contexts) if sentinels[i]}
    tensor_folder("sentinel-live-logits/repeat-00", "logits", "logits", live, "vocab_size", VOCAB)
    dump(root / "validation" / "hidden-replay-qualification.json", {"status": "qualified"})
    hidden_manifest = root / "reference-hidden" / "manifest.json"
    dump(root / "manifest.json", {
        "artifact_kind": "Kimi K3 distribution-fidelity reference",
        "capture_runtime": {"file": "capture-runtime.json", "sha256": runtime_sha, "status": "qualified"},
        "checkpoint": {"repo": "moonshotai/Kimi-K3", "revision": "2496450e"},
        "context_count": contexts, "context_length": CONTEXT, "created_utc": "2026-01-01T00:00:00Z",
        "format_version": 1,
        "lm_head": {"file": "lm-head/weight.safetensors", "file_sha256": head_sha,
                    "raw_tensor_sha256": head_raw,
                    "shape": [VOCAB, HIDDEN]},
        "partitions": counts("partition"),
        "reference_hidden": {"context_count": contexts, "manifest": "reference-hidden/manifest.json",
                             "manifest_sha256": sha_file(hidden_manifest),
                             "shape_per_context": [CONTEXT - 1, HIDDEN],
                             "total_size_bytes": json.loads(hidden_manifest.read_text())["total_size_bytes"]},
        "scored_positions_per_context": CONTEXT - 1, "sentinel_count": sum(sentinels), "status": "qualified",
        "suite": {"manifest": "suite-manifest.json",
                  "manifest_sha256": sha_file(root / "suite-manifest.json"),
                  "suite_token_hash_sha256": suite_hash},
        "total_scored_positions": contexts * (CONTEXT - 1)})
    lines = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            rel = (Path(folder) / name).relative_to(root).as_posix()
            if rel != "checksums.txt" and not rel.startswith(".cache/"):
                lines.append(f"{sha_file(root / rel)}  {rel}\n")
    (root / "checksums.txt").write_text("".join(sorted(lines, key=lambda line: line.split("  ", 1)[1])))
    return Fixture(root, tokens, hidden[:, :CONTEXT - 1], head, strata, partitions, sentinels, clusters, live)


def check_published(root: Path) -> list[str]:
    """The published format's validation rules, written from the contract (not kldtui's code):
    checksums, hash rules, manifest fields and tensor identity.  Returns the problems found."""
    from safetensors import safe_open

    problems: list[str] = []

    def load(rel: str) -> Any:
        text = (root / rel).read_text()
        doc = json.loads(text)
        if text != json.dumps(doc, indent=2, sort_keys=True) + "\n":
            problems.append(f"{rel}: not written with 2-space indentation, sorted keys and a newline")
        return doc

    # checksums.txt: every file except itself and .cache/, each hash right
    listed = {}
    for line in (root / "checksums.txt").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        listed[rel] = digest
    present = set()
    for folder, _dirs, files in os.walk(root):
        for name in files:
            rel = (Path(folder) / name).relative_to(root).as_posix()
            if rel != "checksums.txt" and not rel.startswith(".cache/"):
                present.add(rel)
    if set(listed) != present:
        problems.append(f"checksums.txt lists {sorted(set(listed) ^ present)[:5]} wrongly")
    for rel, digest in listed.items():
        if (root / rel).is_file() and sha_file(root / rel) != digest:
            problems.append(f"{rel}: checksum differs")
    suite = load("suite-manifest.json")
    digests = []
    for n, c in enumerate(suite["contexts"]):
        ids = json.loads((root / c["token_file"]).read_text())
        text = (root / c["token_file"]).read_text()
        if text != compact(ids) + "\n":
            problems.append(f"{c['token_file']}: not compact JSON and a newline")
        if sha_text(compact(ids)) != c["token_ids_json_sha256"]:
            problems.append(f"{c['token_file']}: token_ids_json_sha256 differs")
        if c["index"] != n or c["context_index"] != n or len(ids) != suite["context_length"]:
            problems.append(f"context {n}: index or length wrong")
        for key in ("allocation_stratum", "semantic_class", "partition", "sentinel", "source_cluster_id",
                    "scored_row_start", "scored_row_end_exclusive", "num_tokens", "token_file"):
            if key not in c:
                problems.append(f"context {n}: no {key}")
        digests.append(c["token_ids_json_sha256"])
    suite_hash = hashlib.sha256("\n".join(digests).encode("ascii")).hexdigest()
    if suite_hash != suite["suite_token_hash_sha256"]:
        problems.append("suite_token_hash_sha256 differs from the joined digests")
    if suite["context_count"] != len(suite["contexts"]):
        problems.append("context_count")
    if suite["total_scored_positions"] != len(suite["contexts"]) * (suite["context_length"] - 1):
        problems.append("total_scored_positions")
    parts = load("partitions.json")
    for item in parts["contexts"]:
        c = suite["contexts"][item["context_index"]]
        if (item["partition"], item["sentinel"]) != (c["partition"], c["sentinel"]):
            problems.append(f"partitions.json: context {item['context_index']} differs")
    top = load("manifest.json")
    if top["suite"]["manifest_sha256"] != sha_file(root / top["suite"]["manifest"]):
        problems.append("manifest.json: suite.manifest_sha256")
    if top["suite"]["suite_token_hash_sha256"] != suite_hash:
        problems.append("manifest.json: suite.suite_token_hash_sha256")
    rh = top["reference_hidden"]
    if rh["manifest_sha256"] != sha_file(root / rh["manifest"]):
        problems.append("manifest.json: reference_hidden.manifest_sha256")
    head_manifest = load("lm-head/manifest.json")
    head_path = root / "lm-head" / head_manifest["file"]
    if sha_file(head_path) not in (top["lm_head"]["file_sha256"],) or \
            head_manifest["file_sha256"] != sha_file(head_path):
        problems.append("lm head file_sha256")
    with safe_open(str(head_path), framework="pt") as f:
        weight = f.get_tensor(head_manifest["key"])
        import torch

        raw = hashlib.sha256(weight.contiguous().view(torch.int16).numpy().tobytes()).hexdigest()
        if str(weight.dtype) != "torch.bfloat16" or list(weight.shape) != head_manifest["shape"]:
            problems.append("lm head dtype/shape")
        if raw != head_manifest["raw_tensor_sha256"] or raw != top["lm_head"]["raw_tensor_sha256"]:
            problems.append("lm head raw_tensor_sha256")
    runtime_entry = top["capture_runtime"]
    if runtime_entry and runtime_entry["sha256"] != sha_file(root / runtime_entry["file"]):
        problems.append("capture_runtime.sha256")
    for manifest_rel in [rh["manifest"]] + [p.relative_to(root).as_posix() for p in
                                             sorted(root.glob("sentinel-*/repeat-*/manifest.json"))]:
        tm = load(manifest_rel)
        folder = (root / manifest_rel).parent
        if tm["suite_token_hash_sha256"] != suite_hash:
            problems.append(f"{manifest_rel}: suite hash")
        runtime = tm.get("runtime_manifest")
        if runtime is not None and (runtime.startswith("/") or
                                    tm["runtime_manifest_sha256"] != sha_file(root / runtime)):
            problems.append(f"{manifest_rel}: runtime_manifest")
        if tm["total_size_bytes"] != sum(r["size_bytes"] for r in tm["contexts"]):
            problems.append(f"{manifest_rel}: total_size_bytes")
        for r in tm["contexts"]:
            path = folder / r["file"]
            if sha_file(path) != r["sha256"] or path.stat().st_size != r["size_bytes"]:
                problems.append(f"{path.name}: sha256/size")
            c = suite["contexts"][r["context_index"]]
            if r["token_ids_json_sha256"] != c["token_ids_json_sha256"]:
                problems.append(f"{path.name}: token hash")
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
                meta = f.metadata() or {}
                t = f.get_tensor(keys[0])
            width = tm.get("hidden_width", tm.get("vocab_size"))
            if keys != [tm["tensor_key"]] or str(t.dtype) != "torch.bfloat16" or t.shape[1] != width:
                problems.append(f"{path.name}: key/dtype/width")
            if t.shape[0] < suite["context_length"] - 1 or list(t.shape) != r["shape"]:
                problems.append(f"{path.name}: rows")
            for key, want in (("context_index", str(r["context_index"])),
                              ("token_ids_json_sha256", c["token_ids_json_sha256"]),
                              ("semantic_point", tm["semantic_point"])):
                if meta.get(key) != want:
                    problems.append(f"{path.name}: metadata {key}")
    return problems


__all__ = ["CONTEXT", "HIDDEN", "STRATA", "VOCAB", "Fixture", "build", "check_published", "compact", "dump",
           "sha_file", "sha_text"]
