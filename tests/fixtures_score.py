"""Score mode's equality contract (docs/SCORE_MODE.md), shared by the embedded-server tests
(tests/functional/test_score_mode.py) and the real-vLLM test (tests/vllm/test_vllm_score.py).

Per row: KL, reverse KL and JS within 1e-6 relative where KL >= 1e-8 (below, both modes take the
precise CPU path: within 1e-14 absolute), argmaxes and top-k ranks exact, next-token
log-probabilities within 1e-6 absolute and the reference's top probability within 1e-6 relative
(the compiled CPU kernel's float32 path has float32 exps: its normalisers are good to ~1e-7
relative, the torch float64 path's to ~1e-15). Per report: every
field present on both sides, strings and integers equal, floats within 1e-6 relative (or 1e-12
absolute), figures built from the entropies within 1e-6 absolute as the entropies are (the entropy
shift is a difference of two entropies near 0: 9e-10 apart measured on real vLLM, 1.4e-5 relative),
an interval's ends within 1e-6 of the estimate they bracket (a t interval's lower end near 0 was
1.4e-9 apart, 3.9e-6 of itself), apart from the volatile fields (provenance, candidate folder).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kldtui.metrics.kernels import RowStats

VOLATILE = {"provenance", "candidate_dir"}


# an interval's ends are a mean minus or plus a margin of the same size: held to 1e-6 of the estimate
# they bracket, not of themselves (a lower end near 0 keeps only the absolute precision of its parts)
_ESTIMATES = ("kl_mean", "mean", "estimate", "value")
_INTERVAL_ENDS = ("ci95_low", "ci95_high", "ci_low", "ci_high", "low", "high")


def _walk(x: Any, y: Any, path: str, problems: list[str], skip: set[str], abs_tol: float = 1e-12) -> None:
    if isinstance(x, dict):
        if not isinstance(y, dict) or set(x) != set(y):
            problems.append(f"{path}: fields differ: {sorted(set(x) ^ set(y or {}))}")
            return
        scale = max((abs(v) for k, v in x.items() if k in _ESTIMATES and isinstance(v, float)
                     and math.isfinite(v)), default=None)
        for k in x:
            if not (path == "" and k in skip):
                tol = 1e-6 * scale if scale is not None and k in _INTERVAL_ENDS else 1e-12
                _walk(x[k], y[k], f"{path}.{k}", problems, skip, max(tol, 1e-12))
    elif isinstance(x, list):
        if not isinstance(y, list) or len(x) != len(y):
            problems.append(f"{path}: lengths differ")
            return
        for i, (p, q) in enumerate(zip(x, y, strict=True)):
            _walk(p, q, f"{path}[{i}]", problems, skip, abs_tol)
    elif isinstance(x, float) and isinstance(y, float):
        if not math.isclose(x, y, rel_tol=1e-6, abs_tol=max(abs_tol, 1e-6 if "entropy" in path else 0.0)):
            problems.append(f"{path}: {x!r} != {y!r}")
    elif x != y:
        problems.append(f"{path}: {x!r} != {y!r}")


def report_differences(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """Where two reports differ beyond the tolerance (volatile fields and ``skip`` left out)."""
    problems: list[str] = []
    _walk(a, b, "", problems, VOLATILE | set(skip))
    return problems


def row_differences(a: RowStats, b: RowStats) -> list[str]:
    """Per-row figures beyond the tolerance (see the module docstring)."""
    out = []
    for name in ("argmax_ref", "argmax_cand", "rank_ref_top"):
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            out.append(name)
    big = a.kl >= 1e-8
    for name in ("kl", "js", "kl_reverse"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            out.append(f"{name} missing")
            continue
        if (not np.allclose(x[big], y[big], rtol=1e-6, atol=0)
                or not np.allclose(x[~big], y[~big], atol=1e-14)):
            out.append(name)
    for name in ("logp_ref_next", "logp_cand_next"):
        if not np.allclose(getattr(a, name), getattr(b, name), rtol=0, atol=1e-6):
            out.append(name)
    if not np.allclose(a.ref_top_prob, b.ref_top_prob, rtol=1e-6, atol=1e-12):
        out.append("ref_top_prob")
    return out
