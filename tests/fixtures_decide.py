"""Synthetic comparison reports for the decide tests, in kldtui's schema (docs/REPORT.md) and in
the original comparator's (docs/FORMATS.md, "Comparison report"): only per-window figures matter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

SUITE_HASH = "5" * 64
REF_HASH = "7" * 64


def _stats(mean: float) -> dict[str, float]:
    return {"mean": mean, "median": mean * 0.6, "p95": mean * 3, "p99": mean * 6, "max": mean * 20}


def _js(kl: float) -> float:
    """A JS mean for a KL mean: a quarter of it, kept where 20 times it (the fixture's max) is below
    ln 2, as every JS is."""
    return min(kl / 4, 0.034)


def make_report(kl: Sequence[float], domains: Sequence[str] | None = None, *, fmt: str = "kldtui",
                candidate_dir: str = "/runs/cand", reference_dir: str = "/suite/ref",
                suite_hash: str | None = SUITE_HASH, ref_hash: str | None = REF_HASH,
                positions: int = 2047, start: int = 0, reverse: Sequence[float] | None = None,
                ) -> dict[str, Any]:
    n = len(kl)
    domains = list(domains) if domains is not None else ["prose"] * n
    idx = list(range(start, start + n))
    per_window = []
    for i in range(n):
        entry: dict[str, Any] = {"window_index": idx[i], "domain": domains[i], "positions": positions,
                                 "kl_reference_to_candidate": _stats(float(kl[i])),
                                 "js": _stats(_js(float(kl[i]))), "top1_agreement": 0.99}
        if reverse is not None and fmt == "original":
            entry["kl_candidate_to_reference"] = _stats(float(reverse[i]))
        per_window.append(entry)
    means = np.asarray(kl, dtype=np.float64)
    report: dict[str, Any] = {
        "direction": "KL(reference || candidate)",
        "reference_dir": reference_dir, "candidate_dir": candidate_dir,
        "positions": positions * n, "windows": n, "window_range": [start, start + n],
        "kl_reference_to_candidate": _stats(float(means.mean())),
        "js": _stats(_js(float(means.mean()))), "top1_agreement": 0.99,
        "kl_window_cluster_bootstrap": {"estimate": float(means.mean()), "standard_error": 0.0,
                                        "ci95_low": 0.0, "ci95_high": 0.0, "bootstrap_samples": 10000,
                                        "cluster_unit": "window"},
        "domains": {},
        "per_window": per_window,
    }
    if fmt == "kldtui":
        report["report_format"] = "kldtui-comparison-v1"
        if suite_hash is not None:
            report["suite_token_hash_sha256"] = suite_hash
        if ref_hash is not None:
            report["reference_manifest_sha256"] = ref_hash
        report["per_window_arrays"] = {"window_index": idx, "domain": domains, "positions": [positions] * n,
                                       "kl_mean": [float(v) for v in kl]}
        if reverse is not None:
            report["per_window_arrays"]["kl_reverse_mean"] = [float(v) for v in reverse]
    return report


def write_report(path: Path, report: dict[str, Any]) -> Path:
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return path


def suite_domains(n: int = 32) -> list[str]:
    """The published suite's layout scaled to n windows: half prose, a quarter code, a quarter instruction."""
    return ["prose"] * (n // 2) + ["code"] * (n // 4) + ["instruction"] * (n - n // 2 - n // 4)


OTHER_SUITE_HASH = "6" * 64


def two_suite_folder(folder: Path) -> Path:
    """One work folder of two suites' reports, as ``kldtui demo`` then ``kldtui demo --hidden`` leave
    it: comparison-a.json, comparison-b.json of SUITE_HASH (with its noise model) and comparison-c.json,
    comparison-d.json of OTHER_SUITE_HASH."""
    folder.mkdir()
    base = np.random.default_rng(7).gamma(4.0, 0.0025, 16)
    domains = suite_domains(16)
    for name, shift, suite in (("a", 0.0, SUITE_HASH), ("b", 0.002, SUITE_HASH),
                               ("c", 0.0, OTHER_SUITE_HASH), ("d", 0.003, OTHER_SUITE_HASH)):
        write_report(folder / f"comparison-{name}.json",
                     make_report(base + shift, domains, candidate_dir=f"/runs/{name}", suite_hash=suite))
    # the campaign's noise model of the first suite: named (and trusted) only for reports of that suite
    (folder / f"noise-model-{SUITE_HASH[:16]}.json").write_text(
        json.dumps({"suite_token_hash_sha256": SUITE_HASH}))
    return folder
