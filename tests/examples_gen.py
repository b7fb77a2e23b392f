"""Generator of the embedded example suite (``examples/suite``): a few windows of synthetic,
peaked logits at a small vocabulary, a reference and a candidate (the reference perturbed the
way a quantized model's logits are), in the published layout.  Deterministic and re-runnable::

    python -m tests.examples_gen [OUT_DIR]      # default: examples/suite
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.suite import LOGITS_MANIFEST
from kldtui.formats.suite_writer import write_suite

SEED = 20261129
VOCAB = 256
CONTEXT = 65  # 64 scored positions per window
DOMAINS = ("prose", "prose", "code", "instruction")
CREATED_UTC = "2026-01-01T00:00:00Z"  # fixed, so the output is byte-for-byte reproducible


def synthetic_logits(rng: np.random.Generator, tokens: np.ndarray, vocab: int) -> np.ndarray:
    """Peaked reference logits: a heavy-tailed background, the actual next token usually on top."""
    rows = tokens.size - 1
    logits = rng.standard_normal((rows, vocab)) * 2.0 - 4.0
    boost = rng.uniform(2.0, 14.0, size=rows)  # from unsure to near one-hot
    hit = rng.random(rows) < 0.7  # the reference is right 70 % of the time
    target = np.where(hit, tokens[1:], rng.integers(0, vocab, size=rows))
    logits[np.arange(rows), target] += boost
    return logits.astype(np.float32)


def perturbed(rng: np.random.Generator, ref: np.ndarray) -> np.ndarray:
    """A candidate: per-logit noise whose size varies by position, like a quantized model."""
    scale = rng.uniform(0.02, 0.4, size=(ref.shape[0], 1))
    return (ref + rng.standard_normal(ref.shape) * scale).astype(np.float32)


def generate(out_dir: str | os.PathLike[str]) -> Path:
    root = Path(out_dir)
    rng = np.random.default_rng(SEED)
    windows = [(domain, [int(t) for t in rng.integers(0, VOCAB, size=CONTEXT)]) for domain in DOMAINS]
    suite = write_suite(root, windows, dataset="kldtui/examples-synthetic",
                        datasets=[{"dataset": "kldtui/examples-synthetic", "revision": "1",
                                   "construction": "tests.examples_gen (synthetic peaked logits)",
                                   "seed": SEED}])
    for folder in ("ref", "candidate"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    ref_written, cand_written = [], []
    for w, (_, ids) in zip(suite.windows, windows, strict=True):
        ref = synthetic_logits(rng, np.asarray(ids), VOCAB)
        cand = perturbed(rng, ref)
        ref_written.append(write_logits_array(root / "ref", w, ref, CONTEXT, force=True))
        cand_written.append(write_logits_array(root / "candidate", w, cand, CONTEXT, force=True))
    sides = (("ref", "reference", ref_written), ("candidate", "candidate", cand_written))
    for folder, kind, written in sides:
        path = write_logits_manifest(root / folder, suite, written, kind=kind,
                                     runtime={"generator": "tests.examples_gen", "seed": SEED})
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        doc["created_utc"] = CREATED_UTC
        write_json_atomic(root / folder / LOGITS_MANIFEST, doc)
    return root


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "examples" / "suite"
    generate(out)
    print(f"example suite written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
